"""What the codegen pipeline gives a renderer: a `Program`, a kernel's UOps in execution order with its arguments."""
from __future__ import annotations

from dataclasses import dataclass

from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp


@dataclass(frozen=True)
class Program:
    """A linearized kernel: `uops` in execution order; `params` are the AST's PARAMs by index (the buffers it
    is called with, used or not), `variables` its DEFINE_VARs by name (the int arguments after the buffers)."""
    name: str
    uops: tuple[UOp, ...]
    params: tuple[UOp, ...]
    variables: tuple[UOp, ...]

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


def _param_index(p: UOp) -> int:
    return p.arg[0] if isinstance(p.arg, tuple) else p.arg
