"""Tensor ops against numpy on the PYTHON reference device: elementwise (with a dtype matrix and
broadcasting), movement, reductions, creation; kernel counts; errors on bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tg_core import Device, Tensor, dtypes
from tg_core.schedule import create_schedule

RNG = np.random.default_rng(0)
DTYPES = [dtypes.int32, dtypes.float16, dtypes.float32, dtypes.bool]
NP = {dtypes.int32: np.int32, dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.bool: np.bool_}


def data(shape, dt=dtypes.float32, lo=-5, hi=5):
    if dt is dtypes.bool:
        return RNG.random(shape) > 0.5
    if dtypes.is_int(dt):
        return RNG.integers(lo, hi, shape).astype(NP[dt])
    return RNG.uniform(lo, hi, shape).astype(NP[dt])


def close(t: Tensor, ref, atol=1e-5, rtol=1e-5):
    ref = np.asarray(ref)
    got = t.numpy()
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if got.dtype.kind in "fc" or ref.dtype.kind in "fc":
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), atol=atol, rtol=rtol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, ref)


def kernels(t: Tensor) -> int:
    return len(create_schedule([t.uop], [t.device])[0])


# ---- elementwise ---------------------------------------------------------------------------------------------

BINARY = {"add": (lambda a, b: a + b, np.add), "sub": (lambda a, b: a - b, np.subtract),
          "mul": (lambda a, b: a * b, np.multiply), "max": (lambda a, b: a.maximum(b), np.maximum),
          "min": (lambda a, b: a.minimum(b), np.minimum), "lt": (lambda a, b: a < b, np.less),
          "le": (lambda a, b: a <= b, np.less_equal), "eq": (lambda a, b: a == b, np.equal),
          "ne": (lambda a, b: a != b, np.not_equal), "ge": (lambda a, b: a >= b, np.greater_equal)}


# bool subtraction is an error (as in PyTorch), tested below
@pytest.mark.parametrize("dt, name", [(dt, name) for dt in DTYPES for name in BINARY
                                      if not (dt is dtypes.bool and name == "sub")], ids=str)
def test_binary_dtypes(dt, name):
    a, b = data((3, 4), dt), data((4,), dt)
    ours, ref = BINARY[name]
    tol = 1e-2 if dt is dtypes.float16 else 1e-6
    out = ours(Tensor(a), Tensor(b))
    expect = ref(a, b)
    if dt is dtypes.bool and name in ("add", "mul"):
        expect = ref(a.astype(np.int32), b.astype(np.int32)) if name == "add" else a & b
        expect = expect.astype(bool) if name == "add" else expect
    close(out, expect, atol=tol, rtol=tol)
    assert out.dtype is (dtypes.bool if name in ("lt", "le", "eq", "ne", "ge") else dt)


def test_true_division_and_promotion():
    a, b = data((5,), dtypes.int32, 1, 9), data((5,), dtypes.int32, 1, 9)
    out = Tensor(a) / Tensor(b)
    assert out.dtype is dtypes.float32
    close(out, a / b, rtol=1e-6)
    assert (Tensor(a) + 1.5).dtype is dtypes.float32
    assert (Tensor(a) * 2).dtype is dtypes.int32
    assert (Tensor(a.astype(np.float16)) + 1.5).dtype is dtypes.float16
    assert (Tensor([True, False]) + 1).dtype is dtypes.int32
    assert (Tensor(a) + Tensor(a.astype(np.float16))).dtype is dtypes.float16
    close(2 - Tensor([1.0, 2.0]), [1.0, 0.0])
    close(1 / Tensor([2.0, 4.0]), [0.5, 0.25])


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.float32, dtypes.int8], ids=str)
def test_floor_division_and_modulo(dt):
    a = np.array([-7, 7, -8, 8, 5, -5, 0, 3], dtype=np.int32)
    b = np.array([2, -2, 3, -3, 5, 3, 7, -4], dtype=np.int32)
    npdt = {dtypes.int32: np.int32, dtypes.float32: np.float32, dtypes.int8: np.int8}[dt]
    ta, tb = Tensor(a.astype(npdt)), Tensor(b.astype(npdt))
    close(ta // tb, a.astype(npdt) // b.astype(npdt))
    close(ta % tb, np.mod(a.astype(npdt), b.astype(npdt)))
    close(ta // 3, a.astype(npdt) // npdt(3))
    close(ta % -3, np.mod(a.astype(npdt), npdt(-3)))
    close(17 // tb, np.int32(17) // b.astype(npdt) if dt is not dtypes.float32 else 17.0 // b.astype(npdt))
    assert (ta // tb).dtype is dt


def test_div_rounding_modes():
    a, b = np.array([-7, 7, -8, 5], np.int32), np.array([2, -2, 3, 5], np.int32)
    close(Tensor(a).div(Tensor(b), rounding_mode="trunc"), np.trunc(a / b).astype(np.int32))
    close(Tensor(a).div(Tensor(b), rounding_mode="floor"), a // b)
    close(Tensor(a.astype(np.float32)).div(2, rounding_mode="trunc"), np.trunc(a / 2))
    assert Tensor(a).div(Tensor(b), rounding_mode="trunc").dtype is dtypes.int32
    with pytest.raises(ValueError, match="rounding_mode"):
        Tensor(a).div(2, rounding_mode="round")


def test_float_floor_div_and_mod():
    a, b = data((20,)), data((20,), lo=0.5, hi=3) * np.where(RNG.random(20) > 0.5, 1, -1).astype(np.float32)
    close(Tensor(a) // Tensor(b), np.floor_divide(a, b), atol=1e-5)
    close(Tensor(a) % Tensor(b), np.mod(a, b), atol=1e-5)


@pytest.mark.parametrize("name,ours,ref,lo,hi", [
    ("exp", Tensor.exp, np.exp, -5, 5), ("log", Tensor.log, np.log, 0.1, 5), ("exp2", Tensor.exp2, np.exp2, -5, 5),
    ("log2", Tensor.log2, np.log2, 0.1, 5), ("sqrt", Tensor.sqrt, np.sqrt, 0, 5),
    ("rsqrt", Tensor.rsqrt, lambda x: 1 / np.sqrt(x), 0.1, 5), ("sin", Tensor.sin, np.sin, -5, 5),
    ("cos", Tensor.cos, np.cos, -5, 5), ("tan", Tensor.tan, np.tan, -1.2, 1.2),
    ("relu", Tensor.relu, lambda x: np.maximum(x, 0), -5, 5),
    ("sigmoid", Tensor.sigmoid, lambda x: 1 / (1 + np.exp(-x)), -30, 30), ("tanh", Tensor.tanh, np.tanh, -10, 10),
    ("silu", Tensor.silu, lambda x: x / (1 + np.exp(-x)), -10, 10),
    ("softplus", Tensor.softplus, lambda x: np.log1p(np.exp(x)), -10, 10),
    ("abs", Tensor.abs, np.abs, -5, 5), ("neg", Tensor.neg, np.negative, -5, 5),
    ("floor", Tensor.floor, np.floor, -5, 5), ("ceil", Tensor.ceil, np.ceil, -5, 5),
    ("trunc", Tensor.trunc, np.trunc, -5, 5), ("round", Tensor.round, np.round, -5, 5),
    ("sign", Tensor.sign, np.sign, -5, 5), ("square", Tensor.square, np.square, -5, 5),
])
def test_unary_float(name, ours, ref, lo, hi):
    x = data((64,), lo=lo, hi=hi)
    if name == "round":
        x = np.concatenate([x, np.array([0.5, 1.5, 2.5, -0.5, -1.5], np.float32)])
    close(ours(Tensor(x)), ref(x.astype(np.float64)).astype(np.float32), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.float16, dtypes.bool], ids=str)
@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin", "cos", "sigmoid", "tanh", "relu", "abs", "gelu",
                                  "silu", "softplus", "exp2", "rsqrt"])
def test_unary_dtype_matrix(dt, name):
    x = data((16,), dt, 1, 4)
    ref_fn = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos, "exp2": np.exp2,
              "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh, "relu": lambda v: np.maximum(v, 0),
              "abs": np.abs, "silu": lambda v: v / (1 + np.exp(-v)), "softplus": lambda v: np.log1p(np.exp(v)),
              "gelu": lambda v: 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2))),
              "rsqrt": lambda v: 1 / np.sqrt(v)}[name]
    out = getattr(Tensor(x), name)()
    float_out = name not in ("relu", "abs")
    expect_dt = dt if not float_out or dt is dtypes.float16 else dtypes.float32
    assert out.dtype is expect_dt
    tol = 1e-2 if dt is dtypes.float16 else 1e-5
    with np.errstate(all="ignore"):
        ref = ref_fn(x.astype(np.float64))
    close(out, ref, atol=tol, rtol=tol)


def test_unary_dtypes():
    i = data((10,), dtypes.int32)
    assert Tensor(i).exp().dtype is dtypes.float32
    close(Tensor(i).abs(), np.abs(i))
    close(-Tensor(i), -i)
    h = data((10,), dtypes.float16, 0.1, 3)
    out = Tensor(h).log()
    assert out.dtype is dtypes.float16
    close(out, np.log(h.astype(np.float32)), atol=2e-3, rtol=2e-3)
    assert Tensor([True]).sqrt().dtype is dtypes.float32


def test_gelu_matches_erf_definition():
    x = data((50,), lo=-6, hi=6).astype(np.float64)
    erf = np.vectorize(math.erf)
    close(Tensor(x.astype(np.float32)).gelu(), 0.5 * x * (1 + erf(x / math.sqrt(2))), atol=1e-5)
    tanh_ref = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    close(Tensor(x.astype(np.float32)).gelu(approximate="tanh"), tanh_ref, atol=1e-5)


def test_sigmoid_softplus_extremes():
    x = np.array([-1000, -100, 0, 100, 1000], np.float32)
    close(Tensor(x).sigmoid(), [0, 0, 0.5, 1, 1], atol=1e-30)
    close(Tensor(x).softplus(), [0, 0, math.log(2), 100, 1000], atol=1e-6)


def test_pow():
    x = data((10,), lo=0.1, hi=3)
    close(Tensor(x) ** 2, x ** 2, rtol=1e-6)
    close(Tensor(x) ** 0.5, np.sqrt(x))
    close(Tensor(x) ** 2.7, x.astype(np.float64) ** 2.7, rtol=1e-5)
    close(2 ** Tensor(x), 2 ** x.astype(np.float64), rtol=1e-5)
    close(Tensor(x) ** Tensor(x), x.astype(np.float64) ** x, rtol=1e-5)
    close(Tensor([-2.0, 3.0]) ** 3, [-8.0, 27.0])
    i = Tensor([2, 3, -4])
    close(i ** 2, [4, 9, 16])
    close(i ** 5, np.array([2, 3, -4]) ** 5)
    assert (i ** 5).dtype is dtypes.int32
    # a tensor of negative exponents truncates the real power, as alu.py (only 1 and -1 stay non-zero)
    close(Tensor([2, -1, 1, -1, 0]) ** Tensor([-1, -1, -3, -2, -1]), [0, -1, 1, 1, 0])
    with pytest.raises(ValueError, match="negative power -2"):
        i ** -2


def test_clip_where():
    x = data((4, 5))
    close(Tensor(x).clip(-1, 2), np.clip(x, -1, 2))
    close(Tensor(x).clip(min_=0), np.maximum(x, 0))
    c = x > 0
    close(Tensor(c).where(Tensor(x), 0.0), np.where(c, x, 0))
    close(Tensor(c).where(1, Tensor(x[0])), np.where(c, 1, x[0]))
    out = Tensor(c).where(1, 2)
    assert out.dtype is dtypes.int32
    close(out, np.where(c, 1, 2))


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.bool, dtypes.uint8], ids=str)
def test_bitwise(dt):
    npdt = {dtypes.int32: np.int32, dtypes.bool: np.bool_, dtypes.uint8: np.uint8}[dt]
    a = data((8,), dt, -50, 50) if dt is not dtypes.uint8 else RNG.integers(0, 255, 8).astype(np.uint8)
    b = data((8,), dt, -50, 50) if dt is not dtypes.uint8 else RNG.integers(0, 255, 8).astype(np.uint8)
    a, b = a.astype(npdt), b.astype(npdt)
    close(Tensor(a) & Tensor(b), a & b)
    close(Tensor(a) | Tensor(b), a | b)
    close(Tensor(a) ^ Tensor(b), a ^ b)
    close(~Tensor(a), ~a)
    if dt is not dtypes.bool:
        close(Tensor(a) << 2, (a << npdt(2)).astype(npdt))
        close(Tensor(a) >> 2, a >> npdt(2))
        close(Tensor(a) & 7, a & npdt(7))


def test_logical():
    a, b = np.array([0, 1, 2, 0]), np.array([0.0, 0.0, 1.5, 2.0], np.float32)
    close(Tensor(a).logical_and(Tensor(b)), np.logical_and(a, b))
    close(Tensor(a).logical_or(Tensor(b)), np.logical_or(a, b))
    close(Tensor(a).logical_xor(Tensor(b)), np.logical_xor(a, b))
    close(Tensor(a).logical_not(), np.logical_not(a))


def test_cast_bitcast():
    x = np.array([-1.7, 0.2, 3.9, 250.0], np.float32)
    close(Tensor(x).cast(dtypes.int32), x.astype(np.int32))
    close(Tensor(x).cast(dtypes.bool), x.astype(bool))
    close(Tensor(x).cast(dtypes.float16), x.astype(np.float16))
    close(Tensor(x).bitcast(dtypes.uint32), x.view(np.uint32))
    close(Tensor(x).bitcast(dtypes.int32).bitcast(dtypes.float32), x)
    close(Tensor([1, 0, 2]).cast("bool"), [True, False, True])


def test_broadcasting():
    a, b = data((2, 1, 4)), data((3, 1))
    close(Tensor(a) * Tensor(b), a * b, rtol=1e-6)
    close(Tensor(a) + 1, a + 1)
    close(Tensor(3.0) + Tensor(b), 3 + b)
    close(Tensor(a) + [1.0, 2.0, 3.0, 4.0], a + np.array([1, 2, 3, 4], np.float32))
    e = np.zeros((0, 4), np.float32)
    close(Tensor(e) + Tensor(a[0, 0]), e + a[0, 0])


# ---- creation ------------------------------------------------------------------------------------------------

def test_creation():
    close(Tensor.zeros(2, 3), np.zeros((2, 3)))
    close(Tensor.ones((2, 3), dtype=dtypes.int32), np.ones((2, 3), np.int32))
    close(Tensor.full((2,), 7), np.full((2,), 7))
    assert Tensor.full((2,), 7).dtype is dtypes.int32 and Tensor.full((2,), 7.0).dtype is dtypes.float32
    assert Tensor.full((2,), True).dtype is dtypes.bool
    assert Tensor.empty(3, 2).shape == (3, 2)
    assert Tensor.empty(3, 2).numpy().shape == (3, 2)
    close(Tensor.arange(7), np.arange(7))
    close(Tensor.arange(3, 20, 4), np.arange(3, 20, 4))
    close(Tensor.arange(10, 0, -3), np.arange(10, 0, -3))
    close(Tensor.arange(0.5, 3, 0.5), np.arange(0.5, 3, 0.5))
    close(Tensor.arange(0), np.arange(0))
    close(Tensor.arange(1000)[::97], np.arange(1000)[::97])
    close(Tensor.linspace(-1, 2, 7), np.linspace(-1, 2, 7), atol=1e-6)
    close(Tensor.linspace(0, 1, 1), np.linspace(0, 1, 1))
    close(Tensor.eye(3), np.eye(3))
    close(Tensor.eye(2, 4, dtype=dtypes.int32), np.eye(2, 4, dtype=np.int32))
    t = Tensor(data((2, 3)))
    close(t.zeros_like(), np.zeros((2, 3)))
    close(t.ones_like(), np.ones((2, 3)))
    close(t.full_like(4.5), np.full((2, 3), 4.5))
    assert t.zeros_like(dtype=dtypes.int32).dtype is dtypes.int32
    assert t.empty_like().shape == (2, 3)


def test_creation_from_data():
    assert Tensor([1, 2]).dtype is dtypes.int32 and Tensor([1.0, 2]).dtype is dtypes.float32
    assert Tensor([True]).dtype is dtypes.bool
    assert Tensor(np.array([1, 2], np.int64)).dtype is dtypes.int64
    assert Tensor([[1, 2]], dtype=dtypes.float16).dtype is dtypes.float16
    assert Tensor(2.5).item() == 2.5 and Tensor(3).item() == 3
    assert Tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    t = Tensor([1, 2])
    assert t.realize() is t and t.shape == (2,) and t.device == Device.DEFAULT
    assert t.to(Device.DEFAULT) is t
    assert Tensor([]).shape == (0,)


def test_copy_to_device():
    t = Tensor([1.0, 2.0], device="PYTHON")
    c = (t * 3).to("PYTHON:1")
    assert c.device == "PYTHON:1" and c.uop.op.name == "COPY"
    close(c + 1, [4.0, 7.0])
    assert (c + 1).device == "PYTHON:1"
    close(Tensor.ones(2).to("python"), [1.0, 1.0])
    with pytest.raises(ValueError, match="PYTHON and PYTHON:1"):
        t + c


def test_random():
    Tensor.manual_seed(42)
    a = Tensor.rand(1000).numpy()
    Tensor.manual_seed(42)
    b = Tensor.rand(1000).numpy()
    np.testing.assert_array_equal(a, b)
    c = Tensor.rand(1000).numpy()
    assert not np.array_equal(a, c)
    assert a.min() >= 0 and a.max() < 1 and abs(a.mean() - 0.5) < 0.05
    assert len(np.unique(a)) > 990
    n = Tensor.randn(4000).numpy()
    assert abs(n.mean()) < 0.1 and abs(n.std() - 1) < 0.1
    assert Tensor.randn(2, 3).shape == (2, 3) and Tensor.rand((2, 3), dtype=dtypes.float16).dtype is dtypes.float16
    r = Tensor.randint(2000, low=-3, high=4).numpy()
    assert r.dtype == np.int32 and set(np.unique(r)) == set(range(-3, 4))
    u = Tensor.uniform(1000, low=2, high=5).numpy()
    assert u.min() >= 2 and u.max() < 5
    assert Tensor.rand_like(Tensor.zeros(3, 2)).shape == (3, 2)
    assert Tensor.randn_like(Tensor.zeros(3, 2)).shape == (3, 2)
    assert kernels(Tensor.rand(16) * 2) == 1


def test_dropout():
    x = Tensor.ones(2000)
    assert x.dropout(0.5) is x  # not training
    Tensor.training = True
    try:
        out = x.dropout(0.25).numpy()
    finally:
        Tensor.training = False
    assert set(np.unique(out)) <= {0.0, np.float32(1 / 0.75)}
    assert abs((out == 0).mean() - 0.25) < 0.05


# ---- movement ------------------------------------------------------------------------------------------------

def test_movement_basics():
    x = data((2, 3, 4))
    t = Tensor(x)
    close(t.reshape(6, 4), x.reshape(6, 4))
    close(t.reshape(-1, 2), x.reshape(-1, 2))
    close(t.view((4, 6)), x.reshape(4, 6))
    close(t.permute(2, 0, 1), x.transpose(2, 0, 1))
    close(t.transpose(0, 2), x.swapaxes(0, 2))
    close(t.T, x.T)
    close(Tensor(x[0]).T, x[0].T)
    close(t.flatten(), x.flatten())
    close(t.flatten(1), x.reshape(2, 12))
    close(t.unflatten(2, (2, 2)), x.reshape(2, 3, 2, 2))
    close(t.reshape(2, 1, 3, 4).squeeze(), x)
    close(t.reshape(2, 1, 3, 4).squeeze(1), x)
    close(t.squeeze(0), x)
    close(t.unsqueeze(-1), x[..., None])
    close(t.unsqueeze(0), x[None])
    close(t[:, :1].expand(2, 5, 4), np.broadcast_to(x[:, :1], (2, 5, 4)))
    close(t[:, :1].expand(-1, 3, -1), np.broadcast_to(x[:, :1], (2, 3, 4)))
    close(t.flip(0, 2), x[::-1, :, ::-1])
    close(t.shrink(((0, 1), None, (1, 3))), x[0:1, :, 1:3])


def test_pad():
    x = data((2, 3))
    t = Tensor(x)
    close(t.pad(((1, 0), (2, 1))), np.pad(x, ((1, 0), (2, 1))))
    close(t.pad((1, 2)), np.pad(x, ((0, 0), (1, 2))))
    close(t.pad((1, 2, 0, 1), value=-3.0), np.pad(x, ((0, 1), (1, 2)), constant_values=-3))
    close(t.pad(((0, 0), (-1, 1))), np.pad(x[:, 1:], ((0, 0), (0, 1))))
    close(t.pad((None, (1, 1)), value=math.inf), np.pad(x, ((0, 0), (1, 1)), constant_values=np.inf))


def test_cat_stack_split():
    a, b, c = data((2, 3)), data((2, 1)), data((2, 2), dtypes.int32)
    close(Tensor(a).cat(Tensor(b), Tensor(c), dim=1), np.concatenate([a, b, c.astype(np.float32)], 1))
    close(Tensor(a).cat(Tensor(a), dim=0), np.concatenate([a, a]))
    close(Tensor(a).cat(Tensor(np.zeros((0, 3), np.float32))), a)
    bo = np.array([True, False])
    close(Tensor(bo).cat(Tensor(bo)), np.concatenate([bo, bo]))
    close(Tensor(a).stack(Tensor(a), dim=1), np.stack([a, a], 1))
    close(Tensor(a).stack(Tensor(a), dim=-1), np.stack([a, a], -1))
    x = data((7, 2))
    parts = Tensor(x).split(3)
    assert [p.shape for p in parts] == [(3, 2), (3, 2), (1, 2)]
    close(parts[2], x[6:])
    parts = Tensor(x).split([2, 5])
    close(parts[1], x[2:])
    parts = Tensor(x).chunk(3)
    assert [p.shape[0] for p in parts] == [3, 3, 1]
    close(Tensor(x).repeat(2, 3), np.tile(x, (2, 3)))
    close(Tensor(x).repeat(2, 1, 1), np.tile(x, (2, 1, 1)))


# ---- indexing ------------------------------------------------------------------------------------------------

INDICES = [
    1, -1, (0, 2), slice(None), slice(1, None), slice(None, None, -1), slice(None, None, 2), slice(-2, None, -2),
    (slice(None), 1), (Ellipsis, 0), (None, 0), (0, None, slice(1, 3)), (slice(None, None, -3), slice(3, 0, -2)),
    (slice(5, 1, -1), None, Ellipsis, slice(None, None, 3)), (slice(10, 20),), (slice(3, 1),), (1, 2, 3),
    (Ellipsis, None), (slice(0, 4, 3),), (slice(4, 0, -3), 1),
]


@pytest.mark.parametrize("idx", INDICES, ids=repr)
def test_getitem_basic(idx):
    x = np.arange(5 * 4 * 6).reshape(5, 4, 6).astype(np.float32)
    close(Tensor(x)[idx], x[idx])


ADV = [
    [0, 2, 2], [-1, 0], (slice(None), [3, 0]), ([1, 2], [0, 3]), ([[0, 1], [2, 3]], 0), (0, [1, 1], [2, 5]),
    (Ellipsis, [5, 0]), ([0, 4], slice(None), [1, 2]), (slice(1, 3), [0, 2], None), ([2], Ellipsis, 1),
]


@pytest.mark.parametrize("idx", ADV, ids=repr)
def test_getitem_advanced(idx):
    x = np.arange(5 * 4 * 6).reshape(5, 4, 6).astype(np.int32)
    close(Tensor(x)[idx], x[idx])


def test_getitem_int_is_basic_indexing():
    # PyTorch applies ints first, so one list index keeps its place; numpy would move it to the front
    x = np.arange(24).reshape(2, 3, 4)
    assert Tensor(x)[0, :, [1, 2]].shape == (3, 2)
    close(Tensor(x)[0, :, [1, 2]], x[0][:, [1, 2]])


def test_getitem_tensor_index():
    x = data((5, 3))
    i = np.array([[4, 0], [-1, 2]])
    close(Tensor(x)[Tensor(i)], x[i])
    close(Tensor(x)[:, Tensor([2, 0])], x[:, [2, 0]])
    b = np.array([True, False, True])
    close(Tensor(b)[Tensor([2, 2, 1])], b[[2, 2, 1]])
    h = data((4,), dtypes.float16)
    close(Tensor(h)[Tensor([3, 0])], h[[3, 0]])


def test_boolean_masks():
    x = data((3, 4))
    m = x > 0
    close(Tensor(x)[Tensor(m)], x[m])
    close(Tensor(x)[Tensor(m[:, 0])], x[m[:, 0]])
    close(Tensor(x)[:, [True, False, True, True]], x[:, [True, False, True, True]])
    t, ref = Tensor(x), x.copy()
    t[Tensor(m)] = 0.0
    ref[m] = 0
    close(t, ref)
    t, ref = Tensor(x), x.copy()
    t[Tensor(m)] = Tensor(np.arange(m.sum(), dtype=np.float32))
    ref[m] = np.arange(m.sum())
    close(t, ref)


def test_getitem_empty_and_scalar():
    x = np.arange(6).reshape(2, 3)
    close(Tensor(x)[2:], x[2:])
    close(Tensor(x)[:, 3:1], x[:, 3:1])
    assert Tensor(x)[1, 2].item() == 5
    assert Tensor(5.0)[None].shape == (1,)
    assert Tensor(5.0)[...].item() == 5.0


def test_setitem():
    x = np.arange(24).reshape(4, 6).astype(np.float32)
    cases = [((1,), 7.0), ((slice(None), 2), np.arange(4, dtype=np.float32)), ((slice(None, None, -2), slice(1, 5, 3)), -1.0),
             ((Ellipsis, -1), np.float32(3)), ((0, slice(None, None, -1)), np.arange(6, dtype=np.float32)),
             ((slice(1, 3), None, slice(0, 6, 2)), np.ones((2, 1, 3), np.float32))]
    for idx, v in cases:
        t, ref = Tensor(x), x.copy()
        t[idx] = v if not isinstance(v, np.ndarray) else Tensor(v)
        ref[idx] = v
        close(t, ref)
    t, ref = Tensor(x), x.copy()
    t[[0, 2], 1] = Tensor([10.0, 20.0])
    ref[[0, 2], 1] = [10.0, 20.0]
    close(t, ref)
    t = Tensor(x)
    t[Tensor([3, 1])] = 0.0
    ref = x.copy()
    ref[[3, 1]] = 0
    close(t, ref)
    i = Tensor(np.arange(5, dtype=np.int32))
    i[1:3] = 9
    close(i, [0, 9, 9, 3, 4])


# ---- reductions ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("axis,keepdim", [(None, False), (0, False), (1, True), ((0, 2), False), (-1, True)])
def test_reductions_dtypes(dt, axis, keepdim):
    x = data((3, 4, 5), dt)
    t = Tensor(x)
    tol = 2e-2 if dt is dtypes.float16 else 1e-5
    ref = x.astype(np.int32) if dt is dtypes.bool else x
    close(t.sum(axis, keepdim), ref.sum(axis, keepdims=keepdim), atol=tol, rtol=tol)
    close(t.max(axis, keepdim), x.max(axis, keepdims=keepdim))
    close(t.min(axis, keepdim), x.min(axis, keepdims=keepdim))
    close(t.any(axis, keepdim), x.any(axis, keepdims=keepdim))
    close(t.all(axis, keepdim), x.all(axis, keepdims=keepdim))
    if dt is not dtypes.bool:
        close(t.mean(axis, keepdim), ref.astype(np.float64).mean(axis, keepdims=keepdim), atol=tol, rtol=tol)
        small = data((3, 4, 5), dt, -1, 2) if dt is dtypes.int32 else x / 4
        close(Tensor(small).prod(axis, keepdim), small.astype(np.float64).prod(axis, keepdims=keepdim), atol=tol, rtol=tol)


def test_reduction_dtypes_of_results():
    assert Tensor([1, 2]).sum().dtype is dtypes.int32
    assert Tensor([True, True]).sum().dtype is dtypes.int32 and Tensor([True, True]).sum().item() == 2
    assert Tensor(np.ones(3, np.float16)).sum().dtype is dtypes.float16
    assert Tensor([1, 2]).mean().dtype is dtypes.float32
    assert Tensor(np.ones(3, np.int8)).sum().dtype is dtypes.int32
    assert Tensor([1, 2]).max().dtype is dtypes.int32
    assert Tensor([1.0, 2.0]).any().dtype is dtypes.bool


def test_int_min_max_extremes():
    x = np.array([-2 ** 31, 2 ** 31 - 1, 0], np.int32)
    assert Tensor(x).min().item() == -2 ** 31
    assert Tensor(x).max().item() == 2 ** 31 - 1
    close(Tensor(x).minimum(Tensor(x[::-1].copy())), np.minimum(x, x[::-1]))
    u = np.array([0, 255, 7], np.uint8)
    assert Tensor(u).min().item() == 0 and Tensor(u).max().item() == 255


def test_var_std():
    x = data((4, 6))
    close(Tensor(x).var(), x.var(ddof=1), rtol=1e-5)
    close(Tensor(x).var(1, correction=0), x.var(1), rtol=1e-5)
    close(Tensor(x).std(0, keepdim=True), x.std(0, ddof=1, keepdims=True), rtol=1e-5)
    close(Tensor(x.astype(np.int32)).std(), x.astype(np.int32).std(ddof=1), rtol=1e-5)


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.int32, dtypes.bool], ids=str)
def test_argmax_argmin(dt):
    x = data((4, 7), dt, -3, 3)
    for axis in (None, 0, 1, -1):
        close(Tensor(x).argmax(axis), np.argmax(x, axis))
        close(Tensor(x).argmin(axis), np.argmin(x, axis))
    close(Tensor(x).argmax(1, keepdim=True), np.argmax(x, 1, keepdims=True))
    assert Tensor(x).argmax().dtype is dtypes.int32
    close(Tensor([1.0, np.nan, 3.0]).argmax(), 1)


def test_cumsum_logsumexp():
    x = data((3, 5))
    close(Tensor(x).cumsum(1), np.cumsum(x, 1), atol=1e-5)
    close(Tensor(x).cumsum(0), np.cumsum(x, 0), atol=1e-5)
    close(Tensor(x.astype(np.int32)).cumsum(-1), np.cumsum(x.astype(np.int32), -1))
    close(Tensor([True, True, False]).cumsum(), [1, 2, 2])
    close(Tensor(x).cumprod(1), np.cumprod(x, 1), rtol=1e-5)
    close(Tensor(x).cummax(1), np.maximum.accumulate(x, 1))
    ref = np.log(np.exp(x.astype(np.float64)).sum(1))
    close(Tensor(x).logsumexp(1), ref, rtol=1e-5)
    close(Tensor(x).logsumexp(), np.log(np.exp(x.astype(np.float64)).sum()), rtol=1e-5)
    close(Tensor(x).logsumexp(0, keepdim=True), np.log(np.exp(x.astype(np.float64)).sum(0, keepdims=True)), rtol=1e-5)
    close(Tensor([1000.0, 1000.0]).logsumexp(), 1000 + math.log(2))
    close(Tensor([-np.inf, -np.inf]).logsumexp(), -np.inf)


def test_empty_reductions():
    e = Tensor(np.zeros((0, 3), np.float32))
    close(e.sum(0), np.zeros(3))
    close(e.prod(0), np.ones(3))
    close(e.any(0), np.zeros(3, bool))
    close(e.all(0), np.ones(3, bool))
    close(e.sum(1), np.zeros(0))
    assert np.isnan(e.mean().item())
    with pytest.raises(ValueError, match="empty"):
        e.max(0)
    with pytest.raises(ValueError, match="empty"):
        e.argmax()


# ---- kernel counts -------------------------------------------------------------------------------------------

def test_kernel_counts():
    a, b, c = Tensor(data((4, 4))), Tensor(data((4, 4))), Tensor(data((4, 4)))
    assert kernels((a + b) * c) == 1
    assert kernels(a.sum()) == 1
    x, w, bias = Tensor(data((3, 5))), Tensor(data((5, 4))), Tensor(data((4,)))
    assert kernels((x @ w + bias).relu()) == 1
    assert kernels(x.softmax()) == 1
    assert kernels(x.log_softmax()) == 1
    assert kernels(x.layernorm()) == 1
    assert kernels(x[:, ::-2] + x[:, 0:5:2]) == 1
    assert kernels(Tensor.arange(10) * 2) == 1
    assert kernels(x.cat(x, dim=1)) == 1
    assert kernels(x.cumsum(1)) == 1
    assert kernels(x.argmax(1)) == 1
    assert kernels(x[Tensor([0, 2])]) == 1


# ---- errors --------------------------------------------------------------------------------------------------

def test_errors_name_shapes_and_values():
    a, b = Tensor(data((2, 3))), Tensor(data((4,)))
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(1, 4\)"):
        a + b
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4,\)"):
        a @ b
    with pytest.raises(IndexError, match="axis 5"):
        a.sum(5)
    with pytest.raises(IndexError, match=r"dim0 -3 is out of range .* \(allowed: -2 to 1\)"):
        a.transpose(-3, 0)
    with pytest.raises(TypeError, match="float"):
        a & a
    with pytest.raises(TypeError, match="float"):
        ~a
    with pytest.raises(TypeError, match="shift"):
        a << 1
    with pytest.raises(IndexError, match="index 2 is out of bounds for axis 0 with size 2"):
        a[2]
    with pytest.raises(IndexError, match="index -4 is out of bounds for axis 1 with size 3"):
        a[0, -4]
    with pytest.raises(IndexError, match="index 7 is out of bounds"):
        a[:, [0, 7]]
    with pytest.raises(IndexError, match="too many indices"):
        a[0, 0, 0]
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(5,\)"):
        a.reshape(5)
    with pytest.raises(ValueError, match="cat"):
        a.cat(b)
    with pytest.raises(TypeError, match="weak"):
        Tensor(Tensor(1).uop.const(dtypes.weakint, 3)).realize()
    with pytest.raises(TypeError, match="weak"):
        Tensor([1], dtype=dtypes.weakfloat)
    with pytest.raises(TypeError, match="bool"):
        Tensor([True]) - Tensor([False])
    with pytest.raises(ValueError, match=r"shape \(3,\).*\(2,\)"):
        t = Tensor([1.0, 2.0])
        t[:] = Tensor([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="item size"):
        Tensor([1.0]).bitcast(dtypes.int16)


def test_more_bad_input():
    a = Tensor(data((2, 3)))
    with pytest.raises(IndexError, match=r"mask of shape \(3,\).*\(2, 3\)"):
        a[Tensor([True, False, True])]
    with pytest.raises(IndexError, match="integers or bools"):
        a[Tensor([0.0])]
    with pytest.raises(IndexError, match="float"):
        a[1.5]
    with pytest.raises(IndexError, match="ellipsis"):
        a[..., ...]
    with pytest.raises(RuntimeError, match=r"\(2, 3\).*ambiguous"):
        bool(a)
    with pytest.raises(ValueError, match="-1"):
        a.reshape(-1, -1)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, -1\)|cannot reshape"):
        a.reshape(4, -1)
    with pytest.raises(ValueError, match="split sizes"):
        a.split([1, 1], dim=1)
    with pytest.raises(ValueError, match="conv2d"):
        Tensor.zeros(1, 3, 5, 5).conv2d(Tensor.zeros(2, 2, 3, 3))
    with pytest.raises(ValueError, match="window"):
        Tensor.zeros(1, 1, 2, 2).max_pool2d(3)
    with pytest.raises(ValueError, match="low < high"):
        Tensor.randint(3, low=2, high=2)
    with pytest.raises(TypeError, match="int"):
        Tensor(data((3,))).gather(0, Tensor([0.0]))
    with pytest.raises(ValueError, match="reduction"):
        a.cross_entropy(Tensor([0, 1]), reduction="avg")
    with pytest.raises(ValueError, match="cannot expand"):
        a.expand(4, 3)
    with pytest.raises(IndexError, match="unsqueeze"):
        a.unsqueeze(4)


def test_extras():
    x = data((3, 4))
    close(Tensor(x).tril(), np.tril(x))
    close(Tensor(x).triu(1), np.triu(x, 1))
    close(Tensor(x).tril(-1), np.tril(x, -1))
    close(Tensor(x).masked_fill(Tensor(x > 0), 0.0), np.where(x > 0, 0, x))
    assert bool(Tensor([3])) and not bool(Tensor(0.0)) and float(Tensor(2.5)) == 2.5 and int(Tensor([7])) == 7
    assert Tensor(x).size() == (3, 4) and Tensor(x).size(-1) == 4
    Tensor.manual_seed(3)
    n = Tensor.normal(3000, mean=2.0, std=3.0).numpy()
    assert abs(n.mean() - 2) < 0.2 and abs(n.std() - 3) < 0.2
    k = Tensor.kaiming_uniform(64, 32).numpy()
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + 0.01 ** 2)) / math.sqrt(32)
    assert k.shape == (64, 32) and np.abs(k).max() <= bound and np.abs(k).max() > 0.8 * bound
    assert Tensor.glorot_uniform(4, 4).shape == (4, 4) and Tensor.scaled_uniform(4, 4).shape == (4, 4)
    close(Tensor(x).lerp(Tensor(x * 0), 0.25), x * 0.75)
    rows = [r.tolist() for r in Tensor(np.arange(6).reshape(3, 2))]
    assert rows == [[0, 1], [2, 3], [4, 5]]


def test_tensor_not_broken_after_error():
    t = Tensor([1.0, 2.0, 3.0])
    with pytest.raises(ValueError):
        t[0:2] = Tensor([1.0, 2.0, 3.0])
    with pytest.raises(IndexError):
        t[5] = 1.0
    with pytest.raises(ValueError):
        t + Tensor([1.0, 2.0])
    close(t, [1.0, 2.0, 3.0])
    close(t + 1, [2.0, 3.0, 4.0])


def test_setitem_storage_semantics():
    a = Tensor(np.zeros((3, 4), np.float32))
    row = a[1]
    a[1, ::2] = 5.0          # a plain view: written in place, seen by other views
    close(row, [5, 0, 5, 0])
    a[:, [0, 3]] = -1.0      # tensor indices: the whole tensor is rewritten
    close(row, [-1, 0, 5, -1])
    b = a + 1                # a value computed before the write keeps its meaning
    a[2] = a[0] + 7          # the value reads the old contents
    close(b, [[0, 1, 1, 0], [0, 1, 6, 0], [0, 1, 1, 0]])
    close(a[2], [6, 7, 7, 6])
    v = Tensor.zeros(5) + 0  # a value, not storage
    v[1:3] = 2.0
    close(v, [0, 2, 2, 0, 0])


def test_tinygrad_style_script():
    Tensor.manual_seed(0)
    w1, w2 = Tensor.kaiming_uniform(8, 16), Tensor.scaled_uniform(16, 4)
    x = Tensor.rand(5, 8, contiguous=True)
    y = Tensor([0, 1, 2, 3, 0])
    out = x.sequential([lambda t: t.linear(w1).relu(), lambda t: t.dot(w2)])
    loss = out.sparse_categorical_crossentropy(y)
    logits = x.numpy() @ w1.numpy()
    logits = np.maximum(logits, 0) @ w2.numpy()
    ls = logits - logits.max(-1, keepdims=True)
    ls = ls - np.log(np.exp(ls).sum(-1, keepdims=True))
    close(loss, -ls[np.arange(5), y.numpy()].mean(), atol=1e-5)
    assert (out.argmax(-1) == y).sum().item() >= 0


def test_random_calls_share_a_cached_schedule():
    from tg_core.schedule import cache
    (Tensor.rand(3, 3) + 1).numpy()
    hits = cache.stats["hits"]
    (Tensor.rand(3, 3) + 1).numpy()
    assert cache.stats["hits"] == hits + 1


def test_import_stays_light():
    import subprocess
    import sys
    code = ("import sys, tg_core; assert 'tg_core.tensor' not in sys.modules; "
            "from tg_core import Tensor, dtypes, Device, Context; assert 'pluggy' not in sys.modules; "
            "assert not [m for m in sys.modules if m.startswith('tg_') and not m.startswith('tg_core')]")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_gather_folds_to_a_load():
    # a one-hot sum over a big axis is one gated load per element, not a loop over the axis
    from tg_core.uop.ops import Ops
    table = Tensor(np.arange(50000, dtype=np.float32).reshape(10000, 5))
    idx = Tensor.randint(64, low=-10000, high=10000)
    out = table[idx]
    (ast, _), = create_schedule([out.uop], [out.device])[0]
    assert not any(u.op is Ops.REDUCE for u in ast.toposort())
    i = idx.numpy()
    close(out, np.arange(50000, dtype=np.float32).reshape(10000, 5)[i])
    emb = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3))
    close(emb.gather(0, Tensor([[3, 0, 1]])), [[9, 1, 5]])
    # an index outside the axis is an IndexError (tests/test_tensor_edge.py checks the lazy case too)
    with pytest.raises(IndexError, match="index 7 is out of bounds for axis 0 with size 4"):
        emb[Tensor([1, 7])]


def test_big_python_ints_widen():
    assert Tensor(2 ** 40).dtype is dtypes.int64 and Tensor(2 ** 40).item() == 2 ** 40
    assert Tensor.full((2,), -2 ** 40).dtype is dtypes.int64
    assert Tensor(7).dtype is dtypes.int32


def test_numpy_operands():
    t = Tensor([1.0, 2.0])
    out = np.float32(2) * t
    assert isinstance(out, Tensor) and out.dtype is dtypes.float32
    close(out, [2.0, 4.0])
    out = np.array([1.0, 2.0], np.float32) + t
    assert isinstance(out, Tensor)
    close(out, [2.0, 4.0])
    close(t - np.float64(0.5), [0.5, 1.5])


def test_zero_dim_numpy_inputs_keep_their_shape():
    assert Tensor(np.array(3.0, dtype=np.float32)).shape == ()
    t = Tensor(np.float32(2.5))
    assert t.shape == () and t.dtype is dtypes.float32 and t.item() == 2.5
    assert Tensor(np.int64(7)).dtype is dtypes.int64
