"""Padded (gated) loads as AVX-512 masked loads: conv2d's borders and padded copies read one zmm under an
opmask of the lanes' gates instead of a branch per float. Values against numpy where the host runs AVX-512;
every kernel's code is decoded by capstone (text and length), also emit-only on AVX2 hosts."""
from __future__ import annotations

import numpy as np
import numpy.lib.stride_tricks as st
import pytest

from tg_core import Tensor
from tg_core.testing.kernels import capture_kernels
from tg_core.uop import Ops

from test_x86_kernels import f32, run_tensor
from x86_harness import check_disassembly, renderer_for, runnable

MASKED_LOAD = "{z}, zmmword ptr ["


def np_conv2d(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = st.sliding_window_view(xp, w.shape[2:], axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,ocij->nohw", win, w)


def _asm(build, isa: str = "avx512") -> list[str]:
    """The X86 code of the kernels `build` runs on PYTHON, compiled for `isa` without running (capstone-checked)."""
    texts = []
    for ast in capture_kernels(build):
        r = renderer_for(isa)
        k = r.compile(r.program(ast))
        check_disassembly(k)
        texts.append(k.asm_str())
    return texts


def _gated(build) -> bool:
    return any(u.op is Ops.INDEX and len(u.src) == 3 for ast in capture_kernels(build) for u in ast.toposort())


@pytest.mark.parametrize("shape, cout, stride, pad", [
    ((1, 3, 7, 7), 4, 1, 1), ((2, 4, 9, 33), 8, 1, 1), ((1, 2, 16, 16), 4, 1, 2), ((2, 16, 8, 32), 8, 1, 1)])
def test_conv2d_borders_are_masked_loads(shape, cout, stride, pad):
    x, w = f32(*shape), f32(cout, shape[1], 3, 3)

    def build(dev="PYTHON"):
        return Tensor(x, device=dev).conv2d(Tensor(w, device=dev), stride=stride, padding=pad).realize()
    assert _gated(build)
    text = "\n".join(_asm(build))
    assert MASKED_LOAD in text and "kmovw k" in text and "vfmadd231ps zmm" in text
    out_cols = (shape[3] + 2 * pad - 3) // stride + 1
    if out_cols <= 32:  # the tile covers the row: no scalar fallback left (wider rows have a scalar tail loop)
        assert "vfmadd231ss" not in text
    if not runnable("avx512"):
        pytest.skip("this host cannot run AVX-512 code (the encodings were checked)")
    got, _ = run_tensor(Tensor(x).conv2d(Tensor(w), stride=stride, padding=pad), own_opts=True, isa="avx512")
    np.testing.assert_allclose(got, np_conv2d(x, w, stride, pad), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rem", range(1, 16))
def test_conv2d_rows_at_every_remainder(rem):
    """Output rows of 16 + rem columns: the tile covers them all (one whole vector and one partial one of rem
    lanes), so the partial vector's gated loads are masked by its gates and its lanes together."""
    x, w = f32(1, 2, 3, 16 + rem), f32(4, 2, 3, 3)

    def build(dev="PYTHON"):
        return Tensor(x, device=dev).conv2d(Tensor(w, device=dev), padding=1).realize()
    text = "\n".join(_asm(build))
    assert MASKED_LOAD in text
    assert ("vfmadd231ss" in text) == (rem == 1)  # a partial vector has 2 lanes or more: one column stays scalar
    if not runnable("avx512"):
        pytest.skip("this host cannot run AVX-512 code (the encodings were checked)")
    got, _ = run_tensor(Tensor(x).conv2d(Tensor(w), padding=1), own_opts=True, isa="avx512")
    np.testing.assert_allclose(got, np_conv2d(x, w, 1, 1), rtol=1e-4, atol=1e-4)


def test_strided_conv2d_stays_scalar_and_right():
    """Stride 2 reads every other column: no consecutive lanes, so no masked vector load; the values hold."""
    x, w = f32(1, 3, 15, 17), f32(4, 3, 3, 3)
    text = "\n".join(_asm(lambda: Tensor(x, device="PYTHON").conv2d(Tensor(w, device="PYTHON"), stride=2,
                                                                     padding=1).realize()))
    assert MASKED_LOAD not in text
    if not runnable("avx512"):
        pytest.skip("this host cannot run AVX-512 code")
    got, _ = run_tensor(Tensor(x).conv2d(Tensor(w), stride=2, padding=1), own_opts=True, isa="avx512")
    np.testing.assert_allclose(got, np_conv2d(x, w, 2, 1), rtol=1e-4, atol=1e-4)


def test_where_with_another_fallback_is_not_a_masked_load():
    """where(gate, load, 7.0) is no zero-masked load: its value comes out right either way (blend or scalar)."""
    x = f32(2, 20)

    def expr(dev=None):
        return Tensor(x, device=dev).pad(((0, 0), (2, 2)), value=7.0) + 1.0
    want = np.pad(x, ((0, 0), (2, 2)), constant_values=7.0) + 1
    if not runnable("avx512"):
        pytest.skip("this host cannot run AVX-512 code")
    got, _ = run_tensor(expr(), own_opts=True, isa="avx512")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_avx2_keeps_its_scalar_gated_loads():
    """AVX2 has no opmasks: its padded loads stay scalar (a branch each) and still compute the same values."""
    x, w = f32(1, 2, 6, 9), f32(3, 2, 3, 3)
    text = "\n".join(_asm(lambda: Tensor(x, device="PYTHON").conv2d(Tensor(w, device="PYTHON"), padding=1).realize(),
                          isa="avx2"))
    assert MASKED_LOAD not in text and "zmm" not in text
    if not runnable("avx2"):
        pytest.skip("this host cannot run AVX2 code")
    got, _ = run_tensor(Tensor(x).conv2d(Tensor(w), padding=1), own_opts=True, isa="avx2")
    np.testing.assert_allclose(got, np_conv2d(x, w, 1, 1), rtol=1e-4, atol=1e-4)
