"""tg-amd's flash_attention_decode (tg_amd/kernels/flash_decode.py) on the mock AMD GPU against numpy, and the same
call on CPU (core's Tensor attention, no kernel offered) agreeing: GQA groups up to 8, ragged key counts, fully
masked waves, more than 256 chunks of 64 keys, a symbolic valid length over a KV cache whose tail holds NaN, three
rounds of the online softmax over large values. The waves exchange float16 in LDS, so results are within float16
rounding (about 5e-4 relative) of float64."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tg_core import Tensor, Variable
from tg_core.kernels import kernel_for
from tg_core.llm.kvcache import KVCache
from tg_core.llm.model import Block, attention_decode
from tg_amd.kernels.flash_decode import CHUNK, decode_waves, partials_for

RTOL, ATOL = 2e-3, 2e-3


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    s = np.einsum("bhgd,bhsd->bhgs", q[:, :, :, 0].astype(np.float64), k.astype(np.float64)) * scale
    e = np.exp(s - s.max(-1, keepdims=True))
    return (np.einsum("bhgs,bhsd->bhgd", e, v.astype(np.float64)) / e.sum(-1, keepdims=True))[:, :, :, None]


def attend(q: Tensor, keys: Tensor, values: Tensor, device: str) -> np.ndarray:
    got = attention_decode(q, keys, values, 1 / math.sqrt(q.shape[-1]))
    if device == "CPU":
        assert got is None  # no kernel offered: the model's own attention
        got = Block._attention(q, keys, values)
    assert got is not None, "tg-amd's kernel declined"
    return got.numpy()


def run(device: str, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return attend(Tensor(q, device=device), Tensor(k, device=device), Tensor(v, device=device), device)


def cache_views(kv: np.ndarray, n: int | Variable, device: str) -> tuple[Tensor, Tensor]:
    """keys and values [:n] of a (2, B, Hk, capacity, D) cache, as the model's KV cache hands them out."""
    t = Tensor(kv, device=device)
    return t[0][:, :, :n], t[1][:, :, :n]


def rand_case(hk: int, g: int, s: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, hk, g, 1, d)).astype(np.float32)
    k, v = (rng.standard_normal((1, hk, s, d)).astype(np.float32) for _ in range(2))
    return q, k, v


# (kv heads, group, keys, head dim): 3/1 with a ragged tail, 2/1 with 5 keys (7 of 8 waves see none), 4/1 at dim 128
# and 256 keys, 8/2 at 77 keys, 8/1 at 256/256 (the largest registers and LDS: about 10 s on the emulator)
@pytest.mark.parametrize("hk, g, s, d", [(1, 3, 100, 32), (1, 2, 5, 32), (1, 4, 256, 128), (2, 4, 77, 64),
                                         (1, 8, 256, 256)])
def test_decode_gqa_matches_numpy_and_cpu(hk, g, s, d):
    q, k, v = rand_case(hk, g, s, d, s + d)
    got, cpu = run("AMD", q, k, v), run("CPU", q, k, v)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, reference(q, k, v, 1 / math.sqrt(d)), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got, cpu, rtol=RTOL, atol=ATOL)


def test_decode_symbolic_length_over_a_cache_with_nan_tail():
    # GQA 8/2 at dim 256; the chunk count comes from a bound variable, one kernel for both lengths, and the
    # cache's positions past the valid length hold NaN, which must not reach the result
    hk, g, d, cap = 2, 4, 256, 192
    rng = np.random.default_rng(3)
    kv = rng.standard_normal((2, 1, hk, cap, d)).astype(np.float32)
    q = rng.standard_normal((1, hk, g, 1, d)).astype(np.float32)
    for n in (130, 7):
        kv_nan = kv.copy()
        kv_nan[:, :, :, n:] = np.nan
        var = Variable("n", 1, cap).bind(n)
        want = reference(q, kv[0][:, :, :n], kv[1][:, :, :n], 1 / math.sqrt(d))
        got = attend(Tensor(q, device="AMD"), *cache_views(kv_nan, var, "AMD"), "AMD")
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        cpu = attend(Tensor(q, device="CPU"), *cache_views(kv, var, "CPU"), "CPU")
        np.testing.assert_allclose(got, cpu, rtol=RTOL, atol=ATOL)


def test_decode_beyond_256_chunks_ragged():
    s, d = 257 * CHUNK - 5, 32  # more than 256 chunks of 64 keys, the last one short: 6 rounds of 48 slots
    q, k, v = rand_case(1, 2, s, d, 1)
    np.testing.assert_allclose(run("AMD", q, k, v), reference(q, k, v, 1 / math.sqrt(d)), rtol=RTOL, atol=ATOL)


def test_decode_three_rounds_of_large_values():
    # 6749 valid keys of a 6784-key cache: 48 slots over 106 chunks, three rounds; value 5500 summed over thousands
    # of keys overflows float16 unless each wave's acc is divided by its sum before the LDS exchange
    cap, n, d = 6784, 6749, 32
    chunks = -(-n // CHUNK)
    assert partials_for(cap) == 48 and -(-chunks // 48) == 3
    rng = np.random.default_rng(2)
    q = rng.standard_normal((1, 1, 1, 1, d)).astype(np.float32)
    kv = np.full((2, 1, 1, cap, d), 5500, np.float32)
    kv[0] = rng.standard_normal((1, 1, cap, d))
    got = attend(Tensor(q, device="AMD"), *cache_views(kv, Variable("n", 1, cap).bind(n), "AMD"), "AMD")
    np.testing.assert_allclose(got, np.full((1, 1, 1, 1, d), 5500), rtol=1e-3)


def test_decode_through_the_kv_cache_with_a_symbolic_position(monkeypatch):
    # the model's data path: KVCache.update's views at a bound start_pos; core's attention must not run
    monkeypatch.setattr(Block, "_attention", staticmethod(lambda *a: (_ for _ in ()).throw(AssertionError("fallback ran"))))
    hk, g, d, cap = 1, 2, 64, 96
    rng = np.random.default_rng(5)
    ks, vs = (rng.standard_normal((1, hk, cap, d)).astype(np.float32) for _ in range(2))
    cache = KVCache(1, hk, cap, d, device="AMD")
    cache.update(Tensor(ks[:, :, :40], device="AMD"), Tensor(vs[:, :, :40], device="AMD"), 0)
    pos = Variable("start_pos", 0, cap - 1).bind(40)
    keys, values = cache.update(Tensor(ks[:, :, 40:41], device="AMD"), Tensor(vs[:, :, 40:41], device="AMD"), pos)
    q = rng.standard_normal((1, hk, g, 1, d)).astype(np.float32)
    got = attention_decode(Tensor(q, device="AMD"), keys, values, 1 / math.sqrt(d))
    assert got is not None
    np.testing.assert_allclose(got.numpy(), reference(q, ks[:, :, :41], vs[:, :, :41], 1 / math.sqrt(d)),
                               rtol=RTOL, atol=ATOL)


def test_waves_halve_until_the_lds_fits():
    assert decode_waves(8, 256) == 8 and decode_waves(8, 512) == 4 and decode_waves(1, 32) == 8
    with pytest.raises(ValueError, match="attention head group exceeds shared memory capacity"):
        decode_waves(8, 4096)
    k = kernel_for("flash_attention_decode", "AMD")
    q, keys = Tensor.zeros(1, 1, 8, 1, 1024, device="AMD"), Tensor.zeros(1, 1, 64, 1024, device="AMD")
    assert not k.supports(q, keys, keys, 0.1)  # declined: core's attention runs instead


def test_decode_replayed_by_tinyjit_at_new_positions():
    # the generator's decode step: a cache write and the kernel at a bound start_pos, captured once, then replayed
    from tg_core.engine.jit import TinyJit
    hk, g, d, cap = 1, 2, 64, 80
    rng = np.random.default_rng(11)
    ks, vs = (rng.standard_normal((1, hk, cap, d)).astype(np.float32) for _ in range(2))
    qs = rng.standard_normal((cap, 1, hk, g, 1, d)).astype(np.float32)
    cache = KVCache(1, hk, cap, d, device="AMD")
    cache.update(Tensor(ks[:, :, :40], device="AMD"), Tensor(vs[:, :, :40], device="AMD"), 0)

    def step(q: Tensor, k: Tensor, v: Tensor, pos) -> Tensor:
        keys, values = cache.update(k, v, pos)
        out = attention_decode(q, keys, values, 1 / math.sqrt(d))
        assert out is not None
        return out.realize()
    jit = TinyJit(step)
    for p in range(40, 44):
        args = [Tensor(x, device="AMD") for x in (qs[p], ks[:, :, p:p + 1], vs[:, :, p:p + 1])]
        got = jit(*args, Variable("start_pos", 0, cap - 1).bind(p)).numpy()
        want = reference(qs[p], ks[:, :, :p + 1], vs[:, :, :p + 1], 1 / math.sqrt(d))
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert jit.captured is not None


def test_decode_batch_of_two_and_groups_beyond_eight():
    # batch 2 over a (2, B, Hk, capacity, D) cache: each batch row's own keys
    rng = np.random.default_rng(13)
    kv = rng.standard_normal((2, 2, 2, 64, 32)).astype(np.float32)
    q = rng.standard_normal((2, 2, 2, 1, 32)).astype(np.float32)
    got = attend(Tensor(q, device="AMD"), *cache_views(kv, 50, "AMD"), "AMD")
    np.testing.assert_allclose(got, reference(q, kv[0][:, :, :50], kv[1][:, :, :50], 1 / math.sqrt(32)), rtol=RTOL, atol=ATOL)
    k = kernel_for("flash_attention_decode", "AMD")
    q16, keys = Tensor.zeros(1, 1, 16, 1, 32, device="AMD"), Tensor.zeros(1, 1, 64, 32, device="AMD")
    assert not k.supports(q16, keys, keys, 0.1)  # a group of 16: core's attention
