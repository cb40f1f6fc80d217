"""The scheduler's recompute-vs-realize rule for elementwise values read by a reduction many times per element:
kernel counts, which kernel does the elementwise work, and values against numpy."""
import numpy as np
import pytest

from tg_core.schedule import create_schedule
from tg_core.schedule.rangeify import REALIZE_READS
from tg_core.tensor import Tensor
from tg_core.uop.ops import Ops

rng = np.random.default_rng(1)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def schedule(t: Tensor) -> list:
    return [ast for ast, _ in create_schedule([t.uop])[0]]


def ops(ast) -> set:
    return {u.op for u in ast.toposort()}


def test_elementwise_operand_read_per_column_is_realized():
    # A = relu(h + b) is computed once per output column of the matmul: with REALIZE_READS columns it gets
    # its own kernel, and the matmul loads it
    h, b, w = Tensor(randn(4, 8)), Tensor(randn(8)), Tensor(randn(8, REALIZE_READS))
    t = (h + b).relu() @ w
    first, second = schedule(t)
    assert Ops.REDUCE not in ops(first) and Ops.CMPLT in ops(first)
    assert Ops.CMPLT not in ops(second) and Ops.REDUCE in ops(second)
    np.testing.assert_allclose(t.numpy(), np.maximum(h.numpy() + b.numpy(), 0) @ w.numpy(), rtol=1e-5, atol=1e-5)


def test_elementwise_operand_read_by_few_columns_stays_fused():
    h, b, w = Tensor(randn(4, 8)), Tensor(randn(8)), Tensor(randn(8, REALIZE_READS - 1))
    t = (h + b).relu() @ w
    assert len(schedule(t)) == 1
    np.testing.assert_allclose(t.numpy(), np.maximum(h.numpy() + b.numpy(), 0) @ w.numpy(), rtol=1e-5, atol=1e-5)


def test_cheap_operands_stay_fused():
    # a buffer through movement ops and a cast costs one load: recomputing it per column is free
    xi = rng.integers(-5, 5, (8, 4)).astype(np.int32)
    x, w = Tensor(xi), Tensor(randn(10, REALIZE_READS))
    t = x.T.float().pad(((0, 0), (1, 1))) @ w
    assert len(schedule(t)) == 1
    np.testing.assert_allclose(t.numpy(), np.pad(xi.T.astype(np.float32), ((0, 0), (1, 1))) @ w.numpy(), rtol=1e-5,
                               atol=1e-5)


def test_mlp_layers_compute_their_bias_and_relu_once():
    # each layer is one kernel: matmul + bias + relu; the next matmul loads the activation. The last layer
    # (10 columns) reads it fewer than REALIZE_READS times, but the previous matmul is realized anyway, so
    # its epilogue goes with it instead of being recomputed per output
    x = Tensor(randn(4, 12))
    w1, b1, w2, b2, w3, b3 = (Tensor(randn(12, 96)), Tensor(randn(96)), Tensor(randn(96, REALIZE_READS)),
                              Tensor(randn(REALIZE_READS)), Tensor(randn(REALIZE_READS, 10)), Tensor(randn(10)))
    t = ((x @ w1 + b1).relu() @ w2 + b2).relu() @ w3 + b3
    asts = schedule(t)
    assert len(asts) == 3
    assert all(Ops.REDUCE in ops(a) for a in asts)
    assert [Ops.CMPLT in ops(a) for a in asts] == [True, True, False]  # the relus are in the layers that make them
    h = np.maximum(x.numpy() @ w1.numpy() + b1.numpy(), 0)
    h = np.maximum(h @ w2.numpy() + b2.numpy(), 0)
    np.testing.assert_allclose(t.numpy(), h @ w3.numpy() + b3.numpy(), rtol=1e-4, atol=1e-4)


def test_matmul_epilogue_joins_its_matmul_for_a_narrow_consumer():
    a, b, c = Tensor(randn(4, 5)), Tensor(randn(5, 6)), Tensor(randn(6, 3))
    t = (a @ b).exp() @ c
    first, second = schedule(t)
    assert Ops.EXP2 in ops(first) and Ops.EXP2 not in ops(second)
    np.testing.assert_allclose(t.numpy(), np.exp(a.numpy() @ b.numpy()) @ c.numpy(), rtol=1e-4, atol=1e-4)


def test_broadcast_reduction_in_a_narrow_operand_stays_fused():
    # x + x.sum() is not an epilogue of a reduction of its size: the sum is computed once, outside the loops
    x, w = Tensor(randn(4, 6)), Tensor(randn(6, 3))
    t = (x + x.sum()) @ w
    assert len(schedule(t)) == 1
    np.testing.assert_allclose(t.numpy(), (x.numpy() + x.numpy().sum()) @ w.numpy(), rtol=1e-4, atol=1e-4)


def np_softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("fn, ref", [
    (lambda x: x.softmax(1), np_softmax),
    (lambda x: x.layernorm(), lambda x: (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)),
])
def test_wide_row_normalizations_stay_one_kernel(fn, ref):
    # their reductions run once per row, not once per output column: nothing inside them is recomputed
    x = Tensor(randn(3, 4 * REALIZE_READS))
    t = fn(x)
    assert len(schedule(t)) == 1
    np.testing.assert_allclose(t.numpy(), ref(x.numpy()), rtol=1e-4, atol=1e-5)


def test_wide_elementwise_broadcast_stays_one_kernel():
    a, b, c = Tensor(randn(5)), Tensor(randn(5)), Tensor(randn(1, 2 * REALIZE_READS))
    t = (a + b).exp().reshape(5, 1) * c
    assert len(schedule(t)) == 1
    np.testing.assert_allclose(t.numpy(), np.exp(a.numpy() + b.numpy()).reshape(5, 1) * c.numpy(), rtol=1e-5)


def test_one_hot_mask_stays_inlined():
    # an embedding lookup: the mask compares the element index, so it stays in the reduction (where the
    # one-hot fold can see it) even though the matmul reads it once per output column
    idx, w = np.array([[3, 0], [6, 6]], dtype=np.int32), randn(7, REALIZE_READS)
    t = Tensor(idx).one_hot(7).float() @ Tensor(w)
    assert len(schedule(t)) == 1
    np.testing.assert_array_equal(t.numpy(), w[idx])


def test_realized_reduction_of_constants_runs_on_its_consumers_device():
    # the inner product of two constant tensors reads no buffer; realized for the outer matmul, it is
    # computed on the device of the kernel that loads it
    x = Tensor(randn(3, 2))
    t = (Tensor.ones(4, 5) @ Tensor.full((5, 3), 0.5)) @ x
    assert len(schedule(t)) == 2
    np.testing.assert_allclose(t.numpy(), np.full((4, 3), 2.5) @ x.numpy(), rtol=1e-5, atol=1e-5)
