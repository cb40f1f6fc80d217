"""The codegen pipeline: a kernel AST -> a `Program`, every stage in order.

opts.py (apply_opts) -> uop/symbolic.py -> expander.py (expand_lanes) -> uop/symbolic.py (index simplification) ->
reduce.py (REDUCE lowering) -> lower_index.py (weakint lowering) -> shifts.py (defined shifts) -> the renderer's
extra_matcher -> ends.py (END splitting and merging) -> linearize.py (execution order) -> program.py (`Program`).
lower_walk.py runs REDUCE and weakint lowering and END splitting in one walk where that is exact. Passes only some
backends use are in codegen/lib/; the device runs them in its own stage (`Compiled.prepare`, or its renderer)."""
from __future__ import annotations

import threading
from collections.abc import Sequence

from tg_core.codegen.ends import merge_ends_order, normalize_ends, normalize_ends_order
from tg_core.codegen.expander import expand_lanes
from tg_core.codegen.linearize import linearize
from tg_core.codegen.lower_index import lower_index_dtype
from tg_core.codegen.lower_walk import lower_walk
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
    _toposorted.last = None
    # with lower_reduce, lower_walk checks that no lane is left, on the walk of the graph it makes anyway
    # simplified before expansion too: each lane then copies simplified code, and the lanes of an index sum
    # are built simplified (expander._sum_lanes), so the pass after expansion has little left to rewrite
    ast = graph_rewrite(apply_opts(ast, opts), symbolic, bottom_up=True)
    ast = expand_lanes(ast, check=not lower_reduce)
    ast = graph_rewrite(ast, symbolic, bottom_up=True)
    if lower_reduce:
        # the three passes after simplification that rebuild the graph, in one walk (see lower_walk.py)
        walked = lower_walk(ast, extra_matcher)
        if walked is not None:
            ast, single, shifts = walked
            if single is not None:
                return _remember(*merge_ends_order(ast, single))
            if shifts:
                ast = define_shifts(ast)
            return _remember(*normalize_ends_order(ast, extra_matcher))
        ast = lower_reduce_pass(ast)
    return _lower_stepwise(ast, lower_reduce, extra_matcher)


# the toposort merge_ends made of lower_kernel's last result (merging stops on a walk that finds nothing left
# to merge): linearize's first step, handed over here so that lower_kernel keeps its signature (bench/codegen.py
# wraps it) and each thread sees its own
_toposorted = threading.local()


def _remember(sink: UOp, order: dict[UOp, None] | None) -> UOp:
    _toposorted.last = (sink, order) if order is not None else None
    return sink


def _lower_stepwise(ast: UOp, lower_reduce: bool, extra_matcher: PatternMatcher | None) -> UOp:
    """lower_kernel's stages after REDUCE lowering, one pass after another (lower_walk.py fuses them)."""
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
        known = getattr(_toposorted, "last", None)
        topo = known[1] if known is not None and known[0] is sink else None
        _toposorted.last = None
        uops = linearize(sink, topo) if lower_reduce else [u for u in sink.toposort() if u is not sink]
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
