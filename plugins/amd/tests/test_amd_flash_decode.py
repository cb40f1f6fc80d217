"""tg-amd's flash_attention_decode (tg_amd/kernels/flash_decode.py) on the mock AMD GPU against numpy, and the same
call on CPU (core's Tensor attention, no kernel offered) agreeing: GQA groups, ragged key counts, more than 256
chunks of 64 keys, large values over thousands of keys; a symbolic key count goes to core's code."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tg_core import Tensor, Variable
from tg_core.kernels import kernel_for
from tg_core.llm.model import Block, attention_decode


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    s = np.einsum("bhgd,bhsd->bhgs", q[:, :, :, 0].astype(np.float64), k.astype(np.float64)) * scale
    e = np.exp(s - s.max(-1, keepdims=True))
    return (np.einsum("bhgs,bhsd->bhgd", e, v.astype(np.float64)) / e.sum(-1, keepdims=True))[:, :, :, None]


def run(device: str, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    args = (Tensor(q, device=device), Tensor(k, device=device), Tensor(v, device=device))
    got = attention_decode(*args, 1 / math.sqrt(q.shape[-1]))
    if device == "CPU":
        assert got is None  # no kernel offered: the model's own attention
        got = Block._attention(*args)
    return got.numpy()


# 8/1 at 256/256 compiles a fully unrolled head dim of 256: about 12 s on the emulator at light load
@pytest.mark.parametrize("hk, g, s, d", [(1, 4, 256, 128), (1, 3, 100, 32), (2, 4, 77, 64),
                                         pytest.param(1, 8, 256, 256, marks=pytest.mark.slow)])
def test_decode_gqa_matches_numpy_and_cpu(hk, g, s, d):
    rng = np.random.default_rng(s + d)
    q = rng.standard_normal((1, hk, g, 1, d)).astype(np.float32)
    k, v = (rng.standard_normal((1, hk, s, d)).astype(np.float32) for _ in range(2))
    want = reference(q, k, v, 1 / math.sqrt(d))
    got, cpu = run("AMD", q, k, v), run("CPU", q, k, v)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, cpu, rtol=1e-4, atol=1e-5)


def test_decode_beyond_256_chunks_ragged():
    s, d = 257 * 64 - 5, 32  # more than 256 chunks of 64 keys, the last one short
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 1, 2, 1, d)).astype(np.float32)
    k, v = (rng.standard_normal((1, 1, s, d)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(run("AMD", q, k, v), reference(q, k, v, 1 / math.sqrt(d)), rtol=1e-4, atol=1e-5)


def test_decode_large_values_over_many_keys():
    # 6749 keys of value 5500: an f16 exchange of unnormalized sums would overflow; the result is 5500
    s, d = 6749, 32
    rng = np.random.default_rng(2)
    q = rng.standard_normal((1, 1, 1, 1, d)).astype(np.float32)
    k = rng.standard_normal((1, 1, s, d)).astype(np.float32)
    v = np.full((1, 1, s, d), 5500, np.float32)
    np.testing.assert_allclose(run("AMD", q, k, v), np.full((1, 1, 1, 1, d), 5500), rtol=1e-5)


def test_decode_symbolic_length_falls_back():
    n = Variable("n", 1, 64).bind(40)
    keys = Tensor.zeros(1, 1, 64, 32, device="AMD").contiguous()[:, :, :n]
    q = Tensor.zeros(1, 1, 2, 1, 32, device="AMD")
    assert not kernel_for("flash_attention_decode", "AMD").supports(q, keys, keys, 0.1)
