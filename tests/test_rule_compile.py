"""Compiled rules (tg_core/uop/rule_compile.py) against UPat.match, the interpreter they replace: the same first
rule, the same bindings and the same result on pattern shapes chosen to be awkward (permutations inside
permutations, UPat.any with names, repeated sources, numbers of other kinds) and on every node every matcher of
the compiler meets while lowering and running real kernels."""
from typing import Any

import numpy as np
import pytest

from tg_core.dtype import dtypes
from tg_core.uop import Ops, PatternMatcher, UOp, UPat, graph_rewrite
from tg_core.uop.rewrite import _Rule

X = UOp.variable("x", 0, 10)
Y = UOp.variable("y", -5, 5)
I32 = X.cast(dtypes.int32)
F = UOp.const(dtypes.float32, 2.0)


def reference(pm: PatternMatcher, u: UOp, ctx: Any = None) -> tuple[UOp, int] | None:
    """What PatternMatcher did before rules were compiled: every rule of the op that accepts the dtype, in
    order, every binding UPat.match lists, in order; the first function returning another node wins."""
    for rule in pm.rules_by_op.get(u.op, ()):
        d = rule.pat.dtype
        if d is not None and u.dtype not in d and u.dtype.scalar() not in d:
            continue
        for store in rule.pat.match(u, {}):
            ret = rule.fn(ctx=ctx, **store) if rule.wants_ctx else rule.fn(**store)
            if ret is not None and ret is not u:
                return ret, rule.index
    return None


def record(name: str):
    """A rule function that returns a node naming the rule and its bindings, so that which rule matched
    and what it bound are visible in the result."""
    def fn(**kw):
        return UOp(Ops.CUSTOM, dtypes.void, tuple(kw[k] for k in sorted(kw)), (name, *sorted(kw)))
    return fn


def declines_unless(name: str, want):
    """A rule that declines (None) unless its bindings satisfy `want`: later bindings and rules must be tried."""
    def fn(**kw):
        return record(name)(**kw) if want(kw) else None
    return fn


AWKWARD = PatternMatcher([
    # nested permutations: ADD[MUL[a, c], b] has 4 orders; only some bindings pass the check
    (UPat(Ops.ADD, src=[UPat(Ops.MUL, src=[UPat.var("a"), UPat.cvar("c")]), UPat.var("b")]),
     declines_unless("nested", lambda kw: kw["c"].arg == 3)),
    # the same name in two places must be one node
    (UPat(Ops.ADD, src=[UPat.var("z"), UPat.var("z")], name="s"), record("twice")),
    # UPat.any with a name, inside a permuted source
    (UPat(Ops.MUL, src=[UPat.any(UPat(Ops.CAST, name="k"), UPat(Ops.DEFINE_VAR, name="k")).named("w"), UPat.var("o")]),
     declines_unless("any", lambda kw: kw["o"].op is not Ops.CONST or kw["o"].arg != 7)),
    # repeated sources: every source a constant (no name), and every source the same named node (UPat.match)
    (UPat(Ops.MAX, src=UPat(Ops.CONST), name="m"), record("allconst")),
    (UPat(Ops.WHERE, src=UPat(name="same")), record("allsame")),
    # extra sources allowed; an arg compared as a number of the same kind
    (UPat(Ops.CUSTOM, src=(UPat.var("first"),), allow_any_len=True, arg="keep"), record("anylen")),
    (UPat(Ops.IDIV, src=(UPat.var("n"), UPat.const(None, 2.0))), record("by2")),
    (UPat(Ops.CMPLT, src=(UPat.var("p", dtypes.int32), UPat.const(None, True))), record("lt_true")),
    (UPat(Ops.CMPLT, dtype=dtypes.bool, src=(UPat.var("p"), UPat.var("q"))), declines_unless("lt", lambda kw: kw["p"] is not kw["q"])),
    # a dtype test on a source, a scalar dtype pattern on a vector source
    (UPat(Ops.CAST, src=(UPat(dtype=dtypes.int32, name="v"),), name="c"), record("cast_i32")),
    # no sources
    (UPat(Ops.SINK, src=()), record("empty_sink")),
    (UPat(Ops.CONST, arg=5, name="c"), record("five")),
])

NODES = [
    X * 3 + Y, Y + X * 3, (X * 3) + (X * 3), X * 4 + Y, (Y * 3) * 1 + X, X + X, Y + X,
    I32 * 7, X * 7, X * Y, Y * I32, I32 * X,
    UOp(Ops.MAX, dtypes.weakint, (UOp.const(dtypes.weakint, 1), UOp.const(dtypes.weakint, 2))), X.maximum(1),
    UOp(Ops.WHERE, dtypes.weakint, (X, X, X)), UOp(Ops.WHERE, dtypes.weakint, (X.ne(1), X, X)),
    UOp(Ops.CUSTOM, dtypes.void, (X, Y), "keep"), UOp(Ops.CUSTOM, dtypes.void, (X,), "keep"),
    UOp(Ops.CUSTOM, dtypes.void, (), "keep"), UOp(Ops.CUSTOM, dtypes.void, (X,), "other"),
    X // 2, X // UOp.const(dtypes.weakint, 3), UOp(Ops.IDIV, dtypes.float32, (F, F)),
    UOp(Ops.CMPLT, dtypes.bool, (I32, UOp.const(dtypes.bool, True))), UOp(Ops.CMPLT, dtypes.bool, (I32, UOp.const(dtypes.int32, 1))),
    X < X, X < Y, I32.cast(dtypes.float32), UOp(Ops.CAST, dtypes.float32.vec(2), (UOp(Ops.VECTORIZE, dtypes.int32.vec(2), (I32, I32)),)),
    UOp(Ops.SINK, dtypes.void, ()), UOp(Ops.SINK, dtypes.void, (X,)), UOp.const(dtypes.weakint, 5),
    UOp.const(dtypes.float32, 5.0), UOp.const(dtypes.bool, True),
]


@pytest.mark.parametrize("u", NODES, ids=lambda u: u.render()[:40])
def test_awkward_patterns_match_as_upat_match_does(u):
    assert AWKWARD._rewrite(u, None) == reference(AWKWARD, u)


def test_awkward_patterns_cover_both_outcomes():
    # the table above is only a test if its rules both fire and decline
    hits = [AWKWARD._rewrite(u, None) for u in NODES]
    fired = {h[0].arg[0] for h in hits if h is not None}
    assert fired >= {"nested", "twice", "any", "allconst", "allsame", "anylen", "by2", "lt_true", "lt", "cast_i32",
                     "empty_sink", "five"}
    assert sum(h is None for h in hits) >= 5
    nested = AWKWARD._rewrite(Y + X * 3, None)
    assert nested is not None and nested[0].src == (X, Y, UOp.const(dtypes.weakint, 3))  # a, b, c bound right


class Checked:
    """Wraps PatternMatcher.compiled so that every compiled call is compared with the reference, for rules
    whose outcome depends on nothing but the node (no ctx)."""

    def __init__(self, monkeypatch):
        self.compared = 0
        self.matchers: set[int] = set()
        real = PatternMatcher.compiled
        checker = self

        def compiled(pm: PatternMatcher, op: Ops, dtype: Any):
            fn = real(pm, op, dtype)
            rules: list[_Rule] = pm.rules_by_op.get(op, [])
            if not fn or any(r.wants_ctx for r in rules):
                return fn

            def both(u: UOp, ctx: Any):
                got = fn(u, ctx)
                assert got == reference(pm, u, ctx), f"compiled rules disagree with UPat.match on {u.render()[:200]}"
                checker.compared += 1
                checker.matchers.add(id(pm))
                return got
            pm.dispatch[op][dtype] = both
            return both
        monkeypatch.setattr(PatternMatcher, "compiled", compiled)


def _fresh(pm: PatternMatcher) -> None:
    for table in pm.dispatch.values():
        table.clear()


def test_the_compilers_matchers_agree_with_upat_match_on_real_kernels(monkeypatch):
    import gc

    from tg_core.tensor import Tensor
    from tg_core.uop.symbolic import symbolic
    check = Checked(monkeypatch)
    for obj in gc.get_objects():  # every matcher compiles again, through the checking wrapper
        if isinstance(obj, PatternMatcher):
            _fresh(obj)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 24), dtype=np.float32), rng.standard_normal((24, 5), dtype=np.float32)
    x, w = Tensor(a), Tensor(b)
    out = ((x @ w).relu().softmax(-1) * 3 + x[:, 2:7]).sum(0)
    want = np.maximum(a @ b, 0)
    want = np.exp(want - want.max(-1, keepdims=True))
    want = (want / want.sum(-1, keepdims=True) * 3 + a[:, 2:7]).sum(0)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
    ints = rng.integers(-50, 50, (6, 10)).astype(np.int32)
    t = Tensor(ints)
    got = ((t * 4 + 3) // 2 % 7 + t.max(1, keepdim=True)).numpy()
    np.testing.assert_array_equal(got, (ints * 4 + 3) // 2 % 7 + ints.max(1, keepdims=True))  # Tensor: floor, as numpy
    for e in [((X * 4 + 3) // 2) % 7 + Y, (X * 6 + Y * 3) // 3, (X + 1) * 2 + (X + 1) * -2]:
        graph_rewrite(e, symbolic, bottom_up=True)
        graph_rewrite(e, symbolic)
    assert check.compared > 300 and len(check.matchers) >= 3, (check.compared, len(check.matchers))
