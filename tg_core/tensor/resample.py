"""Transposed convolution, max-pool indices and unpooling, and interpolation: the bodies of NNMixin's
conv_transposeNd, max_pool2d(return_indices=True), max_unpool2d and interpolate, kept here to keep nn.py
to one screenful per topic.

**Transposed convolution** is a convolution of the input with stride-1 zeros inserted between elements
(`stride - 1` per gap), padded by dilation*(k-1) - padding on each side (plus output_padding after), with
the weight's in/out channel axes swapped per group and its spatial axes flipped.

**Interpolation** is, per resized axis, a product with an (out, in) matrix computed on the host from the
sizes alone (one-hot rows for nearest, two weights for linear): no data-dependent indexing, differentiable,
and the same graph on every device.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tg_core.dtype import dtypes, least_upper_dtype, least_upper_float
from tg_core.tensor.args import int_arg
from tg_core.tensor.checks import check_range

if TYPE_CHECKING:
    from tg_core.tensor.tensor import Tensor


def per_axis(v: int | Sequence[int], n: int, name: str, lo: int | None = None) -> tuple[int, ...]:
    """An int for every spatial axis, or one per axis."""
    vals = tuple(v) if isinstance(v, (tuple, list)) else (v,) * n
    if len(vals) != n:
        raise ValueError(f"{name} must be an int or {n} ints (one per spatial axis), got {v!r}")
    return tuple(int_arg(x, f"{name} {v!r}: each entry", lo) for x in vals)


def conv_transpose(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int, stride: Any, dilation: Any,
                   padding: Any, output_padding: Any) -> Tensor:
    nk = weight.ndim - 2
    if nk < 1 or x.ndim != nk + 2:
        raise ValueError(f"conv_transpose needs an input (N, Cin, *spatial) and a weight (Cin, Cout/groups, "
                         f"*kernel) with as many spatial axes, got {x.shape} and {weight.shape}")
    g = int_arg(groups, "conv_transpose: groups", lo=1)
    s, d = per_axis(stride, nk, "conv_transpose: stride", 1), per_axis(dilation, nk, "conv_transpose: dilation", 1)
    p, op = per_axis(padding, nk, "conv_transpose: padding", 0), per_axis(output_padding, nk, "output_padding", 0)
    n, cin = x.shape[:2]
    if weight.shape[0] != cin or cin % g:
        raise ValueError(f"conv_transpose: input {x.shape} with {g} group(s) does not fit weight {weight.shape} "
                         f"(needed: weight.shape[0] == Cin == {cin}, divisible by groups)")
    for i in range(nk):
        if op[i] >= max(s[i], d[i]):
            raise ValueError(f"conv_transpose: output_padding {op} must be smaller than stride {s} or dilation {d} "
                             f"on each axis")
    k = weight.shape[2:]
    cout_g = weight.shape[1]
    # the input with stride - 1 zeros between elements
    for i, si in enumerate(s):
        if si > 1 and x.shape[2 + i] > 0:
            a, m = 2 + i, x.shape[2 + i]
            x = x.unsqueeze(a + 1).pad(tuple((0, si - 1) if j == a + 1 else (0, 0) for j in range(x.ndim + 1)))
            x = x.reshape(x.shape[:a] + (m * si,) + x.shape[a + 2:])
            x = x.shrink(tuple((0, (m - 1) * si + 1) if j == a else None for j in range(x.ndim)))
    pads = tuple((d[i] * (k[i] - 1) - p[i], d[i] * (k[i] - 1) - p[i] + op[i]) for i in range(nk))
    x = x.pad(((0, 0), (0, 0)) + pads)
    w = weight.reshape((g, cin // g, cout_g) + k).transpose(1, 2).reshape((g * cout_g, cin // g) + k)
    w = w.flip(tuple(range(2, 2 + nk)))
    out = _conv(x, w, g, d)
    return out + bias.reshape((1, -1) + (1,) * nk) if bias is not None else out


def _conv(x: Tensor, w: Tensor, groups: int, dilation: tuple[int, ...]) -> Tensor:
    """A stride-1 convolution of any number of spatial axes (x already padded), as NNMixin.conv2d."""
    nk = w.ndim - 2
    n, cin = x.shape[:2]
    cout, cin_g = w.shape[:2]
    k = w.shape[2:]
    win = x._pool(k, (1,) * nk, dilation)                                   # (N, Cin, *o, *k)
    o = win.shape[2:2 + nk]
    win = win.reshape((n, groups, 1, cin_g) + o + k)
    wr = w.reshape((1, groups, cout // groups, cin_g) + (1,) * nk + k)
    dt = least_upper_dtype(x.dtype, w.dtype)
    acc = dtypes.float32 if dt in (dtypes.float16, dtypes.bfloat16) else dt
    out = (win._cast_to(dt) * wr._cast_to(dt)).sum((3,) + tuple(range(4 + nk, 4 + 2 * nk)), dtype=acc)
    out = out.cast(dt) if out.dtype is not dt else out
    return out.reshape((n, cout) + o)


def pool_indices(x: Tensor, k: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                 full_pad: tuple) -> Tensor:
    """For max_pool2d of x (padded by full_pad), the flat H*W index of the first maximum of each window (PyTorch's
    return_indices), as int32."""
    T = type(x)
    h, w = x.shape[-2:]
    pos = T._iota(h * w, x.device).reshape(h, w).pad(full_pad, value=-1)
    padded = x.pad(((0, 0),) * (x.ndim - 2) + full_pad, value=dtypes.min(x.dtype))
    win = padded._pool(k, stride, dilation).flatten(-2)                    # (..., oh, ow, kh*kw)
    pwin = pos._pool(k, stride, dilation).flatten(-2)                      # (oh, ow, kh*kw)
    first = win.argmax(-1)                                                 # the first maximum in the window
    hot = first.unsqueeze(-1).eq(T._iota(k[0] * k[1], x.device))
    return hot.where(pwin, 0).sum(-1, dtype=dtypes.int32)


def max_unpool(x: Tensor, indices: Tensor, kernel_size: Any, stride: Any, padding: Any,
               output_size: Sequence[int] | None) -> Tensor:
    if x.ndim < 2 or indices.shape != x.shape:
        raise ValueError(f"max_unpool2d: indices of shape {indices.shape} must have the input's shape {x.shape} "
                         "(at least 2-D)")
    if not dtypes.is_int(indices.dtype):
        raise TypeError(f"max_unpool2d: indices must be ints, got {indices.dtype!r}")
    k = per_axis(kernel_size, 2, "max_unpool2d: kernel_size", 1)
    s = per_axis(stride if stride is not None else k, 2, "max_unpool2d: stride", 1)
    p = per_axis(padding, 2, "max_unpool2d: padding", 0)
    oh, ow = x.shape[-2:]
    if output_size is None:
        h, w = ((oh - 1) * s[0] - 2 * p[0] + k[0], (ow - 1) * s[1] - 2 * p[1] + k[1])
    else:
        h, w = tuple(int_arg(v, "max_unpool2d: output_size", 1) for v in tuple(output_size)[-2:])
    T = type(x)
    hot = indices.flatten(-2).unsqueeze(-1).eq(T._iota(h * w, x.device))  # (..., oh*ow, h*w)
    # overlapping windows can name one position more than once, always with the same value (one input
    # element): a max keeps it once (a sum would add it up); its gradient is split among those windows
    hit = hot.any(-2)
    picked = hot.where(x.flatten(-2).unsqueeze(-1), dtypes.min(x.dtype)).max(-2)
    out = hit.where(picked, False if dtypes.is_bool(x.dtype) else 0).reshape(x.shape[:-2] + (h, w))
    return check_range(out, indices, 0, h * w, lambda v: f"max_unpool2d: index {v} is out of range for an output "
                                                        f"of {h}x{w} (allowed: 0 to {h * w - 1})")


_MODES = {"nearest": None, "nearest-exact": None, "linear": 3, "bilinear": 4, "trilinear": 5}


def interpolate(x: Tensor, size: Any, scale_factor: Any, mode: str, align_corners: bool | None) -> Tensor:
    if mode not in _MODES:
        raise ValueError(f"interpolate: mode is one of {', '.join(map(repr, _MODES))}, got {mode!r}")
    nd = x.ndim - 2
    if nd < 1 or (_MODES[mode] is not None and x.ndim != _MODES[mode]):
        need = f"{_MODES[mode]}-D" if _MODES[mode] is not None else "3-D to 5-D"
        raise ValueError(f"interpolate: mode {mode!r} needs a {need} input (N, C, *spatial), got shape {x.shape}")
    if mode.startswith("nearest") and align_corners is not None:
        raise ValueError(f"interpolate: align_corners is for the linear modes, not {mode!r}")
    if (size is None) == (scale_factor is None):
        raise ValueError(f"interpolate: give exactly one of size and scale_factor, got size={size!r}, "
                         f"scale_factor={scale_factor!r}")
    ins = x.shape[2:]
    if size is not None:
        outs = per_axis(size, nd, "interpolate: size", 1)
        scales = [i / o for i, o in zip(ins, outs)]
    else:
        sf = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * nd
        if len(sf) != nd or any(isinstance(f, bool) or not isinstance(f, (int, float)) or not f > 0 for f in sf):
            raise ValueError(f"interpolate: scale_factor must be a positive number or {nd} of them, got "
                             f"{scale_factor!r}")
        outs = tuple(int(math.floor(i * f)) for i, f in zip(ins, sf))
        scales = [1 / f for f in sf]
    out = x._cast_to(least_upper_float(x.dtype)) if not mode.startswith("nearest") else x
    for a in range(nd):
        m = _resize_matrix(ins[a], outs[a], scales[a], mode, bool(align_corners))
        ax = 2 + a
        moved = out.transpose(ax, -1) if ax != out.ndim - 1 else out
        mt = type(x)(m.astype(np.float32 if mode.startswith("nearest") else
                              {dtypes.float64: np.float64}.get(out.dtype, np.float32)), device=x.device)
        if mode.startswith("nearest"):
            hot = mt.cast(dtypes.bool)
            zero = False if dtypes.is_bool(x.dtype) else 0
            moved = hot.where(moved.unsqueeze(-2), zero).sum(-1).cast(x.dtype) if not dtypes.is_bool(x.dtype) \
                else hot.where(moved.unsqueeze(-2), zero).max(-1)
        else:
            moved = (moved.unsqueeze(-2) * mt._cast_to(out.dtype)).sum(-1)
        out = moved.transpose(ax, -1) if ax != out.ndim - 1 else moved
    return out


def _resize_matrix(n_in: int, n_out: int, scale: float, mode: str, align_corners: bool) -> np.ndarray:
    """The (n_out, n_in) matrix of one axis, PyTorch's source-index rules."""
    m = np.zeros((n_out, n_in))
    dst = np.arange(n_out, dtype=np.float64)
    if mode in ("nearest", "nearest-exact"):
        near = np.floor((dst + (0.5 if mode == "nearest-exact" else 0.0)) * scale).astype(np.int64)
        m[np.arange(n_out), np.minimum(near, n_in - 1)] = 1
        return m
    if align_corners:
        src = dst * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    else:
        src = np.maximum((dst + 0.5) * scale - 0.5, 0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    lam = src - i0
    np.add.at(m, (np.arange(n_out), i0), 1 - lam)
    np.add.at(m, (np.arange(n_out), i1), lam)
    return m
