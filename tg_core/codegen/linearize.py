"""Linearizing a lowered kernel graph: a list of UOps in execution order.

The graph (after REDUCE lowering and `normalize_ends`) has one single-range END per RANGE. Linearizing
takes three steps:

1. **Scopes.** A node's scope is the set of ranges it is computed inside: `.ranges` for values (so a
   loop-invariant value is outside the loops it does not depend on), plus, for effects, the loops of
   the ENDs around them (a store inside a loop stays there even if it ignores the loop index).
2. **Loop tree.** A range is nested inside the scope of its END; the scopes must form a chain, or the
   loops cannot be properly nested and linearizing fails with the ranges named.
3. **Order.** Each node goes in the block of the innermost range of its scope. A block's items (its
   nodes, and each child loop as one item) are topologically sorted, ties broken by the graph's own
   deterministic order; a loop item is emitted as RANGE, its block, END. Sibling loops never interleave,
   and a REDUCE's loop lands in exactly the block of the ranges it is inside (softmax's max and sum loops
   run once per row, before the column loop that uses them).
"""
from __future__ import annotations

import heapq
from collections.abc import Callable

from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp, fill_ranges

_EFFECTS = (Ops.STORE, Ops.END, Ops.GROUP)
_FIRST = (Ops.PARAM, Ops.DEFINE_VAR, Ops.DEFINE_REG, Ops.DEFINE_LOCAL)  # the kernel's arguments and storage


class LinearizeError(RuntimeError):
    pass


def _rank(u: UOp) -> tuple:
    """Arguments and storage first (PARAMs by index, variables by name), then everything in graph order."""
    if u.op not in _FIRST:
        return (1,)
    key = u.arg[0] if u.op is Ops.DEFINE_VAR or isinstance(u.arg, tuple) else u.arg
    return (0, _FIRST.index(u.op), key if isinstance(key, (int, str)) else repr(key))


def _name(r: UOp | None) -> str:
    return "the kernel" if r is None else f"range r{r.arg[0]}"


def _scopes(nodes: list[UOp]) -> dict[UOp, frozenset[UOp]]:
    """Each node's scope; effects inherit the loops of the ENDs and GROUPs around them (consumers first)."""
    forced: dict[UOp, set[UOp]] = {}
    scope: dict[UOp, frozenset[UOp]] = {}
    # nodes share their `.ranges` dicts (a one-source node has its source's): one frozenset per dict
    frozen: dict[int, frozenset[UOp]] = {}
    for u in reversed(nodes):
        rngs = u.ranges
        s = frozen.get(id(rngs))
        if s is None:
            s = frozen[id(rngs)] = frozenset(rngs)
        if u in forced:
            s = s | forced[u]
        scope[u] = s
        if u.op is Ops.END:
            forced.setdefault(u.src[0], set()).update(s | {u.src[1]})
        elif u.op is Ops.GROUP:
            for e in u.src:
                forced.setdefault(e, set()).update(s)
    return scope


def _loop_tree(nodes: list[UOp], scope: dict[UOp, frozenset[UOp]]) -> tuple[dict[UOp, UOp | None], dict[UOp, UOp]]:
    """(parent of each range, END of each range)."""
    ends: dict[UOp, UOp] = {}
    for u in nodes:
        if u.op is Ops.END:
            if len(u.src) != 2 or u.src[1] in ends:
                raise LinearizeError("linearize needs one single-range END per range (run normalize_ends first)")
            ends[u.src[1]] = u
    rngs = [u for u in nodes if u.op is Ops.RANGE]
    for r in rngs:
        if r not in ends:
            raise LinearizeError(f"{_name(r)} is never closed: no END (or REDUCE) lists it")
    encl = {r: (scope[ends[r]] | frozenset(r.ranges)) - {r} for r in rngs}
    # a loop inside r is inside every loop r is inside: a value shared by two reductions (a matmul row used
    # inside a reduction that runs per output column) names only the ranges it uses, not those around them
    changed = True
    while changed:
        changed = False
        for r in rngs:
            closed = encl[r].union(*(encl[p] for p in encl[r])) - {r}
            if closed != encl[r]:
                encl[r], changed = closed, True
    parent: dict[UOp, UOp | None] = {}
    for r in rngs:
        chain = sorted(encl[r], key=lambda p: len(encl[p]))
        for depth, p in enumerate(chain):
            if encl[p] != frozenset(chain[:depth]):
                raise LinearizeError(f"{_name(r)} is inside {', '.join(_name(q) for q in chain)}, "
                                     f"which are not nested inside each other")
        parent[r] = chain[-1] if chain else None
    return parent, ends


Lineage = list[tuple[UOp | None, UOp]]  # (block, item) pairs, innermost block first


class _Blocks:
    """Where each node sits: `home[u]` is (block, item), a plain node being its own item in the block of the
    innermost range of its scope, and RANGE and END of r the loop item r in r's parent block. Above that,
    `chain(b)` lists (block, item) from block b up to the kernel's top block (None): one list per block,
    shared by the nodes in it."""

    def __init__(self, nodes: list[UOp], scope: dict[UOp, frozenset[UOp]], parent: dict[UOp, UOp | None]):
        self.parent = parent
        self.chains: dict[UOp | None, Lineage] = {None: []}
        self.outer: dict[UOp | None, dict[UOp | None, UOp]] = {None: {}}  # chain(b) as block -> item
        depth = {r: len(self.chain(r)) for r in parent}
        self.home: dict[UOp, tuple[UOp | None, UOp]] = {}
        blocks: dict[frozenset[UOp], UOp | None] = {}  # scope -> its innermost range, checked once per scope
        for u in nodes:
            if u.op is Ops.RANGE or u.op is Ops.END:
                r = u if u.op is Ops.RANGE else u.src[1]
                self.home[u] = (parent[r], r)
                continue
            sc = scope[u]
            if sc in blocks:
                block = blocks[sc]
            else:
                block = blocks[sc] = max(sc, key=depth.__getitem__) if sc else None
                if not sc <= {b for _, b in self.chain(block)} | {block}:
                    raise LinearizeError(f"{u.op.name} ({u.render()[:80]}) depends on "
                                         f"{', '.join(_name(r) for r in sc)}, which are not nested inside each other")
            self.home[u] = (block, u)

    def chain(self, b: UOp | None) -> Lineage:
        out = self.chains.get(b)
        if out is None:
            assert b is not None  # the outermost scope's (None) chain is preset
            p = self.parent[b]
            out = self.chains[b] = [(p, b), *self.chain(p)]
            self.outer[b] = dict(out)
        return out


def _block_items(nodes: list[UOp], where: _Blocks) -> tuple[dict[UOp | None, list[UOp]], dict[UOp, set[UOp]]]:
    """(each block's items, each item's dependencies among the items of its block). An edge from a source to
    a user is an edge between their items in the deepest block both are inside of."""
    items: dict[UOp | None, list[UOp]] = {}
    home, chain, outer = where.home, where.chain, where.outer
    for u in nodes:
        if u.op is not Ops.END:
            items.setdefault(home[u][0], []).append(u)
    deps: dict[UOp, set[UOp]] = {u: set() for u in nodes}
    # (s's block, u's block) -> the first (block, item) of chain(s's block) that is u's block or encloses it:
    # it depends on the two blocks only, and a kernel has few of them
    meet: dict[tuple[UOp | None, UOp | None], tuple[UOp | None, UOp]] = {}
    for u in nodes:
        ublock, uitem = home[u]
        above = outer.get(ublock)
        if above is None:
            chain(ublock)
            above = outer[ublock]
        for s in u.src:
            hs = home.get(s)
            if hs is None:
                continue
            block, item = hs
            if block is ublock:
                if uitem is not item:
                    deps[uitem].add(item)
                continue
            # s's block, then the blocks enclosing it: the first one also enclosing u orders the two
            if block in above:
                mine = above[block]
                if mine is not item:
                    deps[mine].add(item)
                continue
            m = meet.get((block, ublock))
            if m is None:
                m = meet[(block, ublock)] = next((ob, oi) for ob, oi in chain(block) if ob is ublock or ob in above)
            outer_block, outer_item = m
            mine = uitem if outer_block is ublock else above[outer_block]
            if mine is not outer_item:
                deps[mine].add(outer_item)
    return items, deps


def linearize(sink: UOp, topo: dict[UOp, None] | None = None) -> list[UOp]:
    """The nodes under `sink` (not the SINK itself) in execution order (`topo`: sink.toposort(), if known)."""
    if topo is None:
        topo = sink.toposort()
    fill_ranges(topo)
    nodes = [u for u in topo if u is not sink]
    # each node's place in the tie-break order (_rank, then graph order) as one int, so that the ready heap
    # compares ints: the arguments and storage, sorted once, below zero, everything else its graph position
    key = {u: i for i, u in enumerate(nodes)}
    first = sorted((u for u in nodes if u.op in _FIRST), key=lambda u: (_rank(u), key[u]))
    for i, u in enumerate(first):
        key[u] = i - len(first)
    node_at = {k: u for u, k in key.items()}
    scope = _scopes(nodes + [sink])
    parent, ends = _loop_tree(nodes, scope)
    items, deps = _block_items(nodes, _Blocks(nodes, scope, parent))
    out: list[UOp] = []
    heappush, heappop = heapq.heappush, heapq.heappop

    # emit gets itself as an argument: a closure naming itself would be a reference cycle, which kept the whole
    # walk's state (44k objects for a first MLP forward) alive until a collection found it
    def emit(block: UOp | None, recurse: Callable[[UOp | None, Callable], None]) -> None:
        todo = items.get(block, [])
        waiting: dict[UOp, int] = {}
        users: dict[UOp, list[UOp]] = {}
        ready = []
        for u in todo:
            du = deps[u]
            if du:
                waiting[u] = len(du)
                for d in du:
                    if d in users:
                        users[d].append(u)
                    else:
                        users[d] = [u]
            else:
                ready.append(key[u])
        heapq.heapify(ready)
        placed = 0
        while ready:
            u = node_at[heappop(ready)]
            placed += 1
            out.append(u)
            if u.op is Ops.RANGE:  # a loop item: its body, then its END
                recurse(u, recurse)
                out.append(ends[u])
            for v in users.get(u, ()):
                n = waiting[v] - 1
                waiting[v] = n
                if n == 0:
                    heappush(ready, key[v])
        if placed != len(todo):
            stuck = [u for u in todo if waiting.get(u, 0) > 0]
            raise LinearizeError(f"a dependency cycle in {_name(block)} between "
                                 + ", ".join(f"{u.op.name} {u.render()[:60]}" for u in stuck[:4]))

    emit(None, emit)
    return out
