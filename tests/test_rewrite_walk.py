"""rewrite_walk (a sources-first graph_rewrite as a plain walk matching only the ops a matcher has rules for)
against graph_rewrite itself: the same graph, node for node, for the matchers codegen runs it with (a
renderer's decompositions with END splitting, defined shifts)."""
from __future__ import annotations

import pytest

from tg_core.codegen.ends import pm_split_ends
from tg_core.codegen.expander import expand_lanes
from tg_core.codegen.lib.decomp import decomp
from tg_core.codegen.lower_index import lower_index_dtype
from tg_core.codegen.opts import Opt, OptOps, apply_opts
from tg_core.codegen.reduce import lower_reduce
from tg_core.codegen.rewrite_walk import rewrite_walk
from tg_core.codegen.shifts import define_shifts, pm_defined_shifts
from tg_core.dtype import dtypes
from tg_core.testing.kernels import softmax_kernel
from tg_core.uop import KernelInfo, Ops, UOp
from tg_core.uop.ops import AxisType
from tg_core.uop.rewrite import graph_rewrite
from tg_core.uop.symbolic import symbolic

F32, I32 = dtypes.float32, dtypes.int32


def _kernel(*effects: UOp) -> UOp:
    return UOp(Ops.SINK, dtypes.void, effects, KernelInfo("k"))


_softmax = softmax_kernel


def _powers(n: int = 8) -> UOp:
    """POW decomposes into EXP2 and LOG2, which decompose again: replacements that need rewriting themselves."""
    a, b, out = UOp.param(0, F32.ptr(n)), UOp.param(1, F32.ptr(n)), UOp.param(2, F32.ptr(n))
    i = UOp.range(n, 0)
    x, y = a.index(i).load(), b.index(i).load()
    return _kernel(out.index(i).store(x.alu(Ops.POW, y) + x.exp2() * y.log2()).end(i))


@pytest.mark.parametrize("make,opts", [(_softmax, (Opt(OptOps.UPCAST, 0, 4),)), (_powers, (Opt(OptOps.UPCAST, 0, 4),))])
def test_renderer_rules_as_a_walk_are_the_rewrite(make, opts):
    ast = apply_opts(make(), opts)
    ast = lower_index_dtype(lower_reduce(graph_rewrite(expand_lanes(graph_rewrite(ast, symbolic, bottom_up=True)),
                                                       symbolic, bottom_up=True)))
    pm = decomp + pm_split_ends
    want = graph_rewrite(ast, pm)
    assert want is not ast and not any(u.op in (Ops.EXP2, Ops.LOG2, Ops.POW) for u in want.toposort())
    assert rewrite_walk(ast, ast.toposort(), pm) is want


def _shifts(n: int = 16) -> UOp:
    """shifts by loaded amounts (any value: selects needed), by a masked amount (in range) and by constants"""
    a, s, out = UOp.param(0, I32.ptr(n)), UOp.param(1, I32.ptr(n)), UOp.param(2, I32.ptr(n))
    i = UOp.range(n, 0)
    x, y = a.index(i).load(), s.index(i).load()
    v = (x << y) + (x >> (y & 7)) + (x >> UOp.const(I32, 40)) + (x << UOp.const(I32, 3))
    return _kernel(out.index(i).store(v).end(i))


@pytest.mark.parametrize("upcast", [1, 4])
def test_defined_shifts_as_a_walk_are_the_rewrite(upcast):
    ast = _shifts()
    if upcast > 1:
        ast = expand_lanes(graph_rewrite(apply_opts(ast, (Opt(OptOps.UPCAST, 0, upcast),)), symbolic, bottom_up=True))
    ast = lower_index_dtype(ast)
    want = graph_rewrite(ast, pm_defined_shifts)
    assert want is not ast
    assert define_shifts(ast) is want


def _matmul(m: int = 8, n: int = 8, k: int = 16) -> UOp:
    a, b, out = UOp.param(0, F32.ptr(m * k)), UOp.param(1, F32.ptr(k * n)), UOp.param(2, F32.ptr(m * n))
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisType.REDUCE)
    acc = (a.index(i * k + r).load() * b.index(r * n + j).load()).reduce(Ops.ADD, r)
    return _kernel(out.index(i * n + j).store(acc).end(i, j))


@pytest.mark.parametrize("make,opts", [
    (_matmul, (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 0, 4))),  # nested lanes
    (_softmax, (Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.UNROLL, 1, 2))),
])
def test_lane_expansion_as_a_walk_is_the_rewrite(make, opts):
    from tg_core.codegen.expander import pm_expand
    ast = graph_rewrite(apply_opts(make(), opts), symbolic, bottom_up=True)
    want = graph_rewrite(ast, pm_expand)
    assert not any(u.op is Ops.RANGE and u.arg[1] in (AxisType.UPCAST, AxisType.UNROLL) for u in want.toposort())
    assert expand_lanes(ast) is want
