"""`storage.buffers_read`, the per-node memo writes use to find the live tensors that read a written buffer: its
sets are right (a lazy reader of a written buffer sees the old values, one that reads another buffer is left
alone), and remembering them keeps nothing alive (a realized tensor a write asked about frees its memory when
it dies)."""
from __future__ import annotations

import gc
import weakref

import numpy as np

from tg_core.engine.realize import buffer_of
from tg_core.tensor import Tensor
from tg_core.tensor.storage import buffers_read, storage_of


def test_sets_name_the_buffers_a_graph_reads():
    a, b = Tensor(np.arange(4, dtype=np.float32)).realize(), Tensor(np.ones(4, np.float32)).realize()
    na, nb = storage_of(a.uop), storage_of(b.uop)
    assert na is not None and nb is not None
    assert buffers_read(a.uop) == {na} and buffers_read(na) == {na}
    assert buffers_read((a * 2 + b).uop) == {na, nb} and buffers_read((a.reshape(2, 2) + 1).uop) == {na}
    assert buffers_read(Tensor.arange(4).uop) == frozenset()


def test_a_write_updates_its_lazy_readers_only():
    cache = Tensor(np.zeros(4, np.float32)).realize()
    other = Tensor(np.full(4, 3, np.float32)).realize()
    reader, bystander = cache + 1, other * 2
    cache.assign(Tensor(np.arange(4, dtype=np.float32)))
    np.testing.assert_array_equal(reader.numpy(), np.ones(4))              # computed before the write
    np.testing.assert_array_equal((cache + 1).numpy(), np.arange(4) + 1)  # after it
    np.testing.assert_array_equal(bystander.numpy(), np.full(4, 6))


def test_a_buffer_a_write_asked_about_dies_with_its_tensor():
    cache = Tensor(np.zeros(8, np.float32)).realize()
    x = (Tensor(np.arange(8, dtype=np.float32)) * 2).realize()
    node = storage_of(x.uop)
    assert node is not None
    buf = weakref.ref(buffer_of(node))
    cache.assign(Tensor(np.ones(8, np.float32)))  # scans every live tensor, x among them
    assert buffers_read(x.uop) == {node}
    np.testing.assert_array_equal(x.numpy(), np.arange(8) * 2)
    del x, node
    gc.collect()
    assert buf() is None, "the memo kept the buffer of a dead tensor alive"
