"""Expanding UPCAST and UNROLL ranges into straight-line lanes.

A range of axis type UPCAST or UNROLL (constant size n) is not a loop: whatever is computed inside it is
computed n times, once per lane, with the range replaced by the lane's number. An END over such a range
becomes a GROUP of the n effects; a REDUCE over it becomes n REDUCEs over its other ranges, one per lane,
combined with its op after them, pairwise (n accumulators updated in one loop, since their ENDs merge).
Lanes are scalar copies: the renderer's compiler packs them into vectors (LLVM's SLP vectorizer), or the
renderer's own instruction selection does.
"""
from __future__ import annotations

from collections.abc import Iterable

from tg_core.codegen.reduce import reduce_combine
from tg_core.codegen.rewrite_walk import rewrite_walk
from tg_core.dtype import dtypes
from tg_core.uop.linear import MAX_TERMS, rebuild
from tg_core.uop.ops import AxisType, Ops
from tg_core.uop.rewrite import PatternMatcher
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat

LANE_AXES = (AxisType.UPCAST, AxisType.UNROLL)


def _is_lane(r: UOp) -> bool:
    return r.op is Ops.RANGE and r.arg[1] in LANE_AXES


def _lanes(x: UOp, r: UOp) -> list[UOp]:
    end = r.src[0]
    if end.op is not Ops.CONST:
        raise ValueError(f"an {r.arg[1].name} axis needs a constant size, got {end.render()}")
    # one walk builds every lane: only the nodes that depend on r are copied, lane by lane (n substitutions
    # would walk the whole graph n times, and nested lanes multiply that)
    n = end.arg
    copies: dict[UOp, list[UOp]] = {r: [UOp.const(r.dtype, i) for i in range(n)]}
    get, ADD = copies.get, Ops.ADD
    for u in x.toposort():
        src = u.src
        if not src or u in copies:
            continue
        # one and two sources (nearly every node) spelled out: a generator per lane cost as much as the node
        if len(src) == 1:
            ca = get(src[0])
            if ca is not None:
                op, dt, arg, tag = u.op, u.dtype, u.arg, u.tag
                copies[u] = [UOp(op, dt, (a,), arg, tag) for a in ca]
            continue
        if len(src) == 2:
            a, b = src
            ca, cb = get(a), get(b)
            if ca is None and cb is None:
                continue
            if u.op is ADD:
                lanes = _sum_lanes(u, r, n, copies)
                if lanes is not None:
                    copies[u] = lanes
                    continue
            op, dt, arg, tag = u.op, u.dtype, u.arg, u.tag
            if ca is None:
                copies[u] = [UOp(op, dt, (a, y), arg, tag) for y in cb or ()]
            elif cb is None:
                copies[u] = [UOp(op, dt, (y, b), arg, tag) for y in ca]
            else:
                copies[u] = [UOp(op, dt, (y, z), arg, tag) for y, z in zip(ca, cb)]
            continue
        src_lanes = [get(s) for s in src]
        if all(c is None for c in src_lanes):
            continue
        lanes = _sum_lanes(u, r, n, copies) if u.op is ADD else None
        if lanes is not None:
            copies[u] = lanes
            continue
        copies[u] = [UOp(u.op, u.dtype, tuple([s if c is None else c[i] for s, c in zip(src, src_lanes)]),
                         u.arg, u.tag) for i in range(n)]
    return copies.get(x) or [x] * n


def _sum_lanes(u: UOp, r: UOp, n: int, copies: dict[UOp, list[UOp]]) -> list[UOp] | None:
    """The lanes of a canonical index sum (simplified before expansion) with lane range `r` as one of its terms
    and no other term depending on it, built in their canonical form: the sum without r's term, its constant
    moved by the lane's share. This is what simplification makes of the plain copy (the sum read as a linear
    form, the lane's product folded into the constant, rebuilt in the same term order), so the pass after
    expansion finds the index math already simplified and its users unchanged (None: copy it plainly)."""
    lin = u._lin
    if u.dtype is not dtypes.weakint or lin is None or lin[0] is None or r not in lin[0] or len(lin[0]) > MAX_TERMS:
        return None
    terms, const = lin
    if any(b in copies for b in terms if b is not r):
        return None
    k = terms[r]
    rest = {b: c for b, c in terms.items() if b is not r}
    return [rebuild(u.dtype, rest, const + k * i) for i in range(n)]


def _expand_end(x: UOp) -> UOp | None:
    lanes = [r for r in x.src[1:] if _is_lane(r)]
    if not lanes:
        return None
    effect = x.src[0]
    for r in lanes:
        effect = UOp(Ops.GROUP, dtypes.void, tuple(_lanes(effect, r)))
    return effect.end(*(r for r in x.src[1:] if not _is_lane(r)))


def _expand_reduce(x: UOp) -> UOp | None:
    """Each lane reduces over the other ranges on its own (its own accumulator: independent chains the
    hardware overlaps), and the lanes are combined once, after the loops."""
    lane = next((r for r in x.src[1:] if _is_lane(r)), None)
    if lane is None:
        return None
    rest = tuple(r for r in x.src[1:] if r is not lane)
    parts = [x.replace(src=(v, *rest)) if rest else v for v in _lanes(x.src[0], lane)]
    # pairwise: log2(lanes) dependent steps instead of a chain, and sums rounded as numpy's pairwise sum is
    while len(parts) > 1:
        parts = [reduce_combine(x.arg, *parts[k:k + 2]) if k + 1 < len(parts) else parts[k]
                 for k in range(0, len(parts), 2)]
    return parts[0]


pm_expand = PatternMatcher([
    (UPat(Ops.END, name="x"), _expand_end),
    (UPat(Ops.REDUCE, name="x"), _expand_reduce),
])


def expand_lanes(ast: UOp, check: bool = True) -> UOp:
    """`ast` without UPCAST/UNROLL ranges: their bodies repeated once per lane. `check=False` leaves the check
    that none is left to the caller (`check_expanded` on a walk of the graph it makes anyway)."""
    # graph_rewrite's result (sources first), in a walk that matches only ENDs and REDUCEs: the engine would enter
    # every node of the lanes the rules build to look for more
    out = rewrite_walk(ast, ast.toposort(), pm_expand)
    if check:
        check_expanded(out.toposort())
    return out


def check_expanded(nodes: Iterable[UOp]) -> None:
    """A ValueError naming the first UPCAST/UNROLL range among `nodes` (one left after expansion)."""
    left = [r for r in nodes if r.op is Ops.RANGE and r.arg[1] in LANE_AXES]
    if left:
        raise ValueError(f"axis {left[0].arg[0]} ({left[0].arg[1].name}) is used outside every END and REDUCE over it")
