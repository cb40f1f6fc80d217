"""Renderers: a linear program -> source text (LLVM IR, C, ...) or machine code for one device.

`Renderer` is the base a device plugin subclasses (or uses as is: `LLVMRenderer` is shared by the CPU and
AMD plugins). It says what codegen should give it (which dtypes it supports, whether REDUCE is lowered,
which opts and extra rules it wants) and turns a `Program` into text.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from tg_core.codegen.opts import Opt
from tg_core.codegen.pipeline import kernel_name, linearize_kernel
from tg_core.codegen.program import Program
from tg_core.dtype import DType, PtrDType, dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import PatternMatcher
from tg_core.uop.uop import UOp


class UnsupportedDTypeError(TypeError):
    """A program uses a dtype its renderer cannot render."""


class Renderer:
    """What a device's code generator is: its name, the device it targets, the dtypes it renders, and
    `render(program) -> str`. The class attributes are the knobs codegen reads."""
    name: str = "generic"
    device: str = ""
    supported_dtypes: frozenset[DType] = frozenset()
    lower_reduce: bool = True  # False: REDUCE reaches the renderer (interpreters of the AST)
    extra_matcher: PatternMatcher | None = None  # rules codegen applies after lowering (decompositions)
    vector_isa: str | None = None  # the vector ISA its code uses ("avx2", "avx512"), for reports like tg bench

    def opts_for(self, ast: UOp) -> Sequence[Opt]:
        """The optimizations this renderer asks for on `ast` (none by default)."""
        return ()

    # the device intrinsics (CUSTOM nodes, by name) this renderer renders; LLVMRenderer maps each to its function
    intrinsics: Mapping[str, object] = {}

    def program(self, ast: UOp, opts: Sequence[Opt] | None = None) -> Program:
        """`ast` linearized for this renderer, with `opts` (default: the renderer's own choice). A CUSTOM intrinsic
        it does not know is a NotImplementedError before any pass runs."""
        for u in ast.toposort():
            if u.op is Ops.CUSTOM and u.arg not in self.intrinsics:
                known = ", ".join(sorted(self.intrinsics)) or "none"
                raise NotImplementedError(f"the {self.name} renderer for {self.device or 'this device'} has no "
                                          f"intrinsic {u.arg!r} (in kernel {kernel_name(ast)}); it knows: {known}")
        chosen = self.opts_for(ast) if opts is None else opts
        return linearize_kernel(ast, self.lower_reduce, chosen, self.extra_matcher)

    def check_dtypes(self, program: Program) -> None:
        """Raise UnsupportedDTypeError naming the dtype and this renderer if the program uses one it lacks."""
        for u in program.uops:
            dt = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype
            if dt is dtypes.void:
                continue
            if dt.count != 1 or dt.scalar() not in self.supported_dtypes:
                raise UnsupportedDTypeError(f"the {self.name} renderer does not support {dt!r} "
                                            f"(needed by {u.op.name} in kernel {program.name})")

    def render(self, program: Program) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not implement render()")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} for {self.device or 'any device'}>"


__all__ = ["Renderer", "UnsupportedDTypeError"]
