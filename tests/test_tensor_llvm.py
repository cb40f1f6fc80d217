"""The kernels of Tensor ops, JIT-compiled through the LLVM IR renderer on the host, against the reference
interpreter: what the Tensor layer builds (one-hot folds with gated loads, uint32 hashing, floor division,
convolution windows, triangular masks) must also be what a compiled backend runs."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.testing.kernels import run_schedule
from tg_core.testing.programs import tensor_programs

pytest.importorskip("llvmlite.binding")
from test_llvmir import run  # noqa: E402  (shared JIT helpers)

RNG = np.random.default_rng(7)


def run_llvm(t: Tensor) -> np.ndarray:
    """Every kernel of `t`'s schedule through LLVM, on numpy copies of the input buffers."""
    return run_schedule(t, run)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CASES = tensor_programs(RNG)


@pytest.mark.parametrize("name", CASES)
def test_llvm_matches_interpreter(name):
    Tensor.manual_seed(11)
    t = CASES[name]()
    got = run_llvm(t)
    want = t.numpy()
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)
