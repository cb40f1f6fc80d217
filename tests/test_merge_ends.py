"""ends.merge_ends_order merges several ranges in one substitution where that is exact (ends._wave): the graph
and toposort it gives must be those of merging one range at a time (the definition, written out here)."""
from __future__ import annotations

import pytest

from tg_core.codegen.ends import _split_ends, merge_ends_order
from tg_core.codegen.expander import expand_lanes
from tg_core.codegen.lower_index import lower_index_dtype
from tg_core.codegen.opts import Opt, OptOps, apply_opts
from tg_core.codegen.reduce import lower_reduce
from tg_core.dtype import dtypes
from tg_core.testing.kernels import softmax_kernel
from tg_core.uop import KernelInfo, Ops, UOp
from tg_core.uop.ops import AxisType
from tg_core.uop.rewrite import graph_rewrite, substitute
from tg_core.uop.symbolic import symbolic

F32 = dtypes.float32


def _one_at_a_time(root: UOp) -> tuple[UOp, dict[UOp, None]]:
    """The definition: the range of the first END (toposort order) among ranges with several, its ENDs grouped
    in toposort order, walked again until none is left."""
    while True:
        order = root.toposort()
        many: dict[UOp, list[UOp]] = {}
        for u in order:
            if u.op is Ops.END:
                many.setdefault(u.src[1], []).append(u)
        todo = [(r, ends) for r, ends in many.items() if len(ends) > 1]
        if not todo:
            return root, order
        r, ends = todo[0]
        merged = UOp(Ops.END, dtypes.void, (UOp(Ops.GROUP, dtypes.void, tuple(e.src[0] for e in ends)), r))
        root = substitute(root, {e: merged for e in ends})


def _kernel(*effects: UOp) -> UOp:
    return UOp(Ops.SINK, dtypes.void, effects, KernelInfo("k"))


_softmax = softmax_kernel


def _two_sums(rows: int = 4, cols: int = 12) -> UOp:
    """two independent reductions per row (each its own range) and one that needs both."""
    a, b, out = UOp.param(0, F32.ptr(rows * cols)), UOp.param(1, F32.ptr(rows * cols)), UOp.param(2, F32.ptr(rows))
    i = UOp.range(rows, 0)
    r1, r2, r3 = (UOp.range(cols, k, AxisType.REDUCE) for k in (1, 2, 3))
    sa = a.index(i * cols + r1).load().reduce(Ops.ADD, r1)
    sb = b.index(i * cols + r2).load().reduce(Ops.MAX, r2)
    sc = (a.index(i * cols + r3).load() * sa + sb).reduce(Ops.ADD, r3)
    return _kernel(out.index(i).store(sc).end(i))


def _matmul(m: int = 8, n: int = 8, k: int = 16) -> UOp:
    a, b, out = UOp.param(0, F32.ptr(m * k)), UOp.param(1, F32.ptr(k * n)), UOp.param(2, F32.ptr(m * n))
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisType.REDUCE)
    acc = (a.index(i * k + r).load() * b.index(r * n + j).load()).reduce(Ops.ADD, r)
    return _kernel(out.index(i * n + j).store(acc).end(i, j))


def _split(ast: UOp, opts: tuple[Opt, ...]) -> UOp:
    """The kernel as merge_ends gets it: lanes expanded, REDUCEs and weakint lowered, ENDs split."""
    ast = expand_lanes(graph_rewrite(graph_rewrite(apply_opts(ast, opts), symbolic, bottom_up=True), symbolic,
                                     bottom_up=True))
    ast = lower_index_dtype(lower_reduce(graph_rewrite(ast, symbolic, bottom_up=True)))
    return _split_ends(ast, ast.toposort())[0]


CASES = [
    (_softmax, (Opt(OptOps.UPCAST, 0, 4),)),
    (_softmax, (Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.UNROLL, 1, 4))),
    (_two_sums, (Opt(OptOps.UPCAST, 0, 4),)),
    (_two_sums, (Opt(OptOps.UNROLL, 0, 3), Opt(OptOps.UNROLL, 1, 2), Opt(OptOps.UNROLL, 2, 4))),
    (_matmul, (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 2))),
    (_matmul, (Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 4))),
]


@pytest.mark.parametrize("make,opts", CASES)
def test_merging_in_waves_is_merging_one_range_at_a_time(make, opts):
    split = _split(make(), opts)
    want_root, want_order = _one_at_a_time(split)
    root, order = merge_ends_order(split)
    assert root is want_root
    assert order is not None and list(order) == list(want_order)
    # something was merged (the lanes' ENDs over the ranges they share), and one END per range is left
    assert want_root is not split
    ends = [u.src[1] for u in order if u.op is Ops.END]
    assert len(ends) == len(set(ends))

