"""Reductions built from REDUCE_AXIS (ADD, MAX, MUL) and elementwise ops.

min is max of an order-reversing map: negation for floats, bitwise not for ints (~x = -x-1 reverses the
order without overflowing at the minimum), logical not for bools. argmax picks the first maximum: each
position holding the maximum contributes (n - index), and the largest contribution is the first one.
cumsum sums a triangular window: the input broadcast against a lower-triangular mask, one reduce.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from tg_core.dtype import DType, dtypes, least_upper_float, sum_acc_dtype
from tg_core.tensor.base import TensorBase
from tg_core.uop.ops import Ops

if TYPE_CHECKING:
    from tg_core.tensor.tensor import Tensor

Axis = int | Sequence[int] | None


class ReduceMixin(TensorBase):
    __slots__ = ()

    def _check_nonempty(self, name: str, axis: Axis) -> None:
        if any(self.shape[a] == 0 for a in self._axes(axis)):
            raise ValueError(f"{name}() of an empty axis has no identity (shape {self.shape}, axis {axis})")

    def _max_shift(self, axis: Axis) -> Tensor:
        """The max over `axis` (kept) as the shift that keeps exp() in range in softmax-like ops. Unlike max(),
        an empty axis is allowed: the shift is then MAX's identity (-inf), and the op's result is empty, or
        -inf for logsumexp, as in PyTorch."""
        return self._reduce(Ops.MAX, axis, True)

    def _reversed_order(self) -> Tensor:
        if dtypes.is_bool(self.dtype):
            return self.logical_not()
        if dtypes.is_int(self.dtype):
            return ~self
        return -self

    def min(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
        self._check_nonempty("min", axis)
        return self._reversed_order().max(axis, keepdim)._reversed_order()

    def prod(self, axis: Axis = None, keepdim: bool = False, dtype: DType | None = None) -> Tensor:
        acc = dtype or sum_acc_dtype(self.dtype)
        out = self._reduce(Ops.MUL, axis, keepdim, acc)
        return out.cast(self.dtype) if dtype is None and self.dtype in (dtypes.float16, dtypes.bfloat16) else out

    def mean(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
        n = math.prod(self.shape[a] for a in self._axes(axis))
        ft = least_upper_float(self.dtype)
        acc = dtypes.float32 if ft in (dtypes.float16, dtypes.bfloat16) else ft
        s = self._cast_to(ft).sum(axis, keepdim, dtype=acc)
        return (s / n if n else s * math.nan).cast(ft)

    def var(self, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        n = math.prod(self.shape[a] for a in self._axes(axis))
        x = self._cast_to(least_upper_float(self.dtype))
        dev = x - x.mean(axis, keepdim=True)
        return (dev * dev).sum(axis, keepdim) / max(0, n - correction)

    def std(self, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        return self.var(axis, keepdim, correction).sqrt()

    def var_mean(self, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    def std_mean(self, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    def any(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
        return self._cast_to(dtypes.bool)._reduce(Ops.MAX, axis, keepdim)

    def all(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
        return self._cast_to(dtypes.bool).logical_not().any(axis, keepdim).logical_not()

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """The index of the first maximum (of the flattened tensor when axis is None), as int32."""
        if axis is None:
            flat = self.flatten()
            flat._check_nonempty("argmax", 0)
            out = flat.argmax(0)
            return out.reshape((1,) * self.ndim) if keepdim else out
        self._check_nonempty("argmax", axis)
        a = self._axis(axis)
        n = self.shape[a]
        is_max = self.eq(self.max(a, keepdim=True))
        if dtypes.is_float(self.dtype):
            # a NaN is the maximum (as in numpy and PyTorch): it compares unequal to everything
            has_nan = self.isnan()
            is_max = has_nan.any(a, keepdim=True).where(has_nan, is_max)
        countdown = type(self)._iota(n, self.device).mul(-1).add(n).reshape((n,) + (1,) * (self.ndim - a - 1))
        return (n - is_max.where(countdown, 0).max(a, keepdim)).cast(dtypes.int32)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        return self._reversed_order().argmax(axis, keepdim)

    def logsumexp(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
        x = self._cast_to(least_upper_float(self.dtype))
        m = x._max_shift(axis)
        # a row of -inf would give -inf - -inf = nan; shifting by 0 there keeps it -inf
        m = m.isinf().where(0, m)
        out = (x - m).exp().sum(axis, keepdim=True).log() + m
        return out if keepdim else out.squeeze(self._axes(axis))

    def cumsum(self, axis: int = 0) -> Tensor:
        return self._cumulative(axis, Ops.ADD)

    def cumprod(self, axis: int = 0) -> Tensor:
        return self._cumulative(axis, Ops.MUL)

    def cummax(self, axis: int = 0) -> Tensor:
        return self._cumulative(axis, Ops.MAX)

    def _cumulative(self, axis: int, op: Ops) -> Tensor:
        if self.ndim == 0:
            return cast("Tensor", self)
        a = self._axis(axis)
        n = self.shape[a]
        if n == 0:
            return cast("Tensor", self)
        T = type(self)
        x = self.transpose(a, -1) if a != self.ndim - 1 else self
        row = T._iota(n, self.device)
        tri = row.reshape(n, 1) >= row.reshape(1, n)        # tri[i, j]: j contributes to output i
        ident = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dtypes.min(self.dtype)}[op]
        acc = sum_acc_dtype(self.dtype) if op is not Ops.MAX else self.dtype
        windows = tri.where(x.unsqueeze(-2)._cast_to(acc), ident)
        out = windows._reduce(op, -1, False)
        if op is not Ops.MAX and self.dtype in (dtypes.float16, dtypes.bfloat16):
            out = out.cast(self.dtype)
        return out.transpose(a, -1) if a != self.ndim - 1 else out
