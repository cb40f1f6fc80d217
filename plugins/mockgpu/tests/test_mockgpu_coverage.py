"""Every instruction LLVM emits for tg's kernels is one the emulator implements: the op matrix in every dtype,
casts between all of them, byte matmuls (dot products) and whole-tensor reductions, rendered and compiled for
gfx1100 and each instruction compiled by the emulator without running it."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core.testing import conformance as C
from tg_core.testing.kernels import capture_kernels
from tg_amd.compiler import AMDCompiler
from tg_amd.device import prepare_kernel
from tg_amd.elf import load_code_object
from tg_amd.renderer import AMDRenderer
from tg_mockgpu.emu.machine import EmulatorError
from tg_mockgpu.emu.program import compile_inst
from tg_mockgpu.rdna3.decode import decode_all

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",
          "float32", "float64"]


def _programs() -> None:
    """The programs, realized on the PYTHON reference device; an op a dtype does not support is skipped."""
    from tg_core.tensor import Tensor
    rng = np.random.default_rng(0)

    def t(shape: tuple[int, ...], dt: str) -> Tensor:
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        return Tensor(x, device="PYTHON").cast(dt)

    def attempt(build) -> None:
        try:
            build().numpy()
        except (TypeError, ValueError, NotImplementedError):  # the op is not defined for the dtype
            pass

    for dt in DTYPES:
        for _, op, _, _ in C._UNARY:
            attempt(lambda op=op, dt=dt: op(t((4, 6), dt)))
        for _, op, _, _ in C._BINARY:
            attempt(lambda op=op, dt=dt: op(t((4, 6), dt), t((6,), dt)))
        for other in DTYPES:
            attempt(lambda dt=dt, other=other: t((37,), dt).cast(other))
        attempt(lambda dt=dt: t((3, 16), dt) @ t((16, 5), dt))
        attempt(lambda dt=dt: t((3, 16), dt).cast("int32") @ t((16, 5), "uint8").cast("int32"))
        attempt(lambda dt=dt: t((1500,), dt).sum())
        attempt(lambda dt=dt: t((1500,), dt).max())


@pytest.mark.slow  # about 20 s: some 400 kernels rendered and compiled
def test_every_emitted_instruction_is_implemented():
    asts = capture_kernels(_programs)
    assert len(asts) > 300
    r, comp = AMDRenderer(), AMDCompiler()
    missing: dict[str, set[str]] = {}
    for ast in asts:
        prog = r.program(prepare_kernel(ast).ast)
        code = load_code_object(comp.compile(r.render(prog)))
        k = code.kernel(r.function_name(prog))
        for inst in decode_all(code.image[k.code_offset:k.code_offset + k.code_size], 0, k.name):
            try:
                compile_inst(inst, k.name)
            except (KeyError, EmulatorError) as e:
                missing.setdefault(f"{inst.op} ({type(e).__name__}: {e})", set()).add(prog.name)
    assert not missing, "\n".join(f"{op}: in {', '.join(sorted(ks)[:3])}" for op, ks in sorted(missing.items()))
