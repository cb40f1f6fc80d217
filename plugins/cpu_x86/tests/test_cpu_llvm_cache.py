"""TG_LLVM_CACHE: CPU:LLVM's object code kept on disk (objcache.py), checked by running what it loads."""
import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tg_core.dtype import dtypes
from tg_core.uop import KernelInfo, Ops, UOp

pytest.importorskip("llvmlite.binding")
from tg_cpu_x86 import objcache  # noqa: E402
from tg_cpu_x86.llvm import CPULLVMRenderer, LLVMCompiler  # noqa: E402


def _kernel_ir() -> tuple[str, str]:
    """IR of out[i] = sqrt(in[i]) * 3 + 1 over 1000 float32 (a vectorized loop), and its function name."""
    src, out = UOp.param(0, dtypes.float32.ptr(1000)), UOp.param(1, dtypes.float32.ptr(1000))
    r = UOp.range(UOp.const(dtypes.weakint, 1000), 0)
    value = src.index(r).load().sqrt() * 3.0 + 1.0
    ast = UOp(Ops.SINK, dtypes.void, (out.index(r).store(value).end(r),), KernelInfo("cached"))
    renderer = CPULLVMRenderer()
    program = renderer.program(ast)
    return renderer.render(program), renderer.function_name(program)


def _run(kernel) -> np.ndarray:
    x = np.linspace(0, 50, 1000, dtype=np.float32)
    out = np.full(1000, np.nan, np.float32)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(kernel.address)(x.ctypes.data, out.ctypes.data)
    np.testing.assert_allclose(out, np.sqrt(x) * 3 + 1, rtol=1e-6)
    return out


def _no_optimizing(monkeypatch):
    def fail(self, src, context=None):
        raise AssertionError("the cached kernel was optimized again")
    monkeypatch.setattr(LLVMCompiler, "optimize", fail)


def test_a_stored_kernel_is_loaded_without_compiling(tmp_path, monkeypatch):
    monkeypatch.setenv(objcache.ENV, str(tmp_path))
    src, fn = _kernel_ir()
    _run(LLVMCompiler().load(src, fn, cache=True))
    entries = list(tmp_path.glob("*.o"))
    assert len(entries) == 1
    with monkeypatch.context() as m:
        _no_optimizing(m)
        _run(LLVMCompiler().load(src, fn, cache=True))  # another compiler (a new process's) reads the entry
    assert list(tmp_path.glob("*.o")) == entries
    # without cache=True (hcq's host functions) or without the variable nothing is read or written
    monkeypatch.delenv(objcache.ENV)
    with monkeypatch.context() as m:
        _no_optimizing(m)
        with pytest.raises(AssertionError, match="optimized again"):
            LLVMCompiler().load(src, fn, cache=True)


def test_a_damaged_entry_is_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv(objcache.ENV, str(tmp_path))
    src, fn = _kernel_ir()
    LLVMCompiler().load(src, fn, cache=True)
    (entry,) = tmp_path.glob("*.o")
    data = bytearray(entry.read_bytes())
    data[-1] ^= 0xFF  # the object no longer matches its checksum
    entry.write_bytes(bytes(data))
    assert objcache.read(tmp_path, entry.stem) is None
    entry.write_bytes(data[:10])  # truncated
    assert objcache.read(tmp_path, entry.stem) is None
    _run(LLVMCompiler().load(src, fn, cache=True))
    assert objcache.read(tmp_path, entry.stem) is not None  # written anew


def test_the_key_covers_the_source_and_the_configuration():
    src, _ = _kernel_ir()
    config = LLVMCompiler()._cache_config()
    assert objcache.entry_key(src, config) == objcache.entry_key(src, config)
    assert objcache.entry_key(src + " ", config) != objcache.entry_key(src, config)
    assert objcache.entry_key(src, config + "x") != objcache.entry_key(src, config)
    assert "O1" in LLVMCompiler(opt_level=1)._cache_config() and "O2" in config
    # the parts are length-prefixed: moving text between them is another key
    assert objcache.entry_key("ab", "c") != objcache.entry_key("b", "ca")


def test_an_unwritable_directory_only_costs_the_cache(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(objcache.ENV, str(blocker / "cache"))
    src, fn = _kernel_ir()
    with caplog.at_level("WARNING", logger="tg.cpu"):
        _run(LLVMCompiler().load(src, fn, cache=True))
    assert "cannot write the LLVM cache entry" in caplog.text


_MLP = """
import json, numpy as np
from tg_core.tensor import Tensor
rng = np.random.default_rng(1)
x, w, b = rng.standard_normal((8, 48), dtype=np.float32), rng.standard_normal((48, 24), dtype=np.float32), rng.standard_normal(24, dtype=np.float32)
got = (Tensor(x, device="CPU:LLVM") @ Tensor(w, device="CPU:LLVM") + Tensor(b, device="CPU:LLVM")).relu().numpy()
print(json.dumps(bool(np.allclose(got, np.maximum(x @ w + b, 0), rtol=1e-4, atol=1e-4))))
"""


def test_a_second_process_runs_the_stored_kernels(tmp_path):
    env = dict(os.environ, **{objcache.ENV: str(tmp_path)})
    first = subprocess.run([sys.executable, "-c", _MLP], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    entries = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*.o")}
    assert entries and json.loads(first.stdout.splitlines()[-1])
    second = subprocess.run([sys.executable, "-c", _MLP], env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout.splitlines()[-1])
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("*.o")} == entries  # read, nothing written
