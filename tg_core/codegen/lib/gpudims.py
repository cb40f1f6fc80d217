"""Parallel ranges -> GPU ids: a kernel AST's outermost LOOP ranges become workgroup and workitem ids.

The ranges a GPU kernel runs in parallel are the outermost LOOP ranges every effect of the kernel is inside
(the longest common prefix of the ENDs' range lists): their iterations write disjoint outputs, so each can
be a work-item. The innermost of them becomes `gidx0*L + lidx0` (workgroup id x times the local size L plus
the workitem id x), the next `gidx1` and the one before `gidx2` (workgroup ids y and z, one work-item
deep). Further outer ranges, and every range only some effects are inside, stay loops in each work-item.

When L does not divide the range's size (or the size is symbolic), the last workgroup has work-items past
the end; every INDEX of the kernel is then gated by `gidx0*L + lidx0 < size`, so such a work-item stores
nothing and loads only from a safe address (a gated load reads element 0 and yields 0).

A kernel with no parallel range (a whole-tensor sum, max, mean) would run on one work-item; its big top-level
reductions are shared by a workgroup instead (`group_reduce`: strided partials, LDS, a barrier, one store).
Likewise a kernel whose big reductions do not depend on its innermost parallel range (softmax over long rows)
gets one workgroup per row sharing them, the innermost range a strided loop (`row_groups`).

A kernel that names its own launch shape (a custom kernel: RANGEs of axis type GLOBAL and LOCAL) gets exactly
that shape instead (`explicit_dims`): its GLOBAL ranges, in order of axis id, become the workgroup ids x, y, z
and its LOCAL ranges the workitem ids x, y, z; every other range stays a loop in each work-item. Nothing is
gated, since the ids run over the ranges' sizes exactly. Its LDS buffers and barriers are its own.

`add_gpudims` returns the rewritten AST and the launch dimensions (workgroup counts as expressions over
the kernel's DEFINE_VARs, evaluated for each call, and the constant local size).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from tg_core.codegen.reduce import reduce_identity
from tg_core.dtype import AddrSpace, dtypes
from tg_core.uop.evaluate import evaluate
from tg_core.uop.ops import AxisType, Ops
from tg_core.uop.rewrite import PatternMatcher, graph_rewrite, substitute
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat

GROUP_IDS = ("gidx0", "gidx1", "gidx2")
LOCAL_ID = "lidx0"
LOCAL_IDS = ("lidx0", "lidx1", "lidx2")
# local sizes tried for a range larger than the maximum, best first: the largest that divides it needs no guard
_LOCAL_CANDIDATES = (256, 128, 64)


@dataclass(frozen=True)
class LaunchDims:
    """How to launch a kernel: workgroups per dimension (weakint expressions over DEFINE_VARs) and work-items
    per workgroup."""
    global_size: tuple[UOp, UOp, UOp]
    local_size: tuple[int, int, int]

    def evaluate(self, var_vals: Mapping[str, int]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(workgroups, local size) for the variable values of one call."""
        out = []
        for e in self.global_size:
            env = {u: var_vals[u.arg[0]] for u in e.toposort() if u.op is Ops.DEFINE_VAR}
            out.append(int(evaluate(e, env)))
        return (out[0], out[1], out[2]), self.local_size


def parallel_ranges(ast: UOp) -> list[UOp]:
    """The outermost LOOP ranges every effect of `ast` is inside, outermost first."""
    lists = [list(e.src[1:]) if e.op is Ops.END else [] for e in ast.src]
    common: list[UOp] = []
    for rngs in zip(*lists):
        if any(r is not rngs[0] for r in rngs) or rngs[0].op is not Ops.RANGE or rngs[0].arg[1] is not AxisType.LOOP:
            break
        common.append(rngs[0])
    return common


def _local_size(end: UOp, max_local: int) -> int:
    if end.op is Ops.CONST and end.arg <= max_local:
        return max(int(end.arg), 1)
    if end.op is Ops.CONST:
        for cand in _LOCAL_CANDIDATES:
            if cand <= max_local and end.arg % cand == 0:
                return cand
    return max_local


def _drop_ranges(ctx: set[UOp], x: UOp) -> UOp | None:
    """An END no longer loops over the ranges that became ids; with none left it is just its effect."""
    if not any(r in ctx for r in x.src[1:]):
        return None
    rest = tuple(r for r in x.src[1:] if r not in ctx)
    return x.replace(src=(x.src[0], *rest)) if rest else x.src[0]


def _gate_all(ast: UOp, valid: UOp) -> UOp:
    """Every INDEX of `ast` (loads inside the index math of others included) gated by `valid` as well."""
    done: dict[UOp, UOp] = {}
    for n in ast.toposort():
        src = tuple(done[s] for s in n.src)
        new = n if all(a is b for a, b in zip(src, n.src)) else n.replace(src=src)
        if n.op is Ops.INDEX:
            new = new.replace(src=(*new.src[:2], valid if len(new.src) == 2 else new.src[2] & valid))
        done[n] = new
    return done[ast]


_pm_drop = PatternMatcher([(UPat(Ops.END, name="x"), _drop_ranges)])

# a reduction is shared by a workgroup when it has at least this many iterations and its largest range at least a
# wave's worth (32); L is that range's size, at most the maximum local size
MIN_GROUP_REDUCE = 1024


def _size(r: UOp) -> int:
    return int(r.src[0].arg) if r.src[0].op is Ops.CONST else int(r.src[0].vmax)


def _shareable(red: UOp) -> bool:
    return math.prod(_size(r) for r in red.src[1:]) >= MIN_GROUP_REDUCE and max(_size(r) for r in red.src[1:]) >= 32


def group_reduce(ast: UOp, max_local: int) -> tuple[UOp, int] | None:
    """A kernel without parallel ranges whose effects are plain stores (a whole-tensor sum, max, mean, ...) would run
    its reductions on one work-item. Instead each big top-level REDUCE is shared by a workgroup of L work-items: its
    largest range r (size N) becomes `r2*L + lidx0` with a fresh range r2 over ceil(N/L) (elements past N give the
    identity, their loads gated), each work-item's partial result goes to an LDS array, a barrier, and every
    work-item combines the L partials; only work-item 0 stores. Returns (new AST, L), or None when no reduction is
    big enough to share."""
    if any(e.op is not Ops.STORE for e in ast.src):
        return None
    nodes = list(ast.toposort())
    chosen = {u: max(u.src[1:], key=_size) for u in nodes if u.op is Ops.REDUCE and not u.ranges and _shareable(u)}
    if not chosen:
        return None
    local = min(max_local, max(_size(r) for r in chosen.values()))
    lane = UOp.special(local, LOCAL_ID)
    ids = itertools.count(max((u.arg[0] for u in nodes if u.op is Ops.RANGE and isinstance(u.arg[0], int)),
                              default=-1) + 1)
    done: dict[UOp, UOp] = {}
    for n in nodes:
        src = tuple(done[s] for s in n.src)
        new = n if all(a is b for a, b in zip(src, n.src)) else n.replace(src=src)
        if n in chosen:
            new = _share_reduce(new, chosen[n], lane, local, ids, len(done))
        elif n.op is Ops.STORE and n in ast.src:  # one work-item writes the result
            index = new.src[0]
            first = lane < 1
            valid = first if len(index.src) == 2 else index.src[2] & first
            new = new.replace(src=(index.replace(src=(*index.src[:2], valid)), new.src[1]))
        done[n] = new
    return done[ast], local


def _share_reduce(red: UOp, r: UOp, lane: UOp, local: int, ids: Iterator[int], tag: int) -> UOp:
    value, *rngs = red.src
    n = r.src[0]
    r2 = UOp.range(((n + (local - 1)) // local).simplify(), next(ids), AxisType.REDUCE, r.dtype)
    idx = r2 * local + lane
    exact = n.op is Ops.CONST and n.arg % local == 0
    if not exact:  # loads at the elements past N would be out of bounds: gate the ones that depend on r
        in_range = idx < n
        gated = {u: u.replace(src=(*u.src[:2], in_range if len(u.src) == 2 else u.src[2] & in_range))
                 for u in value.toposort() if u.op is Ops.INDEX and r in u.ranges}
        value = substitute(value, gated)
    value = substitute(value, {r: idx})
    if not exact:
        value = (idx < n).where(value, UOp.const(red.dtype, reduce_identity(red.arg, red.dtype)))
    partial = UOp(Ops.REDUCE, red.dtype, (value, r2, *(x for x in rngs if x is not r)), red.arg)
    lds = UOp(Ops.DEFINE_LOCAL, red.dtype.ptr(local, AddrSpace.LOCAL), (), f"partial{tag}")
    barrier = UOp(Ops.BARRIER, dtypes.void, (lds.index(lane).store(partial),))
    j = UOp.range(local, next(ids), AxisType.REDUCE, r.dtype)
    return UOp(Ops.REDUCE, red.dtype, (lds.after(barrier).index(j).load(), j), red.arg)


def row_groups(ast: UOp, prange: list[UOp], max_local: int) -> tuple[UOp, LaunchDims] | None:
    """Parallel ranges whose innermost one (c, size C) big reductions do not depend on (softmax or layernorm over
    long rows: out[r, c] uses max_j and sum_j of row r) would recompute those reductions for every c. Instead the
    outer ranges become workgroup ids (one workgroup per row), the reductions are shared by the workgroup's L
    work-items as in `group_reduce`, and c becomes a loop `c2*L + lidx0` over ceil(C/L) in each work-item (its
    loads and stores gated when L does not divide C). None when no reduction qualifies."""
    inner, rows = prange[-1], prange[:-1][-3:]
    nodes = list(ast.toposort())
    chosen = {u: max(u.src[1:], key=_size) for u in nodes if u.op is Ops.REDUCE and inner not in u.ranges
              and set(u.ranges) <= set(rows) and _shareable(u)}
    if not chosen:
        return None
    end = inner.src[0]
    local = min(max_local, max(_size(inner), *(_size(r) for r in chosen.values())))
    lane = UOp.special(local, LOCAL_ID)
    ids = itertools.count(max((u.arg[0] for u in nodes if u.op is Ops.RANGE and isinstance(u.arg[0], int)),
                              default=-1) + 1)
    c2 = UOp.range(((end + (local - 1)) // local).simplify(), next(ids), AxisType.LOOP, inner.dtype)
    col = c2 * local + lane
    in_range = None if end.op is Ops.CONST and end.arg % local == 0 else col < end
    done: dict[UOp, UOp] = {inner: col}
    done.update({r: UOp.special(r.src[0], gid, r.dtype) for gid, r in zip(GROUP_IDS, reversed(rows))})
    for n in nodes:
        if n in done:
            continue
        src = tuple(done[s] for s in n.src)
        new = n if all(a is b for a, b in zip(src, n.src)) else n.replace(src=src)
        if n.op is Ops.END:
            rest = [c2 if x is inner else x for x in n.src[1:] if x not in rows]
            new = UOp(Ops.END, n.dtype, (done[n.src[0]], *rest), n.arg) if rest else done[n.src[0]]
        elif n.op is Ops.INDEX and in_range is not None and inner in n.ranges:
            new = new.replace(src=(*new.src[:2], in_range if len(new.src) == 2 else new.src[2] & in_range))
        elif n in chosen:
            new = _share_reduce(new, chosen[n], lane, local, ids, len(done))
        done[n] = new
    sizes = [r.src[0] for r in reversed(rows)] + [UOp.const(end.dtype, 1)] * (3 - len(rows))
    return done[ast], LaunchDims((sizes[0], sizes[1], sizes[2]), (local, 1, 1))


def _axis_key(r: UOp) -> tuple:
    return (0, r.arg[0], "") if isinstance(r.arg[0], int) else (1, 0, repr(r.arg[0]))


def explicit_dims(ast: UOp, max_local: int) -> tuple[UOp, LaunchDims] | None:
    """A kernel's own GLOBAL and LOCAL ranges as workgroup and workitem ids (see the module docstring); None when
    it has neither. Errors: more than three of a kind, a LOCAL size that is not a constant, a workgroup larger
    than `max_local` work-items."""
    nodes = ast.toposort()
    glob = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] is AxisType.GLOBAL), key=_axis_key)
    loc = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] is AxisType.LOCAL), key=_axis_key)
    if not glob and not loc:
        return None
    name = ast.arg.name if hasattr(ast.arg, "name") else "kernel"
    for kind, rngs in (("GLOBAL", glob), ("LOCAL", loc)):
        if len(rngs) > 3:
            raise ValueError(f"kernel {name} has {len(rngs)} {kind} ranges; a GPU launch has at most 3 (x, y, z)")
    if any(r.src[0].op is not Ops.CONST for r in loc):
        bad = next(r for r in loc if r.src[0].op is not Ops.CONST)
        raise ValueError(f"kernel {name}: LOCAL range {bad.arg[0]} has size {bad.src[0].render()}; a workgroup's "
                         "size is fixed when the kernel is compiled, so LOCAL sizes must be constants")
    local = [int(r.src[0].arg) for r in loc] + [1] * (3 - len(loc))
    if math.prod(local) > max_local or min(local) < 1:
        raise ValueError(f"kernel {name}: a workgroup of {' x '.join(map(str, local))} work-items; allowed 1 to "
                         f"{max_local} in all")
    subs = {r: UOp.special(r.src[0], gid, r.dtype) for gid, r in zip(GROUP_IDS, glob)}
    subs.update({r: UOp.special(r.src[0], lid, r.dtype) for lid, r in zip(LOCAL_IDS, loc)})
    one = UOp.const(dtypes.weakint, 1)
    sizes = [r.src[0] for r in glob] + [one] * (3 - len(glob))
    ast = substitute(graph_rewrite(ast, _pm_drop, ctx=set(subs)), subs)
    return ast, LaunchDims((sizes[0], sizes[1], sizes[2]), (local[0], local[1], local[2]))


def add_gpudims(ast: UOp, max_local: int = 256) -> tuple[UOp, LaunchDims]:
    """`ast` with its parallel ranges replaced by GPU ids (see the module docstring), and its launch dims."""
    if ast.op is not Ops.SINK:
        raise TypeError(f"a kernel AST is a SINK, got {ast.op}")
    if max_local < 1:
        raise ValueError(f"the maximum local size must be positive, got {max_local}")
    if (explicit := explicit_dims(ast, max_local)) is not None:
        return explicit
    rngs = parallel_ranges(ast)[-3:]
    if not rngs:
        one = UOp.const(dtypes.weakint, 1)
        grouped = group_reduce(ast, max_local)
        if grouped is not None:
            return grouped[0], LaunchDims((one, one, one), (grouped[1], 1, 1))
        return ast, LaunchDims((one, one, one), (1, 1, 1))
    shared = row_groups(ast, parallel_ranges(ast), max_local)
    if shared is not None:
        return shared
    subs: dict[UOp, UOp] = {}
    inner = rngs[-1]
    end = inner.src[0]
    local = _local_size(end, max_local)
    groups = (end + (local - 1)) // local if local > 1 else end
    groups = groups.simplify()
    lid = UOp.special(local, LOCAL_ID, inner.dtype)
    single = groups.op is Ops.CONST and groups.arg == 1
    expr = lid if single else UOp.special(groups, GROUP_IDS[0], inner.dtype) * local + lid
    subs[inner] = expr
    sizes = [groups]
    for gid, r in zip(GROUP_IDS[1:], reversed(rngs[:-1])):
        subs[r] = UOp.special(r.src[0], gid, r.dtype)
        sizes.append(r.src[0])
    while len(sizes) < 3:
        sizes.append(UOp.const(end.dtype, 1))
    ast = substitute(graph_rewrite(ast, _pm_drop, ctx=set(subs)), subs)
    if not (end.op is Ops.CONST and end.arg % local == 0):
        ast = _gate_all(ast, expr < end)
    return ast, LaunchDims((sizes[0], sizes[1], sizes[2]), (local, 1, 1))
