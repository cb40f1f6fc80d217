"""The device model: Buffer, LRUAllocator, Compiled; the conformance suite run against core's PYTHON device."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tg_core.device import Allocator, Buffer, BufferSpec, Compiled, Compiler, Device, LRUAllocator
from tg_core.dtype import dtypes
from tg_core.testing import DeviceConformance

from .conftest import REPO, clean_env


class TestPythonDevice(DeviceConformance):
    device = "PYTHON"

    @pytest.fixture(autouse=True)
    def _fresh(self, make_registry):
        make_registry()


class _CountingAllocator(LRUAllocator):
    def __init__(self, cache_limit=None):
        super().__init__(cache_limit)
        self.allocs, self.frees = 0, []

    def _alloc(self, size, options):
        self.allocs += 1
        return bytearray(size)

    def _free(self, opaque, size, options):
        self.frees.append(size)


def test_lru_evicts_least_recently_freed():
    lru = _CountingAllocator(cache_limit=300)
    a, b, c = lru.alloc(100), lru.alloc(100), lru.alloc(200)
    lru.free(a, 100)
    lru.free(b, 100)
    assert lru.cached_bytes == 200 and lru.frees == []
    lru.free(c, 200)  # 400 bytes cached > 300: the oldest (a) goes
    assert lru.frees == [100] and lru.cached_bytes == 300
    assert lru.alloc(100) is b and lru.allocs == 3
    lru.free(lru.alloc(400), 400)  # bigger than the whole cache: freed at once
    assert lru.frees == [100, 400]


def test_lru_retries_after_out_of_memory():
    class Tiny(_CountingAllocator):
        def _alloc(self, size, options):
            if sum(self.live.values()) + size > 256:
                raise MemoryError
            buf = bytearray(size)
            self.live[id(buf)] = size
            return buf

        def _free(self, opaque, size, options):
            del self.live[id(opaque)]
    lru = Tiny()
    lru.live = {}
    lru.free(lru.alloc(200), 200)
    assert lru.cached_count == 1
    assert len(lru.alloc(100)) == 100 and lru.cached_count == 0
    with pytest.raises(MemoryError):
        lru.alloc(200)


def test_lru_is_safe_from_several_threads():
    """Threads allocating and freeing (with evictions) through one LRU cache: no bookkeeping error, and no
    allocation handed to two threads at once."""
    from tg_core.testing.devices import run_in_threads
    lru = _CountingAllocator(cache_limit=48)
    owner: dict[int, int] = {}

    def work(k: int) -> None:
        for _ in range(3000):
            held = [lru.alloc(16) for _ in range(3)]
            for b in held:
                if owner.setdefault(id(b), k) != k:
                    raise AssertionError(f"an allocation held by thread {owner[id(b)]} was handed to {k}")
            for b in held:
                del owner[id(b)]
                lru.free(b, 16)

    run_in_threads(work)
    assert lru.cached_bytes == 16 * lru.cached_count <= 48


def test_allocator_base_says_what_to_implement():
    with pytest.raises(NotImplementedError, match="_alloc"):
        Allocator().alloc(8)
    assert not Allocator().supports_views


def test_buffer_basics(make_registry):
    make_registry()
    b = Buffer("python", 6, "float32")
    assert b.device == "PYTHON" and b.nbytes == 24 and b.dtype is dtypes.float32 and not b.is_allocated()
    assert repr(b) == "<Buffer PYTHON 6 x dtypes.float>"
    v = b.view(2, dtypes.int16, 4)
    assert repr(v) == "<Buffer PYTHON 2 x dtypes.short, view of offset 4>"
    with pytest.raises(ValueError, match="size"):
        Buffer("PYTHON", -1, "int32")
    with pytest.raises(ValueError, match="nothing to allocate"):
        Buffer("PYTHON", 0, "int32").allocate()
    with pytest.raises(RuntimeError, match="already allocated"):
        b.ensure_allocated().allocate()


def test_buffer_numpy_interop(make_registry):
    make_registry()
    arr = np.arange(12, dtype=np.float16).reshape(3, 4)
    b = Buffer.from_numpy(arr, "PYTHON")
    assert b.size == 12 and b.dtype is dtypes.float16
    out = b.numpy()
    assert out.flags.writeable and np.array_equal(out, arr.ravel())
    bf = Buffer("PYTHON", 2, dtypes.bfloat16).copyin(np.array([0x3F80, 0x4000], np.uint16))
    assert bf.numpy().dtype == np.uint16  # raw bits: numpy has no bfloat16
    with pytest.raises(ValueError, match="contiguous"):
        Buffer("PYTHON", 6, "float16").copyin(arr[:, ::2])
    with pytest.raises(ValueError, match="writable host buffer"):
        b.copyout(bytes(24))


def test_adopted_memory(make_registry):
    make_registry()
    mem = memoryview(bytearray(b"\x01\x00\x02\x00"))
    b = Buffer("PYTHON", 2, "int16").allocate(mem)
    assert b.opaque is mem and b.numpy().tolist() == [1, 2]
    b.deallocate()
    assert Device["PYTHON"].allocator.alloc(4) is mem  # it went back through the device's allocator


def test_dropped_buffer_returns_memory_to_the_cache(make_registry):
    make_registry()
    lru = Device["PYTHON"].allocator
    lru.free_cache()
    Buffer("PYTHON", 32, "uint8").ensure_allocated()  # dropped at once
    assert lru.cached_count == 1
    lru.free_cache()


def test_compiled_minimal_compile_and_run():
    calls = []

    class Doubler(Compiler):
        def compile(self, src):
            calls.append(src)
            return (src * 2).encode()

    dev = Compiled("X", _CountingAllocator(), Doubler(), runtime=lambda name, lib: (name, lib))
    assert dev.compile("ab") == b"abab" and dev.compile("ab") == b"abab" and calls == ["ab"]
    assert dev.program("k", b"lib") == ("k", b"lib")
    bare = Compiled("Y", _CountingAllocator())
    assert bare.compile("s") == b"s"
    with pytest.raises(NotImplementedError, match="no program runtime"):
        bare.program("k", b"")
    bare.synchronize()
    assert repr(bare) == "<Compiled Y>"


def test_buffer_spec_is_a_cache_key():
    assert BufferSpec() == BufferSpec() and hash(BufferSpec(host=True)) == hash(BufferSpec(host=True))


@pytest.mark.slow
def test_template_passes_the_conformance_suite(plugin_site, tmp_path):
    """The template's own tests, run as its author would: pytest against the installed plugin."""
    tests = REPO / "examples" / "plugin_template" / "tests"
    env = clean_env(HOME=str(tmp_path), PYTHONPATH=f"{plugin_site}:{REPO}", TG_PLUGINS_PATH=str(plugin_site))
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                          str(tests)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert " passed" in res.stdout and "skipped" not in res.stdout


def test_template_is_small():
    root = REPO / "examples" / "plugin_template"
    lines = sum(len(p.read_text().splitlines()) for p in (root / "tg_template").glob("*.py"))
    lines += len((root / "pyproject.toml").read_text().splitlines())
    assert lines < 200
