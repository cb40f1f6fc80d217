"""Custom kernels that set their own launch shape (GLOBAL and LOCAL ranges; codegen/lib/gpudims.py explicit_dims),
with LDS buffers and barriers, against numpy: on the mock AMD GPU the ranges are the grid and the workgroup, on CPU
and PYTHON they are loops (PYTHON runs LDS and barriers too: its interpreter computes a whole range at once)."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core import Tensor, Variable
from tg_core.codegen.lib.gpudims import add_gpudims
from tg_core.dtype import AddrSpace, dtypes
from tg_core.uop.ops import AxisType, KernelInfo, Ops
from tg_core.uop.uop import UOp

ZERO = UOp.const(dtypes.weakint, 0)


def grid_ids(g0: int | UOp, g1: int, l0: int, l1: int):
    """out[flat(g0, g1, l0, l1)] = g0*1000 + g1*100 + l0*10 + l1: which work-item wrote where, exactly."""
    def fxn(out: UOp) -> UOp:
        a, b = UOp.range(g0, 0, AxisType.GLOBAL), UOp.range(g1, 1, AxisType.GLOBAL)
        c, d = UOp.range(l0, 2, AxisType.LOCAL), UOp.range(l1, 3, AxisType.LOCAL)
        flat = ((a * g1 + b) * l0 + c) * l1 + d
        val = (a * 1000 + b * 100 + c * 10 + d).cast(dtypes.int32)
        return out.index(flat).store(val).end(a, b, c, d).sink()
    return fxn


def grid_want(g0: int, g1: int, l0: int, l1: int, size: int) -> np.ndarray:
    a, b, c, d = np.meshgrid(*(np.arange(n) for n in (g0, g1, l0, l1)), indexing="ij")
    want = np.full(size, -1, np.int32)
    want[: g0 * g1 * l0 * l1] = (a * 1000 + b * 100 + c * 10 + d).ravel()
    return want


@pytest.mark.parametrize("device", ["CPU", "PYTHON", "AMD"])
def test_global_by_local_grid(device):
    shape = (3, 2, 8, 4)
    out = Tensor.full((192,), -1, dtype="int32", device=device).contiguous()
    Tensor.custom_kernel(out, fxn=grid_ids(*shape))
    np.testing.assert_array_equal(out.numpy(), grid_want(*shape, 192))


@pytest.mark.parametrize("device", ["CPU", "AMD"])
def test_symbolic_global_size(device):
    for n in (1, 4):
        out = Tensor.full((4 * 2 * 4 * 2,), -1, dtype="int32", device=device).contiguous()
        Tensor.custom_kernel(out, fxn=grid_ids(Variable("g", 1, 4).bind(n), 2, 4, 2))
        np.testing.assert_array_equal(out.numpy(), grid_want(n, 2, 4, 2, 64))


def test_launch_dims_are_the_ranges():
    out = UOp.param(0, dtypes.int32.ptr(192))
    ast = UOp(Ops.SINK, dtypes.void, grid_ids(3, 2, 8, 4)(out).src, KernelInfo("grid"))
    gpu, launch = add_gpudims(ast, 256)
    assert launch.evaluate({}) == ((3, 2, 1), (8, 4, 1))
    assert sorted(u.arg for u in gpu.toposort() if u.op is Ops.SPECIAL) == ["gidx0", "gidx1", "lidx0", "lidx1"]
    assert not any(u.op is Ops.RANGE for u in gpu.toposort())


def test_bad_launch_shapes_are_clear_errors():
    out = UOp.param(0, dtypes.int32.ptr(4096))
    big = UOp(Ops.SINK, dtypes.void, grid_ids(1, 1, 32, 16)(out).src, KernelInfo("big"))
    with pytest.raises(ValueError, match=r"a workgroup of 32 x 16 x 1 work-items; allowed 1 to 256"):
        add_gpudims(big, 256)
    n = UOp.variable("n", 1, 8)
    r = UOp.range(n, 0, AxisType.LOCAL)
    sym = UOp(Ops.SINK, dtypes.void, (out.index(r).store(UOp.const(dtypes.int32, 1)).end(r),), KernelInfo("sym"))
    with pytest.raises(ValueError, match="LOCAL sizes must be constants"):
        add_gpudims(sym, 256)
    rs = [UOp.range(2, i, AxisType.GLOBAL) for i in range(4)]
    four = UOp(Ops.SINK, dtypes.void, (out.index(rs[0] + rs[1] + rs[2] + rs[3]).store(UOp.const(dtypes.int32, 1))
                                       .end(*rs),), KernelInfo("four"))
    with pytest.raises(ValueError, match="4 GLOBAL ranges; a GPU launch has at most 3"):
        add_gpudims(four, 256)


def tree_sum(groups: int, lanes: int):
    """out[g] = sum of x[g*lanes : (g+1)*lanes]: each work-item puts one element into LDS, then log2(lanes) halving
    steps, each after a barrier (lane l < s adds lane l+s), and lane 0 stores."""
    def fxn(out: UOp, x: UOp) -> UOp:
        g, lane = UOp.range(groups, 0, AxisType.GLOBAL), UOp.range(lanes, 1, AxisType.LOCAL)
        lds = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(lanes, AddrSpace.LOCAL), (), "tree")
        bar = UOp(Ops.BARRIER, dtypes.void, (lds.index(lane).store(x.index(g * lanes + lane).load()),))
        s = lanes // 2
        while s >= 1:
            cur, ok = lds.after(bar), lane < s
            total = cur.index(lane + s, ok).load() + cur.index(lane, ok).load()
            bar = UOp(Ops.BARRIER, dtypes.void, (cur.index(lane, ok).store(total),))
            s //= 2
        return out.index(g, lane < 1).store(lds.after(bar).index(ZERO).load()).end(g, lane).sink()
    return fxn


@pytest.mark.parametrize("device", ["PYTHON", "AMD"])
@pytest.mark.parametrize("lanes", [64, 256])
def test_lds_tree_reduction_with_barriers(device, lanes):
    x = np.random.default_rng(lanes).standard_normal(5 * lanes).astype(np.float32)
    out = Tensor.zeros(5, device=device).contiguous()
    Tensor.custom_kernel(out, Tensor(x, device=device), fxn=tree_sum(5, lanes))
    # a pairwise tree in float32: a few ulps of the sum's magnitude from float64
    np.testing.assert_allclose(out.numpy(), x.reshape(5, lanes).astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


def test_lds_on_cpu_is_a_clear_error():
    out = Tensor.zeros(2, device="CPU").contiguous()
    with pytest.raises(NotImplementedError, match="DEFINE_LOCAL"):
        Tensor.custom_kernel(out, Tensor(np.ones(128, np.float32), device="CPU"), fxn=tree_sum(2, 64))


def tiled_sums(groups: int, lanes: int, tiles: int):
    """out[g, l] = (l + 1) * sum(x[g]): each iteration of a tile loop stages `lanes` elements of x in LDS, a barrier,
    every work-item sums the tile from LDS into its register accumulator, a barrier before the next tile's stores."""
    def fxn(out: UOp, x: UOp) -> UOp:
        g, lane = UOp.range(groups, 0, AxisType.GLOBAL), UOp.range(lanes, 1, AxisType.LOCAL)
        t, k = UOp.range(tiles, 2, AxisType.REDUCE), UOp.range(lanes, 3, AxisType.REDUCE)
        lds = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(lanes, AddrSpace.LOCAL), (), "tile")
        reg = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1, AddrSpace.REG), (), 0)
        init = reg.index(ZERO).store(UOp.const(dtypes.float32, 0.0))
        staged = UOp(Ops.BARRIER, dtypes.void, (lds.index(lane).store(x.index((g * tiles + t) * lanes + lane).load()),))
        tile = UOp(Ops.REDUCE, dtypes.float32, (lds.after(staged).index(k).load(), k), Ops.ADD)
        acc = reg.after(init, t).index(ZERO)
        scale = (lane + 1).cast(dtypes.float32)
        done = UOp(Ops.BARRIER, dtypes.void, (acc.store(acc.load() + tile * scale),)).end(t)
        return out.index(g * lanes + lane).store(reg.after(done).index(ZERO).load()).end(g, lane).sink()
    return fxn


# on AMD this kernel must stay whole: tg_amd/split.py would otherwise move the tile sum (a REDUCE inside the tile
# loop) into a kernel of its own, running each tile in a workgroup of its own, LDS staging and all
@pytest.mark.parametrize("device", ["PYTHON", "AMD"])
def test_lds_tiles_in_a_loop_into_a_register(device):
    groups, lanes, tiles = 3, 32, 4
    x = np.random.default_rng(7).integers(-8, 8, groups * lanes * tiles).astype(np.float32)  # exact sums
    out = Tensor.zeros(groups * lanes, device=device).contiguous()
    Tensor.custom_kernel(out, Tensor(x, device=device), fxn=tiled_sums(groups, lanes, tiles))
    want = x.reshape(groups, -1).sum(1)[:, None] * np.arange(1, lanes + 1, dtype=np.float32)
    np.testing.assert_array_equal(out.numpy(), want.ravel())
