"""Core's pipeline from kernel AST to runner (`Compiled.get_runner` and its stages) and a program's public
parameter layout (`Program.layout`, `param_index`)."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tg_core.codegen.pipeline import ast_program, linearize_kernel
from tg_core.codegen.program import BufferParam, VarParam, param_index
from tg_core.device import Buffer, Compiled, KernelSequence, Prepared, PreparedKernel
from tg_core.devices.python import PythonAllocator, PythonDevice
from tg_core.dtype import dtypes
from tg_core.renderer import Renderer
from tg_core.testing.devices import run_in_threads
from tg_core.uop import KernelInfo, Ops, UOp

F32, I32 = dtypes.float32, dtypes.int32


def _kernel(*effects: UOp, name: str = "k") -> UOp:
    return UOp(Ops.SINK, dtypes.void, effects, KernelInfo(name))


def _scale(n: int = 8, name: str = "scale") -> UOp:
    """out[i] = a[i] * k + c for i < n (n and k int variables; PARAM 1 unused by the kernel's body)."""
    a, out = UOp.param(0, F32.ptr(n)), UOp.param(2, F32.ptr(n))
    k, c = UOp.variable("k", 0, 100, I32), UOp.variable("c", -5, 5, I32)
    i = UOp.range(n, 0)
    return _kernel(out.index(i).store(a.index(i).load() * k.cast(F32) + c.cast(F32)).end(i), name=name)


# ---- Program.layout ----------------------------------------------------------------------------------------------

def test_layout_lists_buffers_by_index_and_variables_by_name():
    prog = linearize_kernel(_scale())
    lay = prog.layout
    assert lay.buffers == (BufferParam(0, F32.ptr(8)), BufferParam(2, F32.ptr(8)))
    assert lay.nbuffers == 3  # PARAM 1 is absent but still a slot the caller fills
    assert lay.variables == (VarParam("c", I32), VarParam("k", I32))
    assert prog.launch is None and prog.layout is lay  # computed once


def test_ast_program_is_the_ast_with_the_same_arguments():
    ast = _scale()
    prog = ast_program(ast)
    assert prog.uops[-1] is ast and prog.name == "scale"
    assert prog.layout == linearize_kernel(ast).layout
    with pytest.raises(TypeError, match="a kernel AST is a SINK, got Ops.CONST"):
        ast_program(UOp.const(I32, 1))


def test_param_index():
    assert param_index(UOp.param(3, F32.ptr(1))) == 3
    assert param_index(UOp.param(4, F32.ptr(1), "w")) == 4
    with pytest.raises(TypeError, match="param_index takes a PARAM, got Ops.CONST"):
        param_index(UOp.const(I32, 0))


# ---- the stages -------------------------------------------------------------------------------------------------

class _NameRenderer(Renderer):
    name = "NAMES"
    supported_dtypes = frozenset((F32, I32, dtypes.bool))

    def render(self, program) -> str:
        return f"kernel {program.name} taking {program.layout.nbuffers} buffers"


class _Recording(Compiled):
    """A device whose runtime records the calls: every default stage, with a renderer and a runtime."""

    def __init__(self) -> None:
        self.calls: list = []
        super().__init__("REC", PythonAllocator(), runtime=self._runtime)
        self.renderer = _NameRenderer

    def _runtime(self, name: str, lib: bytes):
        self.calls.append(("load", name, lib))
        return lambda bufs, var_vals: self.calls.append(("run", name, len(bufs), dict(var_vals)))


def test_default_stages_render_compile_and_load_once_per_ast():
    dev = _Recording()
    run = dev.get_runner(_scale())
    assert dev.get_runner(_scale()) is run  # cached per (hash-consed) AST
    assert dev.calls == [("load", "scale", b"kernel scale taking 3 buffers")]
    run([None] * 3, {"k": 2, "c": 1})
    assert dev.calls[-1] == ("run", "scale", 3, {"k": 2, "c": 1})
    dev.forget_runners()
    assert dev.get_runner(_scale()) is not run


def test_a_device_without_renderer_or_runtime_says_so():
    bare = Compiled("BARE", PythonAllocator())
    with pytest.raises(RuntimeError, match="BARE has no renderer: no plugin offered one"):
        bare.get_runner(_scale())
    bare.renderer = _NameRenderer
    with pytest.raises(NotImplementedError, match="device BARE has no program runtime"):
        bare.get_runner(_scale())


def test_launch_dims_from_prepare_reach_the_program():
    from tg_core.codegen.lib.gpudims import add_gpudims

    class GPU(_Recording):
        def prepare(self, ast):
            return Prepared((PreparedKernel(*add_gpudims(ast, 4)),))

        def load(self, program, lib):
            self.calls.append(program.launch.evaluate({"k": 1, "c": 0}))
            return super().load(program, lib)

    dev = GPU()
    dev.get_runner(_scale(10))
    assert dev.calls[0] == ((3, 1, 1), (4, 1, 1))  # 10 rows in workgroups of 4


def test_get_runner_builds_a_new_kernel_once_across_threads():
    builds, runners = [], []

    class Slow(_Recording):
        def build_runner(self, ast):
            builds.append(ast)
            time.sleep(0.01)  # long enough for every thread to miss the cache
            return super().build_runner(ast)

    dev, ast, lock = Slow(), _scale(), threading.Lock()

    def work(k: int) -> None:
        r = dev.get_runner(ast)
        with lock:
            runners.append(r)
    run_in_threads(work, 4)
    assert len(builds) == 1 and len(runners) == 4 and all(r is runners[0] for r in runners)


# ---- several kernels with temporaries (KernelSequence) on the reference device ---------------------------------

class _TwoStep(PythonDevice):
    """out = a * 2 + 1 computed in two kernels through a temporary (PARAM 2): t = a * 2, then out = t + 1."""

    def prepare(self, ast):
        n = 16
        a, out, t = UOp.param(0, F32.ptr(n)), UOp.param(1, F32.ptr(n)), UOp.param(2, F32.ptr(n))
        i = UOp.range(n, 0)
        first = _kernel(t.index(i).store(a.index(i).load() * 2.0).end(i), name="double")
        second = _kernel(out.index(i).store(t.index(i).load() + 1.0).end(i), name="inc")
        return Prepared((PreparedKernel(first), PreparedKernel(second)), ((n, F32),))


def test_kernels_of_one_ast_run_in_order_with_their_temporaries():
    dev = _TwoStep("PYTHON", {})
    n = 16
    a, out = UOp.param(0, F32.ptr(n)), UOp.param(1, F32.ptr(n))
    i = UOp.range(n, 0)
    run = dev.get_runner(_kernel(out.index(i).store(a.index(i).load() * 2.0 + 1.0).end(i)))
    assert isinstance(run, KernelSequence) and len(run.runners) == 2
    x = np.arange(n, dtype=np.float32)
    bufs = [Buffer.from_numpy(x, "PYTHON"), Buffer.from_numpy(np.zeros(n, np.float32), "PYTHON")]
    run(bufs, {})
    np.testing.assert_array_equal(bufs[1].numpy(), x * 2 + 1)
    assert dev.allocator.cached_count == 1  # the temporary went back to this device's cache
    run(bufs, {})
    assert dev.allocator.cached_count == 1  # and was reused


def test_the_reference_device_takes_the_pipeline():
    from tg_core.device import Device
    dev = Device["PYTHON"]
    ast = _scale()
    run = dev.get_runner(ast)
    assert dev.get_runner(ast) is run
    x = np.arange(8, dtype=np.float32)
    bufs = [Buffer.from_numpy(x, "PYTHON"), Buffer("PYTHON", 1, F32), Buffer("PYTHON", 8, F32)]
    run(bufs, {"k": 3, "c": -2})
    np.testing.assert_array_equal(bufs[2].numpy(), x * 3 - 2)
