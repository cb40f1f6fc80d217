"""Neural-network ops on Tensor: products, normalizations, losses, convolution and pooling, gather/scatter.

Every op is one elementwise expression around reductions, with no realize inside, so the scheduler fuses
it into one kernel where the data flow allows (softmax, layernorm, `(x @ w + b).relu()`).

**Windows** for convolution and pooling come from movement ops only. For one axis of length n, kernel k,
stride s and dilation d, the k shifted copies x[j*d : j*d + ...] are rows of a (k, n + d) view of the input
expanded to (k, n) and flattened: flat position j*(n+d) + c is element c + j*d of row j. Keeping every
s-th column (a reshape to (..., s) and a shrink) gives the (output, kernel) axes.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from tg_core.dtype import DType, dtypes, least_upper_dtype, least_upper_float
from tg_core.tensor import resample
from tg_core.tensor.args import broadcast_shape, int_arg
from tg_core.tensor.base import TensorBase
from tg_core.tensor.checks import check_range, check_values
from tg_core.uop.ops import Ops

if TYPE_CHECKING:
    from tg_core.tensor.base import Operand
    from tg_core.tensor.tensor import Tensor


def _pair(v: int | Sequence[int], n: int = 2) -> tuple[int, ...]:
    return (v,) * n if isinstance(v, int) else tuple(v)


def _pool_args(name: str, kernel_size: Any, stride: Any, dilation: Any) -> tuple[tuple[int, ...], ...]:
    """kernel_size, stride (default: kernel_size) and dilation of a 2-D pool, each an int or a pair of
    ints >= 1 (a 0 would otherwise divide by zero deep in the window arithmetic)."""
    k = resample.per_axis(kernel_size, 2, f"{name}: kernel_size", 1)
    st = resample.per_axis(stride if stride is not None else k, 2, f"{name}: stride", 1)
    return k, st, resample.per_axis(dilation, 2, f"{name}: dilation", 1)


class NNMixin(TensorBase):
    __slots__ = ()

    # ---- products ------------------------------------------------------------------------------------------

    def dot(self, w: Tensor) -> Tensor:
        """Matrix product with numpy's rules for 1-D operands and broadcasting of batch axes."""
        if self.ndim == 0 or w.ndim == 0:
            raise ValueError(f"matmul needs tensors of at least 1 dimension, got shapes {self.shape} and {w.shape}")
        k_w = w.shape[-2] if w.ndim > 1 else w.shape[0]
        if self.shape[-1] != k_w:
            raise ValueError(f"matmul: shapes {self.shape} and {w.shape} do not match ({self.shape[-1]} != {k_w})")
        if (fast := self._dot_2d(w)) is not None:
            return fast
        dt = least_upper_dtype(self.dtype, w.dtype)
        x = self._cast_to(dt)
        w = w._cast_to(dt)
        # x (..., n, 1, k) times w (..., 1, m, k), summed over k
        xe = x.reshape(x.shape[:-1] + (1,) * min(w.ndim - 1, 1) + x.shape[-1:])
        wt = w.transpose(-1, -2) if w.ndim > 1 else w
        we = wt.reshape(wt.shape[:-2] + (1,) * min(x.ndim - 1, 1) + wt.shape[-2:]) if w.ndim > 1 else wt
        out = (xe * we).sum(-1, dtype=_acc(dt))
        return out.cast(dt) if out.dtype is not dt else out

    def _dot_2d(self, w: Tensor) -> Tensor | None:
        """The common (n, k) @ (k, m) of one dtype, built as the nodes the general path below makes, without its
        intermediate tensors (an MLP forward's graph build: about 30 us less per product); None where that
        path is needed (no_grad's DETACH on every intermediate, casts, halves' float32 sums, symbolic sizes,
        other ranks or devices)."""
        u, v = self.uop, w.uop
        dt = u.dtype
        if self.no_grad or v.dtype is not dt or dt in _HALVES or dtypes.is_weak(dt) or self._device != w._device:
            return None
        xs, ws = u.tensor_shape, v.tensor_shape
        if len(xs) != 2 or len(ws) != 2 or xs[1] != ws[0] or not all(type(s) is int for s in (*xs, *ws)):
            return None
        (n, k), m = xs, ws[1]
        shape = (n, m, k)
        prod = u.reshape((n, 1, k)).expand(shape).alu(Ops.MUL, v.permute((1, 0)).reshape((1, m, k)).expand(shape))
        return w._wrap(prod.reduce_axis(Ops.ADD, (2,)).reshape((n, m)), self._device)

    def matmul(self, x: Tensor, reverse: bool = False) -> Tensor:
        return x.dot(cast("Tensor", self)) if reverse else self.dot(x)

    def __matmul__(self, x: Tensor) -> Tensor: return self.matmul(x)
    def __rmatmul__(self, x: Operand) -> Tensor: return self.matmul(self._operand(x), True)

    def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """x @ weight + bias, with weight of shape (in, out) as in tinygrad (a 1-D weight scales)."""
        out = self * weight if weight.ndim == 1 else self.dot(weight)
        return out + bias if bias is not None else out

    def sequential(self, layers: Sequence) -> Tensor:
        """Apply each callable in turn (tinygrad's Tensor.sequential)."""
        x = cast("Tensor", self)
        for f in layers:
            x = f(x)
        return x

    # ---- normalizations ------------------------------------------------------------------------------------

    def softmax(self, axis: int = -1, dtype=None) -> Tensor:
        x = self if dtype is None else self.cast(dtype)
        x = x._cast_to(least_upper_float(x.dtype))
        e = (x - x._max_shift(axis)).exp()
        return e / e.sum(axis, keepdim=True)

    def log_softmax(self, axis: int = -1, dtype=None) -> Tensor:
        x = self if dtype is None else self.cast(dtype)
        x = x._cast_to(least_upper_float(x.dtype))
        m = x - x._max_shift(axis)
        return m - m.exp().sum(axis, keepdim=True).log()

    def softmin(self, dim: int = -1, dtype=None) -> Tensor:
        """softmax(-x) along dim (PyTorch's softmin)."""
        x = self if dtype is None else self.cast(dtype)
        return (-x._cast_to(least_upper_float(x.dtype))).softmax(dim)

    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
        """x / max(||x||_p, eps) along dim (PyTorch's F.normalize); p may be inf (the largest |x|)."""
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not p > 0:
            raise ValueError(f"normalize: p must be a positive number or inf, got {p!r}")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
            raise ValueError(f"normalize: eps must be a non-negative number, got {eps!r}")
        x = self._cast_to(least_upper_float(self.dtype))
        d = x._axis(dim, "dim")
        a = x.abs()
        if p == math.inf:
            norm = a._reduce(Ops.MAX, d, True)
        elif p == 2:
            norm = (x * x).sum(d, keepdim=True).sqrt()
        elif p == 1:
            norm = a.sum(d, keepdim=True)
        else:
            norm = (a ** p).sum(d, keepdim=True) ** (1 / p)
        return x / norm.maximum(eps)

    def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
        """(x - mean) / sqrt(var + eps) over `axis` (biased variance), without scale or shift."""
        x = self._cast_to(least_upper_float(self.dtype))
        y = x - x.mean(axis, keepdim=True)
        return y * ((y * y).mean(axis, keepdim=True) + eps).rsqrt()

    def batchnorm(self, weight, bias, mean: Tensor, invstd: Tensor, axis: int | Sequence[int] = 1) -> Tensor:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        shape = tuple(n if i in [a % self.ndim for a in axes] else 1 for i, n in enumerate(self.shape))
        x = (self - mean.reshape(shape)) * invstd.reshape(shape)
        if weight is not None:
            x = x * weight.reshape(shape)
        return x + bias.reshape(shape) if bias is not None else x

    # ---- losses --------------------------------------------------------------------------------------------

    def cross_entropy(self, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
        """PyTorch's cross_entropy: classes on axis 1 (axis 0 for 1-D input); Y holds class indices (one axis
        less than self) or probabilities (same shape)."""
        ax = 1 if self.ndim > 1 else 0
        c = self.shape[ax]
        if Y.ndim == self.ndim - 1:
            if not dtypes.is_int(Y.dtype):
                raise TypeError(f"cross_entropy: class-index targets must be ints, got {Y.dtype!r}")
            Y = check_range(Y._one_hot(c), Y, 0, c, lambda v: f"cross_entropy: target {v} is out of bounds for {c} "
                                                              f"classes (allowed: 0 to {c - 1})")
            if ax != self.ndim - 1:
                Y = Y.permute((0, Y.ndim - 1) + tuple(range(1, Y.ndim - 1)))
        if Y.shape != self.shape:
            raise ValueError(f"cross_entropy: targets of shape {Y.shape} do not fit logits of shape {self.shape}")
        Y = Y._cast_to(least_upper_float(self.dtype)) * (1 - label_smoothing) + label_smoothing / c
        loss = -(self.log_softmax(ax) * Y).sum(ax)
        return _reduced(loss, reduction)

    def sparse_categorical_crossentropy(self, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                        reduction: str = "mean") -> Tensor:
        """tinygrad's loss: classes on the last axis, Y class indices; targets equal to ignore_index count
        for nothing (a mean is over the others)."""
        if Y.shape != self.shape[:-1]:
            raise ValueError(f"sparse_categorical_crossentropy: targets of shape {Y.shape} do not fit logits of "
                             f"shape {self.shape}")
        c = self.shape[-1]
        log_p = self.log_softmax(-1)
        keep = Y.ne(ignore_index)
        target = check_range(Y._one_hot(c), Y, 0, c, ignore=ignore_index,
                             describe=lambda v: f"sparse_categorical_crossentropy: target {v} is out of bounds for {c} "
                                                f"classes (allowed: 0 to {c - 1}, or ignore_index={ignore_index})")
        target = target._cast_to(log_p.dtype)
        nll = -(log_p * target).sum(-1)
        smooth = -log_p.mean(-1)
        loss = keep.where((1 - label_smoothing) * nll + label_smoothing * smooth, 0)
        if reduction == "mean":
            return loss.sum() / keep.sum().maximum(1)
        return _reduced(loss, reduction)

    def binary_crossentropy(self, Y: Tensor, reduction: str = "mean") -> Tensor:
        return _reduced(-(Y * self.log() + (1 - Y) * (1 - self).log()), reduction)

    def binary_crossentropy_logits(self, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
        """PyTorch's BCE-with-logits: pos_weight (broadcast against the last axis, one per class) weighs the
        positive term: (1 - y) * x + (1 + (pw - 1) * y) * log(1 + exp(-x)), with log(1 + exp(-x)) computed
        as log1p(exp(-|x|)) + max(-x, 0) so that it never overflows."""
        softplus_neg = (1 + (-self.abs()).exp()).log() + (-self).maximum(0)
        if pos_weight is None:
            return _reduced((1 - Y) * self + softplus_neg, reduction)
        if not isinstance(pos_weight, TensorBase):
            raise TypeError(f"binary_crossentropy_logits: pos_weight is a Tensor, got {type(pos_weight).__name__}")
        return _reduced((1 - Y) * self + (1 + (pos_weight - 1) * Y) * softplus_neg, reduction)

    def nll_loss(self, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                 reduction: str = "mean") -> Tensor:
        """PyTorch's nll_loss on log-probabilities: classes on axis 1 ((C,) input: axis 0), target the class
        indices; loss = -weight[t] * x[t], a mean divides by the summed weights of the targets not ignored."""
        ax = 1 if self.ndim > 1 else 0
        if self.ndim == 0:
            raise ValueError("nll_loss needs an input of shape (C,), (N, C) or (N, C, d1, ...), got a 0-d tensor")
        c = self.shape[ax]
        expect = self.shape[:ax] + self.shape[ax + 1:]
        if target.shape != expect:
            raise ValueError(f"nll_loss: target of shape {target.shape} does not fit input {self.shape} (expected "
                             f"{expect})")
        if not dtypes.is_int(target.dtype):
            raise TypeError(f"nll_loss: targets are class indices and must be ints, got {target.dtype!r}")
        if weight is not None and weight.shape != (c,):
            raise ValueError(f"nll_loss: weight of shape {weight.shape} must have one entry per class, ({c},)")
        hot = check_range(target._one_hot(c), target, 0, c, ignore=ignore_index,
                          describe=lambda v: f"nll_loss: target {v} is out of bounds for {c} classes (allowed: 0 to "
                                             f"{c - 1}, or ignore_index={ignore_index})")
        x = self._cast_to(least_upper_float(self.dtype))
        hot = hot._cast_to(x.dtype) if weight is None else hot * weight._cast_to(x.dtype)
        if ax != self.ndim - 1:
            hot = hot.permute((0, hot.ndim - 1) + tuple(range(1, hot.ndim - 1)))
        keep = target.ne(ignore_index)
        w = keep.where(hot.sum(ax), 0)               # the weight of each target (0 where ignored)
        loss = -(x * hot).sum(ax) * keep
        if reduction == "mean":
            return loss.sum() / w.sum()
        return _reduced(loss, reduction)

    # ---- convolution and pooling ---------------------------------------------------------------------------

    def _window(self, axis: int, k: int, s: int, d: int) -> Tensor:
        """Axis `axis` (length n) replaced by (out, k): element [o, j] is x[o*s + j*d]."""
        n = self.shape[axis]
        o = (n - d * (k - 1) - 1) // s + 1
        if o <= 0:
            raise ValueError(f"window of size {k} (dilation {d}) does not fit an axis of size {n} in {self.shape}")
        x = self.transpose(axis, -1) if axis != self.ndim - 1 else self
        lead = x.shape[:-1]
        x = x.reshape(lead + (1, n)).expand(lead + (k, n)).reshape(lead + (k * n,))
        x = x.pad(((0, 0),) * len(lead) + ((0, k * d),)).reshape(lead + (k, n + d))
        width = o * s
        x = x.pad(((0, 0),) * (len(lead) + 1) + ((0, max(0, width - (n + d))),)) if width > n + d else x
        x = x.shrink(tuple((0, width) if i == len(lead) + 1 else None for i in range(x.ndim)))
        x = x.reshape(lead + (k, o, s))
        x = x.shrink(tuple((0, 1) if i == len(lead) + 2 else None for i in range(x.ndim)))
        x = x.reshape(lead + (k, o)).transpose(-1, -2)             # (..., o, k)
        if axis != self.ndim - 1:
            # put (o, k) back where the axis was
            nd = x.ndim
            order = list(range(axis)) + [nd - 2, nd - 1] + list(range(axis + 1, nd - 2)) + [axis]
            x = x.permute(order)
        return x

    def unfold(self, dimension: int, size: int, step: int) -> Tensor:
        """Every window of `size` elements along `dimension`, `step` apart (PyTorch's Tensor.unfold): that axis
        becomes the number of windows and the window is a new last axis. Movement ops only."""
        d = self._axis(dimension, "dimension")
        k = int_arg(size, "unfold: size", lo=1)
        s = int_arg(step, "unfold: step", lo=1)
        n = self.shape[d] if self.ndim else 1
        if k > n:
            raise ValueError(f"unfold: size {k} is larger than dimension {dimension} of size {n} in {self.shape}")
        x = self.reshape(1) if self.ndim == 0 else self
        w = x._window(d, k, s, 1)                      # (..., windows, k, ...)
        return w.permute([i for i in range(w.ndim) if i != d + 1] + [d + 1]) if self.ndim else w.reshape(k)

    def _pool(self, k: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> Tensor:
        """The last len(k) axes replaced by the output axes, followed by the kernel axes."""
        nk = len(k)
        x = self
        for i in range(nk):
            # the axes before spatial axis i have each become two
            x = x._window(self.ndim - nk + 2 * i, k[i], stride[i], dilation[i])
        # now (..., o0, k0, o1, k1, ...): move the kernel axes last
        lead = self.ndim - nk
        order = list(range(lead)) + [lead + 2 * i for i in range(nk)] + [lead + 2 * i + 1 for i in range(nk)]
        return x.permute(order)

    def conv2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
               dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0) -> Tensor:
        """PyTorch's conv2d: x (N, Cin, H, W), weight (Cout, Cin/groups, kH, kW); padding is an int, a pair
        (H, W), or tinygrad's (left, right, top, bottom)."""
        if self.ndim != 4 or weight.ndim != 4:
            raise ValueError(f"conv2d needs a 4-D input and weight, got {self.shape} and {weight.shape}")
        n, cin, _, _ = self.shape
        cout, cin_g, kh, kw = weight.shape
        if cin != cin_g * groups or cout % groups:
            raise ValueError(f"conv2d: input {self.shape} with {groups} group(s) does not fit weight {weight.shape}")
        x = self.pad(((0, 0), (0, 0)) + _conv_padding(padding))
        win = x._pool((kh, kw), _pair(stride), _pair(dilation))           # (N, Cin, oh, ow, kh, kw)
        oh, ow = win.shape[2:4]
        win = win.reshape(n, groups, 1, cin_g, oh, ow, kh, kw)
        w = weight.reshape(1, groups, cout // groups, cin_g, 1, 1, kh, kw)
        dt = least_upper_dtype(self.dtype, weight.dtype)
        out = (win._cast_to(dt) * w._cast_to(dt)).sum((3, 6, 7), dtype=_acc(dt))
        out = out.cast(dt) if out.dtype is not dt else out
        out = out.reshape(n, cout, oh, ow)
        return out + bias.reshape(1, cout, 1, 1) if bias is not None else out

    def _pool_pads(self, k, stride, dilation, padding, ceil_mode: bool) -> tuple[tuple, tuple]:
        """(the requested padding, the padding ceil_mode adds at the end) of the last two axes. With ceil_mode
        a last partial window is kept when it starts inside the input or its left padding (PyTorch's rule)."""
        pad = _conv_padding(padding)
        if not ceil_mode:
            return pad, ((0, 0), (0, 0))
        extra = []
        for n, (b, a), kk, s, d in zip(self.shape[-2:], pad, k, stride, dilation):
            span = n + b + a - d * (kk - 1) - 1
            o = -(-span // s) + 1
            if (o - 1) * s >= n + b:
                o -= 1
            extra.append((0, max(0, (o - 1) * s + d * (kk - 1) + 1 - (n + b + a))))
        return pad, tuple(extra)

    def max_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride=None, dilation: int | Sequence[int] = 1,
                   padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                   return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """The max of each window; with return_indices also the flat H*W index of each window's first
        maximum (int32), which max_unpool2d takes."""
        if self.ndim < 2:
            raise ValueError(f"max_pool2d needs the last two axes to be (H, W), got shape {self.shape}")
        k, st, dl = _pool_args("max_pool2d", kernel_size, stride, dilation)
        pad, extra = self._pool_pads(k, st, dl, padding, ceil_mode)
        full = tuple((b + eb, a + ea) for (b, a), (eb, ea) in zip(pad, extra))
        x = self.pad(((0, 0),) * (self.ndim - 2) + full, value=dtypes.min(self.dtype))
        out = x._pool(k, st, dl).max((-2, -1))
        if not return_indices:
            return out
        return out, resample.pool_indices(cast("Tensor", self), k, st, dl, full)

    def max_unpool2d(self, indices: Tensor, kernel_size: int | Sequence[int] = (2, 2), stride=None,
                     padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None) -> Tensor:
        """The inverse of max_pool2d(return_indices=True): each value goes to its flat index of the output
        (H, W), zeros elsewhere (PyTorch's max_unpool2d)."""
        return resample.max_unpool(cast("Tensor", self), indices, kernel_size, stride, padding, output_size)

    def conv_transposeNd(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1,
                         stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                         padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0) -> Tensor:
        """PyTorch's conv_transpose1d/2d/3d for any number of spatial axes: x (N, Cin, *spatial), weight
        (Cin, Cout/groups, *kernel)."""
        return resample.conv_transpose(cast("Tensor", self), weight, bias, groups, stride, dilation, padding,
                                       output_padding)

    def conv_transpose2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1,
                         stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                         padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0) -> Tensor:
        if self.ndim != 4 or weight.ndim != 4:
            raise ValueError(f"conv_transpose2d needs a 4-D input and weight, got {self.shape} and {weight.shape}")
        return self.conv_transposeNd(weight, bias, groups, stride, dilation, padding, output_padding)

    def interpolate(self, size: int | Sequence[int] | None = None, scale_factor: float | Sequence[float] | None = None,
                    mode: str = "nearest", align_corners: bool | None = None) -> Tensor:
        """PyTorch's F.interpolate over the axes after (N, C): modes 'nearest', 'nearest-exact', 'linear'
        (3-D input), 'bilinear' (4-D), 'trilinear' (5-D); align_corners for the linear modes."""
        return resample.interpolate(cast("Tensor", self), size, scale_factor, mode, align_corners)

    def avg_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride=None, dilation: int | Sequence[int] = 1,
                   padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
        """The mean of each window; the divisor counts the padding when count_include_pad, never the
        elements ceil_mode adds."""
        if self.ndim < 2:
            raise ValueError(f"avg_pool2d needs the last two axes to be (H, W), got shape {self.shape}")
        k, st, dl = _pool_args("avg_pool2d", kernel_size, stride, dilation)
        pad, extra = self._pool_pads(k, st, dl, padding, ceil_mode)
        full = tuple((b + eb, a + ea) for (b, a), (eb, ea) in zip(pad, extra))
        total = self.pad(((0, 0),) * (self.ndim - 2) + full)._pool(k, st, dl).sum((-2, -1))
        if all(e == (0, 0) for e in extra) and (count_include_pad or all(p == (0, 0) for p in pad)):
            return total / (k[0] * k[1])
        T = type(self)
        if count_include_pad:
            counted = T.ones(tuple(n + b + a for n, (b, a) in zip(self.shape[-2:], pad)), device=self.device).pad(extra)
        else:
            counted = T.ones(self.shape[-2:], device=self.device).pad(full)
        return total / counted._pool(k, st, dl).sum((-2, -1))

    # ---- gather, scatter, one-hot, dropout -----------------------------------------------------------------

    def one_hot(self, num_classes: int = -1) -> Tensor:
        """int32 one-hot vectors on a new last axis; classes are 0 .. num_classes-1 (others are an IndexError,
        as in PyTorch). num_classes=-1 reads max()+1 (this realizes)."""
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"one_hot needs an int tensor, got {self.dtype!r}")
        if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < -1:
            raise ValueError(f"one_hot: num_classes is a non-negative int or -1 (max()+1), got {num_classes!r}")
        if num_classes == -1:
            num_classes = int(self.max().item()) + 1 if self.numel() else 0
        return check_range(self._one_hot(num_classes), cast("Tensor", self), 0, num_classes,
                           lambda v: f"one_hot: class {v} is out of range for num_classes={num_classes} "
                                     f"(allowed: 0 to {num_classes - 1})")

    def _one_hot(self, num_classes: int) -> Tensor:
        """one_hot without the range check: an index outside 0 .. num_classes-1 gives a row of zeros."""
        ar = type(self)._iota(num_classes, self.device)
        return self.unsqueeze(-1).eq(ar).cast(dtypes.int32)

    def gather(self, dim: int, index: Tensor) -> Tensor:
        """out[i][j] = self[index[i][j]][j] for dim 0 (PyTorch's gather): a one-hot mask and a sum."""
        d = self._axis(dim, "dim")
        if index.ndim != self.ndim or any(a > b for i, (a, b) in enumerate(zip(index.shape, self.shape)) if i != d):
            raise ValueError(f"gather: index of shape {index.shape} does not fit input {self.shape} along dim {dim}")
        if not dtypes.is_int(index.dtype):
            raise TypeError(f"gather needs an int index, got {index.dtype!r}")
        n = self.shape[d]
        x = self.shrink(tuple(None if i == d else (0, s) for i, s in enumerate(index.shape)))
        x = x.unsqueeze(-1).transpose(d, -1)                              # axis d has size 1, last axis n
        hot = index.unsqueeze(-1).eq(type(self)._iota(n, self.device))    # index.shape + (n,)
        zero = False if dtypes.is_bool(self.dtype) else 0
        return check_range(hot.where(x, zero).sum(-1).cast(self.dtype), index, 0, n,
                           lambda v: f"gather: index {v} is out of bounds for dim {dim} with size {n} "
                                     f"(allowed: 0 to {n - 1})")

    def scatter(self, dim: int, index: Tensor, src: Tensor | float | int, reduce: str | None = None) -> Tensor:
        """self[index[i][j]][j] = src[i][j] for dim 0 (PyTorch's scatter); reduce=None, 'add' or 'multiply'.
        With repeated indices and reduce=None one of the values wins (undefined in PyTorch too)."""
        T = type(self)
        d = self._axis(dim, "dim")
        if index.ndim != self.ndim or any(a > b for i, (a, b) in enumerate(zip(index.shape, self.shape)) if i != d):
            raise ValueError(f"scatter: index of shape {index.shape} does not fit {self.shape} along dim {dim}")
        src = src if isinstance(src, TensorBase) else T.full(index.shape, src, self.dtype, self.device)
        if src.ndim != index.ndim or any(a < b for a, b in zip(src.shape, index.shape)):
            raise ValueError(f"scatter: src of shape {src.shape} is smaller than index {index.shape}")
        n = self.shape[d]
        src = src.shrink(tuple((0, s) for s in index.shape))._cast_to(self.dtype)
        # hot: index.shape with axis d swapped for n, and a last axis over index's own positions along d
        hot = index.unsqueeze(-1).eq(T._iota(n, self.device)).transpose(d, -1)
        vals = src.unsqueeze(-1).transpose(d, -1)
        hit = hot.any(-1)
        if reduce == "multiply":
            contrib = hot.where(vals, 1).prod(-1).cast(self.dtype)
        elif reduce == "add" or reduce is None:
            contrib = hot.where(vals, False if dtypes.is_bool(self.dtype) else 0).sum(-1).cast(self.dtype)
            if reduce is None:
                ident = False if dtypes.is_bool(self.dtype) else dtypes.min(self.dtype)
                contrib = hot.where(vals, ident).max(-1)
        else:
            raise ValueError(f"scatter: reduce is None, 'add' or 'multiply', got {reduce!r}")
        grow = tuple((0, 0) if i == d else (0, s - index.shape[i]) for i, s in enumerate(self.shape))
        hit, contrib = hit.pad(grow), contrib.pad(grow)
        if reduce == "add":
            out = self + contrib
        elif reduce == "multiply":
            out = hit.where(self * contrib, self)
        else:
            out = hit.where(contrib, self)
        return check_range(out, index, 0, n, lambda v: f"scatter: index {v} is out of bounds for dim {dim} with size "
                                                       f"{n} (allowed: 0 to {n - 1})")

    def scatter_reduce(self, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:
        """PyTorch's scatter_reduce: self[index[i][j]][j] combined with src[i][j] (dim 0) by reduce 'sum',
        'prod', 'mean', 'amax' or 'amin'; include_self=False leaves self's value out where anything lands.
        A one-hot mask of the indices and one reduce, as scatter."""
        T = type(self)
        idents = {"sum": 0, "mean": 0, "prod": 1, "amax": dtypes.min(self.dtype), "amin": dtypes.max(self.dtype)}
        if reduce not in idents:
            raise ValueError(f"scatter_reduce: reduce is one of {', '.join(map(repr, idents))}, got {reduce!r}")
        d = self._axis(dim, "dim")
        if not isinstance(index, TensorBase) or not dtypes.is_int(index.dtype):
            raise TypeError(f"scatter_reduce needs an int index tensor, got {getattr(index, 'dtype', type(index))!r}")
        if index.ndim != self.ndim or any(a > b for i, (a, b) in enumerate(zip(index.shape, self.shape)) if i != d):
            raise ValueError(f"scatter_reduce: index of shape {index.shape} does not fit {self.shape} along dim {dim}")
        if src.ndim != index.ndim or any(a < b for a, b in zip(src.shape, index.shape)):
            raise ValueError(f"scatter_reduce: src of shape {src.shape} is smaller than index {index.shape}")
        n = self.shape[d]
        src = src.shrink(tuple((0, s) for s in index.shape))._cast_to(self.dtype)
        hot = index.unsqueeze(-1).eq(T._iota(n, self.device)).transpose(d, -1)   # [..n at d.., index pos]
        vals = src.unsqueeze(-1).transpose(d, -1)
        ident = idents[reduce]
        spread = hot.where(vals, ident)
        if reduce in ("sum", "mean"):
            contrib = spread.sum(-1).cast(self.dtype)
        elif reduce == "prod":
            contrib = spread.prod(-1).cast(self.dtype)
        else:
            contrib = spread.max(-1) if reduce == "amax" else spread.min(-1)
        count = hot.sum(-1, dtype=dtypes.int32)
        grow = tuple((0, 0) if i == d else (0, s - index.shape[i]) for i, s in enumerate(self.shape))
        contrib, count = contrib.pad(grow, value=ident), count.pad(grow)
        hit = count > 0
        x = cast("Tensor", self)
        if reduce == "sum":
            out = contrib + x if include_self else contrib
        elif reduce == "prod":
            out = contrib * x if include_self else contrib
        elif reduce == "mean":
            total, k = (contrib + x, count + 1) if include_self else (contrib, count)
            out = total / k.maximum(1)
            out = out if dtypes.is_float(self.dtype) else out.floor().cast(self.dtype)  # PyTorch floors int means
        else:
            out = (contrib.maximum(x) if reduce == "amax" else contrib.minimum(x)) if include_self else contrib
        out = hit.where(out, x)
        return check_range(out, index, 0, n, lambda v: f"scatter_reduce: index {v} is out of bounds for dim {dim} "
                                                       f"with size {n} (allowed: 0 to {n - 1})")

    def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Tensor:
        """int32 category indices drawn from the rows of non-negative weights (1-D: one row), PyTorch's
        multinomial. With replacement: inverse-CDF sampling; without: the num_samples largest log(u) / w
        (Efraimidis-Spirakis), so a zero weight is never drawn. A row with a negative, infinite or NaN
        weight, or no positive one, is a ValueError (at once for realized weights, else at the next read)."""
        k = int_arg(num_samples, "multinomial: num_samples", lo=1)
        if self.ndim not in (1, 2):
            raise ValueError(f"multinomial needs 1-D or 2-D weights, got shape {self.shape}")
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"multinomial needs float weights, got {self.dtype!r}")
        w = self.reshape(1, -1) if self.ndim == 1 else cast("Tensor", self)
        rows, n = w.shape
        if not replacement and k > n:
            raise ValueError(f"multinomial: cannot draw {k} samples without replacement from {n} categories "
                             f"(allowed: at most {n}, or replacement=True)")
        T = type(self)
        u = T.rand((rows, k), device=self.device)
        if replacement:
            cdf = w.cumsum(-1)
            target = u * cdf[:, n - 1:n]
            out = (cdf.unsqueeze(1) <= target.unsqueeze(-1)).sum(-1, dtype=dtypes.int32).minimum(n - 1)
        else:
            keys = (T.rand((rows, n), device=self.device).maximum(1e-30).log()) / w
            out = keys.topk(k, -1)[1]
        out = out.reshape(k) if self.ndim == 1 else out

        def facts(x: Tensor) -> Tensor:
            x2 = x.reshape(1, -1) if x.ndim == 1 else x
            bad = (x2 < 0) | x2.isnan() | x2.isinf()
            positive = (x2 > 0).sum(-1, dtype=dtypes.int32).min()
            return bad.any().cast(dtypes.float32).reshape(1).cat(positive.cast(dtypes.float32).reshape(1))

        def problem(v) -> str | None:
            if v[0]:
                return "multinomial: the weights must be finite and non-negative; a row has a negative, inf or NaN one"
            if not v[1]:
                return "multinomial: a row of weights has no positive entry (all zero): nothing can be drawn"
            if not replacement and v[1] < k:
                return (f"multinomial: a row has only {int(v[1])} positive weights, fewer than the {k} samples drawn "
                        "without replacement (allowed: at most that many, or replacement=True)")
            return None
        return check_values(out, cast("Tensor", self), facts, problem)

    def masked_select(self, mask: Tensor) -> Tensor:
        """The elements where mask (broadcast against self) is True, as a 1-D tensor. Its length depends on the
        mask's data, so this realizes the mask (the selection itself is a lazy gather, differentiable)."""
        if not isinstance(mask, TensorBase) or not dtypes.is_bool(mask.dtype):
            raise TypeError(f"masked_select needs a bool mask tensor, got {getattr(mask, 'dtype', type(mask))!r}")
        shape = broadcast_shape(self.shape, mask.shape)
        x, m = self._broadcast_to(shape), mask._broadcast_to(shape)
        pos = np.flatnonzero(m.numpy())
        flat = x.flatten()
        if pos.size == 0:
            return flat.shrink(((0, 0),))
        return flat[type(self)(pos.astype(np.int32), device=self.device)]

    def nonzero(self, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
        """The indices of the non-zero elements, (count, ndim) int32 (as_tuple: one 1-D tensor per axis), in
        row-major order. The count depends on the data, so this realizes the tensor."""
        pos = np.argwhere(self.numpy()).astype(np.int32)
        T = type(self)
        if as_tuple:
            return tuple(T(np.ascontiguousarray(pos[:, i]), device=self.device) for i in range(max(self.ndim, 1)))
        return T(pos.reshape(-1, self.ndim), device=self.device)

    def dropout(self, p: float = 0.5) -> Tensor:
        """Zero each element with probability p and scale the rest by 1/(1-p), when Tensor.training."""
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        if not type(self).training or p == 0:
            return cast("Tensor", self)
        if p == 1:
            return self.zeros_like()
        keep = type(self).rand(self.shape, device=self.device) >= p
        return keep.where(self * (1 / (1 - p)), 0)

    # ---- einsum and attention ------------------------------------------------------------------------------

    @staticmethod
    def einsum(formula: str, *operands: Tensor | Sequence[Tensor]) -> Tensor:
        """Einstein summation (PyTorch's einsum): 'ij,jk->ik', implicit output (the letters used once, in
        alphabetical order), '...' for broadcast axes, a letter repeated in one operand takes its diagonal.
        The operands are aligned to one order of all letters, multiplied, and summed over the letters the
        output lacks: one elementwise product and one reduce, which the scheduler fuses."""
        ops: list[Tensor] = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) \
            else list(cast("Sequence[Tensor]", operands))
        if not isinstance(formula, str):
            raise TypeError(f"einsum: the formula is a str, got {type(formula).__name__}")
        specs, out_spec = _einsum_specs(formula, [t.shape for t in ops])
        sizes: dict[str, int] = {}
        aligned: list[tuple[Tensor, list[str]]] = []
        for t, spec in zip(ops, specs):
            while len(set(spec)) != len(spec):          # a repeated letter: its diagonal, as a last axis
                c = next(ch for i, ch in enumerate(spec) if ch in spec[:i])
                p = spec.index(c)
                q = spec.index(c, p + 1)
                t = t.diagonal(0, p, q)
                spec = [ch for i, ch in enumerate(spec) if i not in (p, q)] + [c]
            for ch, n in zip(spec, t.shape):
                if n != 1 and sizes.get(ch, 1) not in (1, n):
                    raise ValueError(f"einsum {formula!r}: subscript {_show(ch)} has sizes {sizes[ch]} and {n} in "
                                     f"operand shapes {[o.shape for o in ops]}")
                if n != 1 or ch not in sizes:
                    sizes[ch] = n
            aligned.append((t, spec))
        letters = sorted(sizes)
        prod_t: Tensor | None = None
        for t, spec in aligned:
            # the operand's axes in the global letter order, with a 1 for each letter it lacks
            order = sorted(range(len(spec)), key=lambda i: letters.index(spec[i]))
            t = t.permute(order) if order != list(range(len(spec))) else t
            have = dict(zip((spec[i] for i in order), t.shape))
            t = t.reshape(tuple(have.get(ch, 1) for ch in letters)) if letters else t
            prod_t = t if prod_t is None else prod_t * t
        if prod_t is None:
            raise ValueError(f"einsum {formula!r} needs at least one operand")
        prod_t = prod_t._broadcast_to(tuple(sizes[ch] for ch in letters))
        summed = [i for i, ch in enumerate(letters) if ch not in out_spec]
        kept = [ch for ch in letters if ch in out_spec]
        res = prod_t.sum(tuple(summed), dtype=_acc(prod_t.dtype)) if summed else prod_t
        res = res.cast(prod_t.dtype) if res.dtype is not prod_t.dtype else res
        perm = [kept.index(ch) for ch in out_spec]
        return res.permute(perm) if perm != list(range(len(perm))) else res

    def scaled_dot_product_attention(self, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                     dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                     enable_gqa: bool = False) -> Tensor:
        """PyTorch's F.scaled_dot_product_attention: softmax(q @ k^T * scale + mask) @ v with q = self
        (..., L, E), key (..., S, E), value (..., S, Ev). A bool attn_mask keeps where True, a float one is
        added; is_causal keeps the lower triangle (top-left aligned). dropout_p > 0 drops attention weights
        (always, as PyTorch's function does, not only in training). enable_gqa lets key and value have fewer
        heads (axis -3) than the query, a divisor of its count: each is repeated for its group."""
        q = cast("Tensor", self)
        for name, t in (("query", q), ("key", key), ("value", value)):
            if t.ndim < 2:
                raise ValueError(f"scaled_dot_product_attention: {name} needs at least 2 dims (..., L, E), got shape "
                                 f"{t.shape}")
        if key.shape[-1] != q.shape[-1] or key.shape[-2] != value.shape[-2]:
            raise ValueError(f"scaled_dot_product_attention: query {q.shape}, key {key.shape} and value {value.shape} "
                             "do not fit (needed: query (..., L, E), key (..., S, E), value (..., S, Ev))")
        if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or not 0 <= dropout_p < 1:
            raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1), got {dropout_p!r}")
        if is_causal and attn_mask is not None:
            raise ValueError("scaled_dot_product_attention: pass attn_mask or is_causal=True, not both")
        if enable_gqa and q.ndim >= 3 and key.ndim >= 3 and key.shape[-3] != q.shape[-3]:
            hq, hk = q.shape[-3], key.shape[-3]
            if hk == 0 or hq % hk or value.shape[-3] != hk:
                raise ValueError(f"scaled_dot_product_attention: with enable_gqa the query's {hq} heads must be a "
                                 f"multiple of the key's and value's, got {hk} and {value.shape[-3]}")
            key, value = key.repeat_interleave(hq // hk, -3), value.repeat_interleave(hq // hk, -3)
        sc = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        qk = q.matmul(key.transpose(-1, -2)) * sc
        if is_causal:
            L, S = qk.shape[-2], qk.shape[-1]
            attn_mask = type(self)._iota(L, self.device).reshape(L, 1) >= type(self)._iota(S, self.device).reshape(1, S)
        if attn_mask is not None:
            qk = attn_mask.where(qk, -math.inf) if dtypes.is_bool(attn_mask.dtype) else qk + attn_mask
        # the scores are the one realized intermediate: softmax and the product with value then fuse into
        # a second kernel (left to itself the scheduler realizes qk and also softmax's output: 3 kernels)
        w = qk.contiguous().softmax(-1)
        if dropout_p > 0:
            keep = type(self).rand(w.shape, device=self.device) >= dropout_p
            w = keep.where(w * (1 / (1 - dropout_p)), 0)
        return w.matmul(value)


def _show(ch: str) -> str:
    return "'...'" if ord(ch) >= 0x100 else repr(ch)


def _einsum_specs(formula: str, shapes: list[tuple[int, ...]]) -> tuple[list[list[str]], list[str]]:
    """Each operand's subscripts (an ellipsis as placeholder letters, right-aligned across operands) and the
    output's."""
    f = formula.replace(" ", "")
    lhs, arrow, rhs = f.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(shapes):
        raise ValueError(f"einsum {formula!r} names {len(inputs)} operands, got {len(shapes)}")
    for part in [*inputs, rhs]:
        bad = [ch for ch in part.replace("...", "") if not ch.isalpha()]
        if bad or part.count("...") > 1:
            raise ValueError(f"einsum {formula!r}: subscripts are letters with at most one '...' per operand, got "
                             f"{part!r}")
    ell = []
    for spec, shape in zip(inputs, shapes):
        n = len(spec.replace("...", ""))
        e = len(shape) - n
        if e < 0 or (e > 0 and "..." not in spec):
            raise ValueError(f"einsum {formula!r}: subscripts {spec!r} do not fit an operand of shape {shape}")
        ell.append(e)
    ne = max(ell, default=0)
    dots = [chr(0x100 + i) for i in range(ne)]
    specs = []
    for spec, e in zip(inputs, ell):
        head, _, tail = spec.partition("...")
        specs.append(list(head) + dots[ne - e:] + list(tail) if "..." in spec else list(spec))
    if arrow:
        head, _, tail = rhs.partition("...")
        out = list(head) + (dots if "..." in rhs else []) + list(tail)
        if len(set(out)) != len(out) or any(ch not in {c for s in specs for c in s} for ch in out):
            raise ValueError(f"einsum {formula!r}: the output names each input subscript at most once, got {rhs!r}")
        if "..." not in rhs and ne and any(e for e in ell):
            raise ValueError(f"einsum {formula!r}: the output must keep the '...' axes")
    else:
        counts: dict[str, int] = {}
        for s in specs:
            for ch in s:
                counts[ch] = counts.get(ch, 0) + 1
        out = dots + sorted(ch for ch, k in counts.items() if k == 1 and ord(ch) < 0x100)
    return specs, out


_HALVES = (dtypes.float16, dtypes.bfloat16)


def _acc(dt: DType) -> DType:
    """Products of halves accumulate in float32 (as in PyTorch); other dtypes in themselves."""
    return dtypes.float32 if dt in _HALVES else dt


def _conv_padding(padding: int | Sequence[int]) -> tuple[tuple[int, int], tuple[int, int]]:
    if isinstance(padding, int):
        return ((padding, padding), (padding, padding))
    p = tuple(padding)
    if len(p) == 2:
        return ((p[0], p[0]), (p[1], p[1]))
    if len(p) == 4:   # tinygrad's order: (left, right, top, bottom)
        return ((p[2], p[3]), (p[0], p[1]))
    raise ValueError(f"padding is an int, (pad_h, pad_w) or (left, right, top, bottom), got {padding!r}")


def _reduced(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"reduction is 'mean', 'sum' or 'none', got {reduction!r}")

