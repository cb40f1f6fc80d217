"""tg-amd's flash_attention_prefill (tg_amd/kernels/flash_prefill.py, WMMA for Q K^T and P V) on the mock AMD GPU
against numpy, and the same call on CPU (no kernel offered: the model's Tensor attention) agreeing: unaligned
starts, cache tails holding NaN, +inf or -inf past the valid length, symbolic start and padded symbolic query
chunks, the model's KV cache path; head dims the kernel does not take go to core's attention."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tg_core import Tensor, Variable
from tg_core.kernels import kernel_for
from tg_core.llm.kvcache import KVCache
from tg_core.llm.model import Block, attention_prefill

# the kernel multiplies float16 q, k, p and v (float32 accumulation): the reference rounds q, k, v the same way,
# p's rounding (2^-11 relative) remains
RTOL, ATOL = 2e-3, 2e-3


def f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float64)


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal attention of q (B, Hk, G, T, D) as the last T positions of k, v (B, Hk, S, D)."""
    T, S, D = q.shape[3], k.shape[2], q.shape[4]
    s = np.einsum("bhgtd,bhsd->bhgts", f16(q), f16(k)) / math.sqrt(D)
    s = np.where(np.arange(S)[None, :] <= np.arange(T)[:, None] + (S - T), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhgts,bhsd->bhgtd", e, f16(v)) / e.sum(-1, keepdims=True)


def attend(q: Tensor, keys: Tensor, values: Tensor, device: str) -> np.ndarray:
    got = attention_prefill(q, keys, values, 1 / math.sqrt(q.shape[-1]))
    if device == "CPU":
        assert got is None  # no kernel offered: the model's own attention
        got = Block._attention(q, keys, values)
    assert got is not None, "tg-amd's kernel declined"
    return got.numpy()


def case(hk: int, g: int, t: int, cap: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((1, hk, g, t, d)).astype(np.float32), rng.standard_normal((2, 1, hk, cap, d)).astype(np.float32)


def views(kv: np.ndarray, n, device: str) -> tuple[Tensor, Tensor]:
    t = Tensor(kv, device=device)
    return t[0][:, :, :n], t[1][:, :, :n]


@pytest.mark.parametrize("fill", [np.nan, np.inf, -np.inf])
def test_prefill_unaligned_start_masks_the_cache_tail(fill):
    # 20 queries at positions 17..36 of a 64-key cache whose positions 37.. hold NaN or an infinity
    hk, g, t, start, cap, d = 2, 2, 20, 17, 64, 64
    q, kv = case(hk, g, t, cap, d, 1)
    s = start + t
    tail = kv.copy()
    tail[:, :, :, s:] = fill
    got = attend(Tensor(q, device="AMD"), *views(tail, s, "AMD"), "AMD")
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, reference(q, kv[0][:, :, :s], kv[1][:, :, :s]), rtol=RTOL, atol=ATOL)
    cpu = attend(Tensor(q, device="CPU"), *views(kv, s, "CPU"), "CPU")
    np.testing.assert_allclose(got, cpu, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("hk, g, t, start, cap, d", [(1, 4, 33, 95, 128, 128), (1, 1, 17, 48, 65, 256),
                                                     (1, 2, 48, 1718, 1792, 64)])
def test_prefill_shapes_match_numpy(hk, g, t, start, cap, d):
    # group 4 at dim 128, dim 256 over a 65-key capacity, and a start of 1718 (not tile aligned)
    q, kv = case(hk, g, t, cap, d, t + d)
    s = start + t
    got = attend(Tensor(q, device="AMD"), *views(kv, s, "AMD"), "AMD")
    np.testing.assert_allclose(got, reference(q, kv[0][:, :, :s], kv[1][:, :, :s]), rtol=RTOL, atol=ATOL)


def test_prefill_symbolic_start_and_padded_query_chunk():
    # one kernel for every bound (start_pos, T): the queries padded to T's maximum, the rows past T sliced off
    hk, g, d, cap, tmax = 1, 2, 64, 96, 32
    q, kv = case(hk, g, tmax, cap, d, 7)
    kv[:, :, :, 80:] = np.nan  # never valid below
    for t, start in ((20, 17), (5, 60)):
        T, P = Variable("t", 1, tmax).bind(t), Variable("start_pos", 0, cap - tmax).bind(start)
        got = attend(Tensor(q, device="AMD")[:, :, :, :T], *views(kv, P + T, "AMD"), "AMD")
        s = start + t
        np.testing.assert_allclose(got, reference(q[:, :, :, :t], kv[0][:, :, :s], kv[1][:, :, :s]), rtol=RTOL, atol=ATOL)


def test_prefill_through_the_kv_cache_with_a_symbolic_position(monkeypatch):
    # the model's data path: KVCache.update's views at a bound start_pos; core's attention must not run
    monkeypatch.setattr(Block, "_attention", staticmethod(lambda *a: (_ for _ in ()).throw(AssertionError("fallback ran"))))
    hk, g, d, cap, t = 1, 2, 64, 96, 24
    q, kv = case(hk, g, t, cap, d, 9)
    cache = KVCache(1, hk, cap, d, device="AMD")
    cache.update(Tensor(kv[0][:, :, :30], device="AMD"), Tensor(kv[1][:, :, :30], device="AMD"), 0)
    pos = Variable("start_pos", 0, cap - t).bind(30)
    keys, values = cache.update(Tensor(kv[0][:, :, 30:30 + t], device="AMD"), Tensor(kv[1][:, :, 30:30 + t], device="AMD"),
                                pos)
    got = attention_prefill(Tensor(q, device="AMD"), keys, values, 1 / math.sqrt(d))
    assert got is not None
    s = 30 + t
    np.testing.assert_allclose(got.numpy(), reference(q, kv[0][:, :, :s], kv[1][:, :, :s]), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("d", [32, 384, 512])
def test_prefill_head_dims_it_does_not_take_fall_back(d):
    q, kv = case(1, 2, 16, 40, d, d)
    k = kernel_for("flash_attention_prefill", "AMD")
    qt, (keys, values) = Tensor(q, device="AMD"), views(kv, 40, "AMD")
    assert not k.supports(qt, keys, values, 1 / math.sqrt(d))
    assert attention_prefill(qt, keys, values, 1 / math.sqrt(d)) is None
    got = Block._attention(qt, keys, values).numpy()  # core's attention on the mock GPU
    e = np.einsum("bhgtd,bhsd->bhgts", q.astype(np.float64), kv[0].astype(np.float64)) / math.sqrt(d)
    e = np.exp(np.where(np.arange(40)[None, :] <= np.arange(16)[:, None] + 24, e, -np.inf) - e.max(-1, keepdims=True))
    want = np.einsum("bhgts,bhsd->bhgtd", e, kv[1].astype(np.float64)) / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_prefill_replayed_by_tinyjit_at_new_positions():
    # the generator's prefill piece: a cache write of T tokens and the kernel at a bound start_pos, captured, replayed
    from tg_core.engine.jit import TinyJit
    hk, g, d, cap, t = 1, 2, 64, 96, 8
    rng = np.random.default_rng(12)
    kv = rng.standard_normal((2, 1, hk, cap, d)).astype(np.float32)
    qs = rng.standard_normal((cap // t, 1, hk, g, t, d)).astype(np.float32)
    cache = KVCache(1, hk, cap, d, device="AMD")

    def step(q: Tensor, k: Tensor, v: Tensor, pos) -> Tensor:
        keys, values = cache.update(k, v, pos)
        out = attention_prefill(q, keys, values, 1 / math.sqrt(d))
        assert out is not None
        return out.realize()
    jit = TinyJit(step)
    for i in range(4):
        p = i * t
        args = [Tensor(x, device="AMD") for x in (qs[i], kv[0][:, :, p:p + t], kv[1][:, :, p:p + t])]
        got = jit(*args, Variable("start_pos", 0, cap - t).bind(p)).numpy()
        np.testing.assert_allclose(got, reference(qs[i], kv[0][:, :, :p + t], kv[1][:, :, :p + t]), rtol=RTOL, atol=ATOL)
    assert jit.captured is not None


def test_prefill_batch_of_two():
    rng = np.random.default_rng(14)
    kv = rng.standard_normal((2, 2, 2, 64, 64)).astype(np.float32)
    q = rng.standard_normal((2, 2, 2, 18, 64)).astype(np.float32)
    got = attend(Tensor(q, device="AMD"), *views(kv, 50, "AMD"), "AMD")
    np.testing.assert_allclose(got, reference(q, kv[0][:, :, :50], kv[1][:, :, :50]), rtol=RTOL, atol=ATOL)
