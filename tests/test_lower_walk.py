"""lower_walk.py (REDUCE lowering, weakint lowering and END splitting fused into one walk) against the passes run
one after another: the same graph, node for node, and the same linear program."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core.codegen import pipeline
from tg_core.codegen.expander import expand_lanes
from tg_core.codegen.linearize import linearize
from tg_core.codegen.lower_walk import lower_walk
from tg_core.codegen.opts import Opt, OptOps, apply_opts
from tg_core.codegen.reduce import lower_reduce
from tg_core.dtype import dtypes
from tg_core.uop import KernelInfo, Ops, UOp
from tg_core.uop.rewrite import PatternMatcher, graph_rewrite
from tg_core.uop.symbolic import symbolic
from tg_core.uop.upat import UPat

F32, I32 = dtypes.float32, dtypes.int32


def _kernel(*effects: UOp) -> UOp:
    return UOp(Ops.SINK, dtypes.void, effects, KernelInfo("k"))


def _matmul(m: int = 6, n: int = 8, k: int = 12) -> UOp:
    a, b, out = UOp.param(0, F32.ptr(m * k)), UOp.param(1, F32.ptr(k * n)), UOp.param(2, F32.ptr(m * n))
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, kind=_reduce_kind())
    acc = (a.index(i * k + r).load() * b.index(r * n + j).load()).reduce(Ops.ADD, r)
    return _kernel(out.index(i * n + j).store(acc.maximum(UOp.const(F32, 0.0))).end(i, j))


def _reduce_kind():
    from tg_core.uop.ops import AxisType
    return AxisType.REDUCE


def _gather_by_sum(n: int = 5) -> UOp:
    """out[0] = a[sum(idx)]: an index (weakint) computed from a REDUCE, whose bounds change when it is lowered."""
    idx, a, out = UOp.param(0, I32.ptr(n)), UOp.param(1, F32.ptr(64)), UOp.param(2, F32.ptr(1))
    r = UOp.range(n, 0, kind=_reduce_kind())
    total = idx.index(r).load().reduce(Ops.ADD, r)
    where = (total.cast(dtypes.weakint) % 64)
    return _kernel(out.index(UOp.const(dtypes.weakint, 0)).store(a.index(where).load()))


def _shifted(n: int = 8) -> UOp:
    a, s, out = UOp.param(0, I32.ptr(n)), UOp.param(1, I32.ptr(n)), UOp.param(2, I32.ptr(n))
    i = UOp.range(n, 0)
    return _kernel(out.index(i).store(a.index(i).load() << s.index(i).load()).end(i))


def _exp_rows(rows: int = 3, cols: int = 8) -> UOp:
    a, out = UOp.param(0, F32.ptr(rows * cols)), UOp.param(1, F32.ptr(rows))
    i, r = UOp.range(rows, 0), UOp.range(cols, 1, kind=_reduce_kind())
    s = a.index(i * cols + r).load().exp2().reduce(Ops.ADD, r)
    return _kernel(out.index(i).store(s).end(i))


# a renderer's decomposition as codegen applies it (here: exp2 as a product, enough to be a rewrite)
_DECOMP = PatternMatcher([(UPat(Ops.EXP2, name="x"), lambda x: x.src[0] * x.src[0])])


def _stepwise(ast: UOp, opts: list[Opt], extra: PatternMatcher | None) -> UOp:
    ast = graph_rewrite(expand_lanes(apply_opts(ast, opts)), symbolic, bottom_up=True)
    return pipeline._lower_stepwise(lower_reduce(ast), True, extra)


CASES = {
    "matmul": (_matmul, [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 0, 3)], None),
    "matmul-tail": (_matmul, [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 5)], None),
    "matmul-plain": (_matmul, [], None),
    "gather-by-sum": (_gather_by_sum, [], None),
    "shift": (_shifted, [Opt(OptOps.UPCAST, 0, 4)], None),
    "decomposed": (_exp_rows, [Opt(OptOps.UNROLL, 0, 4)], _DECOMP),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lower_kernel_is_the_passes_one_after_another(name):
    build, opts, extra = CASES[name]
    ast = build()
    want = _stepwise(ast, opts, extra)
    assert pipeline.lower_kernel(ast, True, opts, extra) is want
    prog = pipeline.linearize_kernel(ast, True, opts, extra)
    assert list(prog.uops) == linearize(want)


def test_walk_gives_up_on_an_index_computed_from_a_reduce():
    ast = graph_rewrite(_gather_by_sum(), symbolic, bottom_up=True)
    assert lower_walk(ast, None) is None
    # and the walk does apply where nothing above a REDUCE is index math
    ast = graph_rewrite(expand_lanes(apply_opts(_matmul(), [Opt(OptOps.UPCAST, 1, 4)])), symbolic, bottom_up=True)
    walked = lower_walk(ast, None)
    assert walked is not None and walked[1] is not None and not walked[2]


def test_a_lane_left_outside_its_end_is_still_an_error():
    a, out = UOp.param(0, F32.ptr(8)), UOp.param(1, F32.ptr(8))
    i = UOp.range(8, 0)
    ast = _kernel(out.index(i).store(a.index(i).load()).end(i), out.index(i).store(UOp.const(F32, 1.0)))
    with pytest.raises(ValueError, match=r"axis 1 \(UPCAST\) is used outside every END and REDUCE over it"):
        pipeline.lower_kernel(ast, True, [Opt(OptOps.UPCAST, 0, 4)])


@pytest.mark.parametrize("device", ["CPU:LLVM", "CPU:X86"])
def test_fused_lowering_computes_the_mlp_layer(device):
    """Every kernel a device compiles goes through the walk: a register-tiled matmul with a bias and relu, and a
    softmax (exp2 decomposed on X86), against numpy."""
    from tg_core.tensor import Tensor
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((33, 70), dtype=np.float32), rng.standard_normal((70, 45), dtype=np.float32)
    bias = rng.standard_normal(45, dtype=np.float32)
    got = (Tensor(x, device=device) @ Tensor(w, device=device) + Tensor(bias, device=device)).relu().numpy()
    np.testing.assert_allclose(got, np.maximum(x @ w + bias, 0), rtol=1e-4, atol=1e-4)
    sm = Tensor(x, device=device).softmax(-1).numpy()
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
