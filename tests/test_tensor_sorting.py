"""Sorting, cumulative, scatter_reduce, sampling and data-dependent ops of issue 15 (group 3) against numpy:
values, indices and gradients on the PYTHON reference device and the default device; topk's kernel count;
bad arguments."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import tg_core.engine.realize  # noqa: F401  (the module, for its stats)
from tg_core import Device, Tensor, dtypes

DEVICES = ["PYTHON", Device.DEFAULT]
RNG = np.random.default_rng(3)
STATS = sys.modules["tg_core.engine.realize"].stats


def T(a, device, **kw):
    return Tensor(np.asarray(a), device=device, **kw)


@pytest.mark.parametrize("device", DEVICES)
def test_sort_argsort_stable_with_ties_and_nan(device):
    x = np.array([[3.0, 1.0, 2.0, 1.0, math.nan, -1.0], [0.0, 0.0, -2.0, 5.0, 5.0, math.inf]], dtype=np.float32)
    for desc in (False, True):
        v, i = T(x, device).sort(descending=desc)
        order = np.argsort(-x if desc else x, axis=-1, kind="stable")
        if desc:  # numpy puts NaN last for -x too; PyTorch's descending puts it first
            order = np.array([[4, 0, 2, 1, 3, 5], [5, 3, 4, 0, 1, 2]])
        np.testing.assert_array_equal(i.numpy(), order)
        np.testing.assert_array_equal(v.numpy(), np.take_along_axis(x, order, -1))
        assert i.dtype is dtypes.int32
    np.testing.assert_array_equal(T(x, device).argsort(0).numpy(), np.argsort(x, 0, kind="stable"))
    xi = RNG.integers(-3, 3, (4, 5)).astype(np.int32)
    np.testing.assert_array_equal(T(xi, device).sort(0)[0].numpy(), np.sort(xi, 0))
    np.testing.assert_array_equal(T(xi, device).argsort(1, descending=True).numpy(),
                                  np.argsort(-xi, 1, kind="stable"))
    b = np.array([True, False, True, False])
    np.testing.assert_array_equal(T(b, device).sort()[0].numpy(), np.sort(b))
    assert T(np.float32(2.0), device).sort()[0].numpy() == 2.0


@pytest.mark.parametrize("device", DEVICES)
def test_sort_and_topk_gradients(device):
    x = RNG.normal(size=(3, 5)).astype(np.float32)
    w = RNG.normal(size=(3, 2)).astype(np.float32)
    t = T(x, device, requires_grad=True)
    v, i = t.topk(2, dim=1)
    np.testing.assert_allclose(v.numpy(), -np.sort(-x, 1)[:, :2])
    np.testing.assert_array_equal(i.numpy(), np.argsort(-x, 1, kind="stable")[:, :2])
    (v * T(w, device)).sum().backward()
    expect = np.zeros_like(x)
    np.put_along_axis(expect, np.argsort(-x, 1)[:, :2], w, 1)
    np.testing.assert_allclose(t.grad.numpy(), expect)
    v, i = T(x, device).topk(3, dim=0, largest=False)
    np.testing.assert_allclose(v.numpy(), np.sort(x, 0)[:3])
    np.testing.assert_array_equal(i.numpy(), np.argsort(x, 0, kind="stable")[:3])
    assert T(x, device).topk(0)[0].shape == (3, 0)


def test_topk_of_10_from_32000_is_three_kernels():
    logits = RNG.normal(size=(32000,)).astype(np.float32)
    t = Tensor(logits).realize()
    before = STATS["kernels"]
    v, i = t.topk(10)
    Tensor.realize_all(v, i)
    assert STATS["kernels"] - before <= 3
    np.testing.assert_array_equal(i.numpy(), np.argsort(-logits, kind="stable")[:10])
    np.testing.assert_array_equal(v.numpy(), logits[i.numpy()])


@pytest.mark.parametrize("device", DEVICES)
def test_cummin_cummax_logcumsumexp(device):
    x = RNG.normal(size=(3, 6)).astype(np.float32)
    np.testing.assert_array_equal(T(x, device).cummin(1).numpy(), np.minimum.accumulate(x, 1))
    np.testing.assert_array_equal(T(x, device).cummax(0).numpy(), np.maximum.accumulate(x, 0))
    xi = RNG.integers(-9, 9, (5,)).astype(np.int32)
    np.testing.assert_array_equal(T(xi, device).cummin().numpy(), np.minimum.accumulate(xi))
    # values far apart: a shift by the whole axis's max would underflow exp() of the early ones to 0
    big = np.array([-200.0, -199.0, 0.0, 150.0, -1e4, math.inf], dtype=np.float32)
    for a, axis in ((x, 1), (x, 0), (big, 0)):
        t = T(a, device, requires_grad=True)
        out = t.logcumsumexp(axis)
        ref = np.logaddexp.accumulate(a.astype(np.float64), axis)
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-6)
    t = T(x, device, requires_grad=True)
    t.logcumsumexp(1).sum().backward()
    # d/dx_j sum_i lse(x_0..x_i) = sum_{i >= j} exp(x_j - lse_i)
    lse = np.logaddexp.accumulate(x.astype(np.float64), 1)
    expect = np.array([[sum(np.exp(x[r, j] - lse[r, i]) for i in range(j, 6)) for j in range(6)] for r in range(3)])
    np.testing.assert_allclose(t.grad.numpy(), expect, rtol=1e-5)


def _scatter_reduce_ref(x, dim, idx, src, reduce, include_self):
    out = x.astype(np.float64).copy()
    hits: dict = {}
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[dim] = idx[pos]
        hits.setdefault(tuple(tgt), []).append(src[pos])
    for tgt, vals in hits.items():
        vals = ([out[tgt]] if include_self else []) + vals
        out[tgt] = {"sum": np.sum, "prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}[reduce](vals)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce(reduce, device):
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    idx = np.array([[0, 2, 2], [1, 0, 2]])
    src = RNG.normal(size=(2, 3)).astype(np.float32)
    for include_self in (True, False):
        got = T(x, device).scatter_reduce(0, T(idx, device), T(src, device), reduce, include_self=include_self)
        np.testing.assert_allclose(got.numpy(), _scatter_reduce_ref(x, 0, idx, src, reduce, include_self),
                                   rtol=1e-5, atol=1e-6)
    got = T(x, device).scatter_reduce(1, T(idx, device), T(src, device), reduce)
    np.testing.assert_allclose(got.numpy(), _scatter_reduce_ref(x, 1, idx, src, reduce, True), rtol=1e-5, atol=1e-6)
    xi = np.arange(4, dtype=np.int32)
    got = T(xi, device).scatter_reduce(0, T([1, 1, 3], device), T(np.array([4, 7, -2], np.int32), device), reduce)
    ref = _scatter_reduce_ref(xi, 0, np.array([1, 1, 3]), np.array([4, 7, -2]), reduce, True)
    np.testing.assert_array_equal(got.numpy(), np.floor(ref).astype(np.int32))


@pytest.mark.parametrize("device", DEVICES)
def test_scatter_reduce_gradient_sum(device):
    x = RNG.normal(size=(4,)).astype(np.float32)
    src = RNG.normal(size=(3,)).astype(np.float32)
    tx, ts = T(x, device, requires_grad=True), T(src, device, requires_grad=True)
    w = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    (tx.scatter_reduce(0, T([1, 1, 3], device), ts, "sum") * T(w, device)).sum().backward()
    np.testing.assert_allclose(tx.grad.numpy(), w)
    np.testing.assert_allclose(ts.grad.numpy(), [2.0, 2.0, 4.0])


@pytest.mark.parametrize("device", DEVICES)
def test_multinomial(device):
    Tensor.manual_seed(7)
    w = np.array([[0.0, 1.0, 3.0, 0.0], [2.0, 0.0, 0.0, 2.0]], dtype=np.float32)
    s = T(w, device).multinomial(4000, replacement=True).numpy()
    assert s.shape == (2, 4000) and s.dtype == np.int32
    for r in range(2):
        freq = np.bincount(s[r], minlength=4) / 4000
        np.testing.assert_allclose(freq, w[r] / w[r].sum(), atol=0.03)
    s = T(w, device).multinomial(2).numpy()
    assert sorted(s[0]) == [1, 2] and sorted(s[1]) == [0, 3]   # without replacement: each positive one once
    one = T(np.array([0.0, 0.0, 5.0], np.float32), device).multinomial(1).numpy()
    assert one.tolist() == [2]


def test_multinomial_bad_weights_raise():
    with pytest.raises(ValueError, match=r"weights must be finite and non-negative; a row has a negative"):
        Tensor([[1.0, -1.0]]).multinomial()
    with pytest.raises(ValueError, match=r"a row of weights has no positive entry \(all zero\)"):
        Tensor([[1.0, 2.0], [0.0, 0.0]]).multinomial()
    with pytest.raises(ValueError, match=r"no positive entry .*device-side check"):
        (Tensor([[1.0, 1.0]]) * 0).multinomial().numpy()        # computed weights: found when read
    with pytest.raises(ValueError, match=r"only 1 positive weights, fewer than the 2 samples"):
        Tensor([[1.0, 0.0, 0.0]]).multinomial(2)
    with pytest.raises(ValueError, match=r"cannot draw 4 samples without replacement from 3 categories"):
        Tensor([1.0, 1.0, 1.0]).multinomial(4)
    with pytest.raises(ValueError, match=r"num_samples must be >= 1, got 0"):
        Tensor([1.0]).multinomial(0)
    with pytest.raises(TypeError, match=r"multinomial needs float weights, got dtypes.int"):
        Tensor([1, 2]).multinomial()
    with pytest.raises(ValueError, match=r"multinomial needs 1-D or 2-D weights, got shape \(1, 1, 2\)"):
        Tensor([[[1.0, 2.0]]]).multinomial()


@pytest.mark.parametrize("device", DEVICES)
def test_masked_select_and_nonzero(device):
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    m = x > 0.2
    t = T(x, device, requires_grad=True)
    out = t.masked_select(T(m, device))
    np.testing.assert_array_equal(out.numpy(), x[m])
    out.sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), m.astype(np.float32))
    row = np.array([True, False, True, False])
    np.testing.assert_array_equal(T(x, device).masked_select(T(row, device)).numpy(), x[:, row].reshape(-1))
    assert T(x, device).masked_select(T(np.zeros(4, bool), device)).shape == (0,)
    xi = np.array([[0, 3, 0], [1, 0, 2]], dtype=np.int32)
    np.testing.assert_array_equal(T(xi, device).nonzero().numpy(), np.argwhere(xi))
    for a, b in zip(T(xi, device).nonzero(as_tuple=True), np.nonzero(xi)):
        np.testing.assert_array_equal(a.numpy(), b)
    assert T(np.zeros(3, np.float32), device).nonzero().shape == (0, 1)


def test_sorting_and_scatter_errors():
    t = Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"topk: k=4 is larger than dim -1 of size 3 in \(2, 3\) \(allowed: 0 to 3\)"):
        t.topk(4)
    with pytest.raises(ValueError, match=r"topk: k must be >= 0, got -1"):
        t.topk(-1)
    with pytest.raises(IndexError, match=r"dim 2 is out of range"):
        t.sort(2)
    with pytest.raises(ValueError, match=r"scatter_reduce: reduce is one of 'sum', 'mean', 'prod', 'amax', 'amin', "
                                         r"got 'max'"):
        t.scatter_reduce(0, Tensor([[0]]), t, "max")
    with pytest.raises(TypeError, match=r"scatter_reduce needs an int index tensor"):
        t.scatter_reduce(0, Tensor([[0.0]]), t, "sum")
    with pytest.raises(IndexError, match=r"scatter_reduce: index 2 is out of bounds for dim 0 with size 2"):
        t.scatter_reduce(0, Tensor([[2]]), t, "sum")
    with pytest.raises(TypeError, match=r"masked_select needs a bool mask tensor"):
        t.masked_select(Tensor([1, 0, 1]))


@pytest.mark.parametrize("device", DEVICES)
def test_float32_sort_keys_tie_signed_zeros_and_every_nan(device):
    # float32 ranks come from integer keys of the bits: -0.0 must still tie with 0.0 (stable order) and a
    # NaN with the sign bit set must sort with the other NaNs, above inf
    x = np.array([0.0, -0.0, np.nan, -np.nan, 1.0, -np.inf, np.inf, -0.0], dtype=np.float32)
    np.testing.assert_array_equal(T(x, device).argsort().numpy(), np.argsort(x, kind="stable"))
    np.testing.assert_array_equal(T(x, device).argsort(descending=True).numpy(), [2, 3, 6, 4, 0, 1, 7, 5])
    np.testing.assert_array_equal(T(x, device).topk(3, largest=False)[1].numpy(), [5, 0, 1])
