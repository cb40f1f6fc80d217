"""PatternMatcher and graph_rewrite: every transformation in tg is a list of `UPat -> function` rules.

A rule's function gets the pattern's named nodes as keyword arguments (and `ctx`, if it has a parameter
of that name) and returns a replacement UOp, or None to decline. Rules are indexed by the op of the
node they match, so a rewrite of a large graph only tries the rules that can apply to each node.
"""
from __future__ import annotations

import gc
import inspect
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from tg_core.helpers import REWRITE_STEP_LIMIT
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat, _UPatAny

RuleFn = Callable[..., UOp | None]
_CONST = Ops.CONST  # a module constant: Ops.X goes through EnumType.__getattr__'s hook on Python 3.11


def _describe(fn: Callable, pat: UPat | None = None) -> str:
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"rule {getattr(fn, '__qualname__', fn)!s}{where}" + (f" for {pat!r}" if pat is not None else "")


class _Rule:
    __slots__ = ("pat", "fn", "wants_ctx", "trivial_name", "direct", "early_any", "early_all", "early_consts",
                 "early")

    def __init__(self, pat: UPat, fn: RuleFn):
        self.pat, self.fn = pat, fn
        try:
            params = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = []
        self.wants_ctx = "ctx" in params
        # patterns like UPat(Ops.ADD, name="x") bind the node itself: no matching needed
        self.trivial_name = pat.name if pat.trivial and not isinstance(pat, _UPatAny) else None
        # ... and when the function takes just that node, it is called positionally (no kwargs dict)
        self.direct = self.trivial_name is not None and params == [self.trivial_name]
        self.early_any, self.early_all, self.early_consts = pat.early_any, pat.early_all, pat.early_consts
        self.early = bool(self.early_any or self.early_all is not None or self.early_consts)


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
        # (op, dtype) -> the rules of that op whose pattern accepts that dtype, filled on first use: a node's
        # dtype rules out most rules of its op (a float MUL meets no index-math rule), and checking that once
        # per (op, dtype) instead of per node and rule keeps the order and the outcome of every match
        self._rules_for: dict[tuple[Ops, Any], tuple[_Rule, ...]] = {}

    def _rules(self, op: Ops, dtype: Any) -> tuple[_Rule, ...]:
        rules = tuple(r for r in self.rules_by_op.get(op, ())
                      if r.pat.dtype is None or dtype in r.pat.dtype or dtype.scalar() in r.pat.dtype)
        self._rules_for[(op, dtype)] = rules
        return rules

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.patterns + other.patterns)

    def __len__(self) -> int:
        return len(self.patterns)

    def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
        """The first rule's replacement for `u`, or None if no rule rewrites it."""
        hit = self._rewrite(u, ctx)
        return None if hit is None else hit[0]

    def _rewrite(self, u: UOp, ctx: Any) -> tuple[UOp, _Rule] | None:
        """The replacement and the rule that made it, so that errors can name the rule."""
        rules = self._rules_for.get((u.op, u.dtype))
        if rules is None:
            rules = self._rules(u.op, u.dtype)
        srcops: set[Ops] | None = None
        consts: set | None = None
        for rule in rules:
            try:
                if rule.direct:
                    ret = rule.fn(u)
                    if ret is None or ret is u:
                        continue
                    return self._checked(ret, rule)
                if rule.trivial_name is not None:
                    matches: Any = ({rule.trivial_name: u},)
                else:
                    if rule.early:
                        # reject on the sources' ops and constants before paying for a full match
                        if srcops is None:
                            srcops = {s.op for s in u.src}
                        if rule.early_all is not None and not srcops <= rule.early_all:
                            continue
                        reject = False
                        for req in rule.early_any:
                            if srcops.isdisjoint(req):
                                reject = True
                                break
                        if not reject and rule.early_consts:
                            if consts is None:
                                consts = {s.arg for s in u.src if s.op is _CONST}
                            for c in rule.early_consts:
                                if c not in consts:
                                    reject = True
                                    break
                        if reject:
                            continue
                    matches = rule.pat.match(u, {})
                for store in matches:
                    ret = rule.fn(ctx=ctx, **store) if rule.wants_ctx else rule.fn(**store)
                    if ret is not None and ret is not u:
                        return self._checked(ret, rule)
            except Exception as e:
                if not getattr(e, "_tg_noted", False):
                    e.add_note(f"raised by {_describe(rule.fn, rule.pat)} on {u.op} node")
                    e._tg_noted = True  # type: ignore[attr-defined]  # a marker: outer rewrites do not note it again
                raise
        return None

    @staticmethod
    def _checked(ret: Any, rule: _Rule) -> tuple[UOp, _Rule]:
        if type(ret) is not UOp:
            raise TypeError(f"{_describe(rule.fn, rule.pat)} returned {type(ret).__name__} {ret!r}; "
                            "a rule must return a UOp or None")
        return ret, rule


class RewriteError(RuntimeError):
    pass


def _short(u: UOp, limit: int = 120) -> str:
    text = u.render()
    return text if len(text) <= limit else text[:limit // 2] + " ... " + text[-limit // 2:]


class _Rewriter:
    """Applies a PatternMatcher to every node of a graph until no rule applies anywhere."""

    def __init__(self, pm: PatternMatcher, ctx: Any):
        self.pm, self.ctx = pm, ctx
        self.applied = 0
        self.limit = REWRITE_STEP_LIMIT.value
        self.rule_counts: Counter = Counter()
        # each pending rewrite result -> (the node it replaced, the rule), to name the rules when a rewrite
        # loops; an entry is dropped once its node is done, so this holds only the current path
        self.made_by: dict[UOp, tuple[UOp, _Rule]] = {}

    def _apply(self, u: UOp) -> UOp | None:
        rules = self.pm.rules_by_op.get(u.op)
        if rules is None:
            return None
        hit = self.pm._rewrite(u, self.ctx)
        if hit is None:
            return None
        ret, rule = hit
        self.applied += 1
        self.rule_counts[rule] += 1
        self.made_by[ret] = (u, rule)
        if self.applied > self.limit:
            self._too_many(u, ret, rule)
        return ret

    def _too_many(self, u: UOp, ret: UOp, rule: _Rule) -> None:
        top = ", ".join(f"{_describe(r.fn, r.pat)} ({n} times)" for r, n in self.rule_counts.most_common(3))
        raise RewriteError(f"graph_rewrite did not reach a fixed point after {self.applied} rule applications "
                           f"(REWRITE_STEP_LIMIT={self.limit}); the last rewrite, by {_describe(rule.fn, rule.pat)}, "
                           f"turned {_short(u)} into {_short(ret)}. Most applied: {top}. "
                           "A rule is probably undoing another one or growing the graph forever.")

    def _cycle(self, start: UOp, back: UOp) -> None:
        """`back`, still being rewritten, was reached again while rewriting `start`: list the rewrites between."""
        steps, node, seen = [], start, set()
        if back in self.made_by and self.made_by[back][0] is start:  # reached as the rewrite of start itself
            steps.append(f"{_describe(self.made_by[back][1].fn, self.made_by[back][1].pat)} rewrote "
                         f"{_short(start)} into {_short(back)}")
        while node in self.made_by and node not in seen:
            seen.add(node)
            orig, rule = self.made_by[node]
            steps.append(f"{_describe(rule.fn, rule.pat)} rewrote {_short(orig)} into {_short(node)}")
            if orig is back:
                break
            node = orig
        how = "; ".join(reversed(steps)) or f"no rule applied yet to {_short(start)}"
        grows = back is not start and back in start.toposort()
        why = (f"the result contains {_short(back)} itself, so the graph would grow forever" if grows else
               f"this leads back to {_short(back)}, so the rules keep undoing each other")
        raise RewriteError(f"graph_rewrite does not terminate: {how}; {why}")

    def run(self, root: UOp, node_first: bool) -> UOp:
        """Rewrite every node reachable from `root` to a fixed point, with an explicit stack (graphs can be
        thousands of nodes deep). Stage 0 enters a node, stage 1 rebuilds it from its finished sources,
        stage 2 finishes a node as whatever its rewrite became.

        Sources first: rules run on the rebuilt node in stage 1. Node first: rules run in stage 0, before
        the sources are entered, and again on the rebuilt node if its sources changed. Either way a rule's
        result is processed from stage 0, so the final node is one no rule rewrites."""
        done: dict[UOp, UOp] = {}
        busy: set[UOp] = set()  # entered and not finished: reaching one again is a cycle
        stack: list[tuple[int, UOp, UOp | None]] = [(0, root, None)]
        pop, push = stack.pop, stack.append
        apply, has_rules, made_by = self._apply, self.pm.rules_by_op.__contains__, self.made_by
        while stack:
            stage, n, aux = pop()
            if stage == 0:
                if n in done:
                    continue
                if n in busy:
                    self._cycle(aux if aux is not None else n, n)
                if node_first and has_rules(n.op):
                    ret = apply(n)
                    if ret is not None:
                        busy.add(n)
                        push((2, n, ret))
                        push((0, ret, n))
                        continue
                pending = [s for s in n.src if s not in done]
                if pending:
                    busy.add(n)
                    push((1, n, None))
                    for s in pending:
                        push((0, s, n))
                    continue
                # every source is finished: stage 1 right away (what popping it next would do)
            elif stage == 2:
                assert aux is not None  # stage 2 entries carry the node's rewrite
                done[n] = done[aux]
                busy.discard(n)
                made_by.pop(aux, None)
                continue
            # stage 1: rebuild from the finished sources, then rewrite (sources first)
            src = n.src
            new_src = tuple([done[s] for s in src])
            nn = n if new_src == src else UOp(n.op, n.dtype, new_src, n.arg, n.tag)
            if node_first:
                ret = None if nn is n else nn  # a rebuilt node gets its rules from stage 0
            else:
                ret = apply(nn) if has_rules(nn.op) else None
                if ret is None and nn is not n:
                    done.setdefault(nn, nn)
            if ret is None:
                done[n] = nn
                busy.discard(n)
            else:
                busy.add(n)
                push((2, n, ret))
                push((0, ret, n))
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
    with gc_paused():
        return rw.run(sink, node_first=bottom_up)


_gc_lock = threading.Lock()
_gc_depth = 0
_gc_was_enabled = False  # whether the collector ran before the outermost pause


class _GcPause:
    """The pause as a plain context manager: a generator-based one cost several µs per use, and a tiny eager
    realize enters it about six times (issue 16's launch overhead)."""
    __slots__ = ()

    def __enter__(self) -> None:
        global _gc_depth, _gc_was_enabled
        with _gc_lock:
            if _gc_depth == 0:
                _gc_was_enabled = gc.isenabled()
                gc.disable()
            _gc_depth += 1

    def __exit__(self, *exc: object) -> None:
        global _gc_depth
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_was_enabled:
                gc.enable()


_GC_PAUSE = _GcPause()


def gc_paused() -> _GcPause:
    """Pause the cyclic garbage collector while rewriting. A rewrite allocates many nodes and creates no
    reference cycles, and collections that walk millions of live nodes would otherwise double its time.
    Reference counting still frees everything at once; nested and concurrent rewrites share one pause.
    Codegen holds one pause around a whole kernel (its passes and the renderer's work in between allocate
    as much as the rewrites do: collections were a fifth of a first MLP forward's compile time)."""
    return _GC_PAUSE


def substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """`root` with every key of `mapping` replaced by its value; the values are not searched."""
    done: dict[UOp, UOp] = dict(mapping)
    stack: list = [root]  # a node, then (node,) once more to rebuild it after its sources
    pop, push = stack.pop, stack.append
    while stack:
        n = pop()
        if type(n) is tuple:
            n = n[0]
            if n in done:
                continue
            src = n.src
            new_src = tuple([done[s] for s in src])
            done[n] = n if new_src == src else UOp(n.op, n.dtype, new_src, n.arg, n.tag)
            continue
        if n in done:
            continue
        push((n,))
        stack += [s for s in n.src if s not in done]
    return done[root]
