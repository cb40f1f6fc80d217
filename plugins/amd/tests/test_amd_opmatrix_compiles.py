"""Every kernel of core's op matrix (tg_core.testing.conformance) renders for gfx1100, compiles with llvmlite, loads
through tg-amd's ELF reader and fits gfx1100: checked without a GPU, by capturing the kernels the reference device
runs for the same programs."""
from __future__ import annotations

import numpy as np

from tg_core.device import Device
from tg_core.testing import conformance as C
from tg_amd.compiler import AMDCompiler
from tg_amd.elf import load_code_object
from tg_amd.renderer import AMDRenderer


def _programs() -> None:
    from tg_core.tensor import Tensor
    rng = np.random.default_rng(0)

    def t(shape, dt):
        return Tensor((rng.standard_normal(shape) * 3).astype(dt), device="PYTHON")
    for _, op, _, dts in C._UNARY:
        for dt in dts:
            op(t((4, 6), dt)).numpy()
    for _, op, _, dts in C._BINARY:
        for dt in dts:
            op(t((4, 6), dt), t((6,), dt)).numpy()
    (t((5, 7), np.float32) @ t((7, 3), np.float32)).numpy()
    t((1, 2, 5, 5), np.float32).conv2d(t((3, 2, 3, 3), np.float32)).numpy()


def test_op_matrix_kernels_compile_and_load(monkeypatch):
    asts: dict = {}
    cls = type(Device["PYTHON"])
    orig = cls.get_runner
    monkeypatch.setattr(cls, "get_runner", lambda self, ast: (asts.setdefault(ast, None), orig(self, ast))[1])
    _programs()
    assert len(asts) >= 30
    r, comp = AMDRenderer(), AMDCompiler()
    for ast in asts:
        prog = r.program(ast)
        code = load_code_object(comp.compile(r.render(prog)))
        k = code.kernel(r.function_name(prog))
        assert k.descriptor.wavefront32 and k.descriptor.user_sgprs == {"kernarg_segment_ptr": 0}, prog.name
