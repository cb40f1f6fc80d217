"""The reference interpreter's bounds checks: an access whose index range analysis keeps below a bound the
buffer reaches runs unchecked; every other access is checked at run time, and an out-of-bounds one raises
IndexError naming the kernel."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core.devices.python.interpreter import _plan, run_kernel
from tg_core.dtype import dtypes
from tg_core.uop import KernelInfo, Ops, UOp

F32, I32 = dtypes.float32, dtypes.int32


def kernel(*effects: UOp, name: str = "k") -> UOp:
    return UOp(Ops.SINK, dtypes.void, effects, KernelInfo(name))


def shifted_copy(n: int, shift: UOp | int) -> UOp:
    """out[i] = a[i + shift] for i < n."""
    a, out = UOp.param(0, F32.ptr(n)), UOp.param(1, F32.ptr(n))
    r = UOp.range(n, 0)
    return kernel(out.index(r).store(a.index(r + shift).load()).end(r), name="shifted")


def test_proven_accesses_skip_checks_and_compute():
    ast = shifted_copy(8, 0)
    assert list(_plan(ast).proven.values()) == [8, 8]  # the load and the store index are within [0, 8)
    a, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    run_kernel(ast, [a, out])
    np.testing.assert_array_equal(out, a)


def test_a_buffer_smaller_than_the_proven_bound_is_still_checked():
    ast = shifted_copy(8, 0)
    with pytest.raises(IndexError, match="kernel shifted: index 7 out of bounds for a buffer of 4 elements"):
        run_kernel(ast, [np.zeros(4, np.float32), np.zeros(8, np.float32)])


def test_unproven_accesses_are_checked_at_run_time():
    v = UOp.variable("shift", 0, 10, dtypes.weakint)
    ast = shifted_copy(4, v)
    # the load may reach index 13: with a smaller buffer it is checked on every run
    assert sorted(_plan(ast).proven.values()) == [4, 14]
    a, out = np.arange(8, dtype=np.float32), np.zeros(4, np.float32)
    run_kernel(ast, [a, out], {"shift": 3})
    np.testing.assert_array_equal(out, a[3:7])
    with pytest.raises(IndexError, match="index 8 out of bounds for a buffer of 8 elements"):
        run_kernel(ast, [a, out], {"shift": 5})


def test_gated_loads_are_checked_where_valid():
    n = 6
    a, out = UOp.param(0, F32.ptr(4)), UOp.param(1, F32.ptr(n))
    r = UOp.range(n, 0)
    load = a.index(r - 1, (r >= 1) & (r < 5)).load()  # a padded view: out = [0, a0, a1, a2, a3, 0]
    ast = kernel(out.index(r).store(load).end(r), name="padded")
    got = np.full(n, -1, np.float32)
    run_kernel(ast, [np.arange(1, 5, dtype=np.float32), got])
    np.testing.assert_array_equal(got, [0, 1, 2, 3, 4, 0])
