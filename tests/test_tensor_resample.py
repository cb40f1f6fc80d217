"""conv_transpose2d/Nd, max_pool2d(return_indices) and max_unpool2d, interpolate against direct numpy loops:
values and gradients (finite differences) on the PYTHON reference device and the default device; bad
arguments."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tg_core import Device, Tensor, dtypes

DEVICES = ["PYTHON", Device.DEFAULT]
RNG = np.random.default_rng(4)


def conv_transpose_ref(x, w, stride, padding, output_padding, dilation, groups):
    """out[n, g*cog + co, i*s - p + j*d] += x[n, g*cig + ci, i] * w[g*cig + ci, co, j], any number of axes."""
    nk = x.ndim - 2
    n, cin = x.shape[:2]
    cog, k = w.shape[1], w.shape[2:]
    cig = cin // groups
    size = [(x.shape[2 + a] - 1) * stride[a] - 2 * padding[a] + dilation[a] * (k[a] - 1) + output_padding[a] + 1
            for a in range(nk)]
    out = np.zeros((n, cog * groups, *size))
    for b, c in itertools.product(range(n), range(cin)):
        g = c // cig
        for i in itertools.product(*(range(s) for s in x.shape[2:])):
            for j in itertools.product(*(range(kk) for kk in k)):
                o = tuple(i[a] * stride[a] - padding[a] + j[a] * dilation[a] for a in range(nk))
                if all(0 <= o[a] < size[a] for a in range(nk)):
                    out[(b, slice(g * cog, (g + 1) * cog)) + o] += x[(b, c) + i] * w[(c, slice(None)) + j]
    return out


CONV_T = [  # x shape, w shape, stride, padding, output_padding, dilation, groups
    ((1, 2, 3, 3), (2, 3, 2, 2), (1, 1), (0, 0), (0, 0), (1, 1), 1),
    ((2, 2, 3, 2), (2, 1, 3, 2), (2, 1), (1, 0), (1, 0), (1, 1), 1),
    ((1, 4, 2, 3), (4, 2, 2, 3), (2, 2), (0, 1), (0, 1), (1, 2), 2),
    ((1, 2, 4), (2, 3, 3), (3,), (1,), (2,), (1,), 1),                 # 1-D
    ((1, 1, 2, 2, 2), (1, 2, 2, 1, 2), (1, 2, 1), (0, 0, 0), (0, 1, 0), (1, 1, 1), 1),  # 3-D
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(CONV_T)))
def test_conv_transpose(case, device):
    xs, ws, s, p, op, d, g = CONV_T[case]
    x, w = RNG.normal(size=xs), RNG.normal(size=ws)
    bias = RNG.normal(size=(ws[1] * g,))
    tx = Tensor(x.astype(np.float32), device=device, requires_grad=True)
    tw = Tensor(w.astype(np.float32), device=device, requires_grad=True)
    tb = Tensor(bias.astype(np.float32), device=device)
    op_fn = Tensor.conv_transpose2d if len(xs) == 4 else Tensor.conv_transposeNd
    out = op_fn(tx, tw, tb, groups=g, stride=s, dilation=d, padding=p, output_padding=op)
    ref = conv_transpose_ref(x, w, s, p, op, d, g) + bias.reshape((1, -1) + (1,) * (len(xs) - 2))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)
    # linear in x and in w: the gradient of sum(out * r) is the reference applied to the adjoint
    r = RNG.normal(size=ref.shape)
    (out * Tensor(r.astype(np.float32), device=device)).sum().backward()
    gx = np.array([(conv_transpose_ref(np.eye(x.size)[i].reshape(xs), w, s, p, op, d, g) * r).sum()
                   for i in range(x.size)]).reshape(xs)
    gw = np.array([(conv_transpose_ref(x, np.eye(w.size)[i].reshape(ws), s, p, op, d, g) * r).sum()
                   for i in range(w.size)]).reshape(ws)
    np.testing.assert_allclose(tx.grad.numpy(), gx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tw.grad.numpy(), gw, rtol=1e-4, atol=1e-4)


def test_conv_transpose_errors():
    x, w = Tensor(np.zeros((1, 2, 3, 3), np.float32)), Tensor(np.zeros((2, 1, 2, 2), np.float32))
    with pytest.raises(ValueError, match=r"output_padding \(2, 2\) must be smaller than stride \(2, 2\) or dilation"):
        x.conv_transpose2d(w, stride=2, output_padding=2)
    with pytest.raises(ValueError, match=r"does not fit weight \(3, 1, 2, 2\)"):
        x.conv_transpose2d(Tensor(np.zeros((3, 1, 2, 2), np.float32)))
    with pytest.raises(ValueError, match=r"stride must be an int or 2 ints"):
        x.conv_transpose2d(w, stride=(1, 2, 3))
    with pytest.raises(ValueError, match=r"stride .*each entry must be >= 1, got 0"):
        x.conv_transpose2d(w, stride=0)
    with pytest.raises(ValueError, match=r"conv_transpose2d needs a 4-D input and weight"):
        x.reshape(1, 2, 9).conv_transpose2d(w)


def pool_ref(x, k, s, p):
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    vals, idx = np.zeros((n, c, oh, ow)), np.zeros((n, c, oh, ow), np.int64)
    for b, ch, i, j in itertools.product(range(n), range(c), range(oh), range(ow)):
        best = None
        for a, bb in itertools.product(range(k), range(k)):
            y, z = i * s - p + a, j * s - p + bb
            if 0 <= y < h and 0 <= z < w and (best is None or x[b, ch, y, z] > best):
                best, vals[b, ch, i, j], idx[b, ch, i, j] = x[b, ch, y, z], x[b, ch, y, z], y * w + z
    return vals, idx


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k, s, p", [(2, 2, 0), (3, 2, 1), (3, 1, 0)])
def test_max_pool_indices_and_unpool(k, s, p, device):
    x = RNG.normal(size=(2, 2, 5, 6)).astype(np.float32)
    tx = Tensor(x, device=device, requires_grad=True)
    v, i = tx.max_pool2d(k, stride=s, padding=p, return_indices=True)
    rv, ri = pool_ref(x, k, s, p)
    np.testing.assert_allclose(v.numpy(), rv)
    np.testing.assert_array_equal(i.numpy(), ri)
    assert i.dtype is dtypes.int32
    size = (5, 6)
    u = v.max_unpool2d(i, k, stride=s, padding=p, output_size=size)
    ref = np.zeros((2, 2, 30))
    for b, c in itertools.product(range(2), range(2)):
        ref[b, c, ri[b, c].reshape(-1)] = rv[b, c].reshape(-1)
    np.testing.assert_allclose(u.numpy(), ref.reshape(2, 2, 5, 6))
    u.sum().backward()
    # each input element that is some window's maximum gets 1 (split among the windows that share it)
    chosen = np.zeros((4, 30))
    for r in range(4):
        chosen[r, np.unique(ri.reshape(4, -1)[r])] = 1
    np.testing.assert_allclose(tx.grad.numpy(), chosen.reshape(2, 2, 5, 6), atol=1e-6)
    # ties: the first maximum of the window
    z = Tensor(np.zeros((1, 1, 2, 2), np.float32), device=device)
    assert z.max_pool2d(2, return_indices=True)[1].numpy().tolist() == [[[[0]]]]


def test_max_unpool_errors():
    v = Tensor(np.zeros((1, 1, 2, 2), np.float32))
    with pytest.raises(ValueError, match=r"indices of shape \(1, 1, 4\) must have the input's shape \(1, 1, 2, 2\)"):
        v.max_unpool2d(Tensor(np.zeros((1, 1, 4), np.int32)))
    with pytest.raises(TypeError, match=r"max_unpool2d: indices must be ints"):
        v.max_unpool2d(v)
    with pytest.raises(IndexError, match=r"max_unpool2d: index 16 is out of range for an output of 4x4 "
                                         r"\(allowed: 0 to 15\)"):
        v.max_unpool2d(Tensor(np.full((1, 1, 2, 2), 16, np.int32)))



@pytest.mark.parametrize("pool", ["max_pool2d", "avg_pool2d"])
def test_pool_arguments_are_checked(pool):
    x = Tensor(np.zeros((1, 1, 4, 4), np.float32))
    with pytest.raises(ValueError, match=rf"{pool}: kernel_size 0: each entry must be >= 1, got 0"):
        getattr(x, pool)(0)
    with pytest.raises(ValueError, match=rf"{pool}: stride \(2, 0\): each entry must be >= 1, got 0"):
        getattr(x, pool)(2, stride=(2, 0))
    with pytest.raises(ValueError, match=rf"{pool}: dilation 0: each entry must be >= 1"):
        getattr(x, pool)(2, dilation=0)
    with pytest.raises(ValueError, match=rf"{pool}: kernel_size must be an int or 2 ints"):
        getattr(x, pool)((2, 2, 2))
    with pytest.raises(ValueError, match=rf"{pool} needs the last two axes to be \(H, W\), got shape \(3,\)"):
        getattr(Tensor(np.zeros(3, np.float32)), pool)(1)

def _axis_ref(n_in, n_out, mode, align, scale):
    """Per output position: [(source index, weight)], PyTorch's rules written as loops."""
    rows = []
    for o in range(n_out):
        if mode == "nearest":
            rows.append([(min(int(math.floor(o * scale)), n_in - 1), 1.0)])
        elif mode == "nearest-exact":
            rows.append([(min(int(math.floor((o + 0.5) * scale)), n_in - 1), 1.0)])
        else:
            src = (o * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0) if align else max((o + 0.5) * scale - 0.5, 0.0)
            i0 = min(int(math.floor(src)), n_in - 1)
            i1 = min(i0 + 1, n_in - 1)
            rows.append([(i0, 1 - (src - i0)), (i1, src - i0)])
    return rows


def interp_ref(x, outs, mode, align, scales):
    out = x.astype(np.float64)
    for a, n_out in enumerate(outs):
        ax = 2 + a
        rows = _axis_ref(out.shape[ax], n_out, mode, align, scales[a])
        moved = np.moveaxis(out, ax, -1)
        new = np.stack([sum(wt * moved[..., i] for i, wt in r) for r in rows], -1)
        out = np.moveaxis(new, -1, ax)
    return out


INTERP = [  # input shape, kwargs
    ((1, 2, 5), {"size": 8, "mode": "linear"}),
    ((1, 2, 5), {"size": 3, "mode": "linear", "align_corners": True}),
    ((1, 1, 3, 4), {"scale_factor": 2, "mode": "bilinear"}),
    ((1, 1, 3, 4), {"size": (5, 2), "mode": "bilinear", "align_corners": True}),
    ((2, 1, 2, 3, 2), {"scale_factor": (1.5, 1, 2), "mode": "trilinear"}),
    ((1, 2, 3, 4), {"scale_factor": 2, "mode": "nearest"}),
    ((1, 2, 5, 4), {"size": (3, 7), "mode": "nearest"}),
    ((1, 2, 5, 4), {"size": (3, 7), "mode": "nearest-exact"}),
    ((1, 1, 7), {"size": 3, "mode": "nearest-exact"}),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(INTERP)))
def test_interpolate(case, device):
    shape, kw = INTERP[case]
    x = RNG.normal(size=shape)
    nd = len(shape) - 2
    if "size" in kw:
        outs = (kw["size"],) * nd if isinstance(kw["size"], int) else kw["size"]
        scales = [i / o for i, o in zip(shape[2:], outs)]
    else:
        sf = (kw["scale_factor"],) * nd if not isinstance(kw["scale_factor"], tuple) else kw["scale_factor"]
        outs = tuple(int(math.floor(i * f)) for i, f in zip(shape[2:], sf))
        scales = [1 / f for f in sf]
    ref = interp_ref(x, outs, kw["mode"], kw.get("align_corners", False), scales)
    t = Tensor(x.astype(np.float32), device=device, requires_grad=True)
    out = t.interpolate(**kw)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-6)
    r = RNG.normal(size=ref.shape)
    (out * Tensor(r.astype(np.float32), device=device)).sum().backward()
    # linear in x: the gradient is the reference applied to the adjoint, element by element
    g = np.array([(interp_ref(np.eye(x.size)[i].reshape(shape), outs, kw["mode"], kw.get("align_corners", False),
                              scales) * r).sum() for i in range(x.size)]).reshape(shape)
    np.testing.assert_allclose(t.grad.numpy(), g, rtol=1e-4, atol=1e-5)


def test_interpolate_keeps_int_dtype_for_nearest_and_rejects_bad_arguments():
    xi = Tensor(np.arange(6, dtype=np.int32).reshape(1, 1, 6))
    got = xi.interpolate(size=3)
    assert got.dtype is dtypes.int32 and got.numpy().tolist() == [[[0, 2, 4]]]
    x = Tensor(np.zeros((1, 1, 4), np.float32))
    with pytest.raises(ValueError, match=r"mode is one of 'nearest', 'nearest-exact', 'linear', 'bilinear', "
                                         r"'trilinear', got 'cubic'"):
        x.interpolate(size=2, mode="cubic")
    with pytest.raises(ValueError, match=r"mode 'bilinear' needs a 4-D input \(N, C, \*spatial\), got shape"):
        x.interpolate(size=2, mode="bilinear")
    with pytest.raises(ValueError, match=r"align_corners is for the linear modes, not 'nearest'"):
        x.interpolate(size=2, align_corners=True)
    with pytest.raises(ValueError, match=r"give exactly one of size and scale_factor"):
        x.interpolate()
    with pytest.raises(ValueError, match=r"scale_factor must be a positive number or 1 of them, got -2"):
        x.interpolate(scale_factor=-2)
    with pytest.raises(ValueError, match=r"interpolate: size .*each entry must be >= 1, got 0"):
        x.interpolate(size=0)
