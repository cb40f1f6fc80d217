"""The scheduler: kernel counts of fused patterns, values against numpy, the schedule cache, memory planning."""
import numpy as np
import pytest

from tg_core.engine.realize import buffer_of
from tg_core.engine.realize import realize as realize_uops
from tg_core.schedule import cache, create_schedule
from tg_core.tensor import Tensor
from tg_core.uop.ops import Ops

rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def kernels(t: Tensor) -> int:
    return len(create_schedule([t.uop])[0])


def matmul(a: Tensor, b: Tensor) -> Tensor:
    (n, k), (_, m) = a.shape, b.shape
    return (a.reshape(n, k, 1) * b.reshape(1, k, m)).sum(1)


def softmax(x: Tensor) -> Tensor:
    e = (x - x.max(1, keepdim=True)).exp()
    return e / e.sum(1, keepdim=True)


def layernorm(x: Tensor, eps=1e-5) -> Tensor:
    mean = x.sum(1, keepdim=True) / x.shape[1]
    centered = x - mean
    var = (centered * centered).sum(1, keepdim=True) / x.shape[1]
    return centered / (var + eps).sqrt()


def test_elementwise_chain_is_one_kernel():
    a, b, c = Tensor(randn(4, 5)), Tensor(randn(4, 5)), Tensor(randn(5))
    t = (a + b) * c
    assert kernels(t) == 1
    np.testing.assert_allclose(t.numpy(), (a.numpy() + b.numpy()) * c.numpy(), rtol=1e-6)


def test_full_sum_is_one_kernel():
    x = Tensor(randn(7, 9))
    assert kernels(x.sum()) == 1
    np.testing.assert_allclose(x.sum().numpy(), x.numpy().sum(), rtol=1e-5)


def test_matmul_bias_relu_is_one_kernel():
    x, w, b = Tensor(randn(6, 5)), Tensor(randn(5, 3)), Tensor(randn(3))
    t = (matmul(x, w) + b).relu()
    assert kernels(t) == 1
    np.testing.assert_allclose(t.numpy(), np.maximum(x.numpy() @ w.numpy() + b.numpy(), 0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn, ref", [
    (softmax, lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)),
    (lambda x: x - x.max(1, keepdim=True) - ((x - x.max(1, keepdim=True)).exp().sum(1, keepdim=True)).log(),
     lambda x: (x - x.max(1, keepdims=True)) - np.log(np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True))),
    (layernorm, lambda x: (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)),
])
def test_row_normalizations_are_one_kernel(fn, ref):
    x = Tensor(randn(8, 33))
    t = fn(x)
    assert kernels(t) == 1
    np.testing.assert_allclose(t.numpy(), ref(x.numpy()), rtol=1e-4, atol=1e-5)


def test_two_reductions_over_a_row_share_their_max():
    x = Tensor(randn(4, 6))
    ast = create_schedule([softmax(x).uop])[0][0][0]
    reduces = [u for u in ast.toposort() if u.op is Ops.REDUCE]
    assert sorted(r.arg.name for r in reduces) == ["ADD", "MAX"]  # the max is computed once, used twice


def test_matmul_chain_realizes_the_inner_product():
    a, b, c = Tensor(randn(4, 5)), Tensor(randn(5, 3)), Tensor(randn(3, 2))
    t = matmul(matmul(a, b), c)
    assert kernels(t) == 2  # inlined, the inner product would be recomputed for every output column
    np.testing.assert_allclose(t.numpy(), a.numpy() @ b.numpy() @ c.numpy(), rtol=1e-4, atol=1e-5)


def test_nested_sum_without_outputs_is_one_kernel():
    x = Tensor(randn(5, 6))
    assert kernels(x.sum(1).sum(0)) == 1
    assert kernels(x + x.sum()) == 1
    # atol: x + sum cancels to near zero for some elements, where the sum's rounding (~1e-6) is all there is
    np.testing.assert_allclose((x + x.sum()).numpy(), x.numpy() + x.numpy().sum(), rtol=1e-5, atol=2e-6)


def test_movement_ops_against_numpy():
    xn = randn(3, 4, 5)
    x = Tensor(xn)
    t = x.permute(2, 0, 1).flip(0).shrink(((1, 4), None, (1, 3))).pad(((0, 1), (2, 0), (0, 0))).reshape(4, -1)
    ref = np.pad(xn.transpose(2, 0, 1)[::-1][1:4, :, 1:3], ((0, 1), (2, 0), (0, 0))).reshape(4, -1)
    assert kernels(t) == 1
    np.testing.assert_array_equal(t.numpy(), ref)


def test_pad_of_exp_is_zero_in_the_padding():
    x = Tensor(randn(2, 3))
    t = x.exp().pad(((1, 1), (0, 2)))
    np.testing.assert_allclose(t.numpy(), np.pad(np.exp(x.numpy()), ((1, 1), (0, 2))), rtol=1e-6)


def test_schedule_cache_hits_for_the_same_graph_shape():
    before = dict(cache.stats)
    for _ in range(3):
        a, b = Tensor(randn(6, 7)), Tensor(randn(6, 7))
        np.testing.assert_allclose(((a * b).sum(1)).numpy(), (a.numpy() * b.numpy()).sum(1), rtol=1e-5)
    assert cache.stats["misses"] - before["misses"] == 1
    assert cache.stats["hits"] - before["hits"] == 2


def test_cached_schedule_gets_fresh_output_buffers():
    a1, a2 = Tensor(randn(5)), Tensor(randn(5))
    r1, r2 = (a1 * 2).realize(), (a2 * 2).realize()
    assert r1.uop is not r2.uop
    np.testing.assert_allclose(r1.numpy(), a1.numpy() * 2)
    np.testing.assert_allclose(r2.numpy(), a2.numpy() * 2)


def test_intermediates_share_memory_when_lifetimes_do_not_overlap():
    a, b, c, d = (Tensor(randn(4, 4)) for _ in range(4))
    # three matmul chains: the middle products are intermediates realized one after another
    t = matmul(matmul(matmul(a, b), c), d)
    out = realize_uops([t.uop])[t.uop]
    items = create_schedule([t.uop])[0]
    assert len(items) == 3
    np.testing.assert_allclose(buffer_of(out).numpy().reshape(4, 4),
                               a.numpy() @ b.numpy() @ c.numpy() @ d.numpy(), rtol=1e-4, atol=1e-5)


def test_constant_tensor_realizes_on_its_device():
    t = Tensor(2.5) + 1
    assert t.numpy() == 3.5
    assert kernels(Tensor(randn(3)).sum() * 0 + 1) == 1


def test_check_oob_proves_every_kernel_of_a_padded_gather(monkeypatch):
    import tg_core.uop.validate as validate
    from tg_core.helpers import Context
    checked = []
    real = validate.validate_index
    monkeypatch.setattr(validate, "validate_index", lambda sink: (checked.append(sink), real(sink)))
    x = Tensor(randn(6, 8))
    t = x.pad(((1, 2), (0, 3))).reshape(9, 11).flip(0).sum(1)
    with Context(CHECK_OOB=1):
        got = t.numpy()
    assert checked and all(s.op is Ops.SINK for s in checked)
    np.testing.assert_allclose(got, np.pad(x.numpy(), ((1, 2), (0, 3)))[::-1].sum(1), rtol=1e-5)


def test_debug_prints_each_kernel(capsys):
    from tg_core.helpers import Context
    x = Tensor(randn(3, 4))
    with Context(DEBUG=2):
        (x * 2).sum(1).realize()
    err = capsys.readouterr().err
    assert "kernel k" in err and "3xfloat" in err and "REDUCE" in err
