"""The optimizations hook: `Opt`s a renderer or device asks for, applied to a kernel AST by range splitting.

An opt splits one range `r` of size `n` into `outer*amt + inner`: `outer` keeps the axis (size `n//amt`) and
`inner` (size `amt`) gets the opt's axis type (UPCAST for an output axis, UNROLL for a reduce axis). The
split only renames loops, so the AST computes the same values; `expander.py` later turns UPCAST/UNROLL
ranges into straight-line lanes.

When `amt` does not divide `n`, the last `n % amt` iterations are peeled into a tail: a copy of what the
range encloses with `r = n//amt*amt + t` (`t` a new range of the axis' own type, or the constant when one
iteration is left). An output axis gets a second effect (`END` of the copied store over `t`), a reduce
axis a second REDUCE combined with the first. The copy renames the ranges nested inside `r` (the inner
loops of the effect, the ranges of reductions that depend on `r`), so each loop keeps one place in the
loop tree; values that do not depend on `r` (softmax's row max, when its columns are split) stay shared.
Unlike a masked tail, the main loop keeps no per-lane gates, which would keep a compiler from vectorizing it.
A size that is an expression (a core's share of rows, a variable) splits into `n//amt` groups and a tail
loop of `n % amt` iterations.

PACK (`pack_panels`) is the one opt that is not a split: it copies a matmul's B into scratch panels, optionally
in K blocks (the partial sums then accumulate in the output, blocking.py).
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum

from tg_core.codegen.reduce import reduce_combine
from tg_core.dtype import AddrSpace, dtypes
from tg_core.uop.ops import AxisType, Ops
from tg_core.uop.rewrite import PatternMatcher, graph_rewrite, substitute
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat


class OptOps(Enum):
    UPCAST = "UPCAST"  # an output (LOOP) axis becomes straight-line lanes
    UNROLL = "UNROLL"  # a reduce axis becomes straight-line lanes
    PACK = "PACK"      # a reduction's operand copied into contiguous panels of `amt` columns (see pack_panels)


@dataclass(frozen=True)
class Opt:
    """`op` applied to an axis: `axis` counts the kernel's LOOP ranges (UPCAST, PACK) or REDUCE ranges
    (UNROLL), ordered by axis id; `amt` is the number of lanes (0: the whole axis), at most the axis size, a
    size it does not divide leaving a peeled tail; for PACK, the panel width, and `depth` (0: the whole reduction)
    the rows of the reduction each panel holds (K blocks, see pack_panels)."""
    op: OptOps
    axis: int
    amt: int = 0
    depth: int = 0


class OptError(ValueError):
    """An opt that does not apply to the kernel (no such axis, a size it does not divide, ...)."""


# which axes each opt may split, and the axis type of the lanes it makes
_SPLITS = {OptOps.UPCAST: (AxisType.LOOP, AxisType.UPCAST), OptOps.UNROLL: (AxisType.REDUCE, AxisType.UNROLL)}


def _axis_key(axis_id: object) -> tuple:
    # ids are ints from the scheduler; tuples may come from elsewhere: order ints first, then the rest by text
    return (0, axis_id, "") if isinstance(axis_id, int) else (1, 0, repr(axis_id))


def kernel_ranges(ast: UOp, kind: AxisType | None = None) -> list[UOp]:
    """The RANGEs of a kernel AST (of one axis type, if given), ordered by axis id."""
    rngs = [u for u in ast.toposort() if u.op is Ops.RANGE and (kind is None or u.arg[1] is kind)]
    return sorted(rngs, key=lambda r: _axis_key(r.arg[0]))


def _respread(ctx: tuple[UOp, tuple[UOp, ...]], x: UOp) -> UOp | None:
    """END and REDUCE list the loops they close: the split range is replaced there by its new ranges."""
    old, new = ctx
    if old not in x.src[1:]:
        return None
    rngs = [n for r in x.src[1:] for n in (new if r is old else (r,))]
    return x.replace(src=(x.src[0], *rngs))


_pm_respread = PatternMatcher([(UPat((Ops.END, Ops.REDUCE), name="x"), _respread)])


class _Tail:
    """How to copy the part of a kernel inside the split range `rng` for its last iterations."""

    def __init__(self, rng: UOp, base: UOp, rest: UOp, fresh: Iterator[int]):
        self.rng, self.fresh = rng, fresh
        one = rest.op is Ops.CONST and rest.arg == 1
        self.range = None if one else UOp.range(rest, next(fresh), rng.arg[1], rng.dtype)
        self.expr = base + self.range if self.range is not None else base

    def copy(self, x: UOp, nested: Sequence[UOp]) -> tuple[UOp, list[UOp]]:
        """`x` at `rng = base + t`, with `nested` and the ranges of the reductions in `x` that depend on `rng`
        renamed; also the renamed `nested`."""
        dep: set[UOp] = set()
        for n in x.toposort():
            if n is self.rng or any(s in dep for s in n.src):
                dep.add(n)
        inner = dict.fromkeys([*nested, *(q for n in dep if n.op is Ops.REDUCE for q in n.src[1:])])
        inner.pop(self.rng, None)
        mapping = {self.rng: self.expr}
        for q in sorted(inner, key=lambda r: _axis_key(r.arg[0])):
            mapping[q] = UOp.range(q.src[0].substitute(mapping), next(self.fresh), q.arg[1], q.dtype)
        return x.substitute(mapping), [mapping[q] for q in nested]

    def ranges(self) -> tuple[UOp, ...]:
        return () if self.range is None else (self.range,)


def _peel_end(tail: _Tail, new: tuple[UOp, ...], e: UOp) -> tuple[UOp, ...]:
    """An effect over the split range as the main effect (over `new`) and its tail."""
    rngs = e.src[1:]
    if tail.rng not in rngs:
        return (e,)
    pos = rngs.index(tail.rng)
    main = UOp(Ops.END, dtypes.void, (e.src[0], *rngs[:pos], *new, *rngs[pos + 1:]))
    body, inner = tail.copy(e.src[0], rngs[pos + 1:])
    return main, body.end(*rngs[:pos], *tail.ranges(), *inner)


def _peel_reduce(ctx: tuple[_Tail, tuple[UOp, ...]], red: UOp) -> UOp | None:
    """A reduction over the split range as the main reduction (over `new`) combined with its tail's."""
    tail, new = ctx
    if tail.rng not in red.src[1:]:
        return None
    others = [r for r in red.src[1:] if r is not tail.rng]
    main = red.replace(src=(red.src[0], *[n for r in red.src[1:] for n in (new if r is tail.rng else (r,))]))
    value, renamed = tail.copy(red.src[0], others)
    rest = (*renamed, *tail.ranges())
    return reduce_combine(red.arg, main, value.reduce(red.arg, *rest) if rest else value)


def split_range(ast: UOp, rng: UOp, amt: int, kind: AxisType) -> UOp:
    """`ast` with `rng` (size n) replaced by `outer*amt + inner`, inner of axis type `kind`, and the last
    `n % amt` iterations peeled into a tail (see the module docstring). A size that is an expression (a core's
    share of rows, a variable) needs an amount and always gets a tail loop, of `n % amt` iterations."""
    end = rng.src[0]
    if end.op is not Ops.CONST and amt <= 0:
        raise OptError(f"cannot split axis {rng.arg[0]} entirely: its size {end.render()} is not a constant")
    size: int | None = end.arg if end.op is Ops.CONST else None
    if amt == 0 and size is not None:  # the whole axis (an expression's size with amt 0 was rejected above)
        amt = size
    if size is not None and not 0 < amt <= size:
        raise OptError(f"cannot split axis {rng.arg[0]} of size {size} by {amt}: the amount must be in 1..{size}")
    ids = [r.arg[0] for r in kernel_ranges(ast)]
    fresh = itertools.count(max((i for i in ids if isinstance(i, int)), default=-1) + 1)
    inner = UOp.range(UOp.const(rng.dtype, amt), next(fresh), kind, rng.dtype)
    new: tuple[UOp, ...]
    if size is not None and size // amt == 1:  # no loop of one iteration: the scope analysis would see a loop
        new, expr = (inner,), inner           # nothing depends on
    else:
        outer = UOp.range((end // amt).simplify(), rng.arg[0], rng.arg[1], rng.dtype)
        new, expr = (outer, inner), outer * amt + inner
    rest = (end % amt).simplify()
    if not (rest.op is Ops.CONST and rest.arg == 0):
        tail = _Tail(rng, (end // amt * amt).simplify(), rest, fresh)
        ast = graph_rewrite(ast, PatternMatcher([(UPat(Ops.REDUCE, name="red"), _peel_reduce)]), ctx=(tail, new))
        ast = ast.replace(src=tuple(x for e in ast.src for x in _peel_end(tail, new, e)))
    else:
        ast = graph_rewrite(ast, _pm_respread, ctx=(rng, new))
    return substitute(ast, {rng: expr})


# the largest panel PACK puts on the stack (the scratch of every core's thread)
MAX_PANEL_BYTES = 256 * 1024


def pack_panels(ast: UOp, j: UOp, amt: int, depth: int = 0) -> UOp:
    """PACK: the operand of the kernel's reduction that depends on output axis `j` and the reduce axis `k` only
    (B of a matmul) is copied, for each group of `amt` columns, into a scratch panel `P[k][amt]` before the
    loops that use it, and the reduction reads `P[k*amt + jw]` instead. `j` becomes `jo*amt + jw` with `jo`
    the outermost loop, so one panel serves every row: a unit-stride stream the size of one cache-resident
    panel instead of a walk down B's columns (a 4 KB stride maps a 16-column panel to few cache sets, so it
    is refetched from L3 for every row tile). The copy is O(K*N) work against the O(M*N*K) it feeds.

    When `amt` does not divide the axis, the last panel is padded: its copy loads are gated (the padding
    holds zeros) and so is every access of the kernel outside the reduction that uses a column (the store, a
    bias), so the reduction loop itself stays free of gates.

    With `depth` less than the reduction's size the panels hold K blocks of `depth` rows (blocking.py): a deep K's
    panel then fits the cache and the scratch."""
    size = j.src[0].arg if j.src[0].op is Ops.CONST else 0
    if len(ast.src) != 1 or ast.src[0].op is not Ops.END or j not in ast.src[0].src[1:]:
        raise OptError(f"PACK needs a kernel with one effect ended over axis {j.arg[0]}")
    if not 0 < amt <= size:
        raise OptError(f"PACK of axis {j.arg[0]} needs a constant size of at least {amt}")
    effect = ast.src[0]
    reds = [u for u in effect.toposort() if u.op is Ops.REDUCE and j in u.src[0].ranges]
    if len(reds) != 1 or len(reds[0].src) != 2 or reds[0].src[1].src[0].op is not Ops.CONST:
        raise OptError("PACK needs one reduction over one constant-size axis that uses the packed axis")
    red, k = reds[0], reds[0].src[1]
    loads = [u for u in red.src[0].toposort() if u.op is Ops.LOAD and set(u.ranges) == {j, k}]
    if len(loads) != 1:
        raise OptError(f"PACK needs one load in the reduction that uses exactly axes {j.arg[0]} and {k.arg[0]}")
    load, full = loads[0], k.src[0].arg
    depth = full if depth <= 0 else depth
    if depth * amt * load.dtype.itemsize > MAX_PANEL_BYTES:
        raise OptError(f"a {depth}x{amt} panel of {load.dtype!r} exceeds {MAX_PANEL_BYTES} bytes of scratch")
    ids = [r.arg[0] for r in kernel_ranges(ast)]
    fresh = itertools.count(max((i for i in ids if isinstance(i, int)), default=-1) + 1)
    if depth < full:
        from tg_core.codegen.blocking import pack_blocks
        return pack_blocks(ast, j, k, red, load, amt, depth, fresh)
    jo = UOp.range(UOp.const(j.dtype, -(-size // amt)), j.arg[0], j.arg[1], j.dtype)
    jw, pk, pw = (UOp.range(UOp.const(r.dtype, n), next(fresh), AxisType.LOOP, r.dtype)
                  for r, n in ((j, amt), (k, depth), (j, amt)))
    # numbered below zero: reduce.py numbers the accumulators from zero
    panel = UOp(Ops.DEFINE_REG, load.dtype.ptr(depth * amt, AddrSpace.REG), (), -1 - len(
        [u for u in ast.toposort() if u.op is Ops.DEFINE_REG]))
    col, copy_col = jo * amt + jw, jo * amt + pw
    source = load.substitute({k: pk, j: copy_col})
    if size % amt:
        source = source.replace(src=(_gated(source.src[0], copy_col < size), *source.src[1:]))
    copy = panel.index(pk * amt + pw).store(source).end(pk, pw)
    packed = panel.after(copy).index(k * amt + jw).load()
    store = effect.src[0].substitute({load: packed}).substitute({j: col})
    if size % amt:
        store = store.substitute({u: _gated(u, col < size) for u in store.toposort()
                                  if u.op is Ops.INDEX and u.src[0].op is Ops.PARAM and jw in u.ranges})
    others = [r for r in effect.src[1:] if r is not j]
    return ast.replace(src=(store.end(jo, *others, jw),))


def _gated(index: UOp, cond: UOp) -> UOp:
    """`index` valid only where `cond` (and its own gate) holds."""
    return index.replace(src=(*index.src[:2], cond if len(index.src) == 2 else index.src[2] & cond))


def apply_opts(ast: UOp, opts: Sequence[Opt]) -> UOp:
    """`ast` with each opt applied in order (each opt's axis is counted on the AST as the earlier opts left it)."""
    for opt in opts:
        if opt.op is OptOps.PACK:
            axes = kernel_ranges(ast, AxisType.LOOP)
            if not 0 <= opt.axis < len(axes) or opt.amt <= 0:
                raise OptError(f"{opt}: the kernel has {len(axes)} LOOP axes and PACK needs a panel width > 0")
            ast = pack_panels(ast, axes[opt.axis], opt.amt, opt.depth)
            continue
        if opt.op not in _SPLITS:
            raise OptError(f"unknown opt {opt.op}")
        of, kind = _SPLITS[opt.op]
        axes = kernel_ranges(ast, of)
        if not 0 <= opt.axis < len(axes):
            raise OptError(f"{opt}: the kernel has {len(axes)} {of.name} axes")
        ast = split_range(ast, axes[opt.axis], opt.amt, kind)
    return ast
