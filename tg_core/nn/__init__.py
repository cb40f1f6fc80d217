"""Layers: tinygrad's constructors and initialization. A layer is a plain object whose Tensor attributes are
its parameters (`get_parameters`, `get_state_dict` find them); calling it applies it."""
from __future__ import annotations

import math
from collections.abc import Sequence

from tg_core.dtype import dtypes
from tg_core.helpers import prod
from tg_core.tensor import Tensor
from tg_core.tensor.checks import check_range


class Linear:
    """y = x @ weight.T + bias, weight of shape (out_features, in_features) (PyTorch's layout); weight and bias
    are uniform in [-1/sqrt(in_features), 1/sqrt(in_features)]."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        bound = 1 / math.sqrt(in_features)
        self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound)
        self.bias = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.linear(self.weight.transpose(), self.bias)


def _pair(v: int | Sequence[int]) -> tuple[int, ...]:
    return (v, v) if isinstance(v, int) else tuple(v)


class Conv2d:
    """A 2-D convolution over (N, C, H, W); weight (out_channels, in_channels // groups, kh, kw) and bias are
    uniform in [-s, s] with s = 1/sqrt(fan_in), fan_in = in_channels // groups * kh * kw (a kernel's inputs).
    `padding` is what Tensor.conv2d takes."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                 groups: int = 1, bias: bool = True):
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: {in_channels} input and {out_channels} output channels do not split into "
                             f"{groups} groups")
        self.kernel_size = _pair(kernel_size)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        scale = 1 / math.sqrt(in_channels // groups * prod(self.kernel_size))
        self.weight = Tensor.uniform(out_channels, in_channels // groups, *self.kernel_size, low=-scale, high=scale)
        self.bias = Tensor.uniform(out_channels, low=-scale, high=scale) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)


class LayerNorm:
    """Normalizes the last len(normalized_shape) axes (biased variance), then scales by weight (ones) and
    shifts by bias (zeros) when elementwise_affine."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True):
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.axis = tuple(-1 - i for i in range(len(self.normalized_shape)))
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight = Tensor.ones(*self.normalized_shape) if elementwise_affine else None
        self.bias = Tensor.zeros(*self.normalized_shape) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        n = len(self.normalized_shape)
        if x.shape[-n:] != self.normalized_shape:
            raise ValueError(f"LayerNorm over {self.normalized_shape} cannot normalize an input of shape {x.shape}")
        x = x.layernorm(axis=self.axis, eps=self.eps)
        if not self.elementwise_affine:
            return x
        assert self.weight is not None and self.bias is not None  # __init__ made both with elementwise_affine
        return x * self.weight + self.bias


class Embedding:
    """A lookup table of vocab_size vectors of embed_size, Glorot-uniform initialized. An index selects a row
    through a one-hot product, so the gradient reaches exactly the rows that were used."""

    def __init__(self, vocab_size: int, embed_size: int):
        self.vocab_sz, self.embed_sz = vocab_size, embed_size
        self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

    def __call__(self, idx: Tensor) -> Tensor:
        if not dtypes.is_int(idx.dtype):
            raise TypeError(f"Embedding needs int indices, got {idx.dtype!r}")
        n = self.vocab_sz
        return check_range(idx._one_hot(n).cast(self.weight.dtype) @ self.weight, idx, 0, n,
                           lambda v: f"Embedding: index {v} is out of range for {n} embeddings (allowed: 0 to {n - 1})")


__all__ = ["Conv2d", "Embedding", "LayerNorm", "Linear"]
