"""int32 division and remainder by a constant without idiv (isel._divide_by_constant): a reciprocal multiply
or a biased shift, truncating like alu.py, checked against Python's exact arithmetic on the extremes and on
random values, for powers of two and other divisors up to INT32_MAX."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core.dtype import dtypes
from tg_core.testing.kernels import elementwise
from tg_core.uop import Ops, UOp

from x86_harness import run_x86

RNG = np.random.default_rng(5)
EDGES = [-2**31, -2**31 + 1, -2**30, -1001, -7, -3, -2, -1, 0, 1, 2, 3, 7, 999, 1000, 2**30, 2**31 - 2, 2**31 - 1]
VALUES = np.array(EDGES + list(RNG.integers(-2**31, 2**31, 300)), dtype=np.int32)


def trunc_div(x: int, c: int) -> int:
    q = abs(x) // c
    return q if x >= 0 else -q


@pytest.mark.parametrize("c", [2, 3, 5, 7, 10, 16, 33, 641, 1000, 2**16, 2**20 + 1, 2**30, 2**31 - 1])
def test_divide_and_remainder_by_constant(c):
    n = len(VALUES)
    ast = elementwise(lambda x: UOp(Ops.IDIV, dtypes.int32, (x, UOp.const(dtypes.int32, c))), [dtypes.int32],
                      dtypes.int32, n, name="div")
    q = np.zeros(n, np.int32)
    k = run_x86(ast, [VALUES, q])
    assert "idiv" not in k.asm_str()
    ast = elementwise(lambda x: UOp(Ops.MOD, dtypes.int32, (x, UOp.const(dtypes.int32, c))), [dtypes.int32],
                      dtypes.int32, n, name="mod")
    r = np.zeros(n, np.int32)
    run_x86(ast, [VALUES, r])
    want_q = [trunc_div(int(x), c) for x in VALUES]
    assert q.tolist() == want_q
    assert r.tolist() == [int(x) - w * c for x, w in zip(VALUES, want_q)]
