"""ENDs in the form the linearizer wants: one range per END, and one END per range.

`END(x, r0, r1)` (outermost first) splits into `END(END(x, r1), r0)`. Effects ended separately over the
same range (two stores in one loop nest, the accumulator updates of reductions sharing a range) merge
into one `END(GROUP(x1, x2), r)`: one loop, both effects inside it.
"""
from __future__ import annotations

from collections.abc import Iterable

from tg_core.codegen.linearize import LinearizeError
from tg_core.codegen.rewrite_walk import rewrite_walk
from tg_core.dtype import dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import PatternMatcher, graph_rewrite, substitute
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat


def _split(x: UOp) -> UOp | None:
    if len(x.src) <= 2:
        return None
    inner = UOp(Ops.END, dtypes.void, (x.src[0], x.src[-1]))
    return UOp(Ops.END, dtypes.void, (inner, *x.src[1:-1]))


pm_split_ends = PatternMatcher([(UPat(Ops.END, name="x"), _split)])


def _ends_by_range(order: Iterable[UOp]) -> dict[UOp, list[UOp]]:
    out: dict[UOp, list[UOp]] = {}
    for u in order:
        if u.op is Ops.END:
            out.setdefault(u.src[1], []).append(u)
    return out


def merge_ends(root: UOp, single: bool = False) -> UOp:
    """`root` with the ENDs of each range merged into one (innermost ranges first: merging them can make
    the ENDs around them identical). `single`: the caller knows no range has two ENDs (nothing to merge)."""
    return merge_ends_order(root, single)[0]


def merge_ends_order(root: UOp, single: bool = False) -> tuple[UOp, dict[UOp, None] | None]:
    """merge_ends, and the toposort of the result when it walked it (to find nothing left to merge): the
    linearizer's first step, which it need not repeat.

    Merging is defined one range at a time: the range of the first END (in toposort order) among ranges with
    several, its ENDs grouped in toposort order, then the graph walked again. A walk merges more than one range
    when that is the same: see _wave."""
    if single:
        return root, None
    merged_ranges: set[UOp] = set()
    order = root.toposort()
    while True:
        many = {r: ends for r, ends in _ends_by_range(order).items() if len(ends) > 1}
        if not many:
            return root, order
        mapping: dict[UOp, UOp] = {}
        for r in _wave(order, many):
            ends = many[r]
            body = UOp(Ops.GROUP, dtypes.void, tuple(e.src[0] for e in ends))
            # a range is merged once, unless one of its ENDs was inside another (the merged END still contains
            # that one): only then is the nesting checked, with one walk under all of them
            if r in merged_ranges and not body.toposort().keys().isdisjoint(ends):
                raise LinearizeError(f"range r{r.arg[0]} is ended twice, one END depending on the other: "
                                     "its loops are not properly nested (or one reduction over it needs another)")
            merged_ranges.add(r)
            merged = UOp(Ops.END, dtypes.void, (body, r))
            mapping.update((e, merged) for e in ends)
        walked = _substitute_order(root, mapping)
        if walked is None:
            root = substitute(root, mapping)
            order = root.toposort()
        else:
            root, order = walked


def _substitute_order(root: UOp, mapping: dict[UOp, UOp]) -> tuple[UOp, dict[UOp, None]] | None:
    """`substitute(root, mapping)` and its toposort, in one walk (the merge loop needs both, each time). None
    when a value of `mapping` contains a key (a range ended twice, one END inside the other: the caller then
    substitutes plainly, and the loop finds the error).

    The walk is toposort's (depth first, sources in order) over the old graph, each node rebuilt after its
    sources, and a key's value walked as it is where the key is met: the new graph's own walk meets its
    nodes in that order. A node it meets again (two old nodes that became one) adds nothing new, since all
    under it was met with it."""
    new: dict[UOp, UOp] = {}
    order: dict[UOp, None] = {}
    if root in mapping:
        return None
    stack = [(root, iter(root.src))]
    push, pop = stack.append, stack.pop
    while stack:
        n, it = stack[-1]
        for s in it:
            if s in new:
                continue
            v = mapping.get(s)
            if v is None:
                push((s, iter(s.src)))
                break
            new[s] = v
            if v in order:
                continue
            # the value as it is: its nodes are their own new versions (they hold no key)
            walk = [(v, iter(v.src))]
            while walk:
                x, xit = walk[-1]
                for c in xit:
                    if c not in order:
                        if c in mapping:
                            return None
                        walk.append((c, iter(c.src)))
                        break
                else:
                    walk.pop()
                    order[x] = None
                    if x not in new:
                        new[x] = x
        else:
            pop()
            src = n.src
            ns = tuple([new[s] for s in src])
            nn = n if ns == src else UOp(n.op, n.dtype, ns, n.arg, n.tag)
            new[n] = nn
            if nn not in order:
                order[nn] = None
    return new[root], order


def _wave(order: Iterable[UOp], many: dict[UOp, list[UOp]]) -> list[UOp]:
    """The ranges of `many` (each range with several ENDs, in toposort order of their first END) that one
    substitution merges exactly as merging them one after another would: the first, and after it, as long as
    each is, the ranges no END of which has an END of a range in `many` under it ("flat"), the first too.

    Merging range a changes only the nodes above its ENDs and the order of the nodes under them (the merged
    END walks all their bodies at once). A flat range's ENDs are neither, so a later flat range keeps its ENDs,
    their order and its place as the next range to merge; and no END of one flat range is under another's."""
    ranges = list(many)
    if len(ranges) == 1:
        return ranges
    # the ranges in `many` that have an END under each node (empty: the one shared empty set)
    empty: frozenset[UOp] = frozenset()
    under: dict[UOp, frozenset[UOp]] = {}
    END = Ops.END
    for u in order:
        acc = empty
        for s in u.src:
            b = under[s]
            if s.op is END and s.src[1] in many and s.src[1] not in b:
                b = b | {s.src[1]}
            if b and b is not acc:
                acc = b if not acc or acc <= b else acc if b <= acc else acc | b
        under[u] = acc
    wave: list[UOp] = []
    for r in ranges:
        if any(under[e] for e in many[r]):
            return wave or [r]  # merged alone when first (as defined), else the wave stops before it
        wave.append(r)
    return wave


def split_ends(ast: UOp, order: Iterable[UOp] | None = None) -> UOp:
    """`ast` with single-range ENDs: `pm_split_ends` to its fixed point, in one sources-first walk over
    `order` (the toposort of `ast`, if known)."""
    return _split_ends(ast, ast.toposort() if order is None else order)[0]


def _split_ends(ast: UOp, order: Iterable[UOp]) -> tuple[UOp, bool]:
    """split_ends, and whether no range of the result has two ENDs (then merge_ends has nothing to do). Every
    END of the result is one this walk built (or found), so counting them here spares merge_ends a walk."""
    new: dict[UOp, UOp] = {}
    end_of: dict[UOp, UOp] = {}  # range -> the one END over it seen so far
    single = True
    for u in order:
        src = u.src
        lowered = tuple([new[s] for s in src])
        x = u if lowered == src else UOp(u.op, u.dtype, lowered, u.arg, u.tag)
        while x.op is Ops.END and len(x.src) > 2:
            inner = UOp(Ops.END, dtypes.void, (x.src[0], x.src[-1]))
            if single and end_of.setdefault(inner.src[1], inner) is not inner:
                single = False
            x = UOp(Ops.END, dtypes.void, (inner, *x.src[1:-1]))
        if x.op is Ops.END and single and end_of.setdefault(x.src[1], x) is not x:
            single = False
        new[u] = x
    return new[ast], single


# (matcher, matcher + pm_split_ends) by id(matcher): a renderer's decompositions, built once
_with_split: dict[int, tuple[PatternMatcher, PatternMatcher]] = {}


def normalize_ends(ast: UOp, also: PatternMatcher | None = None) -> UOp:
    """`ast` with single-range ENDs, one per range. `also` (a renderer's extra rules) is applied first; when
    no node has an op it rewrites (a matmul has no transcendentals to decompose) the rewrite is skipped and
    the ENDs split in a plain walk; else, when it has no END rules, it runs in the splitting pass."""
    return normalize_ends_order(ast, also)[0]


def normalize_ends_order(ast: UOp, also: PatternMatcher | None = None) -> tuple[UOp, dict[UOp, None] | None]:
    """normalize_ends, and the toposort of the result if merge_ends_order walked it."""
    order = ast.toposort()
    if also is None or not any(u.op in also.rules_by_op for u in order):
        return merge_ends_order(*_split_ends(ast, order))
    if Ops.END in also.rules_by_op:
        return merge_ends_order(graph_rewrite(graph_rewrite(ast, also), pm_split_ends))  # rules see unsplit ENDs
    if id(also) not in _with_split:
        _with_split[id(also)] = (also, also + pm_split_ends)
    return merge_ends_order(rewrite_walk(ast, order, _with_split[id(also)][1]))
