"""Issue 15 item 4 and item 2: assigns into views of unrealized tensors write through, realized intermediates
that a live tensor holds keep their buffers, weak-dtype casts are lazy values, and `realize(*others)` is one
schedule. Values are checked against numpy."""
import importlib

import numpy as np
import pytest

from tg_core.dtype import dtypes
from tg_core.tensor import Tensor

realize_mod = importlib.import_module("tg_core.engine.realize")
T = np.array([[1, 2], [3, 4]], dtype=np.int32)


def _kernels(fn) -> int:
    before = realize_mod.stats["kernels"]
    fn()
    return realize_mod.stats["kernels"] - before


# ---- assigns into views of unrealized tensors write through ----------------------------------------------

@pytest.mark.parametrize("realized", [False, True])
@pytest.mark.parametrize("detach", [False, True])
def test_assign_into_a_slice_of_a_contiguous_permute(realized, detach):
    c = Tensor(T).permute(1, 0).contiguous()
    if realized:
        c.realize()
    view = c.detach() if detach else c
    view[:, 1:2].assign(Tensor.ones(2, 1, dtype=dtypes.int32))
    expected = T.T.copy()
    expected[:, 1:2] = 1
    np.testing.assert_array_equal(c.numpy(), expected)   # [[1, 1], [2, 1]]
    assert expected.tolist() == [[1, 1], [2, 1]]


def test_a_view_made_before_its_tensor_is_realized_still_writes_into_it():
    c = Tensor(T).permute(1, 0).contiguous()
    v = c[:, 1:2]
    c.realize()
    v.assign(Tensor([[7], [8]]))
    np.testing.assert_array_equal(c.numpy(), [[1, 7], [2, 8]])


# every view kind: (make the view, the same selection in numpy)
VIEWS = {
    "permute": (lambda c: c.permute(1, 0), lambda a: a.T),
    "shrink": (lambda c: c.shrink(((0, 2), (1, 3))), lambda a: a[0:2, 1:3]),
    "slice": (lambda c: c[1:, ::2], lambda a: a[1:, ::2]),
    "int index": (lambda c: c[1], lambda a: a[1]),
    "reshape": (lambda c: c.reshape(12)[2:7], lambda a: a.reshape(12)[2:7]),
    "flip": (lambda c: c.flip(0)[0], lambda a: a[::-1][0]),
    "detach of a view": (lambda c: c[:, 1].detach().reshape(1, 3), lambda a: a[:, 1].reshape(1, 3)),
}


@pytest.mark.parametrize("kind", sorted(VIEWS))
def test_assign_into_every_view_kind_of_an_unrealized_value(kind):
    make, select = VIEWS[kind]
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    base = Tensor(src)
    c = base * 2 + 1                                           # a value, not storage
    v = make(c)
    new = np.full(v.shape, -5.0, dtype=np.float32) - np.arange(int(np.prod(v.shape)), dtype=np.float32).reshape(v.shape)
    v.assign(Tensor(new))
    expected = src * 2 + 1
    select(expected)[...] = new
    np.testing.assert_array_equal(c.numpy(), expected)
    np.testing.assert_array_equal(v.numpy(), new)
    np.testing.assert_array_equal(base.numpy(), src)          # the tensor the value was computed from is untouched


def test_views_of_one_tensor_see_each_others_writes():
    c = Tensor(T) + 0
    col, row = c[:, 1], c[1]
    col.assign(Tensor([9, 9]))
    np.testing.assert_array_equal(row.numpy(), [3, 9])
    np.testing.assert_array_equal(c.numpy(), [[1, 9], [3, 9]])


def test_assign_into_an_expanded_view_of_an_unrealized_value_is_an_error():
    c = Tensor(T) + 0
    with pytest.raises(RuntimeError, match=r"expanded view of shape \(3, 2\).*\(2, 2\) tensor it views"):
        c[0:1].expand(3, 2).assign(Tensor.ones(3, 2, dtype=dtypes.int32))
    np.testing.assert_array_equal(c.numpy(), T)


def test_assign_to_a_value_itself_still_gives_it_new_storage():
    a = Tensor(T)
    c = a + 0
    c.assign(Tensor(T * 10))
    np.testing.assert_array_equal(c.numpy(), T * 10)
    np.testing.assert_array_equal(a.numpy(), T)


# ---- realized intermediates held by a live tensor keep their buffers ---------------------------------------

@pytest.mark.parametrize("how", ["contiguous", "clone"])
def test_a_realized_intermediate_keeps_its_buffer(how):
    a = Tensor([1.0, 2.0, 3.0])
    b = (a * 2).contiguous() if how == "contiguous" else (a * 2).clone()
    d = b + 1
    assert _kernels(d.realize) >= 1
    assert _kernels(b.numpy) == 0                         # b was computed by d's schedule
    np.testing.assert_array_equal(b.numpy(), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(d.numpy(), [3.0, 5.0, 7.0])


def test_a_kept_intermediate_does_not_add_kernels():
    a = Tensor(np.arange(6, dtype=np.float32))
    b = (a * 2).contiguous()
    d = (b + 1).sum()
    n_live = _kernels(d.realize)
    a2 = Tensor(np.arange(6, dtype=np.float32))
    d2 = ((a2 * 2).contiguous() + 1).sum()               # the same graph, its intermediate dropped
    assert _kernels(d2.realize) == n_live
    np.testing.assert_allclose(d.numpy(), d2.numpy())


def test_a_clone_keeps_the_value_it_was_made_with():
    a = Tensor([1.0, 2.0]).realize()
    b = a.clone()
    (b * 3).realize()
    a.assign(Tensor([5.0, 6.0]))
    np.testing.assert_array_equal(b.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(a.numpy(), [5.0, 6.0])


def test_equal_intermediates_do_not_share_a_buffer():
    a = Tensor([1.0, 2.0])
    b1, b2 = (a * 2).contiguous(), (a * 2).contiguous()   # one node (hash-consing)
    (b1 + b2).realize()
    b1[0:1].assign(Tensor([9.0]))
    np.testing.assert_array_equal(b1.numpy(), [9.0, 4.0])
    np.testing.assert_array_equal(b2.numpy(), [2.0, 4.0])


# ---- casts to a weak dtype are lazy values -----------------------------------------------------------------

X = np.array([0.5, -0.5, 1.7, -1.7, 2.0, -3.25], dtype=np.float32)


def test_weakint_cast_truncates_for_every_consumer():
    x = Tensor(X)
    w = x.cast(dtypes.weakint)
    assert w.dtype is dtypes.weakint
    np.testing.assert_array_equal(w.cast(dtypes.float32).numpy(), np.trunc(X))
    np.testing.assert_allclose((w * x).numpy(), np.trunc(X) * X)
    np.testing.assert_array_equal(w.cast(dtypes.bool).numpy(), np.trunc(X) != 0)
    assert w.cast(dtypes.bool).numpy()[:2].tolist() == [False, False]   # 0.5 and -0.5
    np.testing.assert_array_equal((w + 1).numpy(), np.trunc(X).astype(np.int32) + 1)
    np.testing.assert_array_equal((w < 1).numpy(), np.trunc(X) < 1)
    np.testing.assert_array_equal(w.reshape(2, 3).permute(1, 0).cast(dtypes.int8).numpy(),
                                  np.trunc(X).astype(np.int8).reshape(2, 3).T)


def test_weakfloat_cast_is_lazy():
    i = Tensor(np.array([3, 4, -5], dtype=np.int32))
    f = i.cast(dtypes.weakfloat)
    assert f.dtype is dtypes.weakfloat
    np.testing.assert_array_equal((f * 0.5).numpy(), np.array([1.5, 2.0, -2.5], dtype=np.float32))
    np.testing.assert_array_equal(Tensor(X).cast(dtypes.weakfloat).cast(dtypes.int32).numpy(), np.trunc(X))


def test_realizing_a_weak_value_is_an_error():
    w = Tensor(X).cast(dtypes.weakint)
    with pytest.raises(TypeError, match="weak dtype dtypes.weakint"):
        w.realize()
    with pytest.raises(TypeError, match="weak dtype dtypes.weakint"):
        w.numpy()


# ---- Tensor.realize(*others) -------------------------------------------------------------------------------

def test_realize_others_in_one_schedule():
    x = Tensor(np.arange(8, dtype=np.float32))
    shared = (x * 3).contiguous()
    a, b, c = shared + 1, shared * 2, shared.sum()
    n = _kernels(lambda: Tensor.realize(a, b, c))
    assert n == 4                                              # shared once, then a, b and c
    assert a.realize(b) is a
    for t, want in ((a, np.arange(8) * 3 + 1), (b, np.arange(8) * 6), (c, np.arange(8).sum() * 3)):
        assert t._is_realized()
        np.testing.assert_allclose(t.numpy(), want)


def test_realize_others_shares_work():
    x = Tensor(np.arange(8, dtype=np.float32))
    a, b = (x * 3).contiguous() + 1, (x * 3).contiguous() * 2
    together = _kernels(lambda: a.realize(b))
    x2 = Tensor(np.arange(8, dtype=np.float32))
    a2, b2 = (x2 * 3).contiguous() + 1, (x2 * 3).contiguous() * 2
    apart = _kernels(lambda: (a2.realize(), b2.realize()))
    assert together == 3 and apart == 4
    np.testing.assert_array_equal(a.numpy(), a2.numpy())
    np.testing.assert_array_equal(b.numpy(), b2.numpy())


def test_realize_others_rejects_non_tensors():
    with pytest.raises(TypeError, match=r"others\[1\] is a list"):
        Tensor([1.0]).realize(Tensor([2.0]), [3.0])
