"""tg-amd's `quant_linear` (tg_amd/kernels: sudot4 below 16 tokens, WMMA tiles from 16) for Q4_K, Q5_K, Q6_K and
IQ4_XS on the mock AMD GPU against numpy, and the same calls on CPU, where no plugin offers the kernel, taking core's
matmul of the exact weight and agreeing.

References (the seed's): below 16 tokens Q8(x) @ W.T (the activations int8-quantized per 32, W the exact
dequantization); from 16 x_f16 @ W_f16.T in float32; both rtol 3e-3, atol 2e-2. A weight that is not exactly the
dequantization of the bytes (a RoPE row permutation, an int cast) must take core's matmul and be exact: within the
float32 rounding bound of its dot products."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.kernels import kernel_for
from tg_core.llm.model import linear
from tg_core.llm.weights import gguf_source

Q4_K, Q5_K, Q6_K, IQ4_XS = 12, 13, 14, 23
BLOCK_BYTES = {Q4_K: 144, Q5_K: 176, Q6_K: 210, IQ4_XS: 136}
TYPES = pytest.mark.parametrize("ggml_type", list(BLOCK_BYTES), ids=["Q4_K", "Q5_K", "Q6_K", "IQ4_XS"])


def raw_blocks(n_blocks: int, ggml_type: int, seed: int) -> np.ndarray:
    """Random blocks of a type with small positive float16 scales (d, and Q4_K/Q5_K's dmin) where the type keeps
    them; every other byte pattern is a valid block."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (n_blocks, BLOCK_BYTES[ggml_type]), dtype=np.uint8)
    at = {Q4_K: (0, 2), Q5_K: (0, 2), Q6_K: (208,), IQ4_XS: (0,)}[ggml_type]
    for a in at:
        raw[:, a:a + 2] = rng.uniform(0.001, 0.02, n_blocks).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw


def gguf_weight(raw: np.ndarray, n: int, k: int, ggml_type: int, device: str) -> Tensor:
    """What gguf.py's `tensor()` gives: the lazy dequantization of the uploaded bytes, remembered as such."""
    from tg_core.llm.dequant import dequantize
    from tg_core.llm.weights import remember
    rt = Tensor(raw, device=device)
    w = dequantize(rt, ggml_type).reshape(n, k)
    remember(w, rt, ggml_type)
    return w


def dequantized(raw: np.ndarray, n: int, k: int, ggml_type: int) -> np.ndarray:
    """The exact weight (core's dequantization on CPU) as float64."""
    from tg_core.llm.dequant import dequantize
    return dequantize(Tensor(raw, device="CPU"), ggml_type).reshape(n, k).numpy().astype(np.float64)


def q8_dequantized(x: np.ndarray) -> np.ndarray:
    """Q8(x): per 32 inputs absmax/127 (at least 1e-8), round half to even, clip to +-127, rescaled (float64)."""
    g = x.astype(np.float32).reshape(-1, x.shape[-1] // 32, 32)
    d = np.maximum(np.abs(g).max(-1) / np.float32(127), np.float32(1e-8)).astype(np.float32)
    q = np.clip(np.rint(g / d[..., None]), -127, 127)
    return (q * d[..., None].astype(np.float64)).reshape(x.shape)


def kernel_reference(x: np.ndarray, W: np.ndarray) -> np.ndarray:
    """What the AMD kernel computes, by token count: Q8 activations below 16 tokens, f16 inputs and weights from 16."""
    if x.reshape(-1, x.shape[-1]).shape[0] < 16:
        return q8_dequantized(x) @ W.T
    f16 = W.astype(np.float32).astype(np.float16).astype(np.float64)
    return x.astype(np.float16).astype(np.float64) @ f16.T


def assert_exact(got: np.ndarray, x: np.ndarray, W: np.ndarray) -> None:
    """got is x @ W.T up to float32 rounding: |error| <= 2 K u (|x| @ |W|.T), u = 2^-24 (with the f32 weight's own
    rounding), the bound of a float32 dot product in any order."""
    want = x.astype(np.float64) @ W.T
    bound = 2 * x.shape[-1] * 2.0 ** -24 * (np.abs(x.astype(np.float64)) @ np.abs(W).T) + 1e-30
    err = np.abs(got - want)
    assert (err <= bound).all(), f"max error {err.max()} beyond the float32 bound (worst ratio {(err / bound).max():.2f})"


def run_both(x: np.ndarray, raw: np.ndarray, n: int, k: int, ggml_type: int) -> tuple[np.ndarray, np.ndarray]:
    """(AMD result, CPU result) of linear(x, the GGUF weight); asserts the AMD kernel is the one taken on AMD and
    that CPU, with no plugin's kernel, gives the exact product."""
    w = gguf_weight(raw, n, k, ggml_type, "AMD")
    assert kernel_for("quant_linear", "AMD").supports(Tensor(x, device="AMD"), w, gguf_source(w))
    got = linear(Tensor(x, device="AMD"), w).numpy()
    assert kernel_for("quant_linear", "CPU") is None
    cpu = linear(Tensor(x, device="CPU"), gguf_weight(raw, n, k, ggml_type, "CPU")).numpy()
    assert_exact(cpu, x, dequantized(raw, n, k, ggml_type))
    return got, cpu


def activations(tokens: int, k: int, seed: int) -> np.ndarray:
    """(1, tokens, k) activations: float16 as the seed's sweep, float32 at 3 tokens."""
    x = np.random.default_rng(seed).standard_normal((1, tokens, k))
    return x.astype(np.float32 if tokens == 3 else np.float16)


# the token sweep: 1 and 3 sudot4, 32 to 128 WMMA (128: one wave takes all 8 token tiles of a weight strip)
SWEEP = [1, 3, 32, 64, 128]


@TYPES
@pytest.mark.parametrize("tokens", SWEEP)
def test_quant_linear_token_sweep(ggml_type, tokens):
    N, K = (64 if ggml_type == IQ4_XS else 48), 512  # IQ4_XS: 64 outputs take its two-output-tile waves
    raw = raw_blocks(N * K // 256, ggml_type, 100 * ggml_type + tokens)
    x = activations(tokens, K, tokens)
    got, cpu = run_both(x, raw, N, K, ggml_type)
    np.testing.assert_allclose(got, kernel_reference(x, dequantized(raw, N, K, ggml_type)), rtol=3e-3, atol=2e-2)
    # against core's exact product: the Q8 (or f16) rounding moves a sum by up to about 1% of the outputs' magnitude
    np.testing.assert_allclose(got, cpu, rtol=0, atol=0.01 * np.abs(cpu).max())


# the seed's partial-tile cases (output widths that are not a multiple of the wave's outputs), a trailing partial
# tile in tokens and outputs both (20, 40), and a token count that spreads 9 tiles over two waves (144)
@pytest.mark.parametrize("ggml_type, tokens, n", [
    (Q4_K, 16, 16), (Q4_K, 32, 48), (Q5_K, 16, 48), (Q6_K, 20, 40), (IQ4_XS, 32, 4112), (Q4_K, 144, 32)],
    ids=["Q4_K-16x16", "Q4_K-32x48", "Q5_K-16x48", "Q6_K-20x40", "IQ4_XS-32x4112", "Q4_K-144x32"])
def test_wmma_partial_tiles(ggml_type, tokens, n):
    K = 256
    raw = raw_blocks(n * K // 256, ggml_type, tokens + n)
    x = activations(tokens, K, n)
    got, _ = run_both(x, raw, n, K, ggml_type)
    np.testing.assert_allclose(got, kernel_reference(x, dequantized(raw, n, K, ggml_type)), rtol=3e-3, atol=2e-2)


def rope_permuted(w, heads: int, prefix: int):
    """llama's Q/K row order undone per head: the rows after `prefix` (rope_dim = head_dim - prefix) go from
    (pairs, 2) to (2, pairs), even rows first; `prefix` rows of each head stay (MLA's non-rotated part)."""
    n, k = w.shape
    hd = n // heads
    h = w.reshape(heads, hd, k)
    rot = h[:, prefix:].reshape(heads, (hd - prefix) // 2, 2, k).permute(0, 2, 1, 3).reshape(heads, hd - prefix, k)
    return (rot if prefix == 0 else h[:, :prefix].cat(rot, dim=1)).reshape(n, k)


def rope_rows(n: int, heads: int, prefix: int) -> np.ndarray:
    hd = n // heads
    per = np.concatenate([np.arange(prefix), prefix + np.arange(0, hd - prefix, 2), prefix + np.arange(1, hd - prefix, 2)])
    return np.concatenate([h * hd + per for h in range(heads)])


# prefix 4's fallback kernel is ~6 s of emulation per type (see below): Q4_K's stays in the quick subset
ROPE_CASES = [pytest.param(t, p, id=f"{p}-{name}", marks=[pytest.mark.slow] if p == 4 and t != Q4_K else [])
              for t, name in zip(BLOCK_BYTES, ["Q4_K", "Q5_K", "Q6_K", "IQ4_XS"]) for p in (None, 0, 4)]


@pytest.mark.parametrize("ggml_type, prefix", ROPE_CASES)
def test_rope_permuted_weight_takes_the_exact_fallback(ggml_type, prefix):
    N, K, heads, tokens = 48, 256, 3, 16
    raw = raw_blocks(N * K // 256, ggml_type, 7 * ggml_type + (prefix or 0))
    x = activations(tokens, K, 5)
    W = dequantized(raw, N, K, ggml_type)
    if prefix is None:  # the unpermuted weight: the WMMA kernel
        got, _ = run_both(x, raw, N, K, ggml_type)
        np.testing.assert_allclose(got, kernel_reference(x, W), rtol=3e-3, atol=2e-2)
        return
    rows, x3 = rope_rows(N, heads, prefix), x[:, :3]
    for device in ("AMD", "CPU"):
        w = rope_permuted(gguf_weight(raw, N, K, ggml_type, device), heads, prefix)
        k = kernel_for("quant_linear", device)
        assert gguf_source(w) is None
        assert k is None or not any(k.supports(Tensor(a, device=device), w, gguf_source(w)) for a in (x, x3))
        # computed at 3 tokens: core's matmul of the permuted (and, with a prefix, concatenated) dequantization is
        # emulated a thread per output, 30x the lane-instructions of the unpermuted weight's at prefix 4
        assert_exact(linear(Tensor(x3, device=device), w).numpy(), x3, W[rows])


def test_declines_permuted_cast_and_unaligned_weights():
    N, K = 16, 256
    raw = raw_blocks(N * K // 256, Q4_K, 7)
    w = gguf_weight(raw, N, K, Q4_K, "AMD")
    k = kernel_for("quant_linear", "AMD")
    x = Tensor(np.ones((1, K), np.float32), device="AMD")
    perm = np.concatenate([np.arange(0, N, 2), np.arange(1, N, 2)])  # a RoPE-style row permutation
    for other in (w[Tensor(perm, device="AMD")], w.int().float(), w * 1.0 + 0.0):
        assert gguf_source(other) is None and not k.supports(x, other, gguf_source(other))
    assert gguf_source(w.reshape(N * K).reshape(N, K).contiguous()) is not None  # reshapes are looked through
    for t in (1, 15, 16, 200):  # both paths
        assert k.supports(Tensor(np.ones((t, K), np.float32), device="AMD"), w, gguf_source(w))
    assert not k.supports(Tensor(np.ones((2, K), np.int32), device="AMD"), w, gguf_source(w))  # not float activations


@pytest.mark.parametrize("device", ["AMD", "CPU"])
def test_permuted_and_int_cast_weights_are_exact_through_the_fallback(device):
    N, K = 16, 256
    raw = raw_blocks(N * K // 256, Q4_K, 8)
    w = gguf_weight(raw, N, K, Q4_K, device)
    x = np.random.default_rng(9).standard_normal((2, K)).astype(np.float32)
    W = dequantized(raw, N, K, Q4_K)
    perm = np.concatenate([np.arange(0, N, 2), np.arange(1, N, 2)])
    assert_exact(linear(Tensor(x, device=device), w[Tensor(perm, device=device)]).numpy(), x, W[perm])
    wi = (w * 100).int().float()  # truncation toward zero of the float32 product
    assert_exact(linear(Tensor(x, device=device), wi).numpy(), x, np.trunc((W * 100).astype(np.float32)))


def test_width_not_a_multiple_of_256_falls_back():
    # 4 rows of 128: Q4_K blocks span two rows, which the kernels do not read; core's matmul is exact
    N, K = 4, 128
    raw = raw_blocks(2, Q4_K, 11)
    w = gguf_weight(raw, N, K, Q4_K, "AMD")
    x = np.random.default_rng(12).standard_normal((1, K)).astype(np.float32)
    assert not kernel_for("quant_linear", "AMD").supports(Tensor(x, device="AMD"), w, gguf_source(w))
    assert_exact(linear(Tensor(x, device="AMD"), w).numpy(), x, dequantized(raw, N, K, Q4_K))


def test_sudot4_many_outputs():  # 4112 waves: the emulator runs them as one batch
    N, K = 4112, 256
    raw = raw_blocks(N * K // 256, Q4_K, 13)
    x = np.random.default_rng(14).standard_normal((1, K)).astype(np.float32)
    got = linear(Tensor(x, device="AMD"), gguf_weight(raw, N, K, Q4_K, "AMD")).numpy()
    np.testing.assert_allclose(got, q8_dequantized(x) @ dequantized(raw, N, K, Q4_K).T, rtol=3e-3, atol=2e-2)
