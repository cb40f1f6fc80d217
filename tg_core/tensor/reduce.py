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
from tg_core.tensor.args import int_arg
from tg_core.tensor.base import TensorBase
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

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
        if isinstance(n, UOp):  # a symbolic count (sint.py), divided by at run time: 0 gives nan, as an empty axis does
            return (s / n).cast(ft)
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

    def cummin(self, axis: int = 0) -> Tensor:
        """The running minimum along axis (values, as cummax): cummax of the order-reversing map."""
        return self._reversed_order().cummax(axis)._reversed_order()

    def logcumsumexp(self, axis: int = 0) -> Tensor:
        """log(cumsum(exp(x))) along axis without overflow or underflow: each output is the logsumexp of its
        own triangular window (shifted by that window's max, not the whole axis's), as cumsum's windows."""
        x = self._cast_to(least_upper_float(self.dtype))
        if x.ndim == 0:
            return x
        a = x._axis(axis)
        n = x.shape[a]
        if n == 0:
            return x
        T = type(self)
        xt = x.transpose(a, -1) if a != x.ndim - 1 else x
        row = T._iota(n, self.device)
        tri = row.reshape(n, 1) >= row.reshape(1, n)
        out = tri.where(xt.unsqueeze(-2), -math.inf).logsumexp(-1)
        return out.transpose(a, -1) if a != x.ndim - 1 else out

    # ---- sorting: ranks ------------------------------------------------------------------------------------
    # An element's place in the sorted order is its rank: how many elements of its row come before it (in
    # the order, or equal and at a smaller index: a stable sort). Output position p then picks the element
    # of rank p with a one-hot mask and a sum. No data-dependent control flow, so it is the same graph on
    # every device and differentiable in the values; the cost is n*n comparisons per row.

    def _ranks(self, descending: bool) -> Tensor:
        """int32 ranks along the last axis; NaN sorts as the largest value (numpy, PyTorch)."""
        n = self.shape[-1]
        if self.dtype is dtypes.float32 and n < 2**31:
            return self._ranks_by_key(descending)
        # [..., i, j]: element i against element j, both expanded to (n, n) before any op, so that
        # isnan is computed per pair in the kernel rather than realized as a buffer and broadcast
        full = self.shape + (n,)
        xi, xj = self.unsqueeze(-1).expand(full), self.unsqueeze(-2).expand(full)
        before = xj > xi if descending else xj < xi          # j comes before i in the order
        tie = xi.eq(xj)
        if dtypes.is_float(self.dtype):
            ni, nj = xi.isnan(), xj.isnan()
            before = before | (nj & ni.logical_not() if descending else ni & nj.logical_not())
            tie = tie | (ni & nj)
        idx = type(self)._iota(n, self.device)
        earlier = idx.reshape(1, n) < idx.reshape(n, 1)      # j < i
        return (before | (tie & earlier)).cast(dtypes.int32).sum(-1, dtype=dtypes.int32)

    def _ranks_by_key(self, descending: bool) -> Tensor:
        """float32 ranks from one unique int64 key per element (order bits * n + index): a single compare
        per pair instead of the compare, tie, NaN and index terms. -0.0 is keyed as 0.0 (they tie, as in
        PyTorch) and every NaN as one value above inf."""
        n = self.shape[-1]
        T = type(self)
        full = self.shape + (n,)
        idx = T._iota(n, self.device).cast(dtypes.int64)

        def key(x: Tensor, i: Tensor) -> Tensor:
            b = x.eq(0).where(0.0, x).bitcast(dtypes.int32)
            ok = x.isnan().where(2**31, (b < 0).where(b ^ 0x7FFFFFFF, b).cast(dtypes.int64))  # NaN above inf
            return (-ok if descending else ok) * n + i
        # expanded to (n, n) before any op, so the keys are computed per pair in the one kernel (an
        # expanded elementwise input would be realized as its own buffer first)
        x = cast("Tensor", self).detach()    # ranks are integers: no gradient flows through the keys
        ki = key(x.unsqueeze(-1).expand(full), idx.reshape(n, 1).expand(full))
        kj = key(x.unsqueeze(-2).expand(full), idx.reshape(1, n).expand(full))
        before = kj < ki                                     # [..., i, j]: j comes before i
        return before.cast(dtypes.int32).sum(-1, dtype=dtypes.int32)

    def _select_ranks(self, k: int, descending: bool) -> tuple[Tensor, Tensor]:
        """The first k of the sorted order along the last axis: (values, int32 indices)."""
        n = self.shape[-1]
        T = type(self)
        hot = self._ranks(descending).unsqueeze(-2).eq(T._iota(k, self.device).reshape(k, 1))   # [..., p, i]
        zero = False if dtypes.is_bool(self.dtype) else 0
        vals = hot.where(self.unsqueeze(-2), zero)
        vals = vals.max(-1) if dtypes.is_bool(self.dtype) else vals.sum(-1).cast(self.dtype)
        idx = hot.where(T._iota(n, self.device), 0).sum(-1, dtype=dtypes.int32)
        return vals, idx

    def _sorted_along(self, dim: int, k: int | None, descending: bool) -> tuple[Tensor, Tensor]:
        if self.ndim == 0:
            return cast("Tensor", self), self.zeros_like(dtype=dtypes.int32)
        d = self._axis(dim, "dim")
        x = self.transpose(d, -1) if d != self.ndim - 1 else cast("Tensor", self)
        vals, idx = x._select_ranks(x.shape[-1] if k is None else k, descending)
        if d != self.ndim - 1:
            vals, idx = vals.transpose(d, -1), idx.transpose(d, -1)
        return vals, idx

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> tuple[Tensor, Tensor]:
        """(values, indices) sorted along dim, as PyTorch's sort; always stable (equal elements keep their
        order), indices are int32. NaN sorts as the largest value."""
        return self._sorted_along(dim, None, descending)

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
        return self._sorted_along(dim, None, descending)[1]

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:
        """The k largest (or smallest, largest=False) elements along dim and their int32 indices, in sorted
        order (also when sorted=False, which PyTorch allows); ties keep the smaller index first."""
        n = self.shape[self._axis(dim, "dim")] if self.ndim else 1
        kk = int_arg(k, "topk: k", lo=0)
        if kk > n:
            raise ValueError(f"topk: k={kk} is larger than dim {dim} of size {n} in {self.shape} (allowed: 0 to {n})")
        return self._sorted_along(dim, kk, largest)
