"""The shortcuts of linear.py and vrange.py against the plain algorithms they replace.

`_canonical_terms` stops its walk at an inner sum whose terms are remembered; it must decide exactly what a
walk of the whole chain decides (canonical or not, the terms in order, the constant, ExactTerms or not), for
inner sums of every origin: rebuild's (whose terms may hold a div/mod pair or the opaque sum of a long one),
the walk's own, tagged ones, strong dtypes. Index rebuilds fill each node's bounds themselves, which must
be what range analysis computes; and range analysis of a graph too deep to recurse over must give the
bounds recursion gives.
"""
import random

from tg_core.dtype import dtypes
from tg_core.uop import Ops, UOp
from tg_core.uop.linear import MAX_TERMS, ExactTerms, _canonical_terms, _merge_divmod_pairs, _rebuilt_const, rebuild
from tg_core.uop.vrange import minmax

W, I8, I32 = dtypes.weakint, dtypes.int8, dtypes.int32


def walk_terms(x: UOp):
    """_canonical_terms as it was before the shortcut: every node of the chain walked."""
    n, const, dt = x, 0, x.dtype
    exact = dt.count == 1
    if x.src[1].op is Ops.CONST:
        const = x.src[1].arg
        if const == 0:
            return None
        exact = exact and _rebuilt_const(x.src[1], dt)
        n = x.src[0]
    found, seen = [], set()
    while n is not None:
        if n.op is Ops.ADD:
            if exact and (n.tag is not None or n.arg is not None or n.dtype is not dt):
                exact = False
            t, n = n.src[1], n.src[0]
        else:
            t, n = n, None
        if t.op in (Ops.ADD, Ops.CONST):
            return None
        if t.op is Ops.MUL and t.src[1].op is Ops.CONST:
            base, coeff = t.src[0], t.src[1].arg
            if coeff in (0, 1) or base.op is Ops.MUL and base.src[1].op is Ops.CONST:
                return None
            if exact and (t.tag is not None or t.arg is not None or t.dtype is not dt or
                          not _rebuilt_const(t.src[1], dt)):
                exact = False
        else:
            base, coeff = t, 1
        if base in seen:
            return None
        seen.add(base)
        found.append((base, coeff))
    terms = dict(reversed(found))
    if _merge_divmod_pairs(dict(terms)) is not None:
        return None
    return (ExactTerms(terms) if exact else terms), const


def same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return type(a[0]) is type(b[0]) and list(a[0].items()) == list(b[0].items()) and a[1] == b[1]


def random_base(rnd: random.Random, dt, xs: list[UOp], long_sum: UOp) -> UOp:
    kind = rnd.choice(["var", "var", "var", "div", "mod", "long"] if dt is W else ["var", "var", "div", "mod"])
    x = rnd.choice(xs)
    if kind == "div":
        return UOp(Ops.IDIV, dt, (x, UOp.const(dt, 4)))
    if kind == "mod":
        return UOp(Ops.MOD, dt, (x, UOp.const(dt, 4)))
    if kind == "long":
        return long_sum
    return x


def random_inner(rnd: random.Random, dt, xs: list[UOp], long_sum: UOp) -> UOp:
    """A sum below the outer chain: rebuilt (terms remembered), walked by the rule (remembered), or plain."""
    terms = {random_base(rnd, dt, xs, long_sum): rnd.choice([1, 2, 3, -1, 4, 12]) for _ in range(rnd.randint(1, 4))}
    if rnd.random() < 0.3 and any(b.op is Ops.MOD for b in terms):
        m = next(b for b in terms if b.op is Ops.MOD)  # the matching div of a mod term: a pair rebuild keeps
        terms[UOp(Ops.IDIV, dt, m.src)] = terms[m] * 4
    const = rnd.choice([0, 0, 0, 5])
    inner = rebuild(dt, terms, const)
    if inner.op is not Ops.ADD:
        return inner
    how = rnd.choice(["rebuilt", "walked", "tagged"])
    if how == "rebuilt":
        return inner
    # the same chain written by hand (tagged: a node of its own), its terms remembered by the rule's walk
    tag = "t" if how == "tagged" else None
    n = inner.src[0] if inner.src[1].op is Ops.CONST else inner
    chain: list[UOp] = []
    while n.op is Ops.ADD:
        chain.append(n.src[1])
        n = n.src[0]
    out = n
    for t in reversed(chain):
        out = UOp(Ops.ADD, dt, (out, t), None, tag)
    if inner.src[1].op is Ops.CONST:
        out = UOp(Ops.ADD, dt, (out, inner.src[1]), None, tag)
    if out.op is Ops.ADD and out._lin is None:
        lin = _canonical_terms(out)
        if lin is not None:
            out._lin = lin
    return out


def test_canonical_terms_decides_what_a_full_walk_decides():
    rnd = random.Random(1234)
    checked = {True: 0, False: 0}
    for dt in (W, I8, I32):
        xs = [UOp.variable(f"v{i}", 0, 9, dt) for i in range(5)]
        long_sum = rebuild(W, {UOp.variable(f"l{i}", 0, 3): 1 for i in range(MAX_TERMS + 2)}, 0) if dt is W else None
        for _ in range(600):
            e = random_inner(rnd, dt, xs, long_sum)
            for _ in range(rnd.randint(0, 3)):
                base = random_base(rnd, dt, xs, long_sum)
                coeff = rnd.choice([1, 2, 3, 5])
                e = UOp(Ops.ADD, dt, (e, base if coeff == 1 else UOp(Ops.MUL, dt, (base, UOp.const(dt, coeff)))))
            if rnd.random() < 0.5:
                e = UOp(Ops.ADD, dt, (e, UOp.const(dt, rnd.choice([0, 1, 7]))))
            if e.op is not Ops.ADD:
                continue
            want, got = walk_terms(e), _canonical_terms(e)
            assert same(got, want), (e.render(), got, want)
            checked[want is not None] += 1
    assert checked[True] > 200 and checked[False] > 200, checked  # both outcomes exercised


def test_rebuilt_index_sums_carry_the_bounds_range_analysis_gives():
    rnd = random.Random(7)
    xs = [UOp.variable(f"b{i}", rnd.randint(-20, 0), rnd.randint(1, 30)) for i in range(6)]
    for x in xs:
        assert x.vmin <= x.vmax  # bases analyzed, as a rule's operands are
    for _ in range(300):
        terms = {rnd.choice(xs): rnd.choice([-3, -1, 0, 1, 2, 7]) for _ in range(rnd.randint(1, 5))}
        const = rnd.randint(-5, 5)
        out = rebuild(W, terms, const)
        for n in out.toposort():
            if n._minmax is not None:
                for src in n.src:
                    assert src.vmin <= src.vmax  # (the constants rebuild writes may not be analyzed yet)
                assert n._minmax == minmax(n), n.render()
        # each base once: the bounds are the sum of each term's
        want = (sum(min(k * b.vmin, k * b.vmax) for b, k in terms.items()) + const,
                sum(max(k * b.vmin, k * b.vmax) for b, k in terms.items()) + const)
        assert (out.vmin, out.vmax) == want, out.render()


def chain(x: UOp, probe: bool) -> UOp:
    """3000 ops over x, with float comparisons (whose operands' bounds are not needed) on the way."""
    e = x
    for i in range(3000):
        e = (e + 3) % 1000 if i % 500 == 0 else e + 1
        if i % 700 == 0:
            e = e + (UOp.const(dtypes.float32, 1.5) < e.cast(dtypes.float32)).cast(W)
        if probe:
            assert e.vmin <= e.vmax  # analyzed a few fresh nodes at a time: recursion
    return e


def test_bounds_of_a_graph_too_deep_to_recurse_over():
    deep, probed = chain(UOp.variable("a", 0, 10), False), chain(UOp.variable("b", 0, 10), True)
    assert (deep.vmin, deep.vmax) == (probed.vmin, probed.vmax)
    for u, v in zip(deep.toposort(), probed.toposort()):
        assert u._minmax == v._minmax or u.op is Ops.DEFINE_VAR, (u.op, u._minmax, v._minmax)
