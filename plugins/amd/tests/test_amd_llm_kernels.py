"""tg-amd's named kernels (tg_amd/kernels, offered through tg_kernels) on the mock AMD GPU against numpy, and the same
calls on CPU, where no plugin offers them, taking core's Tensor fallback and agreeing: q8_quantize (round half to
even, the ties, the per-16 sums) and f16_gemv (bias per output row, float32 range, exact integer-cast weights)."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.kernels import kernel_for
from tg_core.llm.model import linear
from tg_core.llm.q8 import q8_quantize

DEVICES = ["AMD", "CPU"]


def q8_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = x.astype(np.float32).reshape(-1, x.shape[-1] // 32, 32)
    d = np.maximum(np.abs(g).max(-1) / np.float32(127), np.float32(1e-8)).astype(np.float32)
    q = np.clip(np.rint(g / d[..., None]), -127, 127).astype(np.int8)  # np.rint: half to even
    return q, d, q.astype(np.int32).reshape(*q.shape[:2], 2, 16).sum(-1).astype(np.float32)


def test_offered_on_amd_only():
    assert kernel_for("q8_quantize", "AMD") is not None and kernel_for("f16_gemv", "AMD") is not None
    assert kernel_for("q8_quantize", "CPU") is None and kernel_for("f16_gemv", "CPU") is None


def ties() -> np.ndarray:
    """One group with 127 and -127 (so d = 1 exactly) and the halves k + 0.5 for k = -15..14: x / d is each tie."""
    x = np.zeros((1, 32), np.float32)
    x[0, :30] = np.arange(-15, 15) + 0.5
    x[0, 30], x[0, 31] = 127, -127
    return x


@pytest.mark.parametrize("device", DEVICES)
def test_q8_ties_round_half_to_even(device):
    q, d, s = q8_quantize(Tensor(ties(), device=device))
    np.testing.assert_array_equal(d.numpy(), [[1.0]])
    want = np.concatenate([np.rint(np.arange(-15, 15) + 0.5), [127, -127]]).astype(np.int8)
    np.testing.assert_array_equal(q.numpy().ravel(), want)
    assert (want[:30] % 2 == 0).all()  # every tie went to the even neighbour
    np.testing.assert_array_equal(s.numpy().ravel(), [want[:16].sum(), want[16:].sum()])


@pytest.mark.parametrize("device", DEVICES)
def test_q8_random_zero_and_constant_groups(device):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 256)) * rng.uniform(0.01, 50, (3, 1))).astype(np.float32)
    x[1, 32:64] = 0        # d = 1e-8, q = 0
    x[2, :32] = -2.5       # amax = 2.5: every q is -127
    x[2, 32:64] = 1e-30    # below the 1e-8 floor: x / d rounds to 0
    got = [t.numpy() for t in q8_quantize(Tensor(x, device=device))]
    for g, w in zip(got, q8_reference(x)):
        np.testing.assert_array_equal(g, w)


def test_q8_half_input_and_leading_dims_on_amd():
    x = (np.random.default_rng(4).standard_normal((2, 2, 64)) * 4).astype(np.float16)
    got = [t.numpy() for t in q8_quantize(Tensor(x, device="AMD"))]
    for g, w in zip(got, q8_reference(x.reshape(4, 64))):
        np.testing.assert_array_equal(g, w)


def test_q8_cpu_fallback_agrees_with_amd_kernel():
    x = (np.random.default_rng(5).standard_normal((4, 128)) * 7).astype(np.float32)
    for a, c in zip(q8_quantize(Tensor(x, device="AMD")), q8_quantize(Tensor(x, device="CPU"))):
        np.testing.assert_array_equal(a.numpy(), c.numpy())


def test_q8_bad_width_is_a_clear_error():
    with pytest.raises(ValueError, match="K a multiple of 32"):
        q8_quantize(Tensor(np.zeros((2, 40), np.float32), device="AMD"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tokens", [1, 3])
def test_f16_gemv_bias_per_row(device, tokens):
    rng = np.random.default_rng(tokens)
    w = rng.standard_normal((48, 96)).astype(np.float16)
    x = rng.standard_normal((1, tokens, 96)).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    got = linear(Tensor(x, device=device), Tensor(w, device=device).float(), Tensor(b, device=device)).numpy()
    want = x.astype(np.float64) @ w.astype(np.float64).T + b  # bias[n] on output row n, for every token
    assert got.shape == (1, tokens, 48)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_f16_gemv_keeps_float32_range(device):
    # 65536 overflows float16: x must stay float32; 65536 * 1/128 = 512 exactly
    x = np.zeros((1, 64), np.float32)
    x[0, 5] = 65536
    w = np.zeros((16, 64), np.float16)
    w[:, 5] = 1 / 128
    got = linear(Tensor(x, device=device), Tensor(w, device=device)).numpy()
    np.testing.assert_array_equal(got, np.full((1, 16), 512, np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_f16_gemv_integer_cast_weight_is_exact(device):
    # .int().float() changes values (0.75 -> 0, -1.5 -> -1): not float16 values any more, so core's code computes it
    w = np.tile(np.array([0.75, -1.5, 2.0, 3.25], np.float16), (16, 8))
    x = np.arange(32, dtype=np.float32).reshape(1, 32)
    wt = Tensor(w, device=device).float().int().float()
    k = kernel_for("f16_gemv", device)
    assert k is None or not k.supports(Tensor(x, device=device), wt)
    got = linear(Tensor(x, device=device), wt).numpy()
    np.testing.assert_array_equal(got, x @ np.trunc(w.astype(np.float32)).T)


def test_f16_gemv_declines_what_it_does_not_do():
    k = kernel_for("f16_gemv", "AMD")
    w = Tensor(np.zeros((16, 64), np.float16), device="AMD")
    assert not k.supports(Tensor(np.zeros((16, 64), np.float32), device="AMD"), w)   # 16 tokens: a matmul
    assert not k.supports(Tensor(np.zeros((1, 40), np.float32), device="AMD"),
                          Tensor(np.zeros((16, 40), np.float16), device="AMD"))     # K not a multiple of 32
    assert not k.supports(Tensor(np.zeros((1, 64), np.float32), device="AMD"), w.float() * 2)  # not f16 values
