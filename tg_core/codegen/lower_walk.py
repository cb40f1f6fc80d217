"""REDUCE lowering, weakint lowering and END splitting in one walk of the kernel.

Each of reduce.py, lower_index.py and ends.py (`split_ends`) rebuilds every node above what it changes, and
each needed a toposort of its own input first: three walks that rebuild most of a large kernel, and four
that only order it. All three are local rewrites of a node whose sources are done, so one sources-first
walk can apply them in sequence to each node: the result is the graph the passes give one after another
(`lower_kernel` keeps them as the fallback, and tests compare the two).

What makes the fusion exact:
- the walk visits nodes in the order reduce.py's own walk finalizes them (sources last to first), so the
  accumulators are numbered as they were;
- a weakint node's concrete dtype comes from its range (vmin/vmax), and the nodes below it are the same
  nodes whichever pass runs first, unless a REDUCE is below it (its lowered form, a LOAD of a register, has
  other bounds): the walk gives up on such a kernel (None) and the passes run one after another;
- the nodes REDUCE lowering builds are lowered on the spot: its index is the int32 constant 0 (what
  lower_index makes of a weakint 0) and its END over several ranges is split as ends.py splits it.
"""
from __future__ import annotations

import itertools

from tg_core.codegen.expander import check_expanded
from tg_core.codegen.reduce import _lower
from tg_core.dtype import DType, dtypes
from tg_core.uop.ops import GroupOp, Ops
from tg_core.uop.rewrite import PatternMatcher
from tg_core.uop.uop import UOp

_I32_MIN, _I32_MAX = dtypes.min(dtypes.int32), dtypes.max(dtypes.int32)
# the ops REDUCE and weakint lowering add to a graph: a renderer rule for one of them must see the lowered
# graph before its ENDs split, so then the walk leaves the splitting to ends.normalize_ends
_BUILT = frozenset({Ops.DEFINE_REG, Ops.AFTER, Ops.INDEX, Ops.STORE, Ops.LOAD, Ops.END, Ops.CONST, Ops.CAST,
                    Ops.ADD, Ops.MUL, Ops.MAX, Ops.OR, Ops.AND})


def _reduce_order(ast: UOp) -> list[UOp]:
    """Every node under `ast` in the order reduce.lower_reduce's walk lowers them (a node after its sources,
    sources explored last to first)."""
    order: list[UOp] = []
    done: set[UOp] = set()
    stack: list = [ast]  # a node, then (node,) again once its sources are done
    push, pop, add, emit = stack.append, stack.pop, done.add, order.append
    while stack:
        n = pop()
        if type(n) is tuple:
            n = n[0]
        elif n in done:
            continue
        else:
            pending = [s for s in n.src if s not in done]
            if pending:
                push((n,))
                stack += pending
                continue
        add(n)
        emit(n)
    return order


def lower_walk(ast: UOp, extra_matcher: PatternMatcher | None) -> tuple[UOp, bool | None, bool] | None:
    """`ast` (simplified, REDUCEs not lowered) with REDUCEs and weakint lowered and, when nothing has to run
    between (no shifts to define, no rule of `extra_matcher` that applies), its ENDs split: (graph, single,
    shifts) with `single` as ends._split_ends gives it, or None when the ENDs are left unsplit, and `shifts`
    whether the graph has a shift. None when a weakint value depends on a REDUCE (the caller then runs the
    passes one after another). A ValueError when an UPCAST/UNROLL range is left (see expander.check_expanded)."""
    order = _reduce_order(ast)
    check_expanded(order)  # pipeline.lower_kernel leaves expand_lanes' check to this walk
    ops = {u.op for u in order}
    if Ops.REDUCE in ops and any(u.op is Ops.REDUCE and u.dtype is dtypes.weakint for u in order):
        return None  # its accumulator would be a weakint register: the passes' order decides its dtype
    also = extra_matcher.rules_by_op if extra_matcher is not None else {}
    shifts = Ops.SHL in ops or Ops.SHR in ops
    split = not shifts and not any(op in also for op in _BUILT) and not any(op in also for op in ops)
    count = itertools.count(1 + max((u.arg for u in order if u.op is Ops.DEFINE_REG and isinstance(u.arg, int)),
                                    default=-1))
    zero = UOp.const(dtypes.int32, 0)
    weak, int32, int64 = dtypes.weakint, dtypes.int32, dtypes.int64
    ctx: dict[UOp, DType] = {}  # weakint node -> its concrete dtype
    new: dict[UOp, UOp] = {}
    tainted: set[UOp] = set()  # nodes with a REDUCE below them (or that are one)
    end_of: dict[UOp, UOp] = {}  # range -> the one END over it seen so far
    single = True

    def source(s: UOp, dt: DType) -> UOp:
        """As lower_index's: lowered `s` for a consumer computing in `dt`, cast up when narrower."""
        if s.dtype is not weak or ctx[s] is dt:
            return new[s]
        return UOp.const(dt, s.arg) if s.op is Ops.CONST else UOp(Ops.CAST, dt, (new[s],))

    def split_end(x: UOp) -> UOp:
        """As ends._split_ends: single-range ENDs, each noted by its range."""
        nonlocal single
        while len(x.src) > 2:
            inner = UOp(Ops.END, dtypes.void, (x.src[0], x.src[-1]))
            if single and end_of.setdefault(inner.src[1], inner) is not inner:
                single = False
            x = UOp(Ops.END, dtypes.void, (inner, *x.src[1:-1]))
        if single and end_of.setdefault(x.src[1], x) is not x:
            single = False
        return x

    comparison, REDUCE, END = GroupOp.Comparison, Ops.REDUCE, Ops.END
    for u in order:
        src = u.src
        if tainted:
            for s in src:
                if s in tainted:
                    tainted.add(u)
                    break
        if u.dtype is weak:
            if u in tainted:
                return None
            mm = u._minmax
            lo, hi = mm if mm is not None else (u.vmin, u.vmax)
            wide = not (_I32_MIN <= lo and hi <= _I32_MAX)
            if not wide:
                for s in src:
                    if ctx.get(s) is int64:
                        wide = True
                        break
            dt = ctx[u] = int64 if wide else int32
            # as source(s, dt), inline: a lowered source of the same dtype as is
            new[u] = UOp(u.op, dt, tuple([new[s] if s.dtype is not weak or ctx[s] is dt else source(s, dt)
                                          for s in src]), u.arg, u.tag)
            continue
        op = u.op
        if op in comparison and any(s.dtype is weak for s in src):
            dt = int64 if any(ctx.get(s, s.dtype) is int64 for s in src) else int32
            lowered = tuple([source(s, dt) for s in src])
        else:
            lowered = tuple([new[s] for s in src])
        x = u if lowered == src else UOp(op, u.dtype, lowered, u.arg, u.tag)
        if op is REDUCE:
            tainted.add(u)
            x = _lower(count, x, zero, split_end if split else None)
        elif split and op is END:
            x = split_end(x)
        new[u] = x
    return new[ast], single if split else None, shifts


__all__ = ["lower_walk"]
