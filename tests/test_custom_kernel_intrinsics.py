"""Device intrinsics in custom kernels (CUSTOM nodes named by the renderer's `intrinsics` table), contiguous vector
loads with a nontemporal hint, VECTORIZE and GEP, against numpy on the mock AMD GPU: a sudot4 dot (int8 x int8
into int32, v_dot4_i32_iu8), a WMMA 16x16x16 f16 tile, ds_swizzle and v_perm; a device without the intrinsic says so."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.codegen.pipeline import linearize_kernel
from tg_core.dtype import AddrSpace, dtypes
from tg_core.uop.ops import AxisType, KernelInfo, Ops
from tg_core.uop.uop import UOp

ZERO = UOp.const(dtypes.weakint, 0)


def intrinsic(name: str, dtype, *srcs: UOp) -> UOp:
    return UOp(Ops.CUSTOM, dtype, srcs, name)


def sudot4_rows(groups: int, lanes: int, words: int):
    """out[r] = sum_w dot4(a[r, w], b[w]) with signed bytes, r = g*lanes + l over a GLOBAL x LOCAL grid, the
    accumulator a register carried through sudot4's acc operand."""
    def fxn(out: UOp, a: UOp, b: UOp) -> UOp:
        g, lane = UOp.range(groups, 0, AxisType.GLOBAL), UOp.range(lanes, 1, AxisType.LOCAL)
        w = UOp.range(words, 2, AxisType.REDUCE)
        row = g * lanes + lane
        reg = UOp(Ops.DEFINE_REG, dtypes.int32.ptr(1, AddrSpace.REG), (), 0)
        init = reg.index(ZERO).store(UOp.const(dtypes.int32, 0))
        acc = reg.after(init, w).index(ZERO)
        word = UOp(Ops.LOAD, dtypes.int32, (a.index(row * words + w),), "nontemporal")  # streamed weights
        upd = acc.store(intrinsic("sudot4", dtypes.int32, word, b.index(w).load(), acc.load())).end(w)
        return out.index(row).store(reg.after(upd).index(ZERO).load()).end(g, lane).sink()
    return fxn


def test_sudot4_dot_matches_numpy():
    rng = np.random.default_rng(0)
    rows, words = 64, 8
    a8 = rng.integers(-128, 128, (rows, words * 4), dtype=np.int8)
    a8[0, :4] = -128  # the extremes: -128 * -128 four times
    b8 = rng.integers(-128, 128, words * 4, dtype=np.int8)
    b8[:4] = -128
    out = Tensor.zeros(rows, dtype="int32", device="AMD").contiguous()
    Tensor.custom_kernel(out, Tensor(a8.view(np.int32).ravel(), device="AMD"), Tensor(b8.view(np.int32), device="AMD"),
                         fxn=sudot4_rows(2, 32, words))
    np.testing.assert_array_equal(out.numpy(), a8.astype(np.int64) @ b8.astype(np.int64))


def wmma_tile(out: UOp, a: UOp, bt: UOp, c: UOp) -> UOp:
    """out = a @ b + c for 16x16 tiles in one wave: lane l loads a's row l % 16 and b's column l % 16 (bt's row) as
    16-half vectors (nontemporal), c's elements [2i + l // 16][l % 16] as 8 floats, and stores the result's."""
    lane = UOp.range(32, 0, AxisType.LOCAL)
    m = lane % 16
    arow = UOp(Ops.LOAD, dtypes.float16.vec(16), (a.index(m * 16),), "nontemporal")
    bcol = UOp(Ops.LOAD, dtypes.float16.vec(16), (bt.index(m * 16),), "nontemporal")
    where = [(2 * i + lane // 16) * 16 + m for i in range(8)]
    acc = UOp(Ops.VECTORIZE, dtypes.float32.vec(8), tuple(c.index(e).load() for e in where))
    d = intrinsic("wmma_f32_16x16x16_f16", dtypes.float32.vec(8), arow, bcol, acc)
    stores = [out.index(e).store(UOp(Ops.GEP, dtypes.float32, (d,), (i,))) for i, e in enumerate(where)]
    return UOp(Ops.GROUP, dtypes.void, tuple(stores)).end(lane).sink()


def test_wmma_16x16x16_tile_matches_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 16)).astype(np.float16)
    c = rng.standard_normal((16, 16)).astype(np.float32)
    out = Tensor.zeros(256, device="AMD").contiguous()
    Tensor.custom_kernel(out, Tensor(a.ravel(), device="AMD"), Tensor(np.ascontiguousarray(b.T).ravel(), device="AMD"),
                         Tensor(c.ravel(), device="AMD"), fxn=wmma_tile)
    want = a.astype(np.float64) @ b.astype(np.float64) + c  # products of halves are exact in f32; sums round
    np.testing.assert_allclose(out.numpy().reshape(16, 16), want, rtol=1e-5, atol=1e-5)


def swizzle_perm(out: UOp, x: UOp) -> UOp:
    """out[l] = perm(swizzle(x, lanes l ^ 1), x[l], 0x00010405): the word of the neighbouring lane, its bytes mixed
    with this lane's by v_perm (selector bytes 5, 4 from the first operand's word, 1, 0 from the second's)."""
    lane = UOp.range(32, 0, AxisType.LOCAL)
    mine = x.index(lane).load()
    other = intrinsic("ds_swizzle", dtypes.int32, mine, UOp.const(dtypes.int32, 0x041F))
    mixed = intrinsic("perm", dtypes.int32, other, mine, UOp.const(dtypes.int32, 0x05040100))
    return out.index(lane).store(mixed).end(lane).sink()


def test_ds_swizzle_and_perm_match_numpy():
    x = np.random.default_rng(2).integers(0, 2**31, 32, dtype=np.int64).astype(np.uint32).view(np.int32)
    out = Tensor.zeros(32, dtype="int32", device="AMD").contiguous()
    Tensor.custom_kernel(out, Tensor(x, device="AMD"), fxn=swizzle_perm)
    u = x.view(np.uint32)
    other = u[np.arange(32) ^ 1]
    # v_perm_b32 D = bytes of {src0, src1} (src1 the low word) by selector: 0x05040100 -> (src0's low half << 16) | src1's
    want = ((other & 0xFFFF) << 16) | (u & 0xFFFF)
    np.testing.assert_array_equal(out.numpy().view(np.uint32), want.astype(np.uint32))


def test_nontemporal_vector_load_renders_metadata():
    from tg_amd.renderer import AMDRenderer
    params = [UOp.param(i, dt.ptr(256)) for i, dt in enumerate((dtypes.float32, dtypes.float16, dtypes.float16,
                                                                  dtypes.float32))]
    ast = UOp(Ops.SINK, dtypes.void, wmma_tile(*params).src, KernelInfo("wmma"))
    from tg_core.codegen.lib.gpudims import add_gpudims
    src = AMDRenderer().render(linearize_kernel(add_gpudims(ast, 256)[0]))
    assert src.count("load <16 x half>") == 2 and "!nontemporal" in src and "!{i32 1}" in src
    assert "@llvm.amdgcn.wmma.f32.16x16x16.f16" in src


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_intrinsic_on_a_device_without_it_is_a_clear_error(device):
    out = Tensor.zeros(64, dtype="int32", device=device).contiguous()
    a, b = Tensor.zeros(64 * 8, dtype="int32", device=device), Tensor.zeros(8, dtype="int32", device=device)
    with pytest.raises(NotImplementedError, match="sudot4"):
        Tensor.custom_kernel(out, a, b, fxn=sudot4_rows(2, 32, 8))


def test_check_oob_counts_a_vector_loads_last_element():
    from tg_core.uop.validate import validate_index
    buf, out = UOp.param(0, dtypes.float16.ptr(256)), UOp.param(1, dtypes.float16.ptr(16))
    r = UOp.range(2, 0, AxisType.LOOP)

    def kernel(start: int) -> UOp:
        v = UOp(Ops.LOAD, dtypes.float16.vec(16), (buf.index(r * 16 + start),))
        return out.index(r).store(UOp(Ops.GEP, dtypes.float16, (v,), (0,))).end(r).sink()
    validate_index(kernel(224))  # rows 224..239 and 240..255
    with pytest.raises(RuntimeError):
        validate_index(kernel(232))  # the second load reads 248..263
