"""UOp: hash-consing (also across threads), structure (toposort, substitute, replace), constructors,
operator overloads checked by value, `.ranges`, printing, and 10000-deep graphs."""
import math
import operator
import pickle
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tg_core.dtype import dtypes
from tg_core.uop import AxisType, Ops, UOp

DEEP = 10_000


def chain(n: int = DEEP) -> tuple[UOp, UOp]:
    x = UOp.variable("x", 0, 10)
    y = x
    for i in range(n):
        y = y + 1 if i % 2 else y * 1
    return x, y


# ---- hash-consing -----------------------------------------------------------------------------------------

def test_same_construction_is_the_same_object():
    x = UOp.variable("x", 0, 10)
    assert UOp.variable("x", 0, 10) is x and UOp.variable("x", 0, 11) is not x
    assert (x + 1) * 3 is (x + 1) * 3
    assert UOp(Ops.ADD, dtypes.weakint, [x, x]) is UOp(Ops.ADD, dtypes.weakint, (x, x))  # list src becomes a tuple
    assert UOp.const(dtypes.float32, 1) is UOp.const(dtypes.float32, 1.0)
    assert UOp.const(dtypes.int32, True) is UOp.const(dtypes.int32, 1)
    assert UOp.const(dtypes.int32, 1) is not UOp.const(dtypes.int64, 1)
    assert x.replace(tag="t") is x.replace(tag="t") and x.replace(tag="t") is not x


def test_float_constants_key_by_their_bits():
    pz, nz = UOp.const(dtypes.float32, 0.0), UOp.const(dtypes.float32, -0.0)
    assert pz is not nz and math.copysign(1, nz.arg) == -1
    assert UOp.const(dtypes.float32, math.nan) is UOp.const(dtypes.float32, math.nan)
    v1, v2 = UOp.const(dtypes.float32.vec(2), (0.0, 1.0)), UOp.const(dtypes.float32.vec(2), (-0.0, 1.0))
    assert v1 is not v2 and v1.op is Ops.VCONST and v1.arg == (0.0, 1.0)


def test_equal_graphs_built_concurrently_are_identical():
    barrier = threading.Barrier(8)

    def build(seed: int) -> tuple[UOp, list[UOp]]:
        barrier.wait()  # start together, so the threads race on the same missing cache entries
        x = UOp.variable("tx", 0, 100)
        r = UOp.range(16, 7)
        y = x
        for i in range(300):
            y = (y * (i % 5 + 1) + r) % 97 if i % 3 else (y < i).where(y + i, y // 3)
        return y, list(y.toposort())

    for _ in range(3):
        with ThreadPoolExecutor(8) as ex:
            results = list(ex.map(build, range(8)))
        root, nodes = results[0]
        for other_root, other_nodes in results[1:]:
            assert other_root is root
            assert len(other_nodes) == len(nodes) and all(a is b for a, b in zip(nodes, other_nodes))


def test_nodes_freed_and_rebuilt_while_threads_race_and_the_cache_sweeps_stay_unique(monkeypatch):
    # insertions take no lock (one setdefault); replacing dead entries and sweeping do: threads rebuilding graphs
    # that just died, across sweeps (the cache passes its 65536-entry sweep mark), must still share every node
    from tg_core.uop import uop as uop_module
    barrier = threading.Barrier(4)
    x = UOp.variable("sweep_x", 0, 1000)

    def build(round_: int) -> list[UOp]:
        barrier.wait()
        out = []
        for i in range(6000):
            out.append(((x * (i + 3) + round_) // 7) % (i + 11))
        return out

    sweeps = []
    real_sweep = uop_module._sweep_dead

    def sweep() -> None:
        real_sweep()
        sweeps.append(len(uop_module._ucache))
        uop_module._sweep_at = len(uop_module._ucache) + 5000  # sweep again soon, while the threads still race
    monkeypatch.setattr(uop_module, "_sweep_dead", sweep)
    monkeypatch.setattr(uop_module, "_sweep_at", len(uop_module._ucache) + 5000)
    for round_ in range(4):
        with ThreadPoolExecutor(4) as ex:
            results = list(ex.map(build, [round_ % 2] * 4))
        first = results[0]
        for other in results[1:]:
            assert all(a is b for a, b in zip(first, other))
        assert first[5].render() == f"((((sweep_x*8)+{round_ % 2})//7)%16)"
        del results, first, other  # the graphs die: the next round rebuilds half of them over dead entries
    assert len(sweeps) >= 4
    monkeypatch.undo()
    uop_module._sweep_dead()
    uop_module._sweep_at = max(1 << 16, 2 * len(uop_module._ucache))


def test_nodes_with_nothing_referencing_them_are_freed_and_rebuilt_equal():
    import gc
    import weakref
    x = UOp.variable("gc_x", 0, 5)
    ref = weakref.ref(x * 12345)
    gc.collect()
    assert ref() is None
    y = x * 12345
    assert y.op is Ops.MUL and y.src == (x, UOp.const(dtypes.weakint, 12345)) and (x * 12345) is y


def test_replace_makes_a_new_node_and_leaves_the_old_one():
    x = UOp.variable("x", 0, 10)
    e = x + 1
    e2 = e.replace(op=Ops.MUL)
    assert e.op is Ops.ADD and e2.op is Ops.MUL and e2.src == e.src  # an equal node made earlier may own its own tuple
    assert e.replace() is e and e.replace(op=Ops.ADD) is e
    assert e.replace(src=(x, x)).evaluate({x: 4}) == 8
    with pytest.raises(TypeError, match=r"unknown fields \['opp'\]"):
        e.replace(opp=Ops.MUL)


def test_pickle_gives_back_the_same_node():
    x = UOp.variable("x", 0, 10)
    e = (x * 3 + 1) % 7
    assert pickle.loads(pickle.dumps(e)) is e


def test_uops_have_no_truth_value_and_are_not_iterable():
    x = UOp.variable("x", 0, 10)
    with pytest.raises(TypeError, match=r"truth value .*\(x<3\)"):
        bool(x < 3)
    with pytest.raises(TypeError, match="not iterable"):
        list(x)


# ---- structure --------------------------------------------------------------------------------------------

def test_toposort_puts_each_node_after_its_sources():
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
    a = x + y
    e = (a * a + x).maximum(a)
    order = list(e.toposort())
    assert order[-1] is e and set(order) == {x, y, a, a * a, a * a + x, e, *[u for u in order if u.op is Ops.CONST]}
    pos = {u: i for i, u in enumerate(order)}
    assert all(pos[s] < pos[u] for u in order for s in u.src)
    assert len(order) == len(set(order))


def test_toposort_gate_stops_descending_but_keeps_the_node():
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
    inner = x * y
    e = inner + 1
    got = e.toposort(gate=lambda u: u is not inner)
    assert inner in got and x not in got and y not in got and list(got)[-1] is e


def test_substitute():
    x, y, z = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10), UOp.variable("z", 0, 10)
    e = (x + y) * x
    s = e.substitute({x: z})
    assert s is (z + y) * z and s.evaluate({z: 3, y: 4}) == 21
    # replacements are not searched again: x -> x + 1 happens once
    assert e.substitute({x: x + 1}) is ((x + 1) + y) * (x + 1)
    assert e.substitute({e: x}) is x and e.substitute({}) is e
    assert e.substitute({UOp.variable("w", 0, 1): z}) is e


def test_sink_and_variables():
    x, y = UOp.variable("b", 0, 10), UOp.variable("a", 0, 10)
    s = x.sink(y, x + y)
    assert s.op is Ops.SINK and s.dtype is dtypes.void and s.src == (x, y, x + y)
    assert s.variables() == [y, x]  # sorted by name


# ---- constructors -----------------------------------------------------------------------------------------

def test_const():
    c = UOp.const(dtypes.int8, 300)
    assert c.op is Ops.CONST and c.arg == 44 and c.dtype is dtypes.int8
    assert UOp.const(dtypes.float16, 1 / 3).arg == float(np.float16(1 / 3))
    v = UOp.const(dtypes.int32.vec(3), (1, 2, 2 ** 32 + 3))
    assert v.op is Ops.VCONST and v.arg == (1, 2, 3)
    b = UOp.const(dtypes.bool.vec(2), True)
    assert b.op is Ops.CONST and b.arg is True and b.dtype.count == 2
    with pytest.raises(ValueError, match="needs 3 values"):
        UOp.const(dtypes.int32.vec(3), (1, 2))
    with pytest.raises(TypeError, match="no constant"):
        UOp.const(dtypes.void, 0)
    with pytest.raises(TypeError, match="Python value"):
        UOp.const(dtypes.int32, c)


def test_variable():
    v = UOp.variable("n", 1, 64, dtypes.int32)
    assert (v.op, v.dtype, v.arg, v.vmin, v.vmax) == (Ops.DEFINE_VAR, dtypes.int32, ("n", 1, 64), 1, 64)
    assert UOp.variable("i", -5, 5).dtype is dtypes.weakint
    with pytest.raises(ValueError, match="greater than max"):
        UOp.variable("n", 5, 1)
    with pytest.raises(ValueError, match="exceed dtypes.uchar's range"):
        UOp.variable("n", -1, 5, dtypes.uint8)
    with pytest.raises(TypeError, match="name"):
        UOp.variable("", 0, 1)
    b = v.bind(10)
    assert b.op is Ops.BIND and b.src == (v, UOp.const(dtypes.int32, 10)) and (b * 2).evaluate() == 20
    with pytest.raises(ValueError, match="outside its range"):
        v.bind(65)
    with pytest.raises(TypeError, match="only a variable"):
        (v + 1).bind(3)


def test_range_param_special():
    r = UOp.range(8, 3)
    assert (r.op, r.dtype, r.arg, r.src) == (Ops.RANGE, dtypes.weakint, (3, AxisType.LOOP), (UOp.const(dtypes.weakint, 8),))
    assert (r.vmin, r.vmax) == (0, 7)
    n = UOp.variable("n", 1, 100)
    rn = UOp.range(n, 4, AxisType.REDUCE)
    assert rn.src == (n,) and rn.arg == (4, AxisType.REDUCE) and (rn.vmin, rn.vmax) == (0, 99)
    p = UOp.param(2, dtypes.float32.ptr(16))
    assert (p.op, p.arg, p.dtype) == (Ops.PARAM, 2, dtypes.float32.ptr(16))
    assert UOp.param(0, dtypes.int32, "a").arg == (0, "a")
    s = UOp.special(32, "lidx0")
    assert s.op is Ops.SPECIAL and s.arg == "lidx0" and (s.vmin, s.vmax) == (0, 31)


def test_memory_and_control_constructors():
    buf = UOp.param(0, dtypes.float32.ptr(16))
    r = UOp.range(16, 0)
    idx = buf.index(r)
    assert idx.op is Ops.INDEX and idx.dtype == buf.dtype and idx.src == (buf, r)
    ld = idx.load()
    assert ld.op is Ops.LOAD and ld.dtype is dtypes.float32
    st = idx.store(ld * 2)
    assert st.op is Ops.STORE and st.dtype is dtypes.void
    assert st.end(r).src == (st, r) and st.end() is st
    red = ld.reduce(Ops.ADD, r)
    assert red.op is Ops.REDUCE and red.arg is Ops.ADD and red.src == (ld, r)


# ---- operators, checked by value -----------------------------------------------------------------------

def c_div(a: int, b: int) -> int:
    return (a - int(np.fmod(a, b))) // b  # exact: a minus C's remainder is a multiple of b


INT_OPS = [("+", operator.add, lambda a, b: a + b), ("*", operator.mul, lambda a, b: a * b),
           ("-", operator.sub, lambda a, b: a - b), ("//", operator.floordiv, c_div),
           ("%", operator.mod, lambda a, b: int(np.fmod(a, b))), ("max", lambda a, b: a.maximum(b), max),
           ("min", lambda a, b: a.minimum(b), min), ("<", operator.lt, operator.lt), (">", operator.gt, operator.gt),
           ("<=", operator.le, operator.le), (">=", operator.ge, operator.ge), ("eq", lambda a, b: a.eq(b), operator.eq),
           ("ne", lambda a, b: a.ne(b), operator.ne), ("&", operator.and_, operator.and_),
           ("|", operator.or_, operator.or_), ("^", operator.xor, operator.xor)]


@pytest.mark.parametrize("name, build, ref", INT_OPS, ids=[o[0] for o in INT_OPS])
def test_int_operators_by_value(name, build, ref):
    x, y = UOp.variable("x", -20, 20), UOp.variable("y", -20, 20)
    e, e_left, e_right = build(x, y), build(x, 3), build(-7, y) if name not in ("max", "min", "eq", "ne") else None
    for xv in range(-20, 21, 3):
        for yv in (-7, -3, -1, 1, 2, 5, 20):
            assert e.evaluate({x: xv, y: yv}) == ref(xv, yv), (name, xv, yv)
        assert e_left.evaluate({x: xv}) == ref(xv, 3)
    if e_right is not None:
        for yv in (-7, -3, 1, 5):
            assert e_right.evaluate({y: yv}) == ref(-7, yv)


def test_reflected_operators_keep_the_operand_order():
    x = UOp.variable("x", 1, 20)
    assert (100 // x).evaluate({x: 7}) == 14 and (100 % x).evaluate({x: 7}) == 2
    assert (3 - x).evaluate({x: 7}) == -4 and (3 + x).evaluate({x: 7}) == 10 and (3 * x).evaluate({x: 7}) == 21
    assert (5 < x).evaluate({x: 7}) is True and (5 > x).evaluate({x: 7}) is False
    f = UOp.variable("f", 0.5, 4.0, dtypes.float32)
    assert (1 / f).evaluate({f: 4.0}) == 0.25 and (f / 2).evaluate({f: 3.0}) == 1.5
    assert (f ** 2).evaluate({f: 3.0}) == 9.0


def test_neg_invert_shifts_and_unary_ops():
    x = UOp.variable("x", -20, 20, dtypes.int8)
    assert (-x).evaluate({x: 5}) == -5 and (-x).evaluate({x: -20}) == 20
    assert (~x).evaluate({x: 5}) == ~5 and (x << 2).evaluate({x: 5}) == 20 and (x >> 1).evaluate({x: -5}) == -3
    assert (x << 5).evaluate({x: 5}) == (5 << 5) - 256  # int8 wraps
    b = UOp.variable("b", False, True, dtypes.bool)
    assert (-b).evaluate({b: True}) is False and (~b).evaluate({b: False}) is True
    assert b.logical_not().dtype is dtypes.bool
    f = UOp.variable("f", -4.0, 4.0, dtypes.float32)
    env = {f: 2.25}
    assert f.sqrt().evaluate(env) == 1.5 and f.exp2().evaluate(env) == float(np.float32(2 ** 2.25))
    assert f.log2().evaluate({f: 8.0}) == 3.0 and f.reciprocal().evaluate({f: 4.0}) == 0.25
    assert f.trunc().evaluate({f: -2.75}) == -2.0 and f.sin().evaluate({f: 0.0}) == 0.0


def test_float_comparisons_with_nan_are_false():
    f, g = UOp.variable("f", -4.0, 4.0, dtypes.float32), UOp.variable("g", -4.0, 4.0, dtypes.float32)
    nan = {f: math.nan, g: 1.0}
    for e in (f < g, f <= g, f > g, f >= g, f.eq(g)):
        assert e.evaluate(nan) is False
    assert f.ne(g).evaluate(nan) is True
    assert (f <= g).evaluate({f: 1.0, g: 1.0}) is True and (f >= g).evaluate({f: 0.5, g: 1.0}) is False


def test_where_and_promotion_in_operators():
    x = UOp.variable("x", 0, 10, dtypes.int16)
    i32 = UOp.variable("i32", 0, 10, dtypes.int32)
    e = x + i32
    assert e.dtype is dtypes.int32 and e.src[0].op is Ops.CAST and e.evaluate({x: 3, i32: 4}) == 7
    w = (x < 5).where(x, i32)
    assert w.dtype is dtypes.int32 and w.evaluate({x: 3, i32: 9}) == 3 and w.evaluate({x: 7, i32: 9}) == 9
    assert (x < 5).where(1, 2).dtype is dtypes.weakint
    assert (x * 2).src[1] is UOp.const(dtypes.int16, 2)  # a Python int is re-made in x's dtype, not cast


def test_cast_and_bitcast():
    x = UOp.variable("x", 0, 10, dtypes.int32)
    assert x.cast(dtypes.int32) is x and x.cast(dtypes.float32).op is Ops.CAST
    f = UOp.variable("f", -4.0, 4.0, dtypes.float32)
    assert f.bitcast(dtypes.int32).evaluate({f: 1.0}) == 0x3F800000
    assert f.cast(dtypes.int8).evaluate({f: -3.9}) == -3
    with pytest.raises(ValueError, match="changes the size"):
        f.bitcast(dtypes.int16)


def test_const_factor():
    x = UOp.variable("x", 0, 10)
    assert (x * 6 + 12).const_factor() == 6 and (x * 4 + 6).const_factor() == 2 and x.const_factor() == 1


def test_evaluate_needs_every_variable():
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
    with pytest.raises(ValueError, match="cannot evaluate Ops.DEFINE_VAR"):
        (x + y).evaluate({x: 1})
    r = UOp.range(4, 0)
    assert (r * 2).evaluate({r: 3}) == 6


# ---- ranges ------------------------------------------------------------------------------------------------

def test_ranges_of_values():
    r0 = UOp.range(10, 0)
    r1 = UOp.range(r0 + 1, 1)  # its end depends on r0: it is inside r0
    assert list(r0.ranges) == [r0] and set(r1.ranges) == {r0, r1}
    x = UOp.variable("x", 0, 5)
    assert x.ranges == {} and (x * 2).ranges == {}
    e = r0 * 2 + r1 + x
    assert set(e.ranges) == {r0, r1}


def test_end_and_reduce_remove_the_ranges_they_end():
    r0, r1, r2 = UOp.range(10, 0), UOp.range(4, 1), UOp.range(3, 2)
    buf = UOp.param(0, dtypes.float32.ptr(40))
    st = buf.index(r0 * 4 + r1).store(UOp.const(dtypes.float32, 1.0))
    assert set(st.ranges) == {r0, r1}
    assert set(st.end(r1).ranges) == {r0} and st.end(r1, r0).ranges == {}
    assert set(st.end(r2).ranges) == {r0, r1}  # ending a range it is not in changes nothing
    val = buf.index(r0 * 4 + r1).load()
    red = val.reduce(Ops.ADD, r1)
    assert set(red.ranges) == {r0}
    assert set((red + r2).ranges) == {r0, r2}
    nested = UOp.range(r0 + 1, 5)  # ending the inner range keeps the outer one it depends on
    assert set((nested * 2).reduce(Ops.ADD, nested).ranges) == {r0}


def test_conditional_end_keeps_the_ranges_it_does_not_end():
    r0, r1 = UOp.range(10, 0), UOp.range(4, 1)
    buf = UOp.param(0, dtypes.int32.ptr(40))
    cond = UOp(Ops.IF, dtypes.void, ((r1 < 2),))
    st = buf.index(r0 * 4 + r1).store(UOp.const(dtypes.int32, 1))
    gated_end = UOp(Ops.END, dtypes.void, (st, cond))
    assert set(gated_end.ranges) == {r0, r1}
    assert set(UOp(Ops.END, dtypes.void, (gated_end, r1)).ranges) == {r0}


def test_call_of_an_external_function_keeps_its_arguments_ranges():
    r0, r1 = UOp.range(10, 0), UOp.range(4, 1)
    inner = UOp.range(7, 9)  # a loop inside the callee's body is the callee's own
    body = UOp(Ops.CUSTOM_FUNCTION, dtypes.void, (inner * 2,), "ext_fn")
    call = UOp(Ops.CALL, dtypes.int32, (body, r0 + 1, r1 * 2))
    assert set(call.ranges) == {r0, r1}
    one_arg = UOp(Ops.CALL, dtypes.int32, (UOp(Ops.CUSTOM_FUNCTION, dtypes.void, (), "f"), r1))
    assert list(one_arg.ranges) == [r1]
    assert set((call + r1).reduce(Ops.ADD, r1).ranges) == {r0}


# ---- printing ---------------------------------------------------------------------------------------------

def test_render():
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
    assert ((x * 4 + 3) // y).render() == "(((x*4)+3)//y)"
    assert (x < 3).where(x, y).render() == "(x if (x<3) else y)"
    assert x.maximum(y).render() == "max(x, y)"
    assert UOp.const(dtypes.bool, True).render() == "True"
    assert x.cast(dtypes.int32).render() == "int(x)" and UOp.range(4, 2).render() == "r2"
    f = UOp.variable("f", 0.0, 1.0, dtypes.float32)
    assert f.bitcast(dtypes.uint32).render() == "bitcast<uint>(f)" and f.sqrt().render() == "sqrt(f)"
    assert UOp.param(0, dtypes.int32, "a").render() == "a" and UOp.param(1, dtypes.int32).render() == "param1"


def test_repr_lists_shared_nodes_once():
    x = UOp.variable("x", 0, 10)
    a = x + 1
    text = repr(a * a)
    lines = text.splitlines()
    assert len(lines) == 4 and lines[-1].split()[1] == "MUL" and "(%2, %2)" in lines[-1]
    assert repr(x) == "UOp(Ops.DEFINE_VAR, dtypes.weakint, arg=('x', 0, 10))"


# ---- deep graphs ------------------------------------------------------------------------------------------

def test_deep_chains_need_no_recursion():
    x, y = chain()
    order = y.toposort()
    assert len(order) == DEEP + 2 and next(iter(order)) is x
    assert (y.vmin, y.vmax) == (DEEP // 2, 10 + DEEP // 2)
    assert y.evaluate({x: 3}) == 3 + DEEP // 2
    z = UOp.variable("z", 0, 1)
    s = y.substitute({x: z})
    assert s.evaluate({z: 1}) == 1 + DEEP // 2 and (s.vmin, s.vmax) == (DEEP // 2, 1 + DEEP // 2)
    text = y.render()
    assert text.startswith("(") and " ... " in text and text.endswith("+1)")
    assert repr(y).count("\n") < 300
    r = UOp.range(5, 0)
    w = r
    for _ in range(DEEP):
        w = w * 1 + 0
    assert list(w.ranges) == [r] and list(w.reduce(Ops.ADD, r).ranges) == []
    del x, y, s, w  # freeing a deep chain must not recurse either


def test_ptrdtype_is_a_buffer_nodes_pointer_dtype():
    buf = UOp.param(0, dtypes.float32.ptr(16), "x")
    assert buf.ptrdtype is buf.dtype and buf.ptrdtype.size == 16
    with pytest.raises(TypeError, match="CONST has the value dtype dtypes.int, not a pointer"):
        UOp.const(dtypes.int32, 3).ptrdtype


def test_tensor_shape_is_the_shape_of_a_tensor_level_node():
    buf = UOp.new_buffer("PYTHON", 6, dtypes.float32).reshape((2, 3))
    assert buf.tensor_shape == (2, 3) == buf.shape and buf.ndim == 2 and buf.numel == 6
    rng = UOp.range(UOp.const(dtypes.weakint, 4), 0, AxisType.LOOP)
    assert rng.shape is None
    with pytest.raises(TypeError, match="RANGE is a kernel-level node: it has no shape"):
        rng.tensor_shape
    with pytest.raises(TypeError, match="RANGE is a kernel-level node"):
        rng.ndim
