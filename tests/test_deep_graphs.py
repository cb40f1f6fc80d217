"""Deep graphs (issue 10): chains of thousands of ops go through every stage (scheduling, codegen, rendering,
running, autograd, printing, pickling) without hitting the recursion limit, and compute the right values.

References: the same chain in float64 numpy with the float32 constants, so the only difference is tg's float32
rounding. Each step y*a + b (all values positive, a ~ 1) rounds at most twice (once with an FMA), each by a
relative 2^-24, and the step's condition number is ~1, so after n steps the relative error is at most about
2*n*2^-24 (1.2e-3 at 10,000): the tolerance below, a proven bound rather than a guess.
"""
from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.testing.devices import why_unavailable

DEPTH = 10_000
# the mock GPU emulates every instruction in Python: 10,000 ops per lane would take minutes, while 1,500 already
# needs several times the default recursion limit in any recursive stage
AMD_DEPTH = 1_500
A, B = np.float32(1.0001), np.float32(0.1)


_no_amd = why_unavailable("AMD")
CASES = [("PYTHON", DEPTH), ("CPU:X86", DEPTH), ("CPU:LLVM", DEPTH),
         pytest.param("AMD", AMD_DEPTH, marks=[pytest.mark.slow, pytest.mark.skipif(_no_amd is not None,
                                                                                     reason=f"no AMD device: {_no_amd}")])]


def _rtol(n: int) -> float:
    return 2 * n * 2.0 ** -24


def test_the_depth_is_past_the_recursion_limit():
    # what makes these tests mean something: a recursive stage would fail at this depth
    assert min(DEPTH, AMD_DEPTH) > sys.getrecursionlimit()


@pytest.mark.parametrize("device,n", CASES)
def test_deep_elementwise_chain_forward(device: str, n: int):
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    y = Tensor(x, device=device)
    ref = x.astype(np.float64)
    for _ in range(n):
        y = y * 1.0001 + 0.1
        ref = ref * np.float64(A) + np.float64(B)
    np.testing.assert_allclose(y.numpy(), ref, rtol=_rtol(n))


def test_deep_chain_packed_into_vector_lanes():
    # 16 elements: the X86 renderer packs the chain into 8-lane registers (SLP), which follows every op too
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    y = Tensor(x, device="CPU:X86")
    ref = x.astype(np.float64)
    for _ in range(DEPTH):
        y = y * 1.0001 + 0.1
        ref = ref * np.float64(A) + np.float64(B)
    # x can be negative here: |y| stays below the positive chain's, so the absolute bound of that chain holds
    np.testing.assert_allclose(y.numpy(), ref, rtol=0, atol=_rtol(DEPTH) * np.abs(ref).max())


@pytest.mark.parametrize("device,n", CASES)
def test_deep_elementwise_chain_backward(device: str, n: int):
    # d/dx of n steps of y*a + b is a^n, exactly, in float64
    x = Tensor(np.array([1.0, 2.0, 3.0], dtype=np.float32), device=device, requires_grad=True)
    y = x
    for _ in range(n):
        y = y * 1.0001 + 0.1
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, np.float64(A) ** n), rtol=_rtol(n))


@pytest.mark.parametrize("device,n", CASES)
def test_deep_sqrt_chain(device: str, n: int):
    # the second example: y = sqrt(y * x) starting at y = x stays x (sqrt is correctly rounded, and
    # x*x is exact for these values), so the reference is exact
    x = np.array([1.5, 2.0, 0.25], dtype=np.float32)
    xt = Tensor(x, device=device)
    y = xt
    for _ in range(n):
        y = (y * xt).sqrt()
    np.testing.assert_array_equal(y.numpy(), x)


def test_deep_graph_prints_and_pickles():
    y = Tensor(np.arange(4, dtype=np.float32), device="PYTHON")
    for _ in range(DEPTH):
        y = y * 1.5 + 1
    u = y.uop
    assert pickle.loads(pickle.dumps(u)) is u
    assert "..." in u.render() and "earlier nodes" in repr(u)
