"""type_verify and the specs: each rule accepts a well-formed node and rejects an ill-formed one with a
message naming the op, the dtype, the sources and what the rule expected."""
import pytest

from tg_core.dtype import AddrSpace, dtypes
from tg_core.uop import AxisType, Ops, PatternMatcher, UOp, UPat
from tg_core.uop.spec import Spec, kernel_spec, program_spec, shared_spec, type_verify

i32, f32, u64, b = dtypes.int32, dtypes.float32, dtypes.uint64, dtypes.bool
void = dtypes.void


def ci(v=1):
    return UOp.const(i32, v)


def cf(v=1.0):
    return UOp.const(f32, v)


def cb(v=True):
    return UOp.const(b, v)


def gbuf(size=16):
    return UOp.param(0, f32.ptr(size))


def rng(end=16, axis=0):
    return UOp.range(end, axis)


def local(size=16):
    return UOp(Ops.DEFINE_LOCAL, f32.ptr(size, AddrSpace.LOCAL), arg="temp")


def store():
    return gbuf().index(rng()).store(cf())


def barrier():
    return UOp(Ops.BARRIER, void, (local().index(rng()).store(cf()),))


def vec_index():
    return UOp(Ops.VECTORIZE, dtypes.weakint.vec(2), (rng(), rng() + 1))


def var():
    return UOp.variable("n", 1, 8)


# (id, node builder) pairs that every spec below must accept
GOOD = [
    ("const-int", lambda: ci(3)), ("const-bool", lambda: cb()), ("const-float", lambda: cf(2.5)),
    ("const-vec", lambda: UOp.const(i32.vec(4), 7)), ("const-weakint", lambda: UOp.const(dtypes.weakint, 2 ** 70)),
    ("vconst", lambda: UOp.const(i32.vec(2), (1, 2))),
    ("define-var", var), ("define-var-int8", lambda: UOp.variable("m", -128, 127, dtypes.int8)),
    ("bind", lambda: var().bind(3)),
    ("range", lambda: rng()), ("range-var-end", lambda: UOp.range(var(), 1)),
    ("special", lambda: UOp.special(16, "lidx0")),
    ("add", lambda: ci() + ci()), ("mul-float", lambda: cf() * cf()), ("neg", lambda: UOp(Ops.NEG, i32, (ci(),))),
    ("mulacc", lambda: UOp(Ops.MULACC, f32, (cf(), cf(), cf()))), ("max-bool", lambda: UOp(Ops.MAX, b, (cb(), cb()))),
    ("idiv", lambda: ci(7) // ci(2)), ("mod", lambda: ci(7) % ci(2)),
    ("and-int", lambda: ci() & ci()), ("xor-bool", lambda: cb() ^ cb()),
    ("exp2", lambda: cf().exp2()), ("fdiv", lambda: cf() / cf()),
    ("cmplt", lambda: ci() < ci()), ("cmpne-float", lambda: cf().ne(cf())), ("cmpeq-bool", lambda: cb().eq(cb())),
    ("cmplt-vec", lambda: UOp(Ops.CMPLT, b.vec(2), (UOp.const(i32.vec(2), 1), UOp.const(i32.vec(2), 2)))),
    ("where", lambda: cb().where(ci(1), ci(2))),
    ("where-vec-scalar-cond", lambda: UOp(Ops.WHERE, i32.vec(2), (cb(), UOp.const(i32.vec(2), 1), UOp.const(i32.vec(2), 2)))),
    ("shl", lambda: UOp(Ops.SHL, i32, (ci(), ci(2)))),
    ("shr-uint-amount", lambda: UOp(Ops.SHR, i32, (ci(), UOp.const(dtypes.uint32, 2)))),
    ("threefry", lambda: UOp(Ops.THREEFRY, u64, (UOp.const(u64, 1), UOp.const(u64, 2)))),
    ("cast", lambda: ci().cast(f32)), ("cast-bool", lambda: cb().cast(i32)),
    ("bitcast", lambda: ci().bitcast(f32)), ("bitcast-vec", lambda: UOp.const(dtypes.int16.vec(2), 1).bitcast(f32)),
    ("vectorize", lambda: UOp(Ops.VECTORIZE, i32.vec(2), (ci(1), ci(2)))),
    ("gep", lambda: UOp(Ops.GEP, i32, (UOp.const(i32.vec(4), 1),), (3,))),
    ("gep-2", lambda: UOp(Ops.GEP, i32.vec(2), (UOp.const(i32.vec(4), 1),), (0, 3))),
    ("param-ptr", gbuf), ("param-named", lambda: UOp.param(2, f32.ptr(4), "out")), ("param-scalar", lambda: UOp.param(1, i32)),
    ("define-local", local), ("define-reg", lambda: UOp(Ops.DEFINE_REG, f32.ptr(4, AddrSpace.REG), arg="acc")),
    ("index", lambda: gbuf().index(rng())), ("index-gated", lambda: gbuf().index(rng(), rng() < 8)),
    ("index-int32", lambda: gbuf().index(ci(3))),
    ("load", lambda: gbuf().index(rng()).load()),
    ("load-alt", lambda: UOp(Ops.LOAD, f32, (gbuf().index(rng(), rng() < 8), cf(0.0)))),
    ("load-vec-index", lambda: UOp(Ops.LOAD, f32.vec(2), (gbuf().index(vec_index()),))),
    ("store", store),
    ("barrier", barrier),
    ("sink", lambda: store().sink()), ("sink-empty", lambda: UOp(Ops.SINK, void)),
    ("group", lambda: UOp(Ops.GROUP, void, (store(), store()))),
    ("end", lambda: store().end(rng())),
    ("after-barrier", lambda: local().after(barrier())), ("after-range", lambda: local().after(rng())),
    ("if", lambda: UOp(Ops.IF, void, (cb(),))),
    ("noop", lambda: UOp(Ops.NOOP, i32, (ci(),))), ("custom", lambda: UOp(Ops.CUSTOM, i32, arg="__builtin_x()")),
]


@pytest.mark.parametrize("make", [g for _, g in GOOD], ids=[i for i, _ in GOOD])
def test_program_spec_accepts(make):
    u = make()
    type_verify(u)
    assert program_spec.verdict(u)[0] is True


# (id, node builder, the rule's words the message must quote)
BAD = [
    ("const-float-arg-on-int", lambda: UOp(Ops.CONST, i32, arg=2.5), "int within its range"),
    ("const-out-of-range", lambda: UOp(Ops.CONST, dtypes.int8, arg=300), "int within its range"),
    # arg 2, not 1: the node cache keys 1 and True alike, so CONST(bool, 1) would alias CONST(bool, True)
    ("const-int-arg-on-bool", lambda: UOp(Ops.CONST, b, arg=2), "bool, int within"),
    ("const-int-arg-on-float", lambda: UOp(Ops.CONST, f32, arg=1), "or float"),
    ("const-void", lambda: UOp(Ops.CONST, void, arg=0), "a value of the dtype's kind"),
    ("const-ptr", lambda: UOp(Ops.CONST, f32.ptr(4), arg=0.0), "a value of the dtype's kind"),
    ("const-with-source", lambda: UOp(Ops.CONST, i32, (ci(),), 1), "no sources"),
    ("vconst-length", lambda: UOp(Ops.VCONST, i32.vec(2), arg=(1, 2, 3)), "one value of its kind per lane"),
    ("vconst-kind", lambda: UOp(Ops.VCONST, i32.vec(2), arg=(1, 2.5)), "one value of its kind per lane"),
    ("define-var-min-gt-max", lambda: UOp(Ops.DEFINE_VAR, dtypes.weakint, arg=("n", 5, 1)), "int min <= max"),
    ("define-var-beyond-dtype", lambda: UOp(Ops.DEFINE_VAR, dtypes.int8, arg=("n", 0, 300)), "inside the dtype's range"),
    ("define-var-float", lambda: UOp(Ops.DEFINE_VAR, f32, arg=("n", 0, 1)), "a scalar int dtype"),
    ("define-var-no-name", lambda: UOp(Ops.DEFINE_VAR, i32, arg=("", 0, 1)), "arg (name, min, max)"),
    ("bind-out-of-bounds", lambda: UOp(Ops.BIND, dtypes.weakint, (var(), UOp.const(dtypes.weakint, 9))), "inside its bounds"),
    ("bind-dtype", lambda: UOp(Ops.BIND, dtypes.weakint, (var(), ci(3))), "a CONST of its dtype"),
    ("range-float-end", lambda: UOp(Ops.RANGE, dtypes.weakint, (cf(16.0),), (0, AxisType.LOOP)),
     "one source (the end) of the same dtype"),
    ("range-end-other-int", lambda: UOp(Ops.RANGE, i32, (UOp.const(dtypes.weakint, 4),), (0, AxisType.LOOP)),
     "of the same dtype"),
    ("range-bad-arg", lambda: UOp(Ops.RANGE, dtypes.weakint, (UOp.const(dtypes.weakint, 4),), (0, "loop")),
     "arg (axis id, AxisType)"),
    ("range-float-dtype", lambda: UOp(Ops.RANGE, f32, (cf(4.0),), (0, AxisType.LOOP)), "a scalar int dtype"),
    ("special-float-size", lambda: UOp(Ops.SPECIAL, dtypes.weakint, (cf(16.0),), "lidx0"), "one source (the size)"),
    ("special-no-name", lambda: UOp(Ops.SPECIAL, dtypes.weakint, (UOp.const(dtypes.weakint, 4),), 0), "a str name"),
    ("add-mixed", lambda: UOp(Ops.ADD, i32, (ci(), cf())), "sources of the node's own dtype, which is float or int"),
    ("add-bool", lambda: UOp(Ops.ADD, b, (cb(), cb())), "ADD/MUL/MULACC/NEG/SUB/TRUNC"),
    ("add-arity", lambda: UOp(Ops.ADD, i32, (ci(),)), "ADD/MUL"),
    ("idiv-float", lambda: UOp(Ops.IDIV, f32, (cf(), cf())), "IDIV/MOD: sources of the node's own dtype, which is int"),
    ("and-float", lambda: UOp(Ops.AND, f32, (cf(), cf())), "which is bool or int"),
    ("exp2-int", lambda: UOp(Ops.EXP2, i32, (ci(),)), "which is float"),
    ("max-ptr", lambda: UOp(Ops.MAX, f32.ptr(4), (gbuf(4), gbuf(4))), "MAX: sources of the node's own dtype"),
    ("cmplt-int-result", lambda: UOp(Ops.CMPLT, i32, (ci(), ci())), "a bool result"),
    ("cmplt-mixed", lambda: UOp(Ops.CMPLT, b, (ci(), cf())), "two sources of one value dtype"),
    ("cmplt-lanes", lambda: UOp(Ops.CMPLT, b, (UOp.const(i32.vec(2), 1), UOp.const(i32.vec(2), 2))),
     "one lane per source lane"),
    ("where-int-cond", lambda: UOp(Ops.WHERE, i32, (ci(), ci(), ci())), "a bool condition"),
    ("where-branches", lambda: UOp(Ops.WHERE, i32, (cb(), ci(), cf())), "two values of the node's dtype"),
    ("shl-float", lambda: UOp(Ops.SHL, f32, (cf(), ci())), "an int value of the node's dtype"),
    ("shr-float-amount", lambda: UOp(Ops.SHR, i32, (ci(), cf())), "by an int amount"),
    ("threefry-int32", lambda: UOp(Ops.THREEFRY, i32, (ci(), ci())), "uint64 result and two uint64 sources"),
    ("cast-lanes", lambda: UOp(Ops.CAST, f32.vec(2), (ci(),)), "the same lane count"),
    ("cast-to-void", lambda: UOp(Ops.CAST, void, (ci(),)), "one value source"),
    ("cast-pointer", lambda: UOp(Ops.CAST, dtypes.int64, (gbuf(),)), "one value source"),
    ("bitcast-size", lambda: UOp(Ops.BITCAST, dtypes.int64, (ci(),)), "the same size in bytes"),
    ("bitcast-weak", lambda: UOp(Ops.BITCAST, dtypes.int64, (UOp.const(dtypes.weakint, 1),)), "neither dtype weak"),
    ("vectorize-count", lambda: UOp(Ops.VECTORIZE, i32.vec(4), (ci(), ci())), "one source of the scalar dtype per lane"),
    ("vectorize-dtype", lambda: UOp(Ops.VECTORIZE, i32.vec(2), (ci(), UOp.const(dtypes.int64, 1))), "of the scalar dtype"),
    ("vectorize-one", lambda: UOp(Ops.VECTORIZE, i32, (ci(),)), "at least two"),
    ("gep-lane", lambda: UOp(Ops.GEP, i32, (UOp.const(i32.vec(4), 1),), (4,)), "a tuple of lanes inside it"),
    ("gep-dtype", lambda: UOp(Ops.GEP, f32, (UOp.const(i32.vec(4), 1),), (0,)), "the scalar dtype times the number of lanes"),
    ("gep-scalar", lambda: UOp(Ops.GEP, i32, (ci(),), (0,)), "a vector source"),
    ("param-local-ptr", lambda: UOp.param(0, f32.ptr(16, AddrSpace.LOCAL)), "a global buffer pointer"),
    ("param-unknown-size", lambda: UOp.param(0, f32.ptr()), "known size"),
    ("param-weak-ptr", lambda: UOp.param(0, dtypes.weakfloat.ptr(4)), "realizable dtype"),
    ("param-bad-index", lambda: UOp.param(-1, f32.ptr(4)), "an index >= 0"),
    ("define-local-global-ptr", lambda: UOp(Ops.DEFINE_LOCAL, f32.ptr(16), arg="temp"), "a LOCAL pointer"),
    ("define-local-empty", lambda: UOp(Ops.DEFINE_LOCAL, f32.ptr(0, AddrSpace.LOCAL), arg="temp"), "a known size"),
    ("define-reg-local-ptr", lambda: UOp(Ops.DEFINE_REG, f32.ptr(4, AddrSpace.LOCAL), arg="acc"), "a REG pointer"),
    ("index-float", lambda: gbuf().index(cf()), "an int index"),
    ("index-int-gate", lambda: gbuf().index(rng(), ci()), "bool valid"),
    ("index-not-pointer", lambda: UOp(Ops.INDEX, i32, (ci(), ci())), "a pointer buffer"),
    ("index-other-dtype", lambda: UOp(Ops.INDEX, i32.ptr(16), (gbuf(), rng())), "the buffer's pointer dtype"),
    ("index-arity", lambda: UOp(Ops.INDEX, f32.ptr(16), (gbuf(),)), "(buffer, index[, valid])"),
    ("load-dtype", lambda: UOp(Ops.LOAD, i32, (gbuf().index(rng()),)), "giving the pointee dtype"),
    ("load-from-buffer", lambda: UOp(Ops.LOAD, f32, (gbuf(),)), "LOAD: (INDEX[, alt])"),
    ("load-alt-ungated", lambda: UOp(Ops.LOAD, f32, (gbuf().index(rng()), cf(0.0))), "needs a gated INDEX"),
    ("load-alt-dtype", lambda: UOp(Ops.LOAD, f32, (gbuf().index(rng(), rng() < 8), ci(0))),
     "an alt value has the load's dtype"),
    ("store-dtype", lambda: gbuf().index(rng()).store(ci()), "with the pointee dtype"),
    ("store-to-buffer", lambda: UOp(Ops.STORE, void, (gbuf(), cf())), "STORE: (INDEX, value)"),
    ("store-result", lambda: UOp(Ops.STORE, f32, (gbuf().index(rng()), cf())), "a void result"),
    ("barrier-value", lambda: UOp(Ops.BARRIER, void, (ci(),)), "after void effects only"),
    ("sink-value", lambda: UOp(Ops.SINK, void, (ci(),)), "gathering void effects"),
    ("sink-dtype", lambda: UOp(Ops.SINK, i32, (store(),)), "SINK: void"),
    ("group-value", lambda: UOp(Ops.GROUP, void, (store(), ci())), "GROUP: void, gathering void effects"),
    ("end-non-range", lambda: UOp(Ops.END, void, (store(), ci())), "the RANGEs/IFs it closes"),
    ("end-no-range", lambda: UOp(Ops.END, void, (store(),)), "at least one"),
    ("end-of-value", lambda: UOp(Ops.END, void, (ci(), rng())), "a void effect"),
    ("after-dtype", lambda: UOp(Ops.AFTER, i32, (local(), barrier())), "with the value's dtype"),
    ("after-nothing", lambda: UOp(Ops.AFTER, local().dtype, (local(),)), "at least one void effect or RANGE"),
    ("after-value-effect", lambda: UOp(Ops.AFTER, local().dtype, (local(), ci())), "void effect or RANGE"),
    ("if-int-cond", lambda: UOp(Ops.IF, void, (ci(),)), "a scalar bool condition"),
    ("custom-no-name", lambda: UOp(Ops.CUSTOM, i32), "name as arg (renderers that know it"),
]


@pytest.mark.parametrize("make,expected", [(m, e) for _, m, e in BAD], ids=[i for i, _, _ in BAD])
def test_program_spec_rejects(make, expected):
    u = make()
    with pytest.raises(RuntimeError) as e:
        type_verify(u)
    msg = str(e.value)
    assert msg.startswith(f"program_spec rejects {u.op.name} of dtype {u.dtype!r}")
    assert f"with sources ({', '.join(f'{s.op.name} {s.dtype!r}' for s in u.src)})" in msg
    assert expected in msg
    assert program_spec.verdict(u)[0] in (False, None)


def test_rejection_message_is_complete():
    bad = UOp(Ops.ADD, i32, (ci(), cf()))
    with pytest.raises(RuntimeError) as e:
        type_verify(bad)
    assert str(e.value) == ("program_spec rejects ADD of dtype dtypes.int with sources (CONST dtypes.int, CONST dtypes.float): "
                            "expected ADD/MUL/MULACC/NEG/SUB/TRUNC: sources of the node's own dtype, which is float or int")


def test_rejection_names_the_arg():
    bad = UOp(Ops.GEP, i32, (UOp.const(i32.vec(4), 1),), (9,))
    with pytest.raises(RuntimeError, match=r"rejects GEP of dtype dtypes.int arg=\(9,\) "
                                           r"with sources \(CONST dtypes.int.vec\(4\)\)"):
        type_verify(bad)


def test_op_without_rules_is_rejected():
    with pytest.raises(RuntimeError, match="program_spec rejects WMMA of dtype dtypes.float with sources \\(\\): "
                                           "program_spec has no rule for WMMA"):
        type_verify(UOp(Ops.WMMA, f32))


def test_unmatched_pattern_lists_what_the_rules_expect():
    # a comparison with three sources matches no comparison pattern at all
    with pytest.raises(RuntimeError, match="no rule accepts it; the rules for CMPLT expect: a comparison: two sources"):
        type_verify(UOp(Ops.CMPLT, b, (ci(), ci(), ci())))


def test_reduce_is_kernel_level_only():
    r = rng()
    red = gbuf().index(r).load().reduce(Ops.ADD, r)
    type_verify(red, kernel_spec)
    with pytest.raises(RuntimeError, match="program_spec has no rule for REDUCE"):
        type_verify(red)
    with pytest.raises(RuntimeError, match="arg ADD, MUL or MAX"):
        type_verify(gbuf().index(r).load().reduce(Ops.SUB, r), kernel_spec)
    with pytest.raises(RuntimeError, match="RANGEs reduced"):
        type_verify(UOp(Ops.REDUCE, f32, (gbuf().index(r).load(), ci()), Ops.ADD), kernel_spec)


def test_first_failing_node_is_reported():
    # the ill-formed source is found before the (well-formed) node that uses it
    bad_src = UOp(Ops.ADD, i32, (ci(), cf()))
    with pytest.raises(RuntimeError, match="rejects ADD"):
        type_verify(bad_src.cast(f32).sink())


def test_whole_kernel():
    lbuf = local()
    lid = UOp.special(16, "lidx0")
    gid = UOp.special(4, "gidx0")
    st = lbuf.index(lid).store(gbuf(64).index(gid * 16 + lid).load())
    bar = UOp(Ops.BARRIER, void, (st,))
    r = rng(16, 1)
    acc = lbuf.after(bar).index(r).load()
    out = UOp.param(1, f32.ptr(64)).index(gid * 16 + lid, lid < 8).store(acc * cf(2.0))
    sink = out.end(r).sink()
    type_verify(sink)
    type_verify(list(sink.toposort()))


def test_linear_program_checks_only_listed_nodes():
    bad = UOp(Ops.ADD, i32, (ci(), cf()))
    type_verify([ci(), cf()])
    type_verify([bad.cast(f32)])  # the CAST itself is fine; its source is not in the list
    with pytest.raises(RuntimeError, match="rejects ADD"):
        type_verify([ci(), bad])


def test_spec_rules_decide_in_order():
    # None defers to the next rule; the first True/False decides
    seen = []
    spec = Spec([
        (UPat(Ops.CONST, name="x"), lambda x: seen.append("first") or None, "first"),
        (UPat(Ops.CONST, name="x"), lambda x: x.arg > 0, "a positive constant"),
        (UPat(Ops.CONST, name="x"), lambda x: True, "anything"),
    ], "positive")
    assert spec.verdict(ci(3)) == (True, "a positive constant")
    assert spec.verdict(ci(-3)) == (False, "a positive constant")
    assert seen == ["first", "first"]
    with pytest.raises(RuntimeError, match="positive rejects CONST of dtype dtypes.int arg=-3 with sources \\(\\): "
                                           "expected a positive constant"):
        type_verify(ci(-3), spec)


def test_spec_is_a_pattern_matcher_and_composes():
    assert isinstance(program_spec, PatternMatcher)
    extra = Spec([(UPat(Ops.WMMA, name="x"), lambda x: True, "anything")], "wmma")
    both = shared_spec + extra
    assert isinstance(both, Spec) and both.name == "shared_spec+wmma"
    type_verify(UOp(Ops.WMMA, f32), both)
    assert both.verdict(ci())[0] is True
    with pytest.raises(TypeError, match="extended by another Spec"):
        shared_spec + PatternMatcher([])


def test_shared_spec_has_no_memory_rules():
    with pytest.raises(RuntimeError, match="shared_spec rejects PARAM .*: shared_spec has no rule for PARAM"):
        type_verify(gbuf().index(rng()), shared_spec)
    with pytest.raises(RuntimeError, match="shared_spec has no rule for INDEX"):
        type_verify([gbuf().index(rng())], shared_spec)
