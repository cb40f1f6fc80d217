"""CPU:LLVM compiles in a build thread while the engine builds a schedule (start_runner, finish_builds)."""
import threading

import numpy as np
import pytest

from tg_core.device import Device
from tg_core.tensor import Tensor
from tg_core.uop import Ops

pytest.importorskip("llvmlite.binding")
from tg_cpu_x86.device import CPURunner, _PendingCPURunner  # noqa: E402
from tg_cpu_x86.llvm import LLVMCompiler  # noqa: E402

DEV = "CPU:LLVM"


def _mlp(scale: float):
    """Three kernels (two matmul layers and a softmax) whose constants make them new to this process."""
    rng = np.random.default_rng(3)
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((8, 32), (32, 48), (48, 16)))
    h = np.maximum(x @ w1 * scale, 0) @ w2
    e = np.exp(h - h.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    tx, tw1, tw2 = (Tensor(a, device=DEV).realize() for a in (x, w1, w2))
    return (((tx @ tw1) * scale).relu() @ tw2).softmax(-1), want


def test_kernels_compile_in_the_build_thread_and_run_right(monkeypatch):
    threads = []
    real = LLVMCompiler.load

    def load(self, src, function, cache=False, own_context=False):
        threads.append((threading.current_thread().name, own_context))
        return real(self, src, function, cache, own_context)
    monkeypatch.setattr(LLVMCompiler, "load", load)
    out, want = _mlp(1.0625)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-6)
    assert threads and all(t.startswith("tg-llvm") and own for t, own in threads), threads
    # the runners the engine built are plain CPURunners once run
    assert not any(isinstance(r, _PendingCPURunner) for r in Device[DEV]._runners.values())


def test_a_failed_compile_fails_the_realize_before_anything_runs(monkeypatch):
    target = Tensor(np.full((8, 16), 7, np.float32), device=DEV).realize()
    out, want = _mlp(1.125)

    def fail(self, src, function, cache=False, own_context=False):
        raise RuntimeError("LLVM rejected the rendered kernel: injected")
    with monkeypatch.context() as m:
        m.setattr(LLVMCompiler, "load", fail)
        with pytest.raises(RuntimeError, match="injected"):
            target.assign(out).realize()
    np.testing.assert_array_equal(target.numpy(), np.full((8, 16), 7, np.float32))  # nothing was written
    # the failed runners were forgotten: the same kernels compile now and compute the result
    target.assign(out).realize()
    np.testing.assert_allclose(target.numpy(), want, rtol=1e-4, atol=1e-6)


def test_a_pending_runner_waits_on_first_use_and_outside_the_engine_runners_are_ready():
    dev = Device[DEV]
    out, want = _mlp(1.1875)
    kernels = [ast for ast, _ in _schedule(out) if ast.op is Ops.SINK]
    dev.forget_runners()  # two of the kernels are the earlier tests' (compiled code is kept: it is reused)
    pending = [dev.start_runner(ast) for ast in kernels]
    assert len(pending) == 3 and all(type(r) is _PendingCPURunner for r in pending)
    assert [dev.start_runner(ast) for ast in kernels] == pending  # cached as they are
    dev.finish_builds()
    # the engine finds these runners cached; each waits for its code on its first call, then is a CPURunner
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-6)
    assert all(type(r) is CPURunner for r in pending)
    out, want = _mlp(1.25)
    assert all(type(dev.get_runner(ast)) is CPURunner for ast, _ in _schedule(out) if ast.op is Ops.SINK)


def _schedule(t):
    from tg_core.schedule.cache import schedule
    items, _, _ = schedule([t.uop], [DEV])
    return items


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_a_forked_child_compiles_in_a_build_thread_of_its_own():
    import os
    out, want = _mlp(1.3125)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-6)  # the parent's build thread exists now
    child_out, child_want = _mlp(1.375)  # new kernels: the child compiles them
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if its result is right (a hang fails by the timeout below)
        ok = np.allclose(child_out.numpy(), child_want, rtol=1e-4, atol=1e-6)
        os._exit(0 if ok else 1)
    import time
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child's compile did not finish (no build thread)")


def test_threads_compile_at_once_in_contexts_of_their_own():
    """LLVMCompiler.load(own_context=True) from several threads at once (what the build threads do): every kernel
    right, in each thread's own LLVM context."""
    import ctypes
    from concurrent.futures import ThreadPoolExecutor

    from tg_core.dtype import dtypes
    from tg_core.uop import KernelInfo, UOp
    from tg_cpu_x86.llvm import CPULLVMRenderer

    def kernel(k: int) -> tuple[str, str]:
        src, out = UOp.param(0, dtypes.float32.ptr(1000)), UOp.param(1, dtypes.float32.ptr(1000))
        r = UOp.range(UOp.const(dtypes.weakint, 1000), 0)
        ast = UOp(Ops.SINK, dtypes.void, (out.index(r).store(src.index(r).load() * float(k) + 1.0).end(r),),
                  KernelInfo(f"threaded{k}"))
        renderer = CPULLVMRenderer()
        program = renderer.program(ast)
        return renderer.render(program), renderer.function_name(program)
    sources = [kernel(k) for k in range(2, 10)]
    compiler = LLVMCompiler()
    with ThreadPoolExecutor(4) as pool:
        loaded = list(pool.map(lambda s: compiler.load(*s, own_context=True), sources))
    x = np.linspace(-5, 5, 1000, dtype=np.float32)
    for k, code in zip(range(2, 10), loaded):
        out = np.zeros(1000, np.float32)
        ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(code.address)(x.ctypes.data, out.ctypes.data)
        np.testing.assert_allclose(out, x * k + 1, rtol=1e-6, atol=1e-6)  # FMA-contracted
