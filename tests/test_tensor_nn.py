"""nn ops on Tensor against numpy references on the PYTHON device, with kernel counts."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core import Tensor, dtypes
from tg_core.schedule import create_schedule

RNG = np.random.default_rng(1)


def rnd(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def close(t: Tensor, ref, atol=1e-5, rtol=1e-5):
    got, ref = t.numpy(), np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), atol=atol, rtol=rtol)


def kernels(t: Tensor) -> int:
    return len(create_schedule([t.uop], [t.device])[0])


def np_log_softmax(x, axis=-1):
    x = x.astype(np.float64)
    m = x - x.max(axis, keepdims=True)
    return m - np.log(np.exp(m).sum(axis, keepdims=True))


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((4,), (4, 2)), ((3, 4), (4,)), ((4,), (4,)),
                                   ((2, 3, 4), (2, 4, 5)), ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul_shapes(sa, sb):
    a, b = rnd(*sa), rnd(*sb)
    close(Tensor(a) @ Tensor(b), a @ b, atol=1e-5)
    close(Tensor(a).dot(Tensor(b)), a @ b, atol=1e-5)
    close(Tensor(a).matmul(Tensor(b)), np.matmul(a, b), atol=1e-5)


def test_matmul_dtypes():
    a, b = RNG.integers(-5, 5, (3, 4)).astype(np.int32), RNG.integers(-5, 5, (4, 2)).astype(np.int32)
    out = Tensor(a) @ Tensor(b)
    assert out.dtype is dtypes.int32
    np.testing.assert_array_equal(out.numpy(), a @ b)
    h, hb = rnd(3, 8, dtype=np.float16), rnd(8, 2, dtype=np.float16)
    out = Tensor(h) @ Tensor(hb)
    assert out.dtype is dtypes.float16
    close(out, h.astype(np.float32) @ hb.astype(np.float32), atol=1e-2, rtol=1e-2)
    assert (Tensor(a) @ Tensor(b.astype(np.float32))).dtype is dtypes.float32


def test_linear():
    x, w, b = rnd(3, 5), rnd(5, 4), rnd(4)
    close(Tensor(x).linear(Tensor(w), Tensor(b)), x @ w + b, atol=1e-5)
    close(Tensor(x).linear(Tensor(w)), x @ w, atol=1e-5)
    close(Tensor(x).linear(Tensor(x[0])), x * x[0])


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_family(axis):
    x = rnd(4, 6) * 5
    ref = np_log_softmax(x, axis)
    close(Tensor(x).softmax(axis), np.exp(ref), atol=1e-6)
    close(Tensor(x).log_softmax(axis), ref, atol=1e-5)
    big = np.array([[1000.0, 0.0, -1000.0]], np.float32)
    close(Tensor(big).softmax(), np.exp(np_log_softmax(big)), atol=1e-6)
    assert Tensor(np.ones((2, 2), np.int32)).softmax().dtype is dtypes.float32


def test_layernorm():
    x = rnd(3, 8) * 3 + 1
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    close(Tensor(x).layernorm(), ref, atol=1e-5)
    ref0 = (x64 - x64.mean(0, keepdims=True)) / np.sqrt(x64.var(0, keepdims=True) + 1e-3)
    close(Tensor(x).layernorm(0, eps=1e-3), ref0, atol=1e-5)


def test_cross_entropy():
    x, y = rnd(5, 4), RNG.integers(0, 4, 5)
    lsm = np_log_softmax(x, 1)
    nll = -lsm[np.arange(5), y]
    close(Tensor(x).cross_entropy(Tensor(y)), nll.mean(), atol=1e-5)
    close(Tensor(x).cross_entropy(Tensor(y), reduction="sum"), nll.sum(), atol=1e-5)
    close(Tensor(x).cross_entropy(Tensor(y), reduction="none"), nll, atol=1e-5)
    onehot = np.eye(4)[y] * 0.9 + 0.1 / 4
    close(Tensor(x).cross_entropy(Tensor(y), label_smoothing=0.1), (-(lsm * onehot).sum(1)).mean(), atol=1e-5)
    probs = np.exp(np_log_softmax(rnd(5, 4), 1)).astype(np.float32)
    close(Tensor(x).cross_entropy(Tensor(probs)), (-(lsm * probs).sum(1)).mean(), atol=1e-5)
    # classes on axis 1 of a 3-D input, as in PyTorch
    x3, y3 = rnd(2, 4, 3), RNG.integers(0, 4, (2, 3))
    l3 = np_log_softmax(x3, 1)
    ref = -np.take_along_axis(l3, y3[:, None], 1)[:, 0]
    close(Tensor(x3).cross_entropy(Tensor(y3), reduction="none"), ref, atol=1e-5)


def test_sparse_categorical_crossentropy():
    x, y = rnd(6, 5), np.array([0, 4, -1, 2, 2, -1])
    lsm = np_log_softmax(x)
    keep = y != -1
    nll = -lsm[np.arange(6), np.where(keep, y, 0)]
    close(Tensor(x).sparse_categorical_crossentropy(Tensor(y)), nll[keep].mean(), atol=1e-5)
    close(Tensor(x).sparse_categorical_crossentropy(Tensor(y), reduction="sum"), nll[keep].sum(), atol=1e-5)
    smooth = 0.2 * -lsm.mean(-1) + 0.8 * nll
    close(Tensor(x).sparse_categorical_crossentropy(Tensor(y), label_smoothing=0.2), smooth[keep].mean(), atol=1e-5)


def np_conv2d(x, w, stride=(1, 1), dilation=(1, 1), padding=(0, 0), groups=1):
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    n, cin, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    oh = (h - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, cout, oh, ow))
    opg = cout // groups
    for o in range(cout):
        g = o // opg
        for i in range(kh):
            for j in range(kw):
                patch = x[:, g * cg:(g + 1) * cg, i * dilation[0]:i * dilation[0] + stride[0] * oh:stride[0],
                          j * dilation[1]:j * dilation[1] + stride[1] * ow:stride[1]]
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
    return out


@pytest.mark.parametrize("kw", [{}, {"stride": 2}, {"padding": 1}, {"dilation": 2}, {"groups": 2},
                                {"stride": (2, 1), "padding": (1, 2), "dilation": (1, 2)}, {"stride": 3}])
def test_conv2d(kw):
    groups = kw.get("groups", 1)
    x, w, b = rnd(2, 4, 7, 8), rnd(6, 4 // groups, 3, 3), rnd(6)
    st, dl, pd = (kw.get(k, d) for k, d in (("stride", 1), ("dilation", 1), ("padding", 0)))
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    ref = np_conv2d(x, w, pair(st), pair(dl), pair(pd), groups) + b[None, :, None, None]
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), **kw)
    close(out, ref, atol=1e-4)


def test_conv2d_tinygrad_padding_and_kernel_count():
    x, w = rnd(1, 2, 5, 5), rnd(3, 2, 2, 2)
    ref = np_conv2d(np.pad(x, ((0, 0), (0, 0), (2, 0), (1, 0))), w)
    close(Tensor(x).conv2d(Tensor(w), padding=(1, 0, 2, 0)), ref, atol=1e-4)
    assert kernels(Tensor(x).conv2d(Tensor(w), Tensor(rnd(3))).relu()) == 1


def np_pool(x, k, s, fn, pad=0, fill=0.0):
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    n, c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = fn(x[:, :, i * s:i * s + k, j * s:j * s + k], axis=(2, 3))
    return out


@pytest.mark.parametrize("k,s,p", [(2, None, 0), (3, 1, 0), (3, 2, 1), (2, 3, 0)])
def test_pools(k, s, p):
    x = rnd(2, 3, 7, 6)
    st = s if s is not None else k
    close(Tensor(x).max_pool2d(k, s, padding=p), np_pool(x, k, st, np.max, p, -np.inf))
    close(Tensor(x).avg_pool2d(k, s, padding=p), np_pool(x, k, st, np.mean, p))
    if p:
        counts = np_pool(np.ones_like(x), k, st, np.sum, p)
        close(Tensor(x).avg_pool2d(k, s, padding=p, count_include_pad=False), np_pool(x, k, st, np.sum, p) / counts)


def test_pools_ceil_mode():
    # outputs checked against PyTorch's documented shape rule and values by hand
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    out = Tensor(x).max_pool2d(2, ceil_mode=True)
    close(out, [[[[6, 8, 9], [16, 18, 19], [21, 23, 24]]]])
    avg = Tensor(x).avg_pool2d(2, ceil_mode=True)
    close(avg, [[[[3, 5, 6.5], [13, 15, 16.5], [20.5, 22.5, 24]]]])
    assert Tensor(x).max_pool2d(3, stride=2, padding=1, ceil_mode=True).shape == (1, 1, 3, 3)
    assert Tensor(np.zeros((1, 1, 6, 6), np.float32)).max_pool2d(3, stride=2, padding=1, ceil_mode=True).shape == (1, 1, 4, 4)
    avg_p = Tensor(x).avg_pool2d(2, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
    ref = np_pool(x, 2, 2, np.sum, 1) / np_pool(np.ones_like(x), 2, 2, np.sum, 1)
    close(avg_p, ref)


def test_pool_int_and_kernel_count():
    x = RNG.integers(-9, 9, (1, 1, 4, 4)).astype(np.int32)
    out = Tensor(x).max_pool2d(2, padding=1)
    assert out.dtype is dtypes.int32
    np.testing.assert_array_equal(out.numpy(), np_pool(x, 2, 2, np.max, 1, np.iinfo(np.int32).min))
    assert kernels(Tensor(rnd(1, 2, 6, 6)).max_pool2d()) == 1


def test_one_hot():
    y = np.array([2, 0, 1, 2])
    np.testing.assert_array_equal(Tensor(y).one_hot(4).numpy(), np.eye(4, dtype=np.int32)[y])
    np.testing.assert_array_equal(Tensor(y).one_hot().numpy(), np.eye(3, dtype=np.int32)[y])
    np.testing.assert_array_equal(Tensor(y.reshape(2, 2)).one_hot(3).numpy(), np.eye(3, dtype=np.int32)[y.reshape(2, 2)])
    with pytest.raises(TypeError, match="int"):
        Tensor([1.0]).one_hot(2)


def test_gather():
    x = rnd(3, 4)
    idx = np.array([[0, 3], [2, 2], [1, 0]])
    close(Tensor(x).gather(1, Tensor(idx)), np.take_along_axis(x, idx, 1))
    idx0 = np.array([[2, 0, 1, 1]])
    close(Tensor(x).gather(0, Tensor(idx0)), np.take_along_axis(x, idx0, 0))
    idx_small = np.array([[1], [0]])
    close(Tensor(x).gather(1, Tensor(idx_small)), np.take_along_axis(x[:2], idx_small, 1))
    xi = RNG.integers(0, 9, (3, 4)).astype(np.int32)
    np.testing.assert_array_equal(Tensor(xi).gather(1, Tensor(idx)).numpy(), np.take_along_axis(xi, idx, 1))
    with pytest.raises(ValueError, match=r"\(5, 1\)"):
        Tensor(x).gather(1, Tensor(np.zeros((5, 1), np.int32)))


def test_scatter():
    x = np.zeros((3, 5), np.float32)
    idx = np.array([[0, 1, 2], [2, 0, 4]])
    src = np.arange(1, 10, dtype=np.float32).reshape(3, 3)
    ref = x.copy()
    for i in range(2):
        for j in range(3):
            ref[i, idx[i, j]] = src[i, j]
    close(Tensor(x).scatter(1, Tensor(idx), Tensor(src)), ref)
    ref0 = x.copy()
    idx0 = np.array([[0, 2, 1, 0, 2]])
    for j in range(5):
        ref0[idx0[0, j], j] = src[0, j] if j < 3 else 7.0
    src0 = np.concatenate([src[:1], np.full((1, 2), 7.0, np.float32)], 1)
    close(Tensor(x).scatter(0, Tensor(idx0), Tensor(src0)), ref0)
    add_ref = np.ones((3, 5), np.float32)
    add_ref[0, 1] += 4.0
    add_ref[0, 3] += 2.0
    close(Tensor.ones(3, 5).scatter(1, Tensor([[1, 1, 3]]), 2.0, reduce="add"), add_ref)
    close(Tensor.ones(2, 3).scatter(1, Tensor([[0], [2]]), 3.0, reduce="multiply"), [[3, 1, 1], [1, 1, 3]])
