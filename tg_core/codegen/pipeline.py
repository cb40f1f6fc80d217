"""The codegen pipeline: a kernel AST -> a `Program`, every stage in order.

opts.py (apply_opts) -> expander.py (expand_lanes) -> uop/symbolic.py (index simplification) -> reduce.py (REDUCE
lowering) -> lower_index.py (weakint lowering) -> shifts.py (defined shifts) -> the renderer's extra_matcher ->
ends.py (END splitting and merging) -> linearize.py (execution order) -> program.py (`Program`). Passes only some
backends use are in codegen/lib/; the device runs them in its own stage (`Compiled.prepare`, or its renderer)."""
from __future__ import annotations

from collections.abc import Sequence

from tg_core.codegen.ends import normalize_ends
from tg_core.codegen.expander import expand_lanes
from tg_core.codegen.linearize import linearize
from tg_core.codegen.lower_index import lower_index_dtype
from tg_core.codegen.opts import Opt, apply_opts
from tg_core.codegen.program import Program, param_index
from tg_core.codegen.reduce import lower_reduce as lower_reduce_pass
from tg_core.codegen.shifts import define_shifts, has_shifts
from tg_core.uop.ops import KernelInfo, Ops
from tg_core.uop.rewrite import PatternMatcher, gc_paused, graph_rewrite
from tg_core.uop.symbolic import symbolic
from tg_core.uop.uop import UOp


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
    order = ast.toposort()
    # weakint lowering keeps every node's op, so the graph has shifts after it iff it had them before: one
    # walk of the kernel tells both passes what they need (define_shifts would walk the lowered graph again)
    ast = lower_index_dtype(ast, order)
    if has_shifts(order):
        ast = define_shifts(ast)
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
    return Program(kernel_name(ast), tuple(uops), *_arguments(ast))


def ast_program(ast: UOp) -> Program:
    """The kernel AST as its own program, untouched by the stages: every node in dependency order, the SINK last.
    For devices that interpret kernel ASTs themselves (the PYTHON device), so they take the same path to a runner."""
    if ast.op is not Ops.SINK:
        raise TypeError(f"a kernel AST is a SINK, got {ast.op}")
    return Program(kernel_name(ast), tuple(ast.toposort()), *_arguments(ast))


def _arguments(ast: UOp) -> tuple[tuple[UOp, ...], tuple[UOp, ...]]:
    """(PARAMs by index, DEFINE_VARs by name) of `ast`."""
    # the arguments are the AST's, even those simplification removed: the caller passes every buffer and variable
    nodes = ast.toposort()
    params = sorted((u for u in nodes if u.op is Ops.PARAM), key=param_index)
    variables = sorted((lower_index_dtype(u) for u in nodes if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg[0])
    return tuple(params), tuple(variables)
