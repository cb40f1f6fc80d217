"""Checking a linear program's structure: what every renderer may rely on."""
from __future__ import annotations

from tg_core.codegen.program import Program
from tg_core.dtype import dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.spec import type_verify


def verify_program(prog: Program) -> None:
    """Raise a RuntimeError unless: every source is defined before its use, every END closes the innermost
    open loop and every loop is closed, a loop index is used only inside its loop, no weakint and no
    REDUCE is left, and every node passes `program_spec`."""
    seen: set = set()
    open_loops: list = []
    for i, u in enumerate(prog.uops):
        where = f"uop {i} ({u.op.name}) of {prog.name}"
        if u in seen:
            raise RuntimeError(f"{where} appears twice")
        if u.dtype is dtypes.weakint or u.op is Ops.REDUCE:
            raise RuntimeError(f"{where}: weakint and REDUCE must be lowered before linearizing")
        if u.op is Ops.END:
            if not open_loops or open_loops[-1] is not u.src[-1]:
                raise RuntimeError(f"{where} closes r{u.src[-1].arg[0]}, which is not the innermost open loop")
            open_loops.pop()
        for s in u.src:
            if s not in seen:
                raise RuntimeError(f"{where} uses {s.op.name} before it is defined")
            if s.op is Ops.RANGE and u.op is not Ops.END and s not in open_loops:
                raise RuntimeError(f"{where} uses the index of r{s.arg[0]} outside its loop")
        if u.op is Ops.RANGE:
            open_loops.append(u)
        seen.add(u)
    if open_loops:
        raise RuntimeError(f"{prog.name}: r{open_loops[-1].arg[0]} is never closed")
    type_verify(list(prog.uops))
