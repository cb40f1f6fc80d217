"""The optimizations hook: `Opt`s a renderer or device asks for, applied to a kernel AST by range splitting.

An opt splits one range `r` of size `n` into `outer*amt + inner`: `outer` keeps the axis (size `n/amt`) and
`inner` (size `amt`) gets the opt's axis type (UPCAST for an output axis, UNROLL for a reduce axis). The
split only renames loops, so the AST computes the same values; `expander.py` later turns UPCAST/UNROLL
ranges into straight-line lanes.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

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
    ordered by axis id; `amt` must divide the axis size (0: the whole axis)."""
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


def split_range(ast: UOp, rng: UOp, amt: int, kind: AxisType) -> UOp:
    """`ast` with `rng` (size n, a constant) replaced by `outer*amt + inner`, inner of axis type `kind`."""
    end = rng.src[0]
    if end.op is not Ops.CONST:
        raise OptError(f"cannot split axis {rng.arg[0]}: its size {end.render()} is not a constant")
    size = end.arg
    amt = amt or size
    if amt <= 0 or size % amt != 0:
        raise OptError(f"cannot split axis {rng.arg[0]} of size {size} by {amt}: the amount must divide the size")
    ids = [r.arg[0] for r in kernel_ranges(ast)]
    new_id = max((i for i in ids if isinstance(i, int)), default=-1) + 1
    inner = UOp.range(UOp.const(rng.dtype, amt), new_id, kind, rng.dtype)
    if amt == size:
        new, expr = (inner,), inner
    else:
        outer = UOp.range(UOp.const(rng.dtype, size // amt), rng.arg[0], rng.arg[1], rng.dtype)
        new, expr = (outer, inner), outer * amt + inner
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
