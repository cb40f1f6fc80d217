"""Every kernel of core's op matrix (tg_core.testing.conformance) renders for gfx1100, compiles with llvmlite, loads
through tg-amd's ELF reader and fits gfx1100: checked without a GPU, by capturing the kernels the reference device
runs for the same programs."""
from __future__ import annotations

from tg_core.testing.kernels import capture_kernels, op_matrix_programs
from tg_amd.compiler import AMDCompiler
from tg_amd.device import prepare_kernel
from tg_amd.elf import load_code_object
from tg_amd.renderer import AMDRenderer


def test_op_matrix_kernels_compile_and_load():
    asts = capture_kernels(op_matrix_programs)
    assert len(asts) >= 30
    r, comp = AMDRenderer(), AMDCompiler()
    for ast in asts:
        prog = r.program(prepare_kernel(ast).ast)
        code = load_code_object(comp.compile(r.render(prog)))
        k = code.kernel(r.function_name(prog))
        assert k.descriptor.wavefront32 and k.descriptor.user_sgprs == {"kernarg_segment_ptr": 0}, prog.name
