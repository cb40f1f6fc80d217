"""From a kernel AST to a linear program: the codegen pipeline and what it gives a renderer."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tg_core.codegen.ends import normalize_ends
from tg_core.codegen.expander import expand_lanes
from tg_core.codegen.linearize import linearize
from tg_core.codegen.lower_index import lower_index_dtype
from tg_core.codegen.opts import Opt, apply_opts
from tg_core.codegen.reduce import lower_reduce as lower_reduce_pass
from tg_core.codegen.shifts import define_shifts
from tg_core.uop.ops import KernelInfo, Ops
from tg_core.uop.rewrite import PatternMatcher, gc_paused, graph_rewrite
from tg_core.uop.symbolic import symbolic
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


def kernel_name(ast: UOp) -> str:
    """The name in the kernel's KernelInfo ("kernel" without one)."""
    return ast.arg.name if isinstance(ast.arg, KernelInfo) else "kernel"


def lower_kernel(ast: UOp, lower_reduce: bool = True, opts: Sequence[Opt] = (),
                 extra_matcher: PatternMatcher | None = None) -> UOp:
    """The kernel AST after every graph pass, ready to linearize: opts applied and expanded into lanes,
    indices simplified, REDUCEs lowered (if asked), weakint lowered, shift amounts made to lie inside the
    width (shifts.py), the renderer's rules applied, ENDs split and merged."""
    if ast.op is not Ops.SINK:
        raise TypeError(f"a kernel AST is a SINK, got {ast.op}")
    ast = expand_lanes(apply_opts(ast, opts))
    ast = graph_rewrite(ast, symbolic, bottom_up=True)
    if lower_reduce:
        ast = lower_reduce_pass(ast)
    ast = define_shifts(lower_index_dtype(ast))
    if lower_reduce:
        return normalize_ends(ast, extra_matcher)  # applies extra_matcher too
    return ast if extra_matcher is None else graph_rewrite(ast, extra_matcher)


def linearize_kernel(ast: UOp, lower_reduce: bool = True, opts: Sequence[Opt] = (),
                     extra_matcher: PatternMatcher | None = None) -> Program:
    """The linear program of a kernel AST (see docs/architecture.md, "Kernel ASTs and programs").

    With `lower_reduce=False` REDUCE stays and `uops` is the processed AST in dependency order (each node
    after its sources, ENDs and REDUCEs unsplit): for devices that interpret the AST themselves."""
    with gc_paused():
        sink = lower_kernel(ast, lower_reduce, opts, extra_matcher)
        uops = linearize(sink) if lower_reduce else [u for u in sink.toposort() if u is not sink]
    # the arguments are the AST's, even those simplification removed: the caller passes every buffer and variable
    nodes = ast.toposort()
    params = sorted((u for u in nodes if u.op is Ops.PARAM), key=_param_index)
    variables = sorted((lower_index_dtype(u) for u in nodes if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg[0])
    return Program(kernel_name(ast), tuple(uops), tuple(params), tuple(variables))
