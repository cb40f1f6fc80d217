"""Tensor programs every compiled CPU backend's tests run kernel by kernel against the default device: what the
Tensor layer builds (elementwise, reductions, matmul tiles and chains, one-hot folds with gated loads, uint32 hashing,
floor division, convolution windows, triangular masks, int64 math) must also be what a renderer compiles."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tg_core.tensor import Tensor


def tensor_programs(rng: np.random.Generator) -> dict[str, Callable[[], Any]]:
    """name -> a builder of the program's lazy Tensor (Any: max_pool2d's type also admits indices); inputs are float32 normals drawn from `rng` when built."""
    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)
    return {
        "elementwise": lambda: Tensor(f32(37)) * Tensor(f32(37)) + 1,
        "sum": lambda: Tensor(f32(7, 9)).sum(1),
        "max_min": lambda: Tensor(f32(5, 6)).max(0) - Tensor(f32(5, 6)).min(1).reshape(5, 1),
        "matmul": lambda: Tensor(f32(5, 7)) @ Tensor(f32(7, 3)),
        "matmul_chain": lambda: (Tensor(f32(3, 4)) @ Tensor(f32(4, 5))) @ Tensor(f32(5, 2)),
        "gather": lambda: Tensor(f32(50, 3))[Tensor([4, -1, 0, 49, -50])],
        "gather_dim": lambda: Tensor(f32(4, 5)).gather(1, Tensor([[0, 4], [1, 1], [3, 2], [0, 0]])),
        "rand": lambda: Tensor.rand(5, 7) + Tensor.randn(7),
        "randint": lambda: Tensor.randint(20, low=-5, high=5),
        "floordiv_mod": lambda: (Tensor(np.arange(-12, 12, dtype=np.int32)) // 5
                                 + Tensor(np.arange(-12, 12, dtype=np.int32)) % -7),
        "conv": lambda: Tensor(f32(2, 3, 7, 7)).conv2d(Tensor(f32(4, 3, 3, 3)), Tensor(f32(4)), stride=2, padding=1).relu(),
        "maxpool": lambda: Tensor(f32(1, 2, 6, 5)).max_pool2d(3, stride=2, padding=1, ceil_mode=True),
        "softmax": lambda: Tensor(f32(4, 9)).softmax(),
        "layernorm": lambda: Tensor(f32(3, 8)).layernorm(),
        "xent": lambda: Tensor(f32(6, 5)).sparse_categorical_crossentropy(Tensor([0, 4, -1, 2, 1, 3])),
        "cumsum_argmax": lambda: Tensor(f32(5, 6)).cumsum(1).argmax(1),
        "slices": lambda: Tensor(f32(9, 8))[::-2, 1::3] * 2,
        "cat_pad": lambda: Tensor(f32(2, 3)).cat(Tensor(f32(2, 2)), dim=1).pad((1, 1), value=-1.0),
        "tril_eye": lambda: Tensor(f32(4, 4)).tril() + Tensor.eye(4),
        "gelu_sigmoid": lambda: Tensor(f32(16)).gelu() + Tensor(f32(16)).sigmoid(),
        "matmul_tiles": lambda: Tensor(f32(13, 19)) @ Tensor(f32(19, 21)),
        "int64_math": lambda: (Tensor(np.arange(-6, 6, dtype=np.int64)) * 3_000_000_000) // 7,
        "where_bool": lambda: (Tensor(f32(3, 4)) > 0).where(Tensor(f32(3, 4)), -1.0).sum(0),
        "gather2d": lambda: Tensor(f32(6, 7))[Tensor([[1, 5], [0, 2]]), Tensor([6, 0])],
        # one kernel: the hidden layer's matmul is recomputed inside the reductions over logit columns
        "mlp_loss": lambda: (Tensor(f32(5, 8)) @ Tensor(f32(8, 16))).relu().dot(Tensor(f32(16, 4)))
        .sparse_categorical_crossentropy(Tensor([0, 1, 2, 3, 0])),
    }
