"""PatternMatcher and graph_rewrite: every transformation in tg is a list of `UPat -> function` rules.

A rule's function gets the pattern's named nodes as keyword arguments (and `ctx`, if it has a parameter
of that name) and returns a replacement UOp, or None to decline. Rules are indexed by the op of the
node they match, so a rewrite of a large graph only tries the rules that can apply to each node.
"""
from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable
from typing import Any

from tg_core.helpers import REWRITE_STEP_LIMIT
from tg_core.uop.ops import Ops
from tg_core.uop.upat import UPat
from tg_core.uop.uop import UOp

RuleFn = Callable[..., UOp | None]


def _describe(fn: Callable, pat: UPat | None = None) -> str:
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"rule {getattr(fn, '__qualname__', fn)!s}{where}" + (f" for {pat!r}" if pat is not None else "")


class _Rule:
    __slots__ = ("pat", "fn", "wants_ctx", "trivial_name")

    def __init__(self, pat: UPat, fn: RuleFn):
        self.pat, self.fn = pat, fn
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        self.wants_ctx = "ctx" in params
        # patterns like UPat(Ops.ADD, name="x") bind the node itself: no matching needed
        self.trivial_name = pat.name if pat.trivial and not isinstance(pat, _any_type()) else None


def _any_type() -> type:
    from tg_core.uop.upat import _UPatAny
    return _UPatAny


class PatternMatcher:
    """An ordered list of rules; the first rule that matches and returns a UOp wins."""

    def __init__(self, patterns: list[tuple[UPat, RuleFn]]):
        self.patterns = list(patterns)
        self.rules_by_op: dict[Ops, list[_Rule]] = {}
        for pat, fn in self.patterns:
            if not isinstance(pat, UPat) or not callable(fn):
                raise TypeError(f"a pattern must be (UPat, callable), got ({type(pat).__name__}, {type(fn).__name__})")
            rule = _Rule(pat, fn)
            for op in (pat.op if pat.op is not None else Ops):
                self.rules_by_op.setdefault(op, []).append(rule)

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.patterns + other.patterns)

    def __len__(self) -> int:
        return len(self.patterns)

    def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
        """The first rule's replacement for `u`, or None if no rule rewrites it."""
        rules = self.rules_by_op.get(u.op)
        if rules is None:
            return None
        for rule in rules:
            if rule.trivial_name is not None:
                matches = ({rule.trivial_name: u},)
            else:
                matches = rule.pat.match(u, {})
            for store in matches:
                try:
                    ret = rule.fn(ctx=ctx, **store) if rule.wants_ctx else rule.fn(**store)
                except Exception as e:
                    e.add_note(f"raised by {_describe(rule.fn, rule.pat)} on {u.op} node")
                    raise
                if ret is not None and ret is not u:
                    if type(ret) is not UOp:
                        raise TypeError(f"{_describe(rule.fn, rule.pat)} returned {type(ret).__name__} {ret!r}; "
                                        "a rule must return a UOp or None")
                    return ret
        return None


class RewriteError(RuntimeError):
    pass


class _Rewriter:
    """Applies a PatternMatcher to every node of a graph until no rule applies anywhere."""

    def __init__(self, pm: PatternMatcher, ctx: Any):
        self.pm, self.ctx = pm, ctx
        self.applied = 0
        self.limit = REWRITE_STEP_LIMIT.value
        self.last_rules: Counter = Counter()

    def _apply(self, u: UOp) -> UOp | None:
        rules = self.pm.rules_by_op.get(u.op)
        if rules is None:
            return None
        ret = self.pm.rewrite(u, self.ctx)
        if ret is not None:
            self.applied += 1
            if self.applied > self.limit:
                self._too_many(u, ret)
        return ret

    def _too_many(self, u: UOp, ret: UOp) -> None:
        raise RewriteError(f"graph_rewrite did not reach a fixed point after {self.applied} rule applications "
                           f"(REWRITE_STEP_LIMIT={self.limit}); the last rewrite turned {u.op} into {ret.op}. "
                           "A rule is probably undoing another one or growing the graph forever.")

    def _cycle(self, start: UOp, back: UOp) -> None:
        raise RewriteError(f"graph_rewrite does not terminate: rewriting {start.render()} leads back to {back.render()} "
                           f"(rules keep undoing each other; check the rules for {start.op} and {back.op})")

    def sources_first(self, root: UOp) -> UOp:
        """Rewrite each node after its sources; a rule's result is itself rewritten the same way."""
        done: dict[UOp, UOp] = {}
        busy: set[UOp] = set()
        stack: list[tuple[int, UOp, UOp | None]] = [(0, root, None)]
        apply = self._apply
        while stack:
            stage, n, aux = stack.pop()
            if stage == 0:
                if n in done:
                    continue
                if n in busy:
                    self._cycle(aux if aux is not None else n, n)
                busy.add(n)
                stack.append((1, n, None))
                for s in n.src:
                    if s not in done:
                        stack.append((0, s, n))
            elif stage == 1:
                src = n.src
                new_src = tuple([done[s] for s in src])
                nn = n
                for a, b in zip(src, new_src):
                    if a is not b:
                        nn = UOp(n.op, n.dtype, new_src, n.arg, n.tag)
                        break
                ret = apply(nn)
                if ret is None:
                    done[n] = nn
                    busy.discard(n)
                    if nn is not n:
                        done.setdefault(nn, nn)
                else:
                    stack.append((2, n, ret))
                    stack.append((0, ret, n))
            else:
                done[n] = done[aux]
                busy.discard(n)
        return done[root]

    def node_first(self, root: UOp) -> UOp:
        """Rewrite each node to a fixed point before its sources, then its (rewritten) sources."""
        done: dict[UOp, UOp] = {}
        busy: set[UOp] = set()
        stack: list[tuple[int, UOp, UOp | None]] = [(0, root, None)]
        apply = self._apply
        while stack:
            stage, n, aux = stack.pop()
            if stage == 0:
                if n in done:
                    continue
                if n in busy:
                    self._cycle(aux if aux is not None else n, n)
                busy.add(n)
                ret = apply(n)
                if ret is not None:
                    stack.append((2, n, ret))
                    stack.append((0, ret, n))
                    continue
                stack.append((1, n, None))
                for s in n.src:
                    if s not in done:
                        stack.append((0, s, n))
            elif stage == 1:
                new_src = tuple([done[s] for s in n.src])
                if all(a is b for a, b in zip(n.src, new_src)):
                    done[n] = n
                    busy.discard(n)
                else:
                    stack.append((2, n, nn := UOp(n.op, n.dtype, new_src, n.arg, n.tag)))
                    stack.append((0, nn, n))
            else:
                done[n] = done[aux]
                busy.discard(n)
        return done[root]


def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None) -> UOp:
    """`sink` with `pm` applied everywhere until nothing changes.

    By default a node is rewritten after its sources (so rules see simplified operands). With
    `bottom_up=True` (tinygrad's name for it) a node is rewritten before its sources are visited, which
    suits rules that replace whole subgraphs by what they mean."""
    if not isinstance(sink, UOp):
        raise TypeError(f"graph_rewrite needs a UOp, got {type(sink).__name__}")
    if not isinstance(pm, PatternMatcher):
        raise TypeError(f"graph_rewrite needs a PatternMatcher, got {type(pm).__name__}")
    rw = _Rewriter(pm, ctx)
    return rw.node_first(sink) if bottom_up else rw.sources_first(sink)


def substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """`root` with every key of `mapping` replaced by its value; the values are not searched."""
    done: dict[UOp, UOp] = dict(mapping)
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        n, ready = stack.pop()
        if n in done:
            continue
        if not ready:
            stack.append((n, True))
            stack.extend((s, False) for s in n.src if s not in done)
            continue
        new_src = tuple([done[s] for s in n.src])
        same = all(a is b for a, b in zip(n.src, new_src))
        done[n] = n if same else UOp(n.op, n.dtype, new_src, n.arg, n.tag)
    return done[root]
