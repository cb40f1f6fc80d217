"""Shared by the test_x86_*.py files: compile a kernel AST with the X86 renderer, check every emitted
instruction against capstone's disassembly, place the code in executable memory and run it on numpy arrays.
Kernel builders and value checks shared with core's LLVM tests are in tg_core.testing.kernels."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tg_core.codegen import Program, linearize_kernel
from tg_core.uop import UOp

capstone = pytest.importorskip("capstone")

from tg_cpu_x86.execmem import ExecMemory  # noqa: E402
from tg_cpu_x86.x86.renderer import X86Kernel, X86Renderer  # noqa: E402

CHECKED = {"kernels": 0, "instructions": 0, "mnemonics": set()}


def check_disassembly(k: X86Kernel) -> None:
    """Capstone (an independent decoder) reads the code back instruction by instruction exactly as
    asm_str prints it, with the same lengths."""
    cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    rows = k.assembler.listing()
    end = rows[-1][0] + len(rows[-1][1]) if rows else 0
    decoded = [(i.address, i.size, f"{i.mnemonic} {i.op_str}".strip()) for i in cs.disasm(k.code[:end], 0)]
    assert [(off, len(blob), text) for off, blob, text in rows] == decoded
    assert k.asm_str() == "\n".join(t for _, _, t in decoded)
    CHECKED["kernels"] += 1
    CHECKED["instructions"] += len(rows)
    CHECKED["mnemonics"].update(t.split()[0] for _, _, t in rows)


def compile_x86(ast: UOp, opts=()) -> tuple[Program, X86Kernel]:
    renderer = X86Renderer()
    prog = linearize_kernel(ast, opts=opts, extra_matcher=renderer.extra_matcher)
    k = renderer.compile(prog)
    check_disassembly(k)
    return prog, k


def run_x86(ast: UOp, arrays: list[np.ndarray], var_vals: dict[str, int] | None = None, opts=(),
            own_opts: bool = False) -> X86Kernel:
    """Compile `ast` (with `opts`, or as the renderer linearizes it by itself: vector lanes where they pack),
    check its disassembly, and call it on `arrays` (by PARAM index) and `var_vals`."""
    if own_opts:
        renderer = X86Renderer()
        prog = renderer.program(ast)
        k = renderer.compile(prog)
        check_disassembly(k)
    else:
        prog, k = compile_x86(ast, opts)
    for a in arrays:
        assert a.flags.c_contiguous
    var_types = [ctypes.c_int64 if v.dtype.itemsize == 8 else ctypes.c_int32 for v in prog.variables]
    mem = ExecMemory(k.code)
    fn = mem.function(None, *[ctypes.c_void_p] * len(arrays), *var_types)
    fn(*[a.ctypes.data for a in arrays], *[(var_vals or {})[v.arg[0]] for v in prog.variables])
    return k
