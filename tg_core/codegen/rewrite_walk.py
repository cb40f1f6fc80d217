"""A sources-first graph_rewrite as a plain walk, for matchers that rewrite few of a kernel's nodes.

`graph_rewrite(ast, pm)` enters every node, rebuilds it and tries pm's rules on it; what it makes of a node
depends on the node alone (its sources' results, then the rules to a fixed point). A walk over the kernel's
toposort does the same with a dict lookup and a rebuild per node, matching only the nodes of the ops pm has
rules for: the renderer's decompositions (a few transcendentals in thousands of nodes), defined shifts.
"""
from __future__ import annotations

from collections.abc import Iterable

from tg_core.helpers import REWRITE_STEP_LIMIT
from tg_core.uop.rewrite import PatternMatcher, RewriteError
from tg_core.uop.uop import UOp


def rewrite_walk(ast: UOp, order: Iterable[UOp], pm: PatternMatcher) -> UOp:
    """`graph_rewrite(ast, pm)` (sources first) as a plain walk over `order` (the toposort of `ast`): a node is
    rebuilt from its sources' results, and only a node of an op `pm` has rules for is matched, its replacement
    then brought to its own fixed point the same way. The result is the same graph, since what a sources-first
    rewrite makes of a node depends on the node alone; the walk spares the rewrite engine's bookkeeping on the
    nodes no rule can touch (all but a few transcendentals and ENDs of a large kernel)."""
    done: dict[UOp, UOp] = {}
    _walk(order, pm, done)
    return done[ast]


def _walk(order: Iterable[UOp], pm: PatternMatcher, done: dict[UOp, UOp]) -> None:
    """Each node of `order` not yet in `done` (its sources before it) rebuilt from its sources' results and, where
    `pm` has rules for its op, rewritten to its fixed point; `done` maps it, and what it became, to the result."""
    has_rules = pm.rules_by_op.__contains__
    for u in order:
        if u in done:
            continue
        src = u.src
        new_src = tuple([done[s] for s in src])
        x = u if new_src == src else UOp(u.op, u.dtype, new_src, u.arg, u.tag)
        if has_rules(x.op):
            x = _fixed_point(x, pm, done)
        done[u] = x
        done.setdefault(x, x)


def _fixed_point(x: UOp, pm: PatternMatcher, done: dict[UOp, UOp]) -> UOp:
    """`x` (its sources done) rewritten by `pm` until no rule applies: as graph_rewrite does, a replacement's
    new nodes are done first (sources first, each rewritten in turn), then the replacement is rebuilt from them
    and matched again."""
    has_rules = pm.rules_by_op.__contains__
    for _ in range(REWRITE_STEP_LIMIT.value):
        if not has_rules(x.op):
            return x
        ret = pm.rewrite(x)
        if ret is None:
            return x
        if ret in done:
            return done[ret]
        new_nodes = ret.toposort(gate=lambda n: n not in done)
        del new_nodes[ret]  # the toposort's last entry: it is rebuilt and matched again here, not entered
        _walk(new_nodes, pm, done)
        src = ret.src
        new_src = tuple([done[s] for s in src])
        x = ret if new_src == src else UOp(ret.op, ret.dtype, new_src, ret.arg, ret.tag)
    raise RewriteError(f"the renderer's rules did not reach a fixed point after {REWRITE_STEP_LIMIT.value} "
                       f"rewrites of one {x.op.name} node (REWRITE_STEP_LIMIT)")
