"""The conformance suite: what every device must do, checked through the public API only.

`BufferConformance` covers memory: allocation and free, the LRU cache, copies in and out, views with
offsets, numpy interop. `OpConformance` is the op matrix: tensor ops on the device against numpy.
`DeviceConformance` is both; subclass it and set `device`.
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
        Buffer.from_numpy(data, dev.device).copyout(dest.data)
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


def _np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# (name, tg op, numpy reference, dtypes): unary and reduction ops on one input
_UNARY = [
    ("neg", lambda t: -t, lambda a: -a, ("float32", "int32")),
    ("abs", lambda t: t.abs(), np.abs, ("float32", "int32")),
    ("exp", lambda t: t.exp(), np.exp, ("float32",)),
    ("log", lambda t: t.abs().add(0.5).log(), lambda a: np.log(np.abs(a) + 0.5), ("float32",)),
    ("sqrt", lambda t: t.abs().sqrt(), lambda a: np.sqrt(np.abs(a)), ("float32",)),
    ("sin", lambda t: t.sin(), np.sin, ("float32",)),
    ("relu", lambda t: t.relu(), lambda a: np.maximum(a, 0), ("float32", "int32")),
    ("sigmoid", lambda t: t.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), ("float32",)),
    ("tanh", lambda t: t.tanh(), np.tanh, ("float32",)),
    ("cast", lambda t: t.cast("int32"), lambda a: a.astype(np.int32), ("float32",)),
    ("sum", lambda t: t.sum(1), lambda a: a.sum(1), ("float32", "int32")),
    ("max", lambda t: t.max(0), lambda a: a.max(0), ("float32", "int32")),
    ("mean", lambda t: t.mean(), lambda a: a.mean(), ("float32",)),
    ("argmax", lambda t: t.argmax(1), lambda a: a.argmax(1), ("float32",)),
    ("cumsum", lambda t: t.cumsum(1), lambda a: a.cumsum(1), ("float32",)),
    ("softmax", lambda t: t.softmax(), _np_softmax, ("float32",)),
    ("permute+pad+flip", lambda t: t.T.pad(((1, 0), (0, 2))).flip(0),
     lambda a: np.pad(a.T, ((1, 0), (0, 2)))[::-1], ("float32", "int32")),
    ("getitem", lambda t: t[1:, ::-2], lambda a: a[1:, ::-2], ("float32", "int32")),
]
# (name, tg op, numpy reference, dtypes): binary ops on inputs of shapes (4, 6) and (6,)
_BINARY = [
    ("add", lambda a, b: a + b, np.add, ("float32", "int32")),
    ("sub", lambda a, b: a - b, np.subtract, ("float32", "int32")),
    ("mul", lambda a, b: a * b, np.multiply, ("float32", "int32")),
    ("div", lambda a, b: a / (b.abs() + 1), lambda a, b: a / (np.abs(b) + 1), ("float32",)),
    ("maximum", lambda a, b: a.maximum(b), np.maximum, ("float32", "int32")),
    ("lt", lambda a, b: a < b, np.less, ("float32", "int32")),
    ("eq", lambda a, b: a == b, np.equal, ("int32",)),
    ("where", lambda a, b: (a > 0).where(a, b), lambda a, b: np.where(a > 0, a, b), ("float32", "int32")),
    ("xor", lambda a, b: a ^ b, np.bitwise_xor, ("int32",)),
]


class OpConformance:
    """The op matrix: tensor ops on the device against numpy, in float32 and int32 where both make sense.
    It runs through the public Tensor API, so it exercises the device's whole path: scheduling, rendering
    (or interpreting), compiling, running, copying back."""
    device: str = ""

    def _input(self, shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        if dtype == "int32":
            return rng.integers(-20, 20, shape).astype(np.int32)
        return rng.standard_normal(shape).astype(np.float32)

    def _check(self, got: np.ndarray, want: np.ndarray, what: str) -> None:
        assert got.shape == np.shape(want), f"{what}: shape {got.shape}, numpy gives {np.shape(want)}"
        if np.issubdtype(got.dtype, np.floating):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)
        else:
            np.testing.assert_array_equal(got, want, err_msg=what)

    @pytest.mark.parametrize("name, op, ref, dtypes_", _UNARY, ids=[u[0] for u in _UNARY])
    def test_unary_and_reduce(self, name: str, op, ref, dtypes_) -> None:
        from tg_core.tensor import Tensor
        for dt in dtypes_:
            a = self._input((4, 6), dt, seed=1)
            self._check(op(Tensor(a, device=self.device)).numpy(), ref(a), f"{name} on {dt}")

    @pytest.mark.parametrize("name, op, ref, dtypes_", _BINARY, ids=[b[0] for b in _BINARY])
    def test_binary_broadcast(self, name: str, op, ref, dtypes_) -> None:
        from tg_core.tensor import Tensor
        for dt in dtypes_:
            a, b = self._input((4, 6), dt, seed=2), self._input((6,), dt, seed=3)
            got = op(Tensor(a, device=self.device), Tensor(b, device=self.device)).numpy()
            self._check(got, ref(a, b), f"{name} on {dt}")

    def test_matmul(self) -> None:
        from tg_core.tensor import Tensor
        a, b = self._input((5, 7), "float32", 4), self._input((7, 3), "float32", 5)
        self._check((Tensor(a, device=self.device) @ Tensor(b, device=self.device)).numpy(), a @ b, "matmul")

    def test_float32_denormals_are_kept(self) -> None:
        """Math whose inputs or results are float32 (or float16) denormals gives them (no flush to zero): within 2 denormal
        steps (2**-149) plus 2e-5 relative of the exact value (math in float64), the error exp(x) = exp2(x*log2(e))
        has on every device from rounding x*log2(e); exp(-100) is 3.78e-44, not 0."""
        import math

        from tg_core.tensor import Tensor
        cases = [("exp", lambda t: t.exp(), math.exp, [-100.0, -90.0, -87.5, -103.0]),
                 ("sigmoid", lambda t: t.sigmoid(), lambda x: 1 / (1 + math.exp(-x)), [-100.0, -95.0]),
                 ("exp2", lambda t: t.exp2(), lambda x: 2.0 ** x, [-127.5, -140.0, -149.0]),
                 ("log2", lambda t: t.log2(), math.log2, [1e-40, 3e-39, 1e-45]),
                 ("sqrt", lambda t: t.sqrt(), math.sqrt, [1e-40, 3e-39, 1e-45]),
                 ("reciprocal", lambda t: t.reciprocal(), lambda x: 1 / x, [1e38, -2e38, 3e-39])]
        for name, op, exact, xs in cases:
            x = np.array(xs, np.float32)
            got = op(Tensor(x, device=self.device)).numpy()
            want = np.array([exact(float(v)) for v in x], np.float64)
            err = np.abs(got.astype(np.float64) - want)
            assert (err <= 2 * 2.0 ** -149 + 2e-5 * np.abs(want)).all(), \
                f"{name}({x.tolist()}) = {got.tolist()}, exactly {want.tolist()}"
        # float16 denormals (below 2**-14), in and out, within 2 steps (2**-24) plus 2e-3 relative
        for name, op, exact, xs in [("reciprocal", lambda t: t.reciprocal(), lambda x: 1 / x, [3e-5, -2e-5]),
                                    ("exp2", lambda t: t.exp2(), lambda x: 2.0 ** x, [-20.0, -23.5, -15.0]),
                                    ("sqrt", lambda t: t.sqrt(), math.sqrt, [3e-5, 6e-8]),
                                    ("log2", lambda t: t.log2(), math.log2, [3e-5, 6e-8])]:
            x = np.array(xs, np.float16)
            got = op(Tensor(x, device=self.device)).numpy()
            want = np.array([exact(float(v)) for v in x], np.float64)
            err = np.abs(got.astype(np.float64) - want)
            assert (err <= 2 * 2.0 ** -24 + 2e-3 * np.abs(want)).all(), \
                f"float16 {name}({x.tolist()}) = {got.tolist()}, exactly {want.tolist()}"

    @pytest.mark.parametrize("k", [4, 16, 33])
    def test_byte_matmul(self, k: int) -> None:
        """8-bit matmuls, wrapping in their dtype or widened to 32 bits with signed and unsigned operands mixed
        (LLVM makes these dot-product instructions on AMD), against numpy exactly."""
        from tg_core.tensor import Tensor
        rng = np.random.default_rng(k)
        for da, db, acc in [("int8", "int8", None), ("uint8", "uint8", None), ("int8", "uint8", "int32"),
                            ("uint8", "int8", "int32"), ("int8", "int8", "int32"), ("uint8", "uint8", "uint32")]:
            a, b = rng.integers(-128, 256, (3, k)).astype(da), rng.integers(-128, 256, (k, 5)).astype(db)
            ta, tb = Tensor(a, device=self.device), Tensor(b, device=self.device)
            if acc is not None:
                ta, tb, a, b = ta.cast(acc), tb.cast(acc), a.astype(acc), b.astype(acc)
            self._check((ta @ tb).numpy(), a @ b, f"{da} @ {db} in {acc or da}, shared dim {k}")

    def test_conv2d(self) -> None:
        from tg_core.tensor import Tensor
        x, w = self._input((1, 2, 5, 5), "float32", 6), self._input((3, 2, 3, 3), "float32", 7)
        want = np.zeros((1, 3, 3, 3), np.float32)
        for o in range(3):
            for i in range(3):
                for j in range(3):
                    want[0, o, i, j] = (x[0, :, i:i + 3, j:j + 3] * w[o]).sum()
        self._check(Tensor(x, device=self.device).conv2d(Tensor(w, device=self.device)).numpy(), want, "conv2d")

    def test_realized_results_stay_valid(self) -> None:
        from tg_core.tensor import Tensor
        a = self._input((3, 4), "float32", 8)
        t = Tensor(a, device=self.device)
        r = (t * 2).realize()
        self._check((r + t).numpy(), a * 3, "a realized tensor reused in a new kernel")

    def test_threads_get_their_own_results(self) -> None:
        """Several threads running the same kernels on the device at once each get their own values (shared
        scratch in a device, e.g. one kernarg segment, would hand a thread another's inputs or outputs)."""
        import threading

        from tg_core.tensor import Tensor
        from tg_core.testing.devices import run_in_threads
        nthreads, rounds = 4, 6
        start = threading.Barrier(nthreads)
        got: dict[tuple[int, int], np.ndarray] = {}

        def work(k: int) -> None:
            start.wait()
            for r in range(rounds):
                v = 100 * k + r
                got[k, r] = (Tensor(np.full((4, 4), v, np.float32), device=self.device) * 2 + 1).numpy()

        run_in_threads(work, nthreads)
        wrong = {kr: a.ravel()[0] for kr, a in got.items() if not (a == 2 * (100 * kr[0] + kr[1]) + 1).all()}
        assert not wrong, f"(thread, round) -> first value of wrong results: {wrong}"


class DeviceConformance(BufferConformance, OpConformance):
    """Everything a device must pass. Subclass it and set `device`."""
