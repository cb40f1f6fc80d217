"""Lowering weakint index math to concrete ints.

Index expressions are built in the unbounded `weakint`; a backend computes them in int32, or in int64
where range analysis (vmin/vmax) shows a value may not fit int32. A node is int64 when its own range
does not fit int32 or when one of its sources is int64 (so a narrow result of a wide computation, like
`big % 7`, is computed wide). Sources narrower than their consumer are cast up. Every weakint CONST,
DEFINE_VAR and RANGE becomes concrete.
"""
from __future__ import annotations

from collections.abc import Iterable

from tg_core.dtype import DType, dtypes
from tg_core.uop.ops import GroupOp, Ops
from tg_core.uop.uop import UOp

_I32_MIN, _I32_MAX = dtypes.min(dtypes.int32), dtypes.max(dtypes.int32)


def index_dtypes(root: UOp, order: Iterable[UOp] | None = None) -> dict[UOp, DType]:
    """The concrete dtype of every weakint node under `root` (`order`: those nodes, sources first, if known)."""
    out: dict[UOp, DType] = {}
    for u in root.toposort() if order is None else order:
        if u.dtype is dtypes.weakint:
            wide = not (_I32_MIN <= u.vmin and u.vmax <= _I32_MAX) or any(out.get(s) is dtypes.int64 for s in u.src)
            out[u] = dtypes.int64 if wide else dtypes.int32
    return out


def lower_index_dtype(ast: UOp, order: Iterable[UOp] | None = None) -> UOp:
    """`ast` with no weakint left (`order`: the toposort of `ast`, if the caller holds it).

    One walk, sources first, instead of a graph_rewrite: every index node changes, so a rewrite would enter
    each one, rebuild it and enter the rebuilt node again (a third of a large kernel's lowering time)."""
    if order is None:
        order = ast.toposort()
    ctx = index_dtypes(ast, order)
    new: dict[UOp, UOp] = {}

    def source(s: UOp, dt: DType) -> UOp:
        """Lowered source `s` for a consumer computing in `dt`: cast up when it lowers to a narrower dtype."""
        if s.dtype is not dtypes.weakint or ctx[s] is dt:
            return new[s]
        return UOp.const(dt, s.arg) if s.op is Ops.CONST else UOp(Ops.CAST, dt, (new[s],))

    for u in order:
        src = u.src
        if u.dtype is dtypes.weakint:
            dt = ctx[u]
            new[u] = UOp(u.op, dt, tuple([source(s, dt) for s in src]), u.arg, u.tag)
            continue
        if u.op in GroupOp.Comparison and any(s.dtype is dtypes.weakint for s in src):
            # a comparison of index values: both sides in the wider of their dtypes
            dt = dtypes.int64 if any(ctx.get(s, s.dtype) is dtypes.int64 for s in src) else dtypes.int32
            lowered = tuple([source(s, dt) for s in src])
        else:
            lowered = tuple([new[s] for s in src])
        new[u] = u if lowered == src else UOp(u.op, u.dtype, lowered, u.arg, u.tag)
    return new[ast]
