"""The graph-build shortcuts of `a @ b` (2-D, one dtype: NNMixin._dot_2d) and `where(c, t, scalar)` (the
constant made as `t + scalar` makes it): each builds the very nodes the general path builds (hash-consed, so
the same objects), raises what it raises, and computes numpy's values."""
from __future__ import annotations

import operator

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.dtype import dtypes
from tg_core.tensor.args import broadcast_shape
from tg_core.tensor.nn import NNMixin
from tg_core.uop import Ops, UOp

SHAPES = [((3, 4), (4, 5)), ((1, 4), (4, 1)), ((4, 1), (1, 4)), ((1, 1), (1, 1)), ((2, 3), (3,)), ((3,), (3, 2)),
          ((2, 2, 3), (3, 4)), ((3, 4), (5, 6)), ((37, 53), (53, 10))]


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # the general path's error must be the shortcut's too
        return type(e)


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.bool_, np.float16, np.uint8])
def test_dot_shortcut_builds_the_general_graph(dt, monkeypatch):
    shortcut = NNMixin._dot_2d
    for a, b in SHAPES:
        x, w = Tensor(np.ones(a, dt)), Tensor(np.ones(b, dt))
        for lhs in (x, x + 1 if dt != np.bool_ else x):  # realized and lazy operands
            monkeypatch.setattr(NNMixin, "_dot_2d", lambda self, w: None)
            want = _outcome(operator.matmul, lhs, w)
            monkeypatch.setattr(NNMixin, "_dot_2d", shortcut)
            got = _outcome(operator.matmul, lhs, w)
            if isinstance(want, Tensor):
                assert isinstance(got, Tensor) and got.uop is want.uop and got.dtype is want.dtype, (dt, a, b)
            else:
                assert got is want, (dt, a, b)
    # what the shortcut leaves to the general path: mixed dtypes, halves (float32 sums), no_grad (DETACH nodes)
    f32, f16 = Tensor(np.ones((2, 3), np.float32)), Tensor(np.ones((3, 2), np.float16))
    assert shortcut(f32, f16) is None and shortcut(f16, Tensor(np.ones((2, 2), np.float16))) is None
    Tensor.no_grad = True
    try:
        assert shortcut(f32, Tensor(np.ones((3, 2), np.float32))) is None
    finally:
        Tensor.no_grad = False


def _general_where(c: Tensor, x, y) -> UOp:
    cond = c._cast_to(dtypes.bool)
    xt, yt = cond._operand(x), cond._operand(y)
    xt, yt = xt._broadcasted(yt)
    shape = broadcast_shape(cond.shape, xt.shape)
    cc, xt, yt = cond._broadcast_to(shape), xt._broadcast_to(shape), yt._broadcast_to(shape)
    return UOp(Ops.WHERE, xt.dtype, (cc.uop, xt.uop, yt.uop))


@pytest.mark.parametrize("dt", [np.float32, np.float16, np.int32, np.bool_, np.uint8])
def test_where_with_a_scalar_builds_the_general_graph(dt):
    for shape in ((), (3,), (4, 5)):
        x = Tensor(np.ones(shape, dt))
        for y in (0, -2, 0.0, -0.0, 0.5, float("nan"), True, 300):
            for c in (x > 0, Tensor(np.ones((7, *shape), np.bool_))):  # same shape, and a condition it broadcasts to
                want = _outcome(_general_where, c, x, y)
                got = _outcome(lambda c, x, y: c.where(x, y).uop, c, x, y)
                assert got is want, (dt, shape, y)


def test_shortcut_values_match_numpy():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((37, 53)).astype(np.float32), rng.standard_normal((53, 10)).astype(np.float32)
    h = Tensor(a) @ Tensor(b)
    np.testing.assert_allclose(h.numpy(), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h.relu().numpy(), np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
    nan = np.array([np.nan, -1.0, 2.0, -0.0], np.float32)
    got = Tensor(nan).relu().numpy()
    assert np.isnan(got[0]) and got[1:].tolist() == [0.0, 2.0, 0.0]
