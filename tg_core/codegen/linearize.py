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
from collections.abc import Callable, Iterable

from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

_EFFECTS = (Ops.STORE, Ops.END, Ops.GROUP)
_FIRST = (Ops.PARAM, Ops.DEFINE_VAR, Ops.DEFINE_REG, Ops.DEFINE_LOCAL)  # the kernel's arguments and storage
_FIRST_OPS = frozenset(_FIRST)  # (membership in a tuple of enum members compares each by ==: 10x slower)


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


def _range_sets(topo: Iterable[UOp]) -> dict[UOp, frozenset[UOp]]:
    """Each node's `.ranges` (see uop.py) as a frozenset, in one walk sources first. Equal sets are mostly one
    object: a one-source node has its source's, and the union of two sets is made once per pair, so the scopes
    built from them hash and compare by identity (filling `.ranges` dicts and freezing each cost a fifth of
    linearizing a large kernel)."""
    out: dict[UOp, frozenset[UOp]] = {}
    empty: frozenset[UOp] = frozenset()
    unions: dict[tuple[int, int], frozenset[UOp]] = {}  # (id(a), id(b)) -> a | b; every set stays alive here
    RANGE, END, REDUCE, CALL = Ops.RANGE, Ops.END, Ops.REDUCE, Ops.CALL
    for u in topo:
        op, src = u.op, u.src
        if op is RANGE:
            r = out[src[0]] | {u}
        elif op is END or op is REDUCE:
            # the ranges it ends are not around it, nor what their bounds depend on
            ended = {s for s in src[1:] if s.op is RANGE}
            acc: set[UOp] = set()
            for s in src:
                if s not in ended:
                    acc.update(out[s])
            r = frozenset(acc - ended)
        else:
            if op is CALL:
                src = src[1:]  # the callee's own loops are internal to it
            if not src:
                r = empty
            else:
                r = out[src[0]]
                for s in src[1:]:
                    b = out[s]
                    if b is r or not b:
                        continue
                    if not r:
                        r = b
                        continue
                    k = (id(r), id(b))
                    c = unions.get(k)
                    if c is None:
                        c = unions[k] = r if b <= r else b if r <= b else r | b
                    r = c
        out[u] = r
    return out


def _scopes(nodes: list[UOp], rngs: dict[UOp, frozenset[UOp]]) -> dict[UOp, frozenset[UOp]]:
    """Each node's scope (`rngs`: its ranges); effects inherit the loops of the ENDs and GROUPs around them
    (consumers first)."""
    forced: dict[UOp, set[UOp]] = {}
    scope: dict[UOp, frozenset[UOp]] = {}
    END, GROUP = Ops.END, Ops.GROUP
    for u in reversed(nodes):
        s = rngs[u]
        if u in forced:
            s = s | forced[u]
        scope[u] = s
        op = u.op
        if op is END:
            forced.setdefault(u.src[0], set()).update(s | {u.src[1]})
        elif op is GROUP:
            for e in u.src:
                forced.setdefault(e, set()).update(s)
    return scope


def _loop_tree(nodes: list[UOp], scope: dict[UOp, frozenset[UOp]],
               sets: dict[UOp, frozenset[UOp]]) -> tuple[dict[UOp, UOp | None], dict[UOp, UOp]]:
    """(parent of each range, END of each range); `sets`: each node's ranges."""
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
    encl = {r: (scope[ends[r]] | sets[r]) - {r} for r in rngs}
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


class _Chains:
    """`chain(b)` lists (block, item) from block b up to the kernel's top block (None), the loop item of each
    block in the block around it: one list per block, shared by the nodes in it; `outer[b]` is the same as a
    dict block -> item."""

    def __init__(self, parent: dict[UOp, UOp | None]):
        self.parent = parent
        self.chains: dict[UOp | None, Lineage] = {None: []}
        self.outer: dict[UOp | None, dict[UOp | None, UOp]] = {None: {}}

    def chain(self, b: UOp | None) -> Lineage:
        out = self.chains.get(b)
        if out is None:
            assert b is not None  # the outermost scope's (None) chain is preset
            p = self.parent[b]
            out = self.chains[b] = [(p, b), *self.chain(p)]
            self.outer[b] = dict(out)
        return out


def _block_items(nodes: list[UOp], scope: dict[UOp, frozenset[UOp]], parent: dict[UOp, UOp | None]) \
        -> tuple[dict[UOp | None, list[UOp]], dict[UOp, set[UOp]], dict[UOp, list[UOp]]]:
    """(each block's items, each item's dependencies among the items of its block, for items that have any, and
    each item's users among them: the dependencies the other way round).

    A plain node is its own item in the block of the innermost range of its scope; RANGE and END of r are the
    loop item r in r's parent block. An edge from a source to a user is an edge between their items in the
    deepest block both are inside of. One walk, sources first: a node's place is known before its users'."""
    where = _Chains(parent)
    chain, outer = where.chain, where.outer
    depth = {r: len(chain(r)) for r in parent}
    home: dict[UOp, tuple[UOp | None, UOp]] = {}
    blocks: dict[frozenset[UOp], UOp | None] = {}  # scope -> its innermost range, checked once per scope
    items: dict[UOp | None, list[UOp]] = {}
    deps: dict[UOp, set[UOp]] = {}
    users: dict[UOp, list[UOp]] = {}
    # (s's block, u's block) -> the first (block, item) of chain(s's block) that is u's block or encloses it:
    # it depends on the two blocks only, and a kernel has few of them
    meet: dict[tuple[UOp | None, UOp | None], tuple[UOp | None, UOp]] = {}
    RANGE, END = Ops.RANGE, Ops.END
    for u in nodes:
        op = u.op
        if op is RANGE or op is END:
            uitem = u if op is RANGE else u.src[1]
            ublock = parent[uitem]
        else:
            sc = scope[u]
            if sc in blocks:
                ublock = blocks[sc]
            else:
                ublock = blocks[sc] = max(sc, key=depth.__getitem__) if sc else None
                if not sc <= {b for _, b in chain(ublock)} | {ublock}:
                    raise LinearizeError(f"{u.op.name} ({u.render()[:80]}) depends on "
                                         f"{', '.join(_name(r) for r in sc)}, which are not nested inside each other")
            uitem = u
        home[u] = (ublock, uitem)
        if op is not END:
            if ublock in items:
                items[ublock].append(u)
            else:
                items[ublock] = [u]
        above = outer.get(ublock)
        if above is None:
            chain(ublock)
            above = outer[ublock]
        for s in u.src:
            block, item = home[s]
            if block is ublock:
                mine = uitem
            elif block in above:
                # s's block encloses u's: the item of u's chain in it
                mine = above[block]
            else:
                # s's block, then the blocks enclosing it: the first one also enclosing u orders the two
                m = meet.get((block, ublock))
                if m is None:
                    m = meet[(block, ublock)] = next((ob, oi) for ob, oi in chain(block) if ob is ublock or ob in above)
                block, item = m
                mine = uitem if block is ublock else above[block]
            if mine is not item:
                d = deps.get(mine)
                if d is None:
                    deps[mine] = {item}
                elif item in d:
                    continue
                else:
                    d.add(item)
                if item in users:
                    users[item].append(mine)
                else:
                    users[item] = [mine]
    return items, deps, users


def linearize(sink: UOp, topo: dict[UOp, None] | None = None) -> list[UOp]:
    """The nodes under `sink` (not the SINK itself) in execution order (`topo`: sink.toposort(), if known)."""
    if topo is None:
        topo = sink.toposort()
    nodes = [u for u in topo if u is not sink]
    # each node's place in the tie-break order (_rank, then graph order) as one int, so that the ready heap
    # compares ints: the arguments and storage first, sorted once, then everything else in graph order
    first_ops = _FIRST_OPS
    first = [u for u in nodes if u.op in first_ops]
    if first:
        pos = {u: i for i, u in enumerate(nodes)}
        first.sort(key=lambda u: (_rank(u), pos[u]))
        node_at = first + [u for u in nodes if u.op not in first_ops]
    else:
        node_at = nodes
    key = {u: i for i, u in enumerate(node_at)}
    sets = _range_sets(topo)
    scope = _scopes([*nodes, sink], sets)
    parent, ends = _loop_tree(nodes, scope, sets)
    items, deps, users = _block_items(nodes, scope, parent)
    waiting = {u: len(d) for u, d in deps.items()}  # each item's dependencies not placed yet
    out: list[UOp] = []
    heappush, heappop, RANGE = heapq.heappush, heapq.heappop, Ops.RANGE

    # emit gets itself as an argument: a closure naming itself would be a reference cycle, which kept the whole
    # walk's state (44k objects for a first MLP forward) alive until a collection found it
    def emit(block: UOp | None, recurse: Callable[[UOp | None, Callable], None]) -> None:
        todo = items.get(block, [])
        ready = [key[u] for u in todo if u not in deps]
        heapq.heapify(ready)
        placed = 0
        while ready:
            u = node_at[heappop(ready)]
            placed += 1
            out.append(u)
            if u.op is RANGE:  # a loop item: its body, then its END
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
