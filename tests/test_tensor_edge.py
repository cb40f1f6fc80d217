"""Bad and edge-case inputs to the Tensor API (issue 10): dtype promotion, NaN and signed zeros in
elementwise ops, out-of-range indices (at once when known on the host, through a device-side check
otherwise), and argument validation. Values are checked against numpy or exact references on every
device; AMD (the mock GPU's emulator) runs a few small cases."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tg_core import Tensor, dtypes

DEVICES = ["PYTHON", "CPU:X86", "CPU:LLVM"]
WITH_AMD = DEVICES + ["AMD"]


def same(got: np.ndarray, want) -> None:
    """Equal values, NaN where NaN, and the same sign of every zero."""
    want = np.asarray(want, dtype=got.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)
    if got.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got[got == 0]), np.signbit(want[want == 0]))


# ---- promotion ----------------------------------------------------------------------------------------------

def test_int64_with_uint64_is_a_clear_type_error():
    a, b = Tensor(np.array([1], np.int64)), Tensor(np.array([1], np.uint64))
    with pytest.raises(TypeError, match="no common dtype for int64 and uint64.*cast an operand"):
        a + b
    with pytest.raises(TypeError, match="int8 and uint64"):
        Tensor(np.array([1], np.int8)) < b
    assert (a.cast(dtypes.float64) + b).dtype is dtypes.float64
    assert (b + 1).dtype is dtypes.uint64 and (b + Tensor(np.array([1], np.uint8))).dtype is dtypes.uint64


# ---- NaN and signed zeros ----------------------------------------------------------------------------------

SPECIAL = np.array([np.nan, -0.0, 0.0, -2.5, 3.0, np.inf, -np.inf, -0.4, 0.4, -0.5, 7.0], np.float32)
UNARY = {
    "relu": lambda x: np.where(np.isnan(x) | (x > 0), x, np.float32(0)),
    "sign": np.sign,
    "abs": np.abs,
    "relu6": lambda x: np.where(np.isnan(x), x, np.clip(np.where(x > 0, x, np.float32(0)), 0, 6)),
    "round": np.round,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
}


@pytest.mark.parametrize("device", WITH_AMD)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_nan_and_signed_zero(device: str, op: str):
    if device == "AMD" and op not in ("relu", "sign", "abs"):
        pytest.skip("AMD runs a few small cases")
    got = getattr(Tensor(SPECIAL, device=device), op)().numpy()
    same(got, UNARY[op](SPECIAL))


@pytest.mark.parametrize("device", DEVICES)
def test_nan_propagates_through_max_min_clamp(device: str):
    a = np.array([np.nan, 1.0, np.nan, -3.0], np.float32)
    b = np.array([0.0, np.nan, np.nan, 2.0], np.float32)
    x, y = Tensor(a, device=device), Tensor(b, device=device)
    same(x.maximum(y).numpy(), np.maximum(a, b))
    same(x.minimum(y).numpy(), np.minimum(a, b))
    same(x.clip(-1, 0.5).numpy(), np.clip(a, -1, 0.5))
    same(x.max().numpy(), np.max(a))
    same(x.min().numpy(), np.min(a))
    same(Tensor(a[1:], device=device).relu().numpy(), np.array([1.0, np.nan, 0.0], np.float32))
    same(x.sigmoid().isnan().numpy(), np.isnan(a))
    same(Tensor([np.nan, -0.0, 2.0], device=device).sign().numpy(), np.array([np.nan, 0.0, 1.0], np.float32))


def test_int_sign_and_abs_keep_their_dtype():
    x = Tensor(np.array([-3, 0, 5], np.int32))
    assert x.sign().dtype is dtypes.int32 and x.abs().dtype is dtypes.int32
    same(x.sign().numpy(), [-1, 0, 1])
    same(x.abs().numpy(), [3, 0, 5])
    same(Tensor([True, False]).sign().numpy(), [True, False])
