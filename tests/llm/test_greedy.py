"""sampling.greedy (two-stage argmax over chunks) against numpy's argmax: random rows, ties across and within
chunks, a vocabulary that is not a multiple of the chunk, -inf logits, a batch, and inside a TinyJit."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core.engine.jit import TinyJit
from tg_core.llm.sampling import GREEDY_CHUNK, greedy
from tg_core.tensor import Tensor

RNG = np.random.default_rng(5)


def check(x: np.ndarray) -> None:
    got = greedy(Tensor(x)).numpy()
    assert got.dtype == np.int32 and got.shape == (x.shape[0], 1)
    np.testing.assert_array_equal(got[:, 0], np.argmax(x, axis=-1))


@pytest.mark.parametrize("vocab", [100, 2 * GREEDY_CHUNK, 49152, 49152 + 37, 5 * GREEDY_CHUNK - 1])
def test_random_rows(vocab):
    check(RNG.standard_normal((2, vocab)).astype(np.float32))


def test_ties_pick_the_first_index():
    V = 8 * GREEDY_CHUNK + 5
    x = RNG.standard_normal((4, V)).astype(np.float32)
    top = x.max() + 1
    x[0, [3 * GREEDY_CHUNK + 7, 5 * GREEDY_CHUNK + 1]] = top        # across chunks: the earlier chunk
    x[1, [2 * GREEDY_CHUNK + 9, 2 * GREEDY_CHUNK + 4]] = top        # inside one chunk: the smaller index
    x[2, [V - 1, V - 2]] = top                                       # in the padded last chunk
    x[3, :] = -np.inf                                                # all -inf: index 0, never the padding
    check(x)


def test_inside_a_tinyjit():
    f = TinyJit(lambda t: greedy(t).realize())
    for _ in range(4):
        x = RNG.standard_normal((1, 49152)).astype(np.float32)
        np.testing.assert_array_equal(f(Tensor(x)).numpy()[:, 0], np.argmax(x, axis=-1))
