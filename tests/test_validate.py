"""Index validation (CHECK_OOB): the vmin/vmax fast path, the z3 proofs, and the exactness of the z3
model against alu.py's semantics (wrapping, truncating division, casts)."""
import itertools
import re
import sys

import pytest

z3 = pytest.importorskip("z3")

from tg_core.dtype import AddrSpace, dtypes  # noqa: E402
from tg_core.helpers import Context  # noqa: E402
from tg_core.uop import Ops, UOp  # noqa: E402
from tg_core.uop.alu import bitcast_const, cast_const, exec_alu  # noqa: E402
from tg_core.uop.validate import _Z3Model, check_index, check_oob, validate_index  # noqa: E402

f32, i32, wi = dtypes.float32, dtypes.int32, dtypes.weakint


def buf(size, n=0, name=None):
    return UOp.param(n, f32.ptr(size), name)


def access(size, idx, valid=None, b=None):
    """A kernel that loads buffer[idx] (size elements)."""
    return (b if b is not None else buf(size)).index(idx, valid).load().sink()


def oob(sink) -> str:
    with pytest.raises(RuntimeError) as e:
        validate_index(sink)
    assert str(e.value).startswith("CHECK_OOB: ")
    return str(e.value)


@pytest.fixture
def no_z3(monkeypatch):
    """z3 made unimportable: a None entry in sys.modules makes `import z3` raise ImportError."""
    monkeypatch.setitem(sys.modules, "z3", None)


# ---- fast path ----------------------------------------------------------------------------------------

def test_fast_path_needs_no_z3(no_z3):
    r = UOp.range(10, 0)
    validate_index(access(10, r))
    validate_index(access(40, r * 4 + 3))
    validate_index(access(10, r + 1, UOp.const(dtypes.bool, False)))  # the access never happens
    with pytest.raises(ImportError):
        validate_index(access(10, r + 1))  # fast path fails, so it needs the solver


def test_missing_z3_names_the_extra(no_z3):
    with pytest.raises(ImportError, match=re.escape("install it with: pip install 'tg-core[validate]'")) as e:
        validate_index(access(10, UOp.range(11, 0)))
    assert "CHECK_OOB=1" in str(e.value) and "z3" in str(e.value)


def test_fast_path_rejection_is_confirmed_by_z3():
    # vmin/vmax alone never reject: r0 in [0, 10] is only out of bounds for r0 = 10
    msg = oob(access(10, UOp.range(11, 0)))
    assert "index r0 into param0 (dtypes.float.ptr(10), size 10, valid indices 0..9)" in msg
    assert msg.endswith("with r0=10 the index is 10")


def test_unknown_size_is_not_checked():
    validate_index(UOp.param(0, f32.ptr()).index(UOp.range(11, 0)).load().sink())


def test_non_integer_index_is_an_error():
    with pytest.raises(RuntimeError, match=r"INDEX into param0 has a non-integer index 1.5 of dtypes.float"):
        validate_index(access(10, UOp.const(f32, 1.5)))


# ---- z3 path: counterexamples -------------------------------------------------------------------------

def test_counterexample_names_buffer_index_and_values():
    r = UOp.range(10, 0)
    msg = oob(access(10, r + 1, b=buf(10, name="data")))
    assert msg == ("CHECK_OOB: index (r0+1) into data (dtypes.float.ptr(10), size 10, valid indices 0..9) "
                   "can go out of bounds: with r0=9 the index is 10")


def test_counterexample_lists_every_variable():
    x = UOp.variable("x", 0, 3)
    r = UOp.range(4, 1)
    msg = oob(access(12, r * 4 + x, (x < 3)))  # needs r1=3, x>=0 for 12..14; x=3 is gated off
    m = re.search(r"with r1=(\d+), x=(\d+) the index is (\d+)$", msg)
    assert m is not None, msg
    r1, xv, i = map(int, m.groups())
    assert r1 == 3 and xv < 3 and i == 12 + xv
    assert "gated by (x<3)" in msg


def test_constant_index_out_of_bounds():
    msg = oob(access(4, UOp.const(wi, 7)))
    assert msg.endswith("with (no variables) the index is 7")


def test_negative_index():
    x = UOp.variable("x", -2, 3)
    m = re.search(r"with x=(-\d) the index is (-\d)$", oob(access(4, x)))
    assert m and m[1] == m[2] and m[1] in ("-1", "-2")


def test_vector_index_reports_the_lane():
    r = UOp.range(10, 0)
    idx = UOp(Ops.VECTORIZE, wi.vec(2), (r * 2, r * 2 + 1))
    validate_index(access(20, idx))
    msg = oob(access(19, idx))
    assert "(lane 1)" in msg and msg.endswith("with r0=9 the index is 19")


# ---- z3 path: the valid gate ----------------------------------------------------------------------------

def test_gate_is_a_constraint():
    r = UOp.range(20, 0)
    validate_index(access(10, r, r < 10))
    msg = oob(access(10, r, r < 11))
    assert "gated by (r0<11)" in msg and msg.endswith("with r0=10 the index is 10")


def test_gate_with_offset():
    r = UOp.range(16, 0)
    x = UOp.variable("x", 0, 100)
    validate_index(access(16, r + x, (r + x) < 16))
    msg = oob(access(16, r + x, (r + x) < 17))
    m = re.search(r"with r0=(\d+), x=(\d+) the index is 16$", msg)
    assert m is not None and int(m[1]) + int(m[2]) == 16, msg


def test_unrelated_empty_loop_proves_nothing():
    # a loop that never runs makes its own accesses vacuously safe, not everyone else's
    n = UOp.variable("n", 0, 0)
    dead = UOp.range(n, 1)
    r = UOp.range(10, 0)
    ok = buf(4, 0).index(dead + 100, dead < 200).load()
    bad = buf(10, 1).index(r + 1, r < 10).load()
    validate_index(ok.sink())
    msg = oob(UOp.sink(ok, bad))
    assert "into param1" in msg and msg.endswith("with r0=9 the index is 10")


# ---- float-derived values ------------------------------------------------------------------------------

def _float_load(n=1):
    return UOp.param(n, f32.ptr(10)).index(UOp.range(10, 0)).load()


def test_float_cast_to_int_is_unconstrained():
    i = _float_load().cast(i32)
    msg = oob(access(10, i.cast(wi)))
    assert re.search(r"with int\(load\(param1\[r0\]\)\)=(-?\d+) the index is \1$", msg), msg


def test_clamped_float_cast_is_proven():
    i = _float_load().cast(i32)
    lo = (i < 0).where(UOp.const(i32, 0), i)
    clamped = (lo < 9).where(lo, UOp.const(i32, 9))
    validate_index(access(10, clamped))
    msg = oob(access(9, clamped))
    assert msg.endswith("the index is 9")


def test_float_comparison_gate_is_a_free_bool():
    r = UOp.range(20, 0)
    f = _float_load()
    msg = oob(access(10, r, f < 3.0))
    assert re.search(r"with r0=1\d, \(load\(param1\[r0\]\)<3.0\)=True the index is 1\d$", msg), msg
    validate_index(access(10, r, (f < 3.0) & (r < 10)))


def test_bitcast_from_float_is_unconstrained():
    bits = _float_load().bitcast(dtypes.uint32)
    msg = oob(access(10, bits))
    assert re.search(r"with bitcast<uint>\(load\(param1\[r0\]\)\)=(\d+) the index is \1$", msg), msg
    validate_index(access(16, bits & 15))  # a mask bounds it whatever the bits are


# ---- integer semantics in proofs -----------------------------------------------------------------------

def test_int_bitcast_wraps():
    x = UOp.variable("x", -1, 5, i32)
    idx = x.bitcast(dtypes.uint32)
    assert oob(access(6, idx)).endswith("with x=-1 the index is 4294967295")
    validate_index(access(6, idx, x > -1))


def test_uint_to_int_bitcast_wraps():
    u = UOp.variable("u", 2 ** 31, 2 ** 31 + 3, dtypes.uint32)
    idx = u.bitcast(i32).cast(wi) + 2 ** 31  # -2**31.. as int32, so 0..3
    validate_index(access(4, idx))
    assert oob(access(3, idx)).endswith(f"with u={2 ** 31 + 3} the index is 3")


def test_int_narrowing_cast_wraps():
    x = UOp.variable("x", 256, 259)
    validate_index(access(4, x.cast(dtypes.uint8)))
    assert oob(access(3, x.cast(dtypes.uint8))).endswith("with x=259 the index is 3")
    y = UOp.variable("y", 128, 128)
    assert oob(access(256, y.cast(dtypes.int8))).endswith("with y=128 the index is -128")


def test_strong_int_arithmetic_wraps():
    x = UOp.variable("x", 0, 2 ** 31 - 1, i32)
    near_top = x > 2 ** 31 - 3
    # int32: x + 2 wraps to -2**31 and -2**31 + 1, whose C remainders are 0 and -7 (unwrapped: 0 and 1)
    validate_index(access(8, (x + 2) % 8 + 7, near_top))
    assert oob(access(8, (x + 2) % 8, near_top)).endswith(f"with x={2 ** 31 - 1} the index is -7")


def test_bool_to_int_cast_is_one():
    r = UOp.range(10, 0)
    idx = r + (r < 5).cast(wi) * 5  # 5..9 whatever r is: needs True -> 1
    validate_index(access(10, idx))
    assert oob(access(9, idx)).endswith("the index is 9")


def test_int_to_bool_cast_is_nonzero():
    x = UOp.variable("x", 0, 3)
    validate_index(access(3, x - 1, x.cast(dtypes.bool)))
    assert oob(access(3, x - 1)).endswith("with x=0 the index is -1")


def test_truncating_division_of_negatives():
    x = UOp.variable("x", -100, 100)
    validate_index(access(3, x // 4 + 1, (x > -8) & (x < 8)))  # -7 // 4 is -1 in C (floor would be -2)
    assert oob(access(3, x // 4 + 1, (x > -9) & (x < 8))).endswith("with x=-8 the index is -1")


def test_truncating_division_by_negative():
    x = UOp.variable("x", 0, 7)
    y = UOp.variable("y", -3, 3)
    validate_index(access(4, x // y + 3, y < -1))  # 7 // -2 is -3 in C (floor would be -4)
    msg = oob(access(4, x // y + 3, y < 0))  # y = -1: 7 // -1 is -7
    assert re.search(r"with x=(\d), y=-1 the index is (-?\d)$", msg), msg


def test_division_by_zero_is_zero():
    x = UOp.variable("x", 0, 9)
    y = UOp.variable("y", 0, 2)
    validate_index(access(10, x // y))
    validate_index(access(10, x % y))
    assert oob(access(9, x // y)).endswith("the index is 9")


def test_truncating_mod_of_negatives():
    x = UOp.variable("x", -100, 1)
    validate_index(access(4, x % 4 + 3, x < 0))  # -1 % 4 is -1 in C (floor would be 3)
    assert oob(access(4, x % 4 + 3, x < 2)).endswith("with x=1 the index is 4")


def test_shifts_and_masks():
    r = UOp.range(16, 0)
    validate_index(access(64, (r << 2) + 3, r < 16))
    assert oob(access(63, (r << 2) + 3, r < 16)).endswith("with r0=15 the index is 63")
    x = UOp.variable("x", 0, 255)
    validate_index(access(16, (x >> 4) + (x & 0), x > -1))
    assert oob(access(15, x >> 4, x > -1)).endswith("the index is 15")


def test_max_and_where():
    x = UOp.variable("x", -50, 50)
    validate_index(access(51, x.maximum(0), x < 51))
    assert oob(access(50, x.maximum(0), x < 51)).endswith("with x=50 the index is 50")
    y = UOp.variable("y", -5, 20)
    clamp = (y < 0).where(0, y)
    validate_index(access(21, clamp, y < 21))
    assert oob(access(20, clamp, y < 21)).endswith("with y=20 the index is 20")


def test_bool_logic_in_gates():
    x = UOp.variable("x", 0, 20)
    lt10 = x < 10
    validate_index(access(10, x, lt10 & lt10.ne(False)))
    validate_index(access(10, x, (lt10 ^ (x < 15)).logical_not() & (x < 15)))  # x < 10 exactly
    msg = oob(access(10, x, lt10 | (x < 12)))
    assert re.search(r"with x=1[01] the index is 1[01]$", msg), msg


def test_loaded_int_index_is_bounded_by_its_dtype():
    idxbuf = UOp.param(1, dtypes.uint8.ptr(4))
    loaded = idxbuf.index(UOp.range(4, 0)).load()
    validate_index(access(256, loaded.cast(wi), loaded.cast(wi) < 300))
    msg = oob(access(255, loaded.cast(wi), loaded.cast(wi) < 300))
    assert msg.endswith("with load(param1[r0])=255 the index is 255")


def test_scalar_param_as_value():
    n = UOp.param(2, dtypes.int16)
    validate_index(access(100, n.cast(wi), (n > -1) & (n < 100)))
    msg = oob(access(100, n.cast(wi), n < 100))
    m = re.search(r"with param2=(-?\d+) the index is (-?\d+)$", msg)
    assert m and m[1] == m[2] and -2 ** 15 <= int(m[1]) < 0


def test_special_and_variable_loop_end():
    n = UOp.variable("n", 1, 32)
    r = UOp.range(n, 0)
    validate_index(access(32, r, r < 100))
    assert oob(access(31, r, r < 100)).endswith("with n=32, r0=31 the index is 31")
    g = UOp.special(4, "gidx0")
    lane = UOp.special(8, "lidx0")
    validate_index(access(32, g * 8 + lane, g < 5))
    assert oob(access(31, g * 8 + lane, g < 5)).endswith("with gidx0=3, lidx0=7 the index is 31")


# ---- local memory ----------------------------------------------------------------------------------------

def _local_kernel(read_idx, read_gate=None, size=16, store_idx=None):
    lbuf = UOp(Ops.DEFINE_LOCAL, f32.ptr(size, AddrSpace.LOCAL), arg="temp")
    lid = UOp.special(16, "lidx0")
    st = lbuf.index(lid if store_idx is None else store_idx(lid)).store(UOp.const(f32, 1.0))
    bar = UOp(Ops.BARRIER, dtypes.void, (st,))
    val = lbuf.after(bar).index(read_idx(lid), None if read_gate is None else read_gate(lid)).load()
    return buf(16).index(lid).store(val).sink()


def test_local_memory_after_barrier():
    validate_index(_local_kernel(lambda lid: lid + 8, lambda lid: lid < 8))
    msg = oob(_local_kernel(lambda lid: lid + 8, lambda lid: lid < 9))
    assert msg == ("CHECK_OOB: index (lidx0+8) gated by (lidx0<9) into temp (dtypes.float.ptr(16, AddrSpace.LOCAL), "
                   "size 16, valid indices 0..15) can go out of bounds: with lidx0=8 the index is 16")


def test_local_memory_store_before_barrier():
    msg = oob(_local_kernel(lambda lid: lid, size=16, store_idx=lambda lid: lid * 2))
    assert "index (lidx0*2) into temp" in msg and "size 16" in msg


def test_check_index_per_access():
    r = UOp.range(10, 0)
    check_index(buf(10).index(r))
    with pytest.raises(RuntimeError, match=r"with r0=9 the index is 10$"):
        check_index(buf(10).index(r + 1))
    with pytest.raises(TypeError, match="check_index needs an INDEX"):
        check_index(r)


def test_check_oob_follows_the_context_var():
    bad = access(10, UOp.range(10, 0) + 1)
    with Context(CHECK_OOB=0):
        check_oob(bad)
    with Context(CHECK_OOB=1):
        with pytest.raises(RuntimeError, match="can go out of bounds"):
            check_oob(bad)


def test_solver_giving_up_is_reported(monkeypatch):
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: z3.unknown)
    monkeypatch.setattr(z3.Solver, "reason_unknown", lambda self: "timeout")
    msg = oob(access(10, UOp.range(11, 0)))
    assert "could not be proven in bounds: z3 gave up (timeout)" in msg


# ---- the model against alu.py, value by value -------------------------------------------------------------

def _model_value(expr, env):
    """The z3 model's value of `expr` at the DEFINE_VAR values `env`, by substitution and simplification."""
    m = _Z3Model(z3)
    t = m.term(expr)
    subs = [(v, z3.IntVal(env[u])) for u in m.leaves for _, v in m.leaves[u]]
    out = z3.simplify(z3.substitute(t.expr, *subs))
    return out.as_long() if z3.is_int_value(out) else z3.is_true(out)


@pytest.mark.parametrize("dt", [wi, dtypes.int8, dtypes.uint8])
@pytest.mark.parametrize("op", [Ops.IDIV, Ops.MOD])
def test_div_mod_model_is_exact(dt, op):
    lo, hi = max(dtypes.min(dt), -130), min(dtypes.max(dt), 130)
    x, y = UOp.variable("x", lo, hi, dt), UOp.variable("y", lo, hi, dt)
    expr = UOp(op, dt, (x, y))
    vals = sorted({lo, hi, 0, 1, -1, 2, -2, 3, -3, 7, -7, lo + 1, hi - 1} & set(range(lo, hi + 1)))
    for a, b in itertools.product(vals, vals):
        assert _model_value(expr, {x: a, y: b}) == exec_alu(op, dt, (a, b)), (op, dt, a, b)


@pytest.mark.parametrize("src,dst", [(dtypes.int16, dtypes.int8), (dtypes.int16, dtypes.uint8), (dtypes.int8, dtypes.uint16),
                                     (dtypes.uint8, dtypes.int8), (dtypes.int16, dtypes.bool), (wi, dtypes.int8)])
def test_cast_model_is_exact(src, dst):
    x = UOp.variable("x", max(dtypes.min(src), -300), min(dtypes.max(src), 300), src)
    for a in range(x.arg[1], x.arg[2] + 1, 7):
        assert _model_value(x.cast(dst), {x: a}) == cast_const(a, src, dst), (src, dst, a)


@pytest.mark.parametrize("src,dst", [(dtypes.int8, dtypes.uint8), (dtypes.uint8, dtypes.int8),
                                     (dtypes.int16, dtypes.uint16), (dtypes.uint16, dtypes.int16)])
def test_bitcast_model_is_exact(src, dst):
    x = UOp.variable("x", dtypes.min(src), dtypes.max(src), src)
    for a in range(dtypes.min(src), dtypes.max(src) + 1, 97):
        assert _model_value(x.bitcast(dst), {x: a}) == bitcast_const(a, src, dst), (src, dst, a)


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, wi])
def test_wrapping_arithmetic_model_is_exact(dt):
    lo, hi = max(dtypes.min(dt), -200), min(dtypes.max(dt), 200)
    x, y = UOp.variable("x", lo, hi, dt), UOp.variable("y", lo, hi, dt)
    vals = [lo, lo + 1, -1, 0, 1, 77, hi - 1, hi]
    for op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.CMPLT):
        expr = UOp(op, dtypes.bool if op is Ops.CMPLT else dt, (x, y))
        for a, b in itertools.product([v for v in vals if lo <= v <= hi], repeat=2):
            assert _model_value(expr, {x: a, y: b}) == exec_alu(op, expr.dtype, (a, b)), (op, dt, a, b)
    for c, a in itertools.product((-1, 0, 1, 3, 9), (lo, -5, 0, 5, hi)):
        if not lo <= a <= hi or c < lo:
            continue
        for op in (Ops.SHL, Ops.SHR):
            expr = UOp(op, dt, (x, UOp.const(dt, c)))
            assert _model_value(expr, {x: a}) == exec_alu(op, dt, (a, c)), (op, dt, a, c)
        mask = (1 << c) - 1 if c >= 0 else 0
        if mask <= hi:
            assert _model_value(x & mask, {x: a}) == exec_alu(Ops.AND, dt, (a, mask)), (dt, a, mask)
