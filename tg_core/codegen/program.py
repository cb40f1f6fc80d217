"""What the codegen pipeline gives a renderer: a `Program`, a kernel's UOps in execution order, and its parameter
layout (the buffers and variables a caller passes, and for a GPU kernel how to launch it)."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from tg_core.dtype import DType
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

if TYPE_CHECKING:
    from tg_core.codegen.lib.gpudims import LaunchDims


def param_index(p: UOp) -> int:
    """The argument position of a PARAM (`UOp.param(i)` or, named, `UOp.param(i, dtype, name)`)."""
    if p.op is not Ops.PARAM:
        raise TypeError(f"param_index takes a PARAM, got {p.op}")
    return p.arg[0] if isinstance(p.arg, tuple) else p.arg


@dataclass(frozen=True)
class BufferParam:
    """A buffer argument: PARAM `index` (the caller's bufs[index]) of pointer dtype `dtype`."""
    index: int
    dtype: DType


class VarParam(NamedTuple):
    """An int argument after the buffers: the DEFINE_VAR `name`, passed as `dtype`."""
    name: str
    dtype: DType


class ParamLayout(NamedTuple):
    """How a program is called: `buffers` by PARAM index, then `variables` in this order. `nbuffers` is the
    number of buffer arguments (the highest PARAM index + 1: a PARAM the kernel does not have is still a slot)."""
    buffers: tuple[BufferParam, ...]
    variables: tuple[VarParam, ...]
    nbuffers: int


@dataclass(frozen=True)
class Program:
    """A linearized kernel: `uops` in execution order; `params` are the AST's PARAMs by index (the buffers it
    is called with, used or not), `variables` its DEFINE_VARs by name (the int arguments after the buffers);
    `launch` is how a GPU program is launched (codegen/lib/gpudims.py: workgroups and local size), None for a
    program that runs as one call. `layout` is the same arguments as plain (index, dtype) and (name, dtype)."""
    name: str
    uops: tuple[UOp, ...]
    params: tuple[UOp, ...]
    variables: tuple[UOp, ...]
    launch: LaunchDims | None = None

    @functools.cached_property
    def layout(self) -> ParamLayout:
        """The parameter layout a runtime calls the program with (computed once per program)."""
        bufs = tuple(BufferParam(param_index(p), p.dtype) for p in self.params)
        return ParamLayout(bufs, tuple(VarParam(v.arg[0], v.dtype) for v in self.variables),
                           max((b.index for b in bufs), default=-1) + 1)

    def __str__(self) -> str:
        """One line per uop, indented by loop depth, sources by position: for reading a program."""
        pos = {u: i for i, u in enumerate(self.uops)}
        lines, depth = [f"program {self.name}"], 0
        for i, u in enumerate(self.uops):
            depth -= u.op is Ops.END
            srcs = ", ".join(f"%{pos[s]}" if s in pos else s.op.name for s in u.src)
            arg = f" {u.arg!r}" if u.arg is not None and u.op is not Ops.END else ""
            lines.append(f"%{i:<4} {'  ' * depth}{u.op.name} {u.dtype!r} ({srcs}){arg}")
            depth += u.op is Ops.RANGE
        return "\n".join(lines)
