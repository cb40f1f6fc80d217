"""Partial vectorization (slp.Packer.run): when not every run of stores packs, the runs that do are ymm code
and the rest stays scalar in the same loops; loads may be read by both. Values against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core import Tensor

from test_x86_induction import innermost_loop
from test_x86_kernels import f32, run_tensor


@pytest.mark.parametrize("n", [10, 12])
def test_matmul_tile_wider_than_a_vector(n):
    """A 4 x n tile (n not a multiple of 8): 8 columns as ymm accumulators, the rest scalar; B panel loads
    are read by both."""
    a, b = f32(24, 96), f32(96, n)
    got, kernels = run_tensor(Tensor(a) @ Tensor(b), own_opts=True)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    text = "\n".join(k.asm_str() for k in kernels)
    assert "vfmadd231ps ymm" in text and "vfmadd231ss xmm" in text


def test_matmul_bias_relu_ten_columns():
    """The MLP's last layer shape: a bias and relu after a 10-column product, partly vector, partly scalar.
    The bias loads have constant indices (b[0..9], the tile's columns): b[0..7] is one vector load."""
    a, b, c = f32(16, 64), f32(64, 10), f32(10)
    got, kernels = run_tensor((Tensor(a) @ Tensor(b) + Tensor(c)).relu(), own_opts=True)
    np.testing.assert_allclose(got, np.maximum(a @ b + c, 0), rtol=1e-4, atol=1e-4)
    text = "\n".join(k.asm_str() for k in kernels)
    assert "vfmadd231ps ymm" in text and "vaddps ymm" in text and "vfmadd231ss xmm" in text


def test_packed_panels_are_cache_line_aligned_with_stack_arguments():
    """A packed matmul with a long epilogue: 9 buffers, so 3 arrive on the stack (read through rbp, the
    entry stack pointer) while rsp is rounded down to 64 bytes for the panel."""
    a, b = f32(16, 40), f32(40, 16)
    extra = [f32(16, 16) for _ in range(6)]
    t = Tensor(a) @ Tensor(b)
    for k, e in enumerate(extra):
        t = t + Tensor(e) * (k + 1)
    got, kernels = run_tensor(t, own_opts=True)
    want = a @ b + sum(e * (k + 1) for k, e in enumerate(extra))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    text = kernels[-1].asm_str()
    assert "and rsp, 0xffffffffffffffc0" in text and "[rbp + 0x10]" in text and "ymmword ptr [rsp + " in text


def test_columns_not_a_multiple_of_the_panel_use_one_vector_panels():
    """24 columns (not a multiple of 16): panels of 8 that divide them, 8 rows, instead of a padded panel
    whose gated copy and stores would not vectorize; each row's broadcast is emitted at its FMA, so the 8
    accumulators, the panel vector and one broadcast fit the registers (no spill in the loop)."""
    a, b = f32(32, 40), f32(40, 24)
    got, kernels = run_tensor(Tensor(a) @ Tensor(b), own_opts=True)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    body = innermost_loop(kernels[-1], "vfmadd231ps")
    assert sum(t.startswith("vfmadd231ps ymm") for t in body) == 8
    assert sum(t.startswith("vbroadcastss") for t in body) == 8
    assert not any(t.startswith("vmovups ymmword ptr [rsp") for t in body), body
