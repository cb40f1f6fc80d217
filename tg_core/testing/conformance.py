"""The conformance suite: what every device must do, checked through the public API only.

`BufferConformance` covers memory: allocation and free, the LRU cache, copies in and out, views with
offsets, numpy interop. `OpConformance` is the extension point for the op matrix (every op checked against
numpy on the device), which arrives with the Tensor API. `DeviceConformance` is both; subclass it and set
`device`.
"""
from __future__ import annotations

import numpy as np
import pytest

from tg_core.device import Buffer, BufferSpec, Compiled, Device, LRUAllocator
from tg_core.helpers import Context

_DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.int64, np.uint32, np.float16, np.float32, np.float64, np.bool_]


class BufferConformance:
    device: str = ""

    @pytest.fixture
    def dev(self) -> Compiled:
        if not self.device:
            pytest.fail(f"{type(self).__name__} must set `device` to the device name under test")
        return Device[self.device]

    def _data(self, n: int, npdt: type, seed: int = 0) -> np.ndarray:
        rng = np.random.default_rng(seed)
        if npdt is np.bool_:
            return rng.integers(0, 2, n).astype(np.bool_)
        if np.issubdtype(npdt, np.integer):
            info = np.iinfo(npdt)
            return rng.integers(info.min, info.max, n, dtype=npdt, endpoint=True)
        return rng.standard_normal(n).astype(npdt)

    def test_opens_as_compiled(self, dev: Compiled) -> None:
        assert isinstance(dev, Compiled)
        assert dev.device == Device.canonicalize(self.device)
        assert Device[self.device] is dev, "opening the same device twice must give the same object"

    def test_allocation_is_lazy(self, dev: Compiled) -> None:
        buf = Buffer(dev.device, 16, "float32")
        assert not buf.is_allocated()
        buf.copyin(np.zeros(16, np.float32))
        assert buf.is_allocated()
        buf.deallocate()
        assert not buf.is_allocated()

    @pytest.mark.parametrize("npdt", _DTYPES, ids=lambda d: np.dtype(d).name)
    def test_copy_roundtrip(self, dev: Compiled, npdt: type) -> None:
        data = self._data(257, npdt)
        buf = Buffer.from_numpy(data, dev.device)
        out = buf.numpy()
        assert out.dtype == data.dtype
        np.testing.assert_array_equal(out, data)

    @pytest.mark.parametrize("nbytes", [1, 3, 4096, 1 << 20])
    def test_sizes(self, dev: Compiled, nbytes: int) -> None:
        data = self._data(nbytes, np.uint8, seed=nbytes)
        np.testing.assert_array_equal(Buffer.from_numpy(data, dev.device).numpy(), data)

    def test_copyout_into_given_memory(self, dev: Compiled) -> None:
        data = np.arange(10, dtype=np.int32)
        dest = np.empty(10, np.int32)
        Buffer.from_numpy(data, dev.device).copyout(memoryview(dest))
        np.testing.assert_array_equal(dest, data)

    def test_copyin_size_mismatch_raises(self, dev: Compiled) -> None:
        buf = Buffer(dev.device, 4, "int32")
        with pytest.raises(ValueError, match="16 bytes"):
            buf.copyin(b"\x00" * 15)

    def test_buffers_are_independent(self, dev: Compiled) -> None:
        bufs = [Buffer.from_numpy(np.full(32, i, np.int32), dev.device) for i in range(8)]
        for i, b in enumerate(bufs):
            np.testing.assert_array_equal(b.numpy(), np.full(32, i, np.int32))

    def test_overwrite(self, dev: Compiled) -> None:
        buf = Buffer.from_numpy(np.zeros(8, np.float32), dev.device)
        buf.copyin(np.arange(8, dtype=np.float32))
        np.testing.assert_array_equal(buf.numpy(), np.arange(8, dtype=np.float32))

    def test_copy_between_devices(self, dev: Compiled) -> None:
        data = np.arange(100, dtype=np.float64)
        ref = Buffer.from_numpy(data, "PYTHON")
        here = Buffer(dev.device, 100, "float64").copy_from(ref)
        back = Buffer("PYTHON", 100, "float64").copy_from(here)
        np.testing.assert_array_equal(back.numpy(), data)

    # ---- the allocator and its LRU cache ----

    def test_alloc_free(self, dev: Compiled) -> None:
        opaque = dev.allocator.alloc(256)
        dev.allocator.free(opaque, 256)
        with pytest.raises(ValueError):
            dev.allocator.alloc(0)

    def _lru(self, dev: Compiled) -> LRUAllocator:
        if not isinstance(dev.allocator, LRUAllocator):
            pytest.skip(f"{dev.device}'s allocator is not an LRUAllocator")
        dev.allocator.free_cache()
        return dev.allocator

    def test_lru_reuses_freed_buffer(self, dev: Compiled) -> None:
        lru = self._lru(dev)
        a = lru.alloc(1024)
        lru.free(a, 1024)
        assert lru.cached_count == 1 and lru.cached_bytes == 1024
        assert lru.alloc(1024) is a, "a freed buffer of the same size and options must be reused"
        assert lru.cached_count == 0
        lru.free(a, 1024)

    def test_lru_keys_on_size_and_options(self, dev: Compiled) -> None:
        lru = self._lru(dev)
        a = lru.alloc(512)
        lru.free(a, 512)
        b = lru.alloc(256)
        assert b is not a
        c = lru.alloc(512, BufferSpec(host=True))
        assert c is not a
        lru.free(b, 256)
        lru.free(c, 512, BufferSpec(host=True))
        assert lru.cached_count == 3
        lru.free_cache()
        assert lru.cached_count == 0 and lru.cached_bytes == 0

    def test_lru_respects_nolru_and_context(self, dev: Compiled) -> None:
        lru = self._lru(dev)
        a = lru.alloc(128, BufferSpec(nolru=True))
        lru.free(a, 128, BufferSpec(nolru=True))
        assert lru.cached_count == 0
        with Context(LRU=0):
            b = lru.alloc(128)
            lru.free(b, 128)
            assert lru.cached_count == 0

    def test_buffer_free_goes_to_lru(self, dev: Compiled) -> None:
        lru = self._lru(dev)
        buf = Buffer(dev.device, 64, "uint8").ensure_allocated()
        opaque = buf.opaque
        buf.deallocate()
        again = Buffer(dev.device, 64, "uint8").ensure_allocated()
        assert again.opaque is opaque
        again.deallocate()
        lru.free_cache()

    # ---- views ----

    def _views(self, dev: Compiled) -> None:
        if not dev.allocator.supports_views:
            pytest.skip(f"{dev.device}'s allocator does not implement _offset (views)")

    def test_view_reads_at_offset(self, dev: Compiled) -> None:
        self._views(dev)
        data = np.arange(64, dtype=np.int32)
        base = Buffer.from_numpy(data, dev.device)
        for start, n in [(0, 64), (0, 1), (5, 10), (63, 1), (32, 32)]:
            v = base.view(n, "int32", offset=start * 4)
            assert v.is_view and v.base is base
            np.testing.assert_array_equal(v.numpy(), data[start:start + n])

    def test_view_writes_reach_base(self, dev: Compiled) -> None:
        self._views(dev)
        base = Buffer.from_numpy(np.zeros(16, np.float32), dev.device)
        base.view(4, "float32", offset=8 * 4).copyin(np.array([1, 2, 3, 4], np.float32))
        np.testing.assert_array_equal(base.numpy(), [0] * 8 + [1, 2, 3, 4] + [0] * 4)

    def test_view_of_view_and_other_dtype(self, dev: Compiled) -> None:
        self._views(dev)
        data = np.arange(32, dtype=np.uint8)
        base = Buffer.from_numpy(data, dev.device)
        inner = base.view(16, "uint8", offset=8).view(2, "uint32", offset=4)
        assert inner.base is base and inner.offset == 12
        np.testing.assert_array_equal(inner.numpy(), data[12:20].view(np.uint32))

    def test_view_allocates_base_lazily(self, dev: Compiled) -> None:
        self._views(dev)
        base = Buffer(dev.device, 8, "int32")
        v = base.view(4, "int32", offset=16)
        v.copyin(np.arange(4, dtype=np.int32))
        assert base.is_allocated()
        np.testing.assert_array_equal(base.numpy()[4:], np.arange(4))

    def test_view_out_of_range_raises(self, dev: Compiled) -> None:
        base = Buffer(dev.device, 8, "int32")
        with pytest.raises(ValueError, match="does not fit"):
            base.view(2, "int32", offset=28)

    def test_base_with_live_view_cannot_be_freed(self, dev: Compiled) -> None:
        self._views(dev)
        base = Buffer.from_numpy(np.arange(8, dtype=np.int32), dev.device)
        v = base.view(2, "int32", offset=8).ensure_allocated()
        with pytest.raises(RuntimeError, match="view"):
            base.deallocate()
        v.deallocate()
        base.deallocate()


class OpConformance:
    """Extension point for the op matrix: every op checked against numpy on the device. The Tensor API adds
    its tests here; until then a device passes it trivially."""


class DeviceConformance(BufferConformance, OpConformance):
    """Everything a device must pass. Subclass it and set `device`."""
