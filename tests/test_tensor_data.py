"""Tensor.data(): a read-only memoryview of the value, a view of the buffer on host-memory devices."""
import gc

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.dtype import dtypes


def test_data_has_the_value_shape_and_format():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor(x)
    for got, want in ((t, x), (t + 1, x + 1), (t.permute(1, 0), x.T), (t[1:, ::2], x[1:, ::2])):
        d = got.data()
        assert d.readonly and d.format == "f" and d.shape == want.shape
        np.testing.assert_array_equal(np.asarray(d), want)
    assert np.asarray(Tensor([1, 2, 3], dtype=dtypes.int32).data()).tolist() == [1, 2, 3]


def test_a_view_outlives_its_tensor_without_seeing_reused_memory():
    # the freed buffer would go back to the allocator's cache and be handed to the next tensor of its size
    base = Tensor(np.arange(6, dtype=np.float32)).realize()
    kept = (base + 1).data()
    gc.collect()
    for _ in range(3):
        (base * 100).contiguous().realize()
    np.testing.assert_array_equal(np.asarray(kept), np.arange(6, dtype=np.float32) + 1)


def test_on_the_cpu_it_is_the_buffer_itself():
    t = Tensor(np.zeros(4, np.float32)).contiguous().realize()
    d = t.data()
    t.assign(Tensor(np.full(4, 7, np.float32))).realize()
    assert np.asarray(d).tolist() == [7.0] * 4  # documented: a view, not a snapshot
    with pytest.raises(TypeError):
        d[0] = 1.0  # type: ignore[index]


def test_other_devices_and_empty_tensors_give_a_copy():
    t = Tensor(np.arange(5, dtype=np.int32), device="PYTHON")
    assert np.asarray(t.data()).tolist() == [0, 1, 2, 3, 4]
    assert np.asarray(Tensor.zeros(0, 3).data()).shape == (0, 3)
