"""The elementwise math and activation ops of issue 15 against numpy: forward values and gradients
(analytic numpy derivatives), on the PYTHON reference device and the default device, plus edge values
(zeros, infinities, NaN, domain ends) and bad arguments."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tg_core import Device, Tensor, dtypes

DEVICES = ["PYTHON", Device.DEFAULT]
RNG = np.random.default_rng(15)
SELU_A, SELU_S = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _softplus(x):
    return np.log1p(np.exp(x))


# name: (our op, numpy forward, numpy derivative, (lo, hi) of the test inputs)
UNARY = {
    "log10": (Tensor.log10, np.log10, lambda x: 1 / (x * np.log(10)), (0.1, 5)),
    "log1p": (Tensor.log1p, np.log1p, lambda x: 1 / (1 + x), (-0.9, 3)),
    "expm1": (Tensor.expm1, np.expm1, np.exp, (-3, 3)),
    "sinh": (Tensor.sinh, np.sinh, np.cosh, (-3, 3)),
    "cosh": (Tensor.cosh, np.cosh, np.sinh, (-3, 3)),
    "asin": (Tensor.asin, np.arcsin, lambda x: 1 / np.sqrt(1 - x * x), (-0.95, 0.95)),
    "acos": (Tensor.acos, np.arccos, lambda x: -1 / np.sqrt(1 - x * x), (-0.95, 0.95)),
    "atan": (Tensor.atan, np.arctan, lambda x: 1 / (1 + x * x), (-6, 6)),
    "asinh": (Tensor.asinh, np.arcsinh, lambda x: 1 / np.sqrt(x * x + 1), (-5, 5)),
    "acosh": (Tensor.acosh, np.arccosh, lambda x: 1 / np.sqrt(x * x - 1), (1.05, 6)),
    "atanh": (Tensor.atanh, np.arctanh, lambda x: 1 / (1 - x * x), (-0.95, 0.95)),
    "softsign": (Tensor.softsign, lambda x: x / (1 + abs(x)), lambda x: 1 / (1 + abs(x)) ** 2, (-4, 4)),
    "logsigmoid": (Tensor.logsigmoid, lambda x: np.log(_sig(x)), lambda x: 1 - _sig(x), (-6, 6)),
    "hardsigmoid": (Tensor.hardsigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1),
                    lambda x: np.where(abs(x) < 3, 1 / 6, 0), (-5, 5)),
    "hardswish": (Tensor.hardswish, lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
                  lambda x: np.where(x < -3, 0, np.where(x > 3, 1, x / 3 + 0.5)), (-5, 5)),
    "celu": (lambda t: t.celu(0.7), lambda x: np.maximum(0, x) + np.minimum(0, 0.7 * np.expm1(x / 0.7)),
             lambda x: np.where(x > 0, 1, np.exp(x / 0.7)), (-3, 3)),
    "selu": (Tensor.selu, lambda x: SELU_S * np.where(x > 0, x, SELU_A * np.expm1(x)),
             lambda x: SELU_S * np.where(x > 0, 1, SELU_A * np.exp(x)), (-3, 3)),
    "mish": (Tensor.mish, lambda x: x * np.tanh(_softplus(x)),
             lambda x: np.tanh(_softplus(x)) + x * (1 - np.tanh(_softplus(x)) ** 2) * _sig(x), (-4, 4)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_forward_and_gradient(name, device):
    ours, fwd, der, (lo, hi) = UNARY[name]
    x = RNG.uniform(lo, hi, (3, 5))
    x = np.where(abs(x) < 1e-3, 0.5, x)  # keep away from the kinks of the piecewise ones
    t = Tensor(x.astype(np.float32), device=device, requires_grad=True)
    out = ours(t)
    np.testing.assert_allclose(out.numpy(), fwd(x), rtol=2e-5, atol=2e-6)
    out.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), der(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_small_arguments_keep_their_relative_accuracy(device):
    # log1p and expm1 exist for these: 1 + 1e-7 rounds to 1 in float32, log(1 + x) would be 0 or 1.19e-7
    x = np.array([1e-7, -3e-8, 1e-20, 0.0, 0.3, -0.4], dtype=np.float32)
    for ours, ref in ((Tensor.log1p, np.log1p), (Tensor.expm1, np.expm1), (Tensor.sinh, np.sinh),
                      (Tensor.asinh, np.arcsinh), (Tensor.atanh, np.arctanh), (Tensor.atan, np.arctan),
                      (Tensor.asin, np.arcsin)):
        np.testing.assert_allclose(ours(Tensor(x, device=device)).numpy(), ref(x.astype(np.float64)), rtol=3e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_edge_values(device):
    inf, nan = math.inf, math.nan
    with np.errstate(all="ignore"):
        cases = {
            Tensor.log1p: ([-1.0, -2.0, inf, 1e30], np.log1p),
            Tensor.expm1: ([inf, -inf, 100.0, -100.0], np.expm1),
            Tensor.log10: ([0.0, -1.0, inf, 1000.0], np.log10),
            Tensor.sinh: ([inf, -inf, 89.0, -89.0], np.sinh),
            Tensor.cosh: ([inf, -inf, 89.0, 0.0], np.cosh),
            Tensor.atan: ([inf, -inf, 1e30, nan], np.arctan),
            Tensor.asin: ([1.0, -1.0, 1.5, nan], np.arcsin),
            Tensor.acos: ([1.0, -1.0, -1.5], np.arccos),
            Tensor.asinh: ([1e20, -1e30, inf, -inf], np.arcsinh),
            Tensor.acosh: ([1.0, 0.5, 1e30, inf], np.arccosh),
            Tensor.atanh: ([1.0, -1.0, 2.0, 0.0], np.arctanh),
            Tensor.logsigmoid: ([-100.0, 100.0, -inf, inf], lambda x: -np.logaddexp(0, -x)),
        }
        for ours, (vals, ref) in cases.items():
            x = np.array(vals, dtype=np.float32)
            np.testing.assert_allclose(ours(Tensor(x, device=device)).numpy(), ref(x.astype(np.float64)).astype(np.float32),
                                       rtol=1e-5, err_msg=ours.__name__)


@pytest.mark.parametrize("device", DEVICES)
def test_atan2_every_quadrant_and_gradient(device):
    y = np.array([1.0, 1.0, -1.0, -1.0, 0.0, 2.0, -2.0, 0.0, 3.0])
    x = np.array([1.0, -1.0, -1.0, 1.0, -1.0, 0.0, 0.0, 0.0, 0.5])
    ty = Tensor(y.astype(np.float32), device=device, requires_grad=True)
    tx = Tensor(x.astype(np.float32), device=device, requires_grad=True)
    np.testing.assert_allclose(ty.atan2(tx).numpy(), np.arctan2(y, x), rtol=1e-6, atol=1e-7)
    keep = x != 0  # the derivative at x == 0 is not the point of the test
    (ty.atan2(tx) * Tensor(keep.astype(np.float32), device=device)).sum().backward()
    r2 = np.where(keep, x * x + y * y, 1.0)
    np.testing.assert_allclose(ty.grad.numpy(), np.where(keep, x / r2, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tx.grad.numpy(), np.where(keep, -y / r2, 0), rtol=1e-5, atol=1e-6)
    # broadcasting and a Python scalar
    np.testing.assert_allclose(Tensor([[1.0], [-2.0]], device=device).atan2(-1.0).numpy(),
                               np.arctan2([[1.0], [-2.0]], -1.0), rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_copysign_fmod_logaddexp(device):
    a = np.array([1.5, -2.0, 3.0, -0.0, 0.0, 7.25], dtype=np.float32)
    b = np.array([-1.0, 2.0, -0.0, 1.0, -3.0, 2.0], dtype=np.float32)
    got = Tensor(a, device=device).copysign(Tensor(b, device=device)).numpy()
    np.testing.assert_array_equal(got, np.copysign(a, b))
    assert np.array_equal(np.signbit(got), np.signbit(np.copysign(a, b)))
    assert Tensor([3, -4], device=device).copysign(-1).dtype is dtypes.float32
    np.testing.assert_array_equal(Tensor([3, -4], device=device).copysign(-1).numpy(), [-3.0, -4.0])

    x = np.array([5.5, -5.5, 5.5, -5.5, 7.0], dtype=np.float32)
    y = np.array([2.0, 2.0, -2.0, -2.0, 7.0], dtype=np.float32)
    np.testing.assert_allclose(Tensor(x, device=device).fmod(Tensor(y, device=device)).numpy(), np.fmod(x, y))
    xi, yi = np.array([7, -7, 7, -7], dtype=np.int32), np.array([3, 3, -3, -3], dtype=np.int32)
    np.testing.assert_array_equal(Tensor(xi, device=device).fmod(Tensor(yi, device=device)).numpy(), np.fmod(xi, yi))
    tx = Tensor(x, device=device, requires_grad=True)
    tx.fmod(3.0).sum().backward()
    np.testing.assert_array_equal(tx.grad.numpy(), np.ones(5))

    p = np.array([0.5, -1000.0, 1000.0, 3.0, -math.inf, math.inf], dtype=np.float32)
    q = np.array([-2.0, -1000.0, 999.0, 3.0, -math.inf, 1.0], dtype=np.float32)
    np.testing.assert_allclose(Tensor(p, device=device).logaddexp(Tensor(q, device=device)).numpy(),
                               np.logaddexp(p.astype(np.float64), q), rtol=1e-6)
    tp = Tensor(p[:4], device=device, requires_grad=True)
    tq = Tensor(q[:4], device=device, requires_grad=True)
    tp.logaddexp(tq).sum().backward()
    pp, qq = p[:4].astype(np.float64), q[:4].astype(np.float64)
    np.testing.assert_allclose(tp.grad.numpy(), np.exp(pp - np.logaddexp(pp, qq)), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(tq.grad.numpy(), np.exp(qq - np.logaddexp(pp, qq)), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_isfinite_isinf_isclose_allclose(device):
    x = np.array([1.0, math.inf, -math.inf, math.nan, 0.0], dtype=np.float32)
    t = Tensor(x, device=device)
    np.testing.assert_array_equal(t.isfinite().numpy(), np.isfinite(x))
    np.testing.assert_array_equal(t.isinf().numpy(), np.isinf(x))
    np.testing.assert_array_equal(t.isinf(detect_negative=False).numpy(), np.isposinf(x))
    np.testing.assert_array_equal(t.isinf(detect_positive=False).numpy(), np.isneginf(x))
    np.testing.assert_array_equal(t.isinf(False, False).numpy(), np.zeros(5, bool))
    np.testing.assert_array_equal(Tensor([1, 2], device=device).isfinite().numpy(), [True, True])

    a = np.array([1.0, 1.0, math.inf, math.inf, math.nan, 100.0, 0.0], dtype=np.float32)
    b = np.array([1.0 + 1e-6, 1.1, math.inf, -math.inf, math.nan, 100.001, 1e-9], dtype=np.float32)
    for kw in ({}, {"equal_nan": True}, {"rtol": 1e-3, "atol": 0.0}, {"atol": 0.2}):
        got = Tensor(a, device=device).isclose(Tensor(b, device=device), **kw).numpy()
        np.testing.assert_array_equal(got, np.isclose(a, b, **kw), err_msg=str(kw))
    assert Tensor([1.0, 2.0], device=device).allclose(Tensor([1.0, 2.0 + 1e-7], device=device)) is True
    assert Tensor([1.0, 2.0], device=device).allclose([1.0, 2.1]) is False
    assert Tensor([1, 2], device=device).isclose(Tensor([1, 3], device=device)).numpy().tolist() == [True, False]


@pytest.mark.parametrize("device", DEVICES)
def test_softmin_and_normalize(device):
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    e = np.exp(-x - (-x).max(0, keepdims=True))
    np.testing.assert_allclose(Tensor(x, device=device).softmin(0).numpy(), e / e.sum(0, keepdims=True), rtol=1e-5)
    for p in (2.0, 1, 3.0, math.inf):
        norm = np.linalg.norm(x.astype(np.float64), ord=p, axis=1, keepdims=True)
        np.testing.assert_allclose(Tensor(x, device=device).normalize(p=p).numpy(), x / norm, rtol=1e-5, err_msg=str(p))
    np.testing.assert_array_equal(Tensor(np.zeros((2, 3), np.float32), device=device).normalize(dim=0).numpy(),
                                  np.zeros((2, 3)))
    t = Tensor(x, device=device, requires_grad=True)
    w = RNG.normal(size=(3, 4))
    (t.normalize() * Tensor(w.astype(np.float32), device=device)).sum().backward()
    n = np.linalg.norm(x, axis=1, keepdims=True)
    u = x / n
    np.testing.assert_allclose(t.grad.numpy(), (w - u * (w * u).sum(1, keepdims=True)) / n, rtol=1e-4, atol=1e-5)


def test_bad_arguments_name_the_value_and_what_is_allowed():
    t = Tensor([1.0, 2.0])
    with pytest.raises(ValueError, match=r"rtol must be a non-negative number, got -1"):
        t.isclose(t, rtol=-1)
    with pytest.raises(ValueError, match=r"atol must be a non-negative number, got 'x'"):
        t.isclose(t, atol="x")
    with pytest.raises(TypeError, match=r"detect_positive and detect_negative are bools, got 1"):
        t.isinf(1, True)
    with pytest.raises(ValueError, match=r"celu: alpha must be a non-zero number, got 0"):
        t.celu(0)
    with pytest.raises(ValueError, match=r"normalize: p must be a positive number or inf, got 0"):
        t.normalize(p=0, dim=0)
    with pytest.raises(ValueError, match=r"eps must be a non-negative number, got -1"):
        t.normalize(dim=0, eps=-1)
    with pytest.raises(IndexError, match=r"dim 1 is out of range for a tensor of shape \(2,\)"):
        t.normalize()
    with pytest.raises(TypeError, match=r"fmod needs int or float tensors, got dtypes.bool"):
        Tensor([True]).fmod(Tensor([True]))


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_at_zero(device):
    # the odd functions are built on |x|; their derivative at 0 must still be the limit, not a sign flip
    for ours, expect in ((Tensor.atan, 1.0), (Tensor.asinh, 1.0), (Tensor.sinh, 1.0), (Tensor.asin, 1.0),
                         (Tensor.atanh, 1.0), (Tensor.log1p, 1.0), (Tensor.expm1, 1.0), (Tensor.cosh, 0.0),
                         (Tensor.softsign, 1.0)):
        t = Tensor([0.0], device=device, requires_grad=True)
        ours(t).sum().backward()
        assert t.grad.numpy().tolist() == pytest.approx([expect], abs=1e-6), ours.__name__
