"""The kernels of Tensor ops, JIT-compiled through the LLVM IR renderer on the host, against the reference
interpreter: what the Tensor layer builds (one-hot folds with gated loads, uint32 hashing, floor division,
convolution windows, triangular masks) must also be what a compiled backend runs."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.testing.kernels import run_schedule

pytest.importorskip("llvmlite.binding")
from test_llvmir import run  # noqa: E402  (shared JIT helpers)

RNG = np.random.default_rng(7)


def run_llvm(t: Tensor) -> np.ndarray:
    """Every kernel of `t`'s schedule through LLVM, on numpy copies of the input buffers."""
    return run_schedule(t, run)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    "gather": lambda: Tensor(f32(50, 3))[Tensor([4, -1, 0, 49, -50])],
    "gather2d": lambda: Tensor(f32(6, 7))[Tensor([[1, 5], [0, 2]]), Tensor([6, 0])],
    "gather_dim": lambda: Tensor(f32(4, 5)).gather(1, Tensor([[0, 4], [1, 1], [3, 2], [0, 0]])),
    "rand": lambda: Tensor.rand(5, 7) + Tensor.randn(7),
    "randint": lambda: Tensor.randint(20, low=-5, high=5),
    "floordiv_mod": lambda: Tensor(np.arange(-12, 12, dtype=np.int32)) // 5 + Tensor(np.arange(-12, 12, dtype=np.int32)) % -7,
    "conv": lambda: Tensor(f32(2, 3, 7, 7)).conv2d(Tensor(f32(4, 3, 3, 3)), Tensor(f32(4)), stride=2, padding=1).relu(),
    "maxpool": lambda: Tensor(f32(1, 2, 6, 5)).max_pool2d(3, stride=2, padding=1, ceil_mode=True),
    "softmax": lambda: Tensor(f32(4, 9)).softmax(),
    "layernorm": lambda: Tensor(f32(3, 8)).layernorm(),
    "xent": lambda: Tensor(f32(6, 5)).sparse_categorical_crossentropy(Tensor([0, 4, -1, 2, 1, 3])),
    "cumsum_argmax": lambda: Tensor(f32(5, 6)).cumsum(1).argmax(1),
    "slices": lambda: Tensor(f32(9, 8))[::-2, 1::3] * 2,
    "cat_pad": lambda: Tensor(f32(2, 3)).cat(Tensor(f32(2, 2)), dim=1).pad((1, 1), value=-1.0),
    "tril_eye": lambda: Tensor(f32(4, 4)).tril() + Tensor.eye(4),
    "matmul_chain": lambda: (Tensor(f32(3, 4)) @ Tensor(f32(4, 5))) @ Tensor(f32(5, 2)),
    "gelu_sigmoid": lambda: Tensor(f32(16)).gelu() + Tensor(f32(16)).sigmoid(),
    # one kernel: the hidden layer's matmul is recomputed inside the reductions over logit columns
    "mlp_loss": lambda: (Tensor(f32(5, 8)) @ Tensor(f32(8, 16))).relu().dot(Tensor(f32(16, 4)))
    .sparse_categorical_crossentropy(Tensor([0, 1, 2, 3, 0])),
}


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
