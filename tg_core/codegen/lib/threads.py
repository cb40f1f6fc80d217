"""Multi-core kernels: a parallel range split across cores by a `core_id` variable.

`split_cores(ast, cores)` rewrites a kernel AST so that core `c` (the int DEFINE_VAR named `core_id`, in
[0, cores)) runs rows [c*n//cores, (c+1)*n//cores) of a LOOP range of n rows, the outermost one with at
least two rows per core (or the one the caller names: a matmul's columns): the range becomes one of (c+1)*n//cores - c*n//cores iterations (a constant when
cores divides n) offset by c*n//cores. The core count is baked in as a constant; a device runs the same
compiled function once per core with its `core_id`, and renderers see it as an ordinary variable. Only a
range that every effect of the kernel is inside may be split (otherwise some store would run on every
core), and only a kernel with enough work (`work_estimate`) is: starting threads costs more than a small
kernel.

A kernel with no such range whose only effect stores one ADD/MAX/MUL reduction to element 0 of a buffer (a
full `sum`, `max` or `prod`) has its reduce range split the same way instead, and each core stores its partial
result to element `core_id` of that buffer, which the split kernel declares with `cores` elements: the runner
passes a scratch buffer there and combines the partials into the real output (`partial_reduction` says which
buffer and how), since cores do not wait for each other inside a kernel.
"""
from __future__ import annotations

from math import prod

from tg_core.codegen.program import param_index
from tg_core.dtype import DType
from tg_core.uop.ops import AxisType, Ops
from tg_core.uop.uop import UOp

CORE_ID = "core_id"
# iterations of the innermost loops below which a kernel stays on one core: waking another core and waiting
# for it costs tens of microseconds, the time of about this many simple iterations
MIN_WORK = 1 << 17


def parallel_ranges(ast: UOp) -> list[UOp]:
    """The LOOP ranges every effect of the kernel is inside, outermost first. Each iteration of one of them
    writes its own output elements, so its iterations may run on different cores."""
    common: list[UOp] | None = None
    for effect in ast.src:
        if effect.op is not Ops.END:
            return []
        loops = [r for r in effect.src[1:] if r.arg[1] is AxisType.LOOP]
        common = loops if common is None else [r for r in common if r in loops]
    return common or []


def work_estimate(ast: UOp) -> int:
    """An upper bound on the iterations of the kernel's innermost loop bodies: for each reduction and each
    store, the product of the largest trip counts of the ranges it is computed inside, summed (a kernel without
    ranges is 1). A reduction counts the ranges its operand depends on, not every loop around it: codegen
    computes it once per iteration of those (an RMSNorm's sum of squares once, not once per output element,
    so its 576x576 "work" of the product of all trip counts was 1152 iterations, split across cores for
    nothing)."""
    work = 0
    for u in ast.toposort():
        if u.op is Ops.REDUCE or u.op is Ops.STORE:
            work += prod(max(int(r.src[0].vmax), 0) for r in (u.src[0] if u.op is Ops.REDUCE else u).ranges)
    return max(work, 1)


def split_cores(ast: UOp, cores: int, min_work: int = MIN_WORK, axis: UOp | None = None) -> UOp:
    """`ast` with a parallel range (or a full reduction's range) split across `cores` cores, or `ast` itself
    when the kernel has no such range of two rows per core or less work than `min_work` (see the module doc).
    `axis`: the parallel range to split when it is one (a matmul's columns, so each core packs only its panels)."""
    if not isinstance(cores, int) or cores < 1:
        raise ValueError(f"the core count must be a positive int, got {cores!r}")
    if cores == 1 or ast.op is not Ops.SINK:
        return ast
    if any(u.op is Ops.DEFINE_VAR and u.arg[0] == CORE_ID for u in ast.toposort()):
        raise ValueError(f"kernel already has a variable named {CORE_ID!r}, which multi-core splitting reserves")
    if work_estimate(ast) < min_work:
        return ast
    # the outermost with two rows per core at least (a range of one iteration is folded away by codegen's
    # simplification): a batch of 2 splits its columns instead
    rng = next((r for r in ([axis] if axis in parallel_ranges(ast) else []) + parallel_ranges(ast)
                if r.src[0].vmax >= 2 * cores), None)
    if rng is None:
        return _split_reduction(ast, cores)
    local, index = _core_rows(rng, cores)
    split = ast.substitute({rng: index})
    # an END lists the loops it closes: there the loop itself belongs, not the row index computed from it
    ends = {e: UOp(e.op, e.dtype, tuple(local if s is index else s for s in e.src), e.arg, e.tag)
            for e in split.src if e.op is Ops.END}
    return split.substitute(ends)


def _core_rows(rng: UOp, cores: int) -> tuple[UOp, UOp]:
    """The range of core `core_id`'s rows of `rng` and the row index computed from it."""
    n, core = rng.src[0], UOp.variable(CORE_ID, 0, cores - 1)
    if n.op is Ops.CONST and n.arg % cores == 0:
        # equal parts: a constant trip count and an index without division keep the loop easy to vectorize
        start, rows = core * (n.arg // cores), UOp.const(n.dtype, n.arg // cores)
    else:
        start = (core * n) // cores
        rows = (((core + 1) * n) // cores - start).simplify()
    local = UOp(Ops.RANGE, rng.dtype, (rows,), rng.arg, rng.tag)
    return local, local + start


# reductions whose per-core partial results combine by the same operation (floats: in another order, so
# within rounding of the one-core result)
PARTIAL_OPS = (Ops.ADD, Ops.MAX, Ops.MUL)


def _split_reduction(ast: UOp, cores: int) -> UOp:
    """`ast` storing each core's partial reduction to element `core_id` of its output (see the module doc), or
    `ast` itself when it is not one store of one reduction over one range of two iterations per core."""
    if len(ast.src) != 1 or ast.src[0].op is not Ops.STORE:
        return ast
    target, red = ast.src[0].src[:2]
    if target.op is not Ops.INDEX or len(target.src) != 2 or red.op is not Ops.REDUCE or len(red.src) != 2:
        return ast
    buf, at = target.src
    rng = red.src[1]
    if (buf.op is not Ops.PARAM or at.op is not Ops.CONST or at.arg != 0 or red.arg not in PARTIAL_OPS
            or red.dtype != buf.dtype.base or red.dtype.count != 1 or rng.src[0].vmax < 2 * cores):
        return ast
    # the output is only stored to: were it also loaded, its partial slots would be read as the real buffer
    if any(buf in u.src for u in ast.toposort() if u is not target):
        return ast
    local, index = _core_rows(rng, cores)
    partial = UOp(Ops.REDUCE, red.dtype, (red.src[0].substitute({rng: index}), local), red.arg, red.tag)
    slots = UOp(Ops.PARAM, buf.dtype.base.ptr(cores, buf.ptrdtype.addrspace), buf.src, buf.arg, buf.tag)
    core = UOp.variable(CORE_ID, 0, cores - 1)
    store = ast.src[0]
    slot = UOp(Ops.INDEX, slots.dtype, (slots, core), target.arg, target.tag)
    return UOp(Ops.SINK, ast.dtype, (UOp(store.op, store.dtype, (slot, partial, *store.src[2:]), store.arg,
                                         store.tag),), ast.arg, ast.tag)


def partial_reduction(ast: UOp) -> tuple[int, Ops, DType] | None:
    """For a kernel from `split_cores` whose cores store partial reductions: the index of the output PARAM (whose
    `core_count` elements the runner combines), the reduction's operation and dtype; otherwise None."""
    if ast.op is not Ops.SINK or len(ast.src) != 1 or ast.src[0].op is not Ops.STORE:
        return None
    target, value = ast.src[0].src[:2]
    if target.op is Ops.INDEX and target.src[1].op is Ops.DEFINE_VAR and target.src[1].arg[0] == CORE_ID:
        buf = target.src[0]
        return param_index(buf), value.arg, value.dtype
    return None


def core_count(ast: UOp) -> int:
    """The number of cores a kernel from `split_cores` was split across (1 if it was not)."""
    for u in ast.toposort():
        if u.op is Ops.DEFINE_VAR and u.arg[0] == CORE_ID:
            return int(u.arg[2]) + 1
    return 1
