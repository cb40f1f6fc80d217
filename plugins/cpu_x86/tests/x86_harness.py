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


# the ISA these helpers compile for unless told: the tests that read instruction shapes (ymm tiles, panel
# sizes) describe the AVX2 code; the AVX-512 tests (test_x86_avx512.py) pass isa="avx512"
ISA = "avx2"


def renderer_for(isa: str | None = None) -> X86Renderer:
    """An X86 renderer for `isa` (default ISA) that only emits: whether this host runs the code is the
    caller's question (`runnable`)."""
    return X86Renderer(isa=isa or ISA, emit_only=True)


def runnable(isa: str) -> bool:
    """Whether this host's CPU runs `isa` code (tests that execute AVX-512 kernels skip on AVX2-only hosts)."""
    from tg_cpu_x86.x86.isa import missing
    return not missing(isa)


def compile_x86(ast: UOp, opts=(), isa: str | None = None) -> tuple[Program, X86Kernel]:
    renderer = renderer_for(isa)
    prog = linearize_kernel(ast, opts=opts, extra_matcher=renderer.extra_matcher)
    k = renderer.compile(prog)
    check_disassembly(k)
    return prog, k


def run_x86(ast: UOp, arrays: list[np.ndarray], var_vals: dict[str, int] | None = None, opts=(),
            own_opts: bool = False, isa: str | None = None) -> X86Kernel:
    """Compile `ast` for `isa` (with `opts`, or as the renderer linearizes it by itself: vector lanes where they
    pack), check its disassembly, and call it on `arrays` (by PARAM index) and `var_vals`."""
    if not runnable(isa or ISA):
        pytest.skip(f"this host cannot run {isa or ISA} code")
    if own_opts:
        renderer = renderer_for(isa)
        prog = renderer.program(ast)
        k = renderer.compile(prog)
        check_disassembly(k)
    else:
        prog, k = compile_x86(ast, opts, isa)
    for a in arrays:
        assert a.flags.c_contiguous
    var_types = [ctypes.c_int64 if v.dtype.itemsize == 8 else ctypes.c_int32 for v in prog.variables]
    mem = ExecMemory(k.code)
    fn = mem.function(None, *[ctypes.c_void_p] * len(arrays), *var_types)
    fn(*[a.ctypes.data for a in arrays], *[(var_vals or {})[v.arg[0]] for v in prog.variables])
    return k
