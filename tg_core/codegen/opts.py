"""The optimizations hook: `Opt`s a renderer or device asks for, applied to a kernel AST by range splitting.

An opt splits one range `r` of size `n` into `outer*amt + inner`: `outer` keeps the axis (size `n//amt`) and
`inner` (size `amt`) gets the opt's axis type (UPCAST for an output axis, UNROLL for a reduce axis). The
split only renames loops, so the AST computes the same values; `expander.py` later turns UPCAST/UNROLL
ranges into straight-line lanes.

When `amt` does not divide `n`, the last `n % amt` iterations are peeled into a tail: a copy of what the
range encloses with `r = n//amt*amt + t` (`t` a new range of the axis' own type, or the constant when one
iteration is left). An output axis gets a second effect (`END` of the copied store over `t`), a reduce
axis a second REDUCE combined with the first. The copy renames the ranges nested inside `r` (the inner
loops of the effect, the ranges of reductions that depend on `r`), so each loop keeps one place in the
loop tree; values that do not depend on `r` (softmax's row max, when its columns are split) stay shared.
Unlike a masked tail, the main loop keeps no per-lane gates, which would keep a compiler from vectorizing it.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum

from tg_core.codegen.reduce import reduce_combine
from tg_core.dtype import dtypes
from tg_core.uop.ops import AxisType, Ops
from tg_core.uop.rewrite import PatternMatcher, graph_rewrite, substitute
from tg_core.uop.upat import UPat
from tg_core.uop.uop import UOp


class OptOps(Enum):
    UPCAST = "UPCAST"  # an output (LOOP) axis becomes straight-line lanes
    UNROLL = "UNROLL"  # a reduce axis becomes straight-line lanes


@dataclass(frozen=True)
class Opt:
    """`op` applied to an axis: `axis` counts the kernel's LOOP ranges (UPCAST) or REDUCE ranges (UNROLL),
    ordered by axis id; `amt` is the number of lanes (0: the whole axis), at most the axis size; a size it
    does not divide leaves a peeled tail."""
    op: OptOps
    axis: int
    amt: int = 0


class OptError(ValueError):
    """An opt that does not apply to the kernel (no such axis, a size it does not divide, ...)."""


# which axes each opt may split, and the axis type of the lanes it makes
_SPLITS = {OptOps.UPCAST: (AxisType.LOOP, AxisType.UPCAST), OptOps.UNROLL: (AxisType.REDUCE, AxisType.UNROLL)}


def _axis_key(axis_id: object) -> tuple:
    # ids are ints from the scheduler; tuples may come from elsewhere: order ints first, then the rest by text
    return (0, axis_id, "") if isinstance(axis_id, int) else (1, 0, repr(axis_id))


def kernel_ranges(ast: UOp, kind: AxisType | None = None) -> list[UOp]:
    """The RANGEs of a kernel AST (of one axis type, if given), ordered by axis id."""
    rngs = [u for u in ast.toposort() if u.op is Ops.RANGE and (kind is None or u.arg[1] is kind)]
    return sorted(rngs, key=lambda r: _axis_key(r.arg[0]))


def _respread(ctx: tuple[UOp, tuple[UOp, ...]], x: UOp) -> UOp | None:
    """END and REDUCE list the loops they close: the split range is replaced there by its new ranges."""
    old, new = ctx
    if old not in x.src[1:]:
        return None
    rngs = [n for r in x.src[1:] for n in (new if r is old else (r,))]
    return x.replace(src=(x.src[0], *rngs))


_pm_respread = PatternMatcher([(UPat((Ops.END, Ops.REDUCE), name="x"), _respread)])


class _Tail:
    """How to copy the part of a kernel inside the split range `rng` for its last iterations."""

    def __init__(self, rng: UOp, base: int, rest: int, fresh: Iterator[int]):
        self.rng, self.fresh = rng, fresh
        self.range = UOp.range(UOp.const(rng.dtype, rest), next(fresh), rng.arg[1], rng.dtype) if rest > 1 else None
        start = UOp.const(rng.dtype, base)
        self.expr = start + self.range if self.range is not None else start

    def copy(self, x: UOp, nested: Sequence[UOp]) -> tuple[UOp, list[UOp]]:
        """`x` at `rng = base + t`, with `nested` and the ranges of the reductions in `x` that depend on `rng`
        renamed; also the renamed `nested`."""
        dep: set[UOp] = set()
        for n in x.toposort():
            if n is self.rng or any(s in dep for s in n.src):
                dep.add(n)
        inner = dict.fromkeys([*nested, *(q for n in dep if n.op is Ops.REDUCE for q in n.src[1:])])
        inner.pop(self.rng, None)
        mapping = {self.rng: self.expr}
        for q in sorted(inner, key=lambda r: _axis_key(r.arg[0])):
            mapping[q] = UOp.range(q.src[0].substitute(mapping), next(self.fresh), q.arg[1], q.dtype)
        return x.substitute(mapping), [mapping[q] for q in nested]

    def ranges(self) -> tuple[UOp, ...]:
        return () if self.range is None else (self.range,)


def _peel_end(tail: _Tail, new: tuple[UOp, ...], e: UOp) -> tuple[UOp, ...]:
    """An effect over the split range as the main effect (over `new`) and its tail."""
    rngs = e.src[1:]
    if tail.rng not in rngs:
        return (e,)
    pos = rngs.index(tail.rng)
    main = UOp(Ops.END, dtypes.void, (e.src[0], *rngs[:pos], *new, *rngs[pos + 1:]))
    body, inner = tail.copy(e.src[0], rngs[pos + 1:])
    return main, body.end(*rngs[:pos], *tail.ranges(), *inner)


def _peel_reduce(ctx: tuple[_Tail, tuple[UOp, ...]], red: UOp) -> UOp | None:
    """A reduction over the split range as the main reduction (over `new`) combined with its tail's."""
    tail, new = ctx
    if tail.rng not in red.src[1:]:
        return None
    others = [r for r in red.src[1:] if r is not tail.rng]
    main = red.replace(src=(red.src[0], *[n for r in red.src[1:] for n in (new if r is tail.rng else (r,))]))
    value, renamed = tail.copy(red.src[0], others)
    rest = (*renamed, *tail.ranges())
    return reduce_combine(red.arg, main, value.reduce(red.arg, *rest) if rest else value)


def split_range(ast: UOp, rng: UOp, amt: int, kind: AxisType) -> UOp:
    """`ast` with `rng` (size n, a constant) replaced by `outer*amt + inner`, inner of axis type `kind`, and
    the last `n % amt` iterations peeled into a tail (see the module docstring)."""
    end = rng.src[0]
    if end.op is not Ops.CONST:
        raise OptError(f"cannot split axis {rng.arg[0]}: its size {end.render()} is not a constant")
    size = end.arg
    amt = amt or size
    if not 0 < amt <= size:
        raise OptError(f"cannot split axis {rng.arg[0]} of size {size} by {amt}: the amount must be in 1..{size}")
    ids = [r.arg[0] for r in kernel_ranges(ast)]
    fresh = itertools.count(max((i for i in ids if isinstance(i, int)), default=-1) + 1)
    inner = UOp.range(UOp.const(rng.dtype, amt), next(fresh), kind, rng.dtype)
    if size // amt == 1:  # no loop of one iteration: the scope analysis would see a loop nothing depends on
        new, expr = (inner,), inner
    else:
        outer = UOp.range(UOp.const(rng.dtype, size // amt), rng.arg[0], rng.arg[1], rng.dtype)
        new, expr = (outer, inner), outer * amt + inner
    if size % amt:
        tail = _Tail(rng, size // amt * amt, size % amt, fresh)
        ast = graph_rewrite(ast, PatternMatcher([(UPat(Ops.REDUCE, name="red"), _peel_reduce)]), ctx=(tail, new))
        ast = ast.replace(src=tuple(x for e in ast.src for x in _peel_end(tail, new, e)))
    else:
        ast = graph_rewrite(ast, _pm_respread, ctx=(rng, new))
    return substitute(ast, {rng: expr})


def apply_opts(ast: UOp, opts: Sequence[Opt]) -> UOp:
    """`ast` with each opt applied in order (each opt's axis is counted on the AST as the earlier opts left it)."""
    for opt in opts:
        if opt.op not in _SPLITS:
            raise OptError(f"unknown opt {opt.op}")
        of, kind = _SPLITS[opt.op]
        axes = kernel_ranges(ast, of)
        if not 0 <= opt.axis < len(axes):
            raise OptError(f"{opt}: the kernel has {len(axes)} {of.name} axes")
        ast = split_range(ast, axes[opt.axis], opt.amt, kind)
    return ast
