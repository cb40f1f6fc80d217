"""The llama forward pass against an independent numpy reference (float64 over gguf.quants.dequantize, RoPE by
undoing GGUF's Q/K row permutation and rotating halves, where tg rotates adjacent pairs of the raw rows), chunked
prefill against one chunk, cached decoding against recomputation, and SmolLM2's goldens (llm.md §7.2)."""
from __future__ import annotations

import numpy as np
import pytest
from llm_helpers import write_tiny_llama

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType

from tg_core.dtype import dtypes  # noqa: E402
from tg_core.llm.generate import Generator  # noqa: E402
from tg_core.llm.gguf import GGUFFile  # noqa: E402
from tg_core.llm.kvcache import KVCache  # noqa: E402
from tg_core.llm.model import Transformer  # noqa: E402
from tg_core.llm.tokenizer import Tokenizer  # noqa: E402
from tg_core.tensor import Tensor  # noqa: E402

# a weight of each kind in a different type; dim and ffn 256 so the K types' 256-element blocks fit a row
TYPES = {"token_embd.weight": Q.Q8_0, "attn_q": Q.F16, "attn_k": Q.Q8_0, "attn_v": Q.Q4_1,
         "attn_output": Q.Q4_0, "ffn_gate": Q.Q4_K, "ffn_up": Q.Q5_0, "ffn_down": Q.Q6_K}
SHAPE = dict(dim=256, n_heads=4, n_kv_heads=2, ffn_dim=256, context=64)


@pytest.fixture(scope="module")
def mixed_llama(tmp_path_factory) -> str:
    return write_tiny_llama(tmp_path_factory.mktemp("mixed") / "mixed.gguf", seed=3, types=TYPES, **SHAPE)


def reference_logits(path: str, ids: list[int]) -> np.ndarray:
    """Logits at every position of `ids`, (T, vocab), float64."""
    r = gguf.GGUFReader(path)
    W = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64).reshape(
        [int(n) for n in reversed(t.shape)]) for t in r.tensors}
    dim, H, Hk = SHAPE["dim"], SHAPE["n_heads"], SHAPE["n_kv_heads"]
    d, eps, T = dim // H, 1e-5, len(ids)

    def norm(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def unpermute(w, heads):  # GGUF stored each head's rows as (d/2, 2) of the original (2, d/2)
        return w.reshape(heads, d // 2, 2, -1).swapaxes(1, 2).reshape(heads * d, -1)

    inv = 10000.0 ** (-np.arange(0, d, 2) / d)
    ang = np.arange(T)[:, None] * inv[None]
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]

    def rope(x):  # (T, heads, d), halves
        a, b = x[..., :d // 2], x[..., d // 2:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)

    x = W["token_embd.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(2):
        p = f"blk.{i}."
        h = norm(x, W[p + "attn_norm.weight"])
        q = rope((h @ unpermute(W[p + "attn_q.weight"], H).T).reshape(T, H, d))
        k = rope((h @ unpermute(W[p + "attn_k.weight"], Hk).T).reshape(T, Hk, d))
        v = (h @ W[p + "attn_v.weight"].T).reshape(T, Hk, d)
        k, v = np.repeat(k, H // Hk, axis=1), np.repeat(v, H // Hk, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(d) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        x = x + np.einsum("hts,shd->thd", s, v).reshape(T, H * d) @ W[p + "attn_output.weight"].T
        h = norm(x, W[p + "ffn_norm.weight"])
        g, u = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "ffn_down.weight"].T
    return norm(x, W["output_norm.weight"]) @ W["token_embd.weight"].T  # tied head


def _close(got: np.ndarray, want: np.ndarray, tol: float = 2e-3) -> None:
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * float(np.abs(want).max()))


# on AMD, tg-amd's quant_linear quantizes the activations to int8 per 32 (Q8, as the seed's kernels do) for the K-quant
# weights, so the logits move by the activations' rounding as well
AMD_TOL = 6e-3


IDS = [257, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 10, 84, 101, 115, 116]


@pytest.mark.parametrize("device", [None, pytest.param("AMD", marks=pytest.mark.slow)])
def test_forward_and_cached_decode_match_numpy(mixed_llama, device):
    want = reference_logits(mixed_llama, IDS)
    model = Transformer.from_gguf(mixed_llama, device=device)
    # the prompt but its last 4 tokens in one run, then those 4 one at a time from the cache
    n = len(IDS) - 4
    tol = AMD_TOL if device == "AMD" else 2e-3
    _close(model(Tensor([IDS[:n]], dtype="int32", device=device), 0).numpy()[0], want[n - 1], tol)
    for pos in range(n, len(IDS)):
        _close(model(Tensor([[IDS[pos]]], dtype="int32", device=device), pos).numpy()[0], want[pos], tol)


def test_prefill_in_chunks_equals_one_chunk(mixed_llama):
    f = GGUFFile(mixed_llama)
    one = Generator(Transformer.from_gguf(f), chunk=64).prefill(IDS).numpy()
    chunked = Generator(Transformer.from_gguf(f), chunk=5).prefill(IDS).numpy()
    np.testing.assert_allclose(chunked, one, rtol=1e-4, atol=1e-4 * float(np.abs(one).max()))
    _close(one[0], reference_logits(mixed_llama, IDS)[-1])


def test_piece_lengths():
    from tg_core.llm.generate import piece_lengths
    assert piece_lengths(23, 32) == [16, 4, 2, 1] and piece_lengths(64, 32) == [32, 32]
    assert piece_lengths(70, 32) == [32, 32, 4, 2] and piece_lengths(1, 32) == [1]
    assert all(sum(piece_lengths(n, c)) == n for n in range(1, 200) for c in (1, 3, 32))


def test_replayed_prefill_chunks_equal_eager_ones(mixed_llama):
    """Full chunks run through one TinyJit capture (the 3rd chunk on is a replay, at a new bound start_pos);
    the prompt's logits after a replayed chunk and then a shorter eager one match the unchunked reference."""
    f = GGUFFile(mixed_llama)
    gen = Generator(Transformer.from_gguf(f), chunk=3)
    assert len(IDS) > 3 * 3 and len(IDS) % 3  # >= 3 full chunks (run, capture, replay) and a shorter last one
    want = reference_logits(mixed_llama, IDS)
    _close(gen.prefill(IDS).numpy()[0], want[-1])
    assert gen._piece_steps[3].captured is not None
    gen.cached = []  # again, all from replays
    _close(gen.prefill(IDS[:9]).numpy()[0], want[8])


def test_greedy_decode_equals_recomputing(mixed_llama):
    f = GGUFFile(mixed_llama)
    gen = Generator(Transformer.from_gguf(f), chunk=8)
    got = list(gen.generate(IDS, 6, stop_ids=[]))
    ids = list(IDS)
    for _ in range(6):  # greedy from scratch each step, on the reference
        ids.append(int(np.argmax(reference_logits(mixed_llama, ids)[-1])))
    assert got == ids[len(IDS):]


def test_float16_cache_matches_a_float32_one(mixed_llama):
    """The default float16 KV cache against a float32 one: the same greedy tokens (prefill in chunks, then cached
    decode steps, each widening the cache's float16 as attention reads it) and logits within 1e-3 of
    their scale; the first layer's cache (its keys and values do not depend on attention) holds exactly the
    float16 rounding of the float32 cache's."""
    f = GGUFFile(mixed_llama)
    half, full = (Generator(Transformer.from_gguf(f, kv_dtype=dt), chunk=8) for dt in (dtypes.float16, dtypes.float32))
    assert half.model.caches[0].kv.dtype == dtypes.float16 and full.model.caches[0].kv.dtype == dtypes.float32
    a, b = half.prefill(IDS).numpy()[0], full.prefill(IDS).numpy()[0]
    np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3 * float(np.abs(b).max()))
    _close(a, reference_logits(mixed_llama, IDS)[-1])
    n = len(IDS)
    kv_half, kv_full = half.model.caches[0].kv.numpy()[..., :n, :], full.model.caches[0].kv.numpy()[..., :n, :]
    np.testing.assert_array_equal(kv_half, kv_full.astype(np.float16))
    half.cached = full.cached = []
    assert list(half.generate(IDS, 8, stop_ids=[])) == list(full.generate(IDS, 8, stop_ids=[]))


def test_cache_dtype_must_be_a_float():
    with pytest.raises(ValueError, match="dtype int is not a float dtype"):
        KVCache(1, 2, 16, 8, dtype=dtypes.int32)


SMOL_PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
SMOL_IDS = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]


@pytest.mark.slow
def test_smollm2_goldens(smollm2):
    tok = Tokenizer.from_gguf_metadata(smollm2.metadata)
    assert tok.encode(SMOL_PROMPT) == SMOL_IDS
    gen = Generator(Transformer.from_gguf(smollm2, max_context=256), tok)
    logits = gen.prefill(SMOL_IDS).numpy()[0]
    top = np.argsort(-logits)[:5]
    assert top.tolist() == [504, 60, 38634, 15319, 7026]
    np.testing.assert_allclose(logits[top], [27.859, 26.130, 26.102, 25.962, 25.181], atol=1e-2)
    gen.cached = []
    assert list(gen.generate(SMOL_IDS, 16)) == [504, 3575, 282, 4649, 314, 7042, 30]  # then <|im_end|>, a stop
