"""UPat matching, PatternMatcher, graph_rewrite: fixed points, visiting order, ctx, errors that name the
rule, and deep graphs."""
import time

import pytest

from tg_core.dtype import dtypes
from tg_core.helpers import Context
from tg_core.uop import Ops, PatternMatcher, RewriteError, UOp, UPat, graph_rewrite
from tg_core.uop.alu import exec_alu

X = UOp.variable("x", 0, 10)
Y = UOp.variable("y", 0, 10)
C3 = UOp.const(dtypes.weakint, 3)


def m(pat: UPat, u: UOp) -> list[dict[str, UOp]]:
    return pat.match(u, {})


# ---- UPat ---------------------------------------------------------------------------------------------------

def test_upat_fields():
    assert m(UPat(Ops.ADD), X + 1) == [{}]
    assert m(UPat(Ops.MUL), X + 1) == []
    assert m(UPat((Ops.MUL, Ops.ADD), name="n"), X + 1) == [{"n": X + 1}]
    assert m(UPat(dtype=dtypes.weakint), X) and not m(UPat(dtype=dtypes.int32), X)
    assert m(UPat(dtype=(dtypes.int32, dtypes.weakint)), X)
    v4 = UOp(Ops.VECTORIZE, dtypes.int32.vec(4), (X.cast(dtypes.int32),) * 4)
    assert m(UPat(dtype=dtypes.int32), v4)  # a scalar dtype pattern matches vectors of it
    assert m(UPat(Ops.CONST, arg=3), C3) and not m(UPat(Ops.CONST, arg=4), C3)


def test_upat_arg_matches_numbers_of_the_same_kind():
    f3 = UOp.const(dtypes.float32, 3.0)
    assert m(UPat.const(None, 3), f3)  # 3 == 3.0: int and float patterns match either
    assert m(UPat.const(None, 3.0), C3)
    one, true = UOp.const(dtypes.int32, 1), UOp.const(dtypes.bool, True)
    assert not m(UPat.const(None, True), one) and not m(UPat.const(None, 1), true)
    assert m(UPat.const(dtypes.bool, True), true)


def test_upat_ordered_sources_and_any_len():
    e = X + C3
    assert m(UPat(Ops.ADD, src=(UPat.var("a"), UPat.cvar("c"))), e) == [{"a": X, "c": C3}]
    assert m(UPat(Ops.ADD, src=(UPat.cvar("c"), UPat.var("a"))), e) == []
    assert m(UPat(Ops.ADD, src=(UPat.var("a"),)), e) == []
    assert m(UPat(Ops.ADD, src=(UPat.var("a"),), allow_any_len=True), e) == [{"a": X}]
    assert m(UPat(Ops.ADD, src=(UPat(), UPat(), UPat()), allow_any_len=True), e) == []


def test_upat_permuted_sources_for_commutative_ops():
    e = X + C3
    pat = UPat(Ops.ADD, src=[UPat.cvar("c"), UPat.var("a")])
    assert m(pat, e) == [{"a": X, "c": C3}] and m(pat, C3 + X) == [{"a": X, "c": C3}]
    # built with operators: commutative ops get list sources, the others keep their order
    assert m(UPat.var("a") + UPat.cvar("c"), C3 + X) and m(UPat.cvar("c") * UPat.var("a"), X * 3)
    assert m(UPat.var("a") // UPat.cvar("c"), X // 3) and not m(UPat.cvar("c") // UPat.var("a"), X // 3)
    # both orders bind when both fit
    assert len(m(UPat(Ops.ADD, src=[UPat.var("p"), UPat.var("q")]), X + Y)) == 2
    cmp_pat = UPat.var("a") < UPat.cvar("c")
    assert cmp_pat.dtype == frozenset({dtypes.bool}) and m(cmp_pat, X < 3)


def test_upat_repeated_source_pattern():
    assert m(UPat(Ops.ADD, src=UPat(Ops.DEFINE_VAR)), X + Y) == [{}]
    assert m(UPat(Ops.ADD, src=UPat(Ops.DEFINE_VAR)), X + 1) == []
    assert m(UPat(Ops.ADD, src=UPat.var("s")), X + X) == [{"s": X}]
    assert m(UPat(Ops.ADD, src=UPat.var("s")), X + Y) == []  # one name, two different nodes


def test_upat_same_name_must_be_the_same_node():
    pat = UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a")))
    assert m(pat, X + X) == [{"a": X}] and m(pat, X + Y) == []
    nested = UPat(Ops.MUL, src=[UPat.var("a"), UPat(Ops.ADD, src=[UPat.var("a"), UPat.cvar()])])
    assert m(nested, X * (X + 1)) and not m(nested, Y * (X + 1))


def test_or_casted_and_any():
    i32 = X.cast(dtypes.int32)
    pat = UPat(Ops.DEFINE_VAR, name="v").or_casted()
    assert m(pat, X) == [{"v": X}] and m(pat, i32) == [{"v": X}] and m(pat, Y + 1) == []
    named = UPat(Ops.DEFINE_VAR, name="v").or_casted("outer")
    # (as in tinygrad, the name given replaces the inner pattern's name on the uncast branch)
    assert m(named, X) == [{"outer": X}] and m(named, i32) == [{"v": X, "outer": i32}]
    anyp = UPat.any(UPat(Ops.CONST, name="k"), UPat(Ops.DEFINE_VAR, name="k"))
    assert m(anyp, C3) == [{"k": C3}] and m(anyp, X) == [{"k": X}] and m(anyp, X + 1) == []
    # naming an alternation keeps the alternatives (and their bindings)
    assert m(anyp.named("z"), X) == [{"z": X, "k": X}] and m(anyp.named("z"), X + 1) == []
    assert m(anyp.or_casted("q"), i32) == [{"q": i32, "k": X}]
    assert m(UPat(Ops.ADD, src=(anyp.named("z"), UPat.var("z"))), X + X) == [{"z": X, "k": X}]
    assert m(UPat(Ops.ADD, src=(anyp.named("z"), UPat.var("z"))), X + C3) == []


# ---- PatternMatcher -------------------------------------------------------------------------------------

def test_rules_are_indexed_by_op_and_tried_in_order():
    calls = []

    def on_mul(x):
        calls.append(x)

    pm = PatternMatcher([(UPat(Ops.MUL, name="x"), on_mul),
                         (UPat(Ops.ADD, name="x"), lambda x: None),
                         (UPat(Ops.ADD, name="x"), lambda x: x),            # returning the node itself declines
                         (UPat(Ops.ADD, src=(UPat.var("a"), UPat.const(None, 0))), lambda a: a),
                         (UPat(Ops.ADD, name="x"), lambda x: UOp.const(dtypes.weakint, 99))])
    assert pm.rewrite(X + 0) is X and pm.rewrite(X + 1) is UOp.const(dtypes.weakint, 99)
    assert pm.rewrite(X) is None and calls == []
    assert len(pm.rules_by_op[Ops.ADD]) == 4 and Ops.SUB not in pm.rules_by_op
    assert pm.rewrite(X * 2) is None and calls == [X * 2]
    assert len(pm + PatternMatcher([(UPat(), lambda: None)])) == 6
    assert all(op in (pm + PatternMatcher([(UPat(name="n"), lambda n: None)])).rules_by_op for op in Ops)


def test_ctx_is_passed_to_rules_that_take_it():
    seen = []
    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda ctx, v: seen.append((ctx, v)))])
    graph_rewrite(X + Y, pm, ctx="C")
    assert sorted(seen, key=lambda t: t[1].arg[0]) == [("C", X), ("C", Y)]


def test_bad_patterns_and_arguments():
    with pytest.raises(TypeError, match="a pattern must be"):
        PatternMatcher([(Ops.ADD, lambda x: x)])
    with pytest.raises(TypeError, match="src must be"):
        UPat(Ops.ADD, src=X)
    with pytest.raises(TypeError, match="needs a UOp"):
        graph_rewrite(3, PatternMatcher([]))
    with pytest.raises(TypeError, match="needs a PatternMatcher"):
        graph_rewrite(X, [])


# ---- graph_rewrite --------------------------------------------------------------------------------------

def _fold(a: UOp, b: UOp, x: UOp) -> UOp:
    return UOp.const(x.dtype, exec_alu(x.op, x.dtype, (a.arg, b.arg)))


fold = PatternMatcher([
    (UPat((Ops.ADD, Ops.MUL, Ops.MAX, Ops.IDIV, Ops.MOD), src=(UPat.cvar("a", vec=False), UPat.cvar("b", vec=False)),
          name="x"), _fold),
    (UPat.var("v") + 0, lambda v: v),
    (UPat.var("v") * 1, lambda v: v),
    (UPat.var("v") * 0, lambda v: v.const_like(0)),
])


@pytest.mark.parametrize("bottom_up", [False, True])
def test_graph_rewrite_reaches_a_fixed_point(bottom_up):
    c = lambda v: UOp.const(dtypes.weakint, v)  # noqa: E731
    e = ((c(2) + c(3)) * (c(4) + X * 0)) + (Y * (c(7) // c(7))) + (X * (c(1) + c(-1)))
    out = graph_rewrite(e, fold, bottom_up=bottom_up)
    assert out is c(20) + Y
    for xv, yv in [(0, 0), (3, 7), (10, 10)]:
        assert out.evaluate({Y: yv}) == e.evaluate({X: xv, Y: yv})
    assert graph_rewrite(out, fold, bottom_up=bottom_up) is out


def test_results_of_rules_are_rewritten_again():
    steps = PatternMatcher([(UPat(Ops.CONST, arg=1), lambda: UOp.const(dtypes.weakint, 2)),
                            (UPat(Ops.CONST, arg=2), lambda: UOp.const(dtypes.weakint, 3)),
                            (UPat(Ops.CONST, arg=3), lambda: X)])
    for bu in (False, True):
        assert graph_rewrite(UOp.const(dtypes.weakint, 1) + Y, steps, bottom_up=bu) is X + Y
    # a parent whose sources changed is tried again: here only the new ADD(x, x) matches
    both = PatternMatcher([(UPat(Ops.DEFINE_VAR, arg=("y", 0, 10)), lambda: X),
                           (UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a"))), lambda a: a * 2)])
    for bu in (False, True):
        assert graph_rewrite(X + Y, both, bottom_up=bu) is X * 2


def test_visiting_order_sources_first_or_node_first():
    order = []
    pm = PatternMatcher([(UPat(name="n"), lambda n: order.append(n))])
    a = X + 1
    e = a * Y
    graph_rewrite(e, pm)
    pos = {u: i for i, u in enumerate(order)}
    assert pos[X] < pos[a] < pos[e] and pos[Y] < pos[e] and len(order) == len(set(order)) == 5
    order.clear()
    graph_rewrite(e, pm, bottom_up=True)
    pos = {u: i for i, u in enumerate(order)}
    assert order[0] is e and pos[a] < pos[X] and len(order) == len(set(order))


def test_bottom_up_replaces_a_subgraph_before_its_sources_are_seen():
    seen = []
    pm = PatternMatcher([(UPat(Ops.MUL, src=[UPat.var("big"), UPat.const(None, 0)]), lambda big: UOp.const(dtypes.weakint, 0)),
                         (UPat(Ops.DEFINE_VAR, name="v"), lambda v: seen.append(v))])
    e = ((X + Y) * 0) + 5
    assert graph_rewrite(e, pm, bottom_up=True) is UOp.const(dtypes.weakint, 0) + 5 and seen == []
    assert graph_rewrite(e, pm) is UOp.const(dtypes.weakint, 0) + 5 and set(seen) == {X, Y}


def test_shared_nodes_are_rewritten_once():
    calls = []

    def on_add(n):
        calls.append(n)

    shared = X + 1
    e = (shared * shared).maximum(shared + shared)
    for bu in (False, True):
        calls.clear()
        graph_rewrite(e, PatternMatcher([(UPat(Ops.ADD, name="n"), on_add)]), bottom_up=bu)
        assert len(calls) == len(set(calls)) == 2


# ---- errors that name the rule -----------------------------------------------------------------------------

def test_a_rule_returning_a_non_uop_is_named():
    def returns_int(c):
        return 5

    pm = PatternMatcher([(UPat(Ops.CONST, name="c"), returns_int)])
    for bu in (False, True):
        with pytest.raises(TypeError, match=r"rule [\w.<>]*returns_int \(.*test_rewrite.py:\d+\) for UPat\(CONST, name='c'\) "
                                            r"returned int 5; a rule must return a UOp or None"):
            graph_rewrite(X + 1, pm, bottom_up=bu)
    with pytest.raises(TypeError, match="returned tuple"):
        PatternMatcher([(UPat(Ops.CONST, name="c"), lambda c: (c,))]).rewrite(C3)


def test_an_exception_in_a_rule_is_annotated_with_the_rule():
    def broken(c):
        raise ZeroDivisionError("inside")

    with pytest.raises(ZeroDivisionError) as ei:
        graph_rewrite(X + 1, PatternMatcher([(UPat(Ops.CONST, name="c"), broken)]))
    assert any("raised by rule " in n and "broken (" in n and "on Ops.CONST node" in n for n in ei.value.__notes__)


@pytest.mark.parametrize("bottom_up", [False, True])
def test_rules_undoing_each_other_are_reported(bottom_up):
    one, two = UOp.const(dtypes.weakint, 1), UOp.const(dtypes.weakint, 2)

    def one_to_two():
        return two

    def two_to_one():
        return one

    pm = PatternMatcher([(UPat(Ops.CONST, arg=1), one_to_two), (UPat(Ops.CONST, arg=2), two_to_one)])
    t = time.perf_counter()
    with pytest.raises(RewriteError, match=r"does not terminate: rule [\w.<>]*one_to_two .* rewrote 1 into 2; "
                                           r"rule [\w.<>]*two_to_one .* rewrote 2 into 1; .*undoing each other"):
        graph_rewrite(X + 1, pm, bottom_up=bottom_up)
    assert time.perf_counter() - t < 1


@pytest.mark.parametrize("bottom_up", [False, True])
def test_endless_growth_is_reported(bottom_up):
    def grow(v):
        return v + 0

    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), grow)])
    with Context(REWRITE_STEP_LIMIT=100):
        with pytest.raises(RewriteError, match=r"rule [\w.<>]*grow .* rewrote x into \(x\+0\); the result contains x itself"):
            graph_rewrite(X * 2, pm, bottom_up=bottom_up)


@pytest.mark.parametrize("bottom_up", [False, True])
def test_step_limit_names_the_rule(bottom_up):
    def count_up(c):
        return UOp.const(c.dtype, c.arg + 1)  # every result is new: no cycle to find, only the limit stops it

    pm = PatternMatcher([(UPat(Ops.CONST, name="c"), count_up)])
    with Context(REWRITE_STEP_LIMIT=50):
        with pytest.raises(RewriteError, match=r"after 51 rule applications \(REWRITE_STEP_LIMIT=50\); the last rewrite, "
                                               r"by rule [\w.<>]*count_up .*, turned 52 into 53\. Most applied: rule [\w.<>]*count_up .*"
                                               r"\(51 times\)"):
            graph_rewrite(X + 2, pm, bottom_up=bottom_up)
    # a rewrite that needs fewer steps than the limit is fine
    stop = PatternMatcher([(UPat(Ops.CONST, name="c"), lambda c: UOp.const(c.dtype, c.arg + 1) if c.arg < 40 else None)])
    with Context(REWRITE_STEP_LIMIT=50):
        assert graph_rewrite(X + 2, stop, bottom_up=bottom_up) is X + 40


# ---- deep graphs --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bottom_up", [False, True])
def test_deep_chains_rewrite_without_recursion(bottom_up):
    y = X
    for i in range(10_000):
        y = y * 1 if i % 2 else y + 0
    assert graph_rewrite(y, fold, bottom_up=bottom_up) is X
    z = X
    for _ in range(10_000):
        z = z + 1
    calls = []
    out = graph_rewrite(z, PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda v: calls.append(v) or (Y if v is X else None))]),
                        bottom_up=bottom_up)
    assert out.evaluate({Y: 5}) == 10_005 and out is z.substitute({X: Y})


def test_gc_paused_nests_and_restores_on_error():
    import gc

    from tg_core.uop.rewrite import gc_paused
    was = gc.isenabled()
    gc.enable()
    try:
        with gc_paused():
            assert not gc.isenabled()
            try:
                with gc_paused():
                    raise KeyError("inner")
            except KeyError:
                pass
            assert not gc.isenabled()  # the outer pause still holds
        assert gc.isenabled()
        gc.disable()
        with gc_paused():
            pass
        assert not gc.isenabled()  # a collector that was off before stays off
    finally:
        (gc.enable if was else gc.disable)()
