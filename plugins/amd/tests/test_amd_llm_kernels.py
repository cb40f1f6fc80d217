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


# ---- quant_linear for Q4_K (sudot4, fewer than 16 tokens) --------------------------------------------------

def q4k_bytes(n_blocks: int, seed: int, nbytes: int = 144) -> np.ndarray:
    """Random Q4_K (Q5_K: 176 bytes) blocks with small positive d and dmin (random other bytes are all valid)."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (n_blocks, nbytes), dtype=np.uint8)
    for at in (0, 2):
        raw[:, at:at + 2] = rng.uniform(0.001, 0.02, n_blocks).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw


def q8_dequantized(x: np.ndarray) -> np.ndarray:
    q, d, _ = q8_reference(x.reshape(-1, x.shape[-1]))
    return (q.astype(np.float64) * d[..., None]).reshape(x.shape)


def gguf_weight(raw: np.ndarray, n: int, k: int, device: str, ggml_type: int = 12) -> Tensor:
    """What gguf.py's `tensor()` gives: the lazy dequantization of the uploaded bytes, remembered as such."""
    from tg_core.llm.dequant import dequantize
    from tg_core.llm.weights import remember
    rt = Tensor(raw, device=device)
    w = dequantize(rt, ggml_type).reshape(n, k)
    remember(w, rt, ggml_type)
    return w


def dequantized(raw: np.ndarray, n: int, k: int, ggml_type: int = 12) -> np.ndarray:
    from tg_core.llm.dequant import dequantize
    return dequantize(Tensor(raw, device="CPU"), ggml_type).reshape(n, k).numpy().astype(np.float64)


@pytest.mark.parametrize("tokens", [1, 3])
def test_q4k_quant_linear_matches_q8_reference(tokens):
    N, K = 48, 512
    raw = q4k_bytes(N * K // 256, tokens)
    x = np.random.default_rng(10 + tokens).standard_normal((1, tokens, K)).astype(np.float32)
    w = gguf_weight(raw, N, K, "AMD")
    assert kernel_for("quant_linear", "AMD").supports(Tensor(x, device="AMD"), w, (Tensor(raw), 12))
    got = linear(Tensor(x, device="AMD"), w).numpy()
    want = q8_dequantized(x) @ dequantized(raw, N, K).T
    np.testing.assert_allclose(got, want, rtol=3e-3, atol=2e-2)
    # the same call on CPU: core's matmul of the exact weight, agreeing within the Q8 rounding of the activations
    cpu = linear(Tensor(x, device="CPU"), gguf_weight(raw, N, K, "CPU")).numpy()
    np.testing.assert_allclose(cpu, x.astype(np.float64) @ dequantized(raw, N, K).T, rtol=1e-5, atol=1e-4)
    # Q8's rounding of 512 activations moves a sum by up to about 1% of the outputs' magnitude
    np.testing.assert_allclose(got, cpu, rtol=0, atol=0.01 * np.abs(cpu).max())


def test_q4k_declines_permuted_cast_and_unaligned_weights():
    N, K = 16, 256
    raw = q4k_bytes(N * K // 256, 7)
    w = gguf_weight(raw, N, K, "AMD")
    k = kernel_for("quant_linear", "AMD")
    x = Tensor(np.ones((1, K), np.float32), device="AMD")
    from tg_core.llm.weights import gguf_source
    perm = np.concatenate([np.arange(0, N, 2), np.arange(1, N, 2)])  # a RoPE-style row permutation
    for other in (w[Tensor(perm, device="AMD")], w.int().float(), w * 1.0 + 0.0):
        assert gguf_source(other) is None and not k.supports(x, other, gguf_source(other))
    assert gguf_source(w.reshape(N * K).reshape(N, K).contiguous()) is not None  # reshapes are looked through
    many = Tensor(np.ones((16, K), np.float32), device="AMD")
    assert k.supports(many, w, gguf_source(w))  # 16 tokens: the WMMA path


@pytest.mark.parametrize("device", DEVICES)
def test_q4k_permuted_and_int_cast_weights_are_exact_through_the_fallback(device):
    N, K = 16, 256
    raw = q4k_bytes(N * K // 256, 8)
    w = gguf_weight(raw, N, K, device)
    x = np.random.default_rng(9).standard_normal((2, K)).astype(np.float32)
    W = dequantized(raw, N, K)
    perm = np.concatenate([np.arange(0, N, 2), np.arange(1, N, 2)])
    got = linear(Tensor(x, device=device), w[Tensor(perm, device=device)]).numpy()
    np.testing.assert_allclose(got, x.astype(np.float64) @ W[perm].T, rtol=1e-5, atol=1e-4)
    wi = (w * 100).int().float()
    got = linear(Tensor(x, device=device), wi).numpy()
    np.testing.assert_allclose(got, x.astype(np.float64) @ np.trunc(W * np.float32(100)).T, rtol=1e-5, atol=1e-3)


def test_q4k_width_not_a_multiple_of_256_falls_back():
    # 4 rows of 128: Q4_K blocks span two rows, which the kernel does not read; core's matmul is exact
    N, K = 4, 128
    raw = q4k_bytes(2, 11)
    w = gguf_weight(raw, N, K, "AMD")
    from tg_core.llm.weights import gguf_source
    x = np.random.default_rng(12).standard_normal((1, K)).astype(np.float32)
    assert not kernel_for("quant_linear", "AMD").supports(Tensor(x, device="AMD"), w, gguf_source(w))
    got = linear(Tensor(x, device="AMD"), w).numpy()
    np.testing.assert_allclose(got, x.astype(np.float64) @ dequantized(raw, N, K).T, rtol=1e-5, atol=1e-4)


def test_q4k_many_outputs():  # 4112 waves: the emulator runs them as one batch (about 1.5 s)
    N, K = 4112, 256  # IQ4_XS's partial-tile case in the seed; here one wave per output row, no tiles
    raw = q4k_bytes(N * K // 256, 13)
    x = np.random.default_rng(14).standard_normal((1, K)).astype(np.float32)
    got = linear(Tensor(x, device="AMD"), gguf_weight(raw, N, K, "AMD")).numpy()
    np.testing.assert_allclose(got, q8_dequantized(x) @ dequantized(raw, N, K).T, rtol=3e-3, atol=2e-2)


@pytest.mark.parametrize("tokens", [1, 3])
def test_q5k_quant_linear_matches_q8_reference(tokens):
    N, K = 48, 512
    raw = q4k_bytes(N * K // 256, 20 + tokens, nbytes=176)
    x = np.random.default_rng(30 + tokens).standard_normal((tokens, K)).astype(np.float32)
    w = gguf_weight(raw, N, K, "AMD", 13)
    from tg_core.llm.weights import gguf_source
    assert kernel_for("quant_linear", "AMD").supports(Tensor(x, device="AMD"), w, gguf_source(w))
    got = linear(Tensor(x, device="AMD"), w).numpy()
    np.testing.assert_allclose(got, q8_dequantized(x) @ dequantized(raw, N, K, 13).T, rtol=3e-3, atol=2e-2)
    cpu = linear(Tensor(x, device="CPU"), gguf_weight(raw, N, K, "CPU", 13)).numpy()
    np.testing.assert_allclose(cpu, x.astype(np.float64) @ dequantized(raw, N, K, 13).T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("tokens", [1, 3])
def test_q6k_quant_linear_matches_q8_reference(tokens):
    N, K = 32, 512
    raw = q4k_bytes(N * K // 256, 40 + tokens, nbytes=210)
    rng = np.random.default_rng(50 + tokens)
    raw[:, 208:210] = rng.uniform(0.001, 0.02, len(raw)).astype(np.float16).view(np.uint8).reshape(-1, 2)  # d at the end
    x = rng.standard_normal((tokens, K)).astype(np.float32)
    w = gguf_weight(raw, N, K, "AMD", 14)
    from tg_core.llm.weights import gguf_source
    assert kernel_for("quant_linear", "AMD").supports(Tensor(x, device="AMD"), w, gguf_source(w))
    got = linear(Tensor(x, device="AMD"), w).numpy()
    np.testing.assert_allclose(got, q8_dequantized(x) @ dequantized(raw, N, K, 14).T, rtol=3e-3, atol=2e-2)


@pytest.mark.parametrize("tokens", [1, 3])
def test_iq4xs_quant_linear_matches_q8_reference(tokens):
    N, K = 32, 512
    raw = q4k_bytes(N * K // 256, 60 + tokens, nbytes=136)  # d at bytes 0..1; random scales and nibbles
    x = np.random.default_rng(70 + tokens).standard_normal((tokens, K)).astype(np.float32)
    w = gguf_weight(raw, N, K, "AMD", 23)
    from tg_core.llm.weights import gguf_source
    assert kernel_for("quant_linear", "AMD").supports(Tensor(x, device="AMD"), w, gguf_source(w))
    got = linear(Tensor(x, device="AMD"), w).numpy()
    np.testing.assert_allclose(got, q8_dequantized(x) @ dequantized(raw, N, K, 23).T, rtol=3e-3, atol=2e-2)


@pytest.mark.parametrize("tokens, n", [(32, 48), (64, 32), (128, 16), (16, 16), (20, 40)])
def test_q4k_wmma_matches_f16_reference(tokens, n):
    # 16 and more tokens: WMMA tiles with f16 inputs and f16-rounded weights; (16, 16) and (32, 48) are the seed's
    # partial-tile widths, (20, 40) a trailing partial tile in both tokens and outputs
    K = 512
    raw = q4k_bytes(n * K // 256, tokens + n)
    x = np.random.default_rng(tokens).standard_normal((1, tokens, K)).astype(np.float16)
    got = linear(Tensor(x, device="AMD"), gguf_weight(raw, n, K, "AMD")).numpy()
    w16 = dequantized(raw, n, K).astype(np.float32).astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(got, x.astype(np.float64) @ w16.T, rtol=3e-3, atol=2e-2)
