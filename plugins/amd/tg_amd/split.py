"""Splitting nested reductions out of a kernel AST, for a GPU.

The scheduler keeps a reduction inside an enclosing one when no output range would make it recomputed; on a CPU
that saves a buffer. On a GPU the nested loops run serially in one work-item: a scalar loss over a two-layer MLP
is one kernel whose single work-item does every multiply of both matmuls. `split_nested` moves every REDUCE
computed inside another reduction's range into a kernel of its own, whose output ranges are the ranges that
REDUCE is computed inside (so they run in parallel), writing a temporary buffer the rest reads.

The parts keep the original PARAM numbering; temporary i is PARAM `nparams + i`. Each part is an ordinary kernel
AST (SINK of END(STORE)), in the order they must run; the last is what is left of the original.
"""
from __future__ import annotations

import math

from tg_core.plugin_api import AxisType, DType, KernelInfo, Ops, UOp, dtypes, substitute


def _nested(u: UOp) -> bool:
    """A REDUCE computed inside another reduction's range, over ranges of constant sizes."""
    if u.op is not Ops.REDUCE or not any(r.arg[1] is AxisType.REDUCE for r in u.ranges):
        return False
    return all(r.src[0].op is Ops.CONST for r in u.ranges)


def _axis_order(r: UOp) -> tuple:
    return (0, r.arg[0], "") if isinstance(r.arg[0], int) else (1, 0, repr(r.arg[0]))


def split_nested(ast: UOp) -> tuple[list[UOp], list[tuple[int, DType]]]:
    """(kernel ASTs in run order, temporaries as (elements, dtype)) for `ast`; just [ast] when nothing is nested,
    and for a hand-written kernel that sets its own launch shape (GLOBAL/LOCAL ranges) or shares LDS: its loops
    are its author's (a tile loop staging LDS around a barrier must stay one loop in one kernel)."""
    if any((u.op is Ops.RANGE and u.arg[1] in (AxisType.GLOBAL, AxisType.LOCAL)) or u.op in (Ops.DEFINE_LOCAL, Ops.BARRIER)
           for u in ast.toposort()):
        return [ast], []
    nparams = 1 + max((p.arg if isinstance(p.arg, int) else p.arg[0]
                       for p in ast.toposort() if p.op is Ops.PARAM), default=-1)
    name = ast.arg.name if isinstance(ast.arg, KernelInfo) else "kernel"
    parts: list[UOp] = []
    temps: list[tuple[int, DType]] = []
    made: dict[UOp, UOp] = {}  # a part's value (ranges numbered by position) -> its temporary
    while True:
        # the innermost nested REDUCE first: one whose value holds no other nested REDUCE
        found = [u for u in ast.toposort() if _nested(u)]
        leaf = next((u for u in found if not any(_nested(v) for v in u.src[0].toposort())), None)
        if leaf is None:
            break
        ctx = sorted(leaf.ranges, key=_axis_order)
        sizes = [int(r.src[0].arg) for r in ctx]
        stride, flat = 1, UOp.const(dtypes.weakint, 0)
        for r, n in reversed(list(zip(ctx, sizes))):
            flat = flat + r * stride
            stride *= n
        # the context ranges become output (LOOP) ranges and every range is numbered by position, so the same
        # REDUCE reached through other ranges (softmax's max and sum both read the logits) is one part and temporary
        loops = {r: UOp.range(r.src[0], k, AxisType.LOOP, r.dtype) for k, r in enumerate(ctx)}
        own = [u for u in leaf.toposort() if u.op is Ops.RANGE and u not in loops]  # its reduce ranges, renumbered
        value = substitute(leaf, {**loops, **{r: UOp.range(r.src[0], len(ctx) + k, r.arg[1], r.dtype)
                                              for k, r in enumerate(own)}})
        if value not in made:
            made[value] = UOp.param(nparams + len(temps), leaf.dtype.ptr(math.prod(sizes)))
            temps.append((math.prod(sizes), leaf.dtype))
            store = made[value].index(substitute(flat, loops)).store(value)
            parts.append(UOp(Ops.SINK, dtypes.void, (store.end(*loops.values()),),
                             KernelInfo(f"{name}_part{len(parts)}")))
        ast = substitute(ast, {leaf: made[value].index(flat).load()})
    return parts + [ast], temps
