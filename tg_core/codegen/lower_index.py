"""Lowering weakint index math to concrete ints.

Index expressions are built in the unbounded `weakint`; a backend computes them in int32, or in int64
where range analysis (vmin/vmax) shows a value may not fit int32. A node is int64 when its own range
does not fit int32 or when one of its sources is int64 (so a narrow result of a wide computation, like
`big % 7`, is computed wide). Sources narrower than their consumer are cast up. Every weakint CONST,
DEFINE_VAR and RANGE becomes concrete.
"""
from __future__ import annotations

from tg_core.dtype import DType, dtypes
from tg_core.uop.ops import GroupOp, Ops
from tg_core.uop.rewrite import PatternMatcher, graph_rewrite
from tg_core.uop.upat import UPat
from tg_core.uop.uop import UOp

_I32_MIN, _I32_MAX = dtypes.min(dtypes.int32), dtypes.max(dtypes.int32)


def index_dtypes(root: UOp) -> dict[UOp, DType]:
    """The concrete dtype of every weakint node under `root`."""
    out: dict[UOp, DType] = {}
    for u in root.toposort():
        if u.dtype is dtypes.weakint:
            wide = not (_I32_MIN <= u.vmin and u.vmax <= _I32_MAX) or any(out.get(s) is dtypes.int64 for s in u.src)
            out[u] = dtypes.int64 if wide else dtypes.int32
    return out


def _source_as(ctx: dict[UOp, DType], s: UOp, dt: DType) -> UOp:
    """Source `s` for a consumer computing in `dt`. A weakint source stays weakint (it is lowered when the
    rewrite reaches it) unless it lowers to a narrower dtype, which gets a cast up."""
    if s.dtype is not dtypes.weakint or ctx[s] is dt:
        return s
    return UOp.const(dt, s.arg) if s.op is Ops.CONST else UOp(Ops.CAST, dt, (s,))


def _concrete(ctx: dict[UOp, DType], x: UOp) -> UOp:
    dt = ctx[x]
    return UOp(x.op, dt, tuple(_source_as(ctx, s, dt) for s in x.src), x.arg, x.tag)


def _compare(ctx: dict[UOp, DType], x: UOp) -> UOp | None:
    """A comparison of index values: both sides in the wider of their dtypes."""
    if not any(s.dtype is dtypes.weakint for s in x.src):
        return None
    dt = dtypes.int64 if any(ctx.get(s, s.dtype) is dtypes.int64 for s in x.src) else dtypes.int32
    src = tuple(_source_as(ctx, s, dt) for s in x.src)
    return None if src == x.src else x.replace(src=src)


pm_lower_index = PatternMatcher([
    (UPat(dtype=dtypes.weakint, name="x"), _concrete),
    (UPat(GroupOp.Comparison, name="x"), _compare),
])


def lower_index_dtype(ast: UOp) -> UOp:
    """`ast` with no weakint left."""
    # node first: each rule sees the original node, whose dtype in the precomputed map is keyed by it
    return graph_rewrite(ast, pm_lower_index, ctx=index_dtypes(ast), bottom_up=True)
