"""PatternMatcher and graph_rewrite: every transformation in tg is a list of `UPat -> function` rules.

A rule's function gets the pattern's named nodes as keyword arguments (and `ctx`, if it has a parameter
of that name) and returns a replacement UOp, or None to decline. Rules are indexed by the op of the
node they match, so a rewrite of a large graph only tries the rules that can apply to each node.
"""
from __future__ import annotations

import gc
import inspect
import threading
from collections.abc import Callable
from typing import Any, Literal

from tg_core.helpers import REWRITE_STEP_LIMIT
from tg_core.uop.ops import Ops
from tg_core.uop.rule_compile import Dispatch, compile_rules
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat, _UPatAny

RuleFn = Callable[..., UOp | None]
Compiled = Dispatch | Literal[False]  # False: no rule of the op accepts the dtype

def _describe(fn: Callable, pat: UPat | None = None) -> str:
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"rule {getattr(fn, '__qualname__', fn)!s}{where}" + (f" for {pat!r}" if pat is not None else "")


class _Rule:
    __slots__ = ("pat", "fn", "index", "wants_ctx", "trivial_name", "direct")

    def __init__(self, pat: UPat, fn: RuleFn, index: int):
        self.pat, self.fn, self.index = pat, fn, index  # index: its position in the matcher's rules
        try:
            params = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = []
        self.wants_ctx = "ctx" in params
        # patterns like UPat(Ops.ADD, name="x") bind the node itself: no matching needed
        self.trivial_name = pat.name if pat.trivial and not isinstance(pat, _UPatAny) else None
        # ... and when the function takes just that node, it is called positionally (no keywords)
        self.direct = self.trivial_name is not None and params == [self.trivial_name]


def _note(e: Exception, rule: _Rule, u: UOp) -> None:
    """Name the rule an exception came out of (once: outer rewrites that see it again add nothing)."""
    if not getattr(e, "_tg_noted", False):
        e.add_note(f"raised by {_describe(rule.fn, rule.pat)} on {u.op} node")
        e._tg_noted = True  # type: ignore[attr-defined]  # a marker: outer rewrites do not note it again


def _bad_result(ret: Any, rule: _Rule) -> None:
    raise TypeError(f"{_describe(rule.fn, rule.pat)} returned {type(ret).__name__} {ret!r}; "
                    "a rule must return a UOp or None")


class PatternMatcher:
    """An ordered list of rules; the first rule that matches and returns a UOp wins."""

    def __init__(self, patterns: list[tuple[UPat, RuleFn]]):
        self.patterns = list(patterns)
        self._rule_list: list[_Rule] = []
        self.rules_by_op: dict[Ops, list[_Rule]] = {}
        for pat, fn in self.patterns:
            if not isinstance(pat, UPat) or not callable(fn):
                raise TypeError(f"a pattern must be (UPat, callable), got ({type(pat).__name__}, {type(fn).__name__})")
            rule = _Rule(pat, fn, len(self._rule_list))
            self._rule_list.append(rule)
            for op in (pat.op if pat.op is not None else Ops):
                self.rules_by_op.setdefault(op, []).append(rule)
        # op -> dtype -> the rules of that op that accept that dtype, compiled into one function on first use
        # (rule_compile.py), or False when none does: a node's dtype rules out most rules of its op (a float
        # MUL meets no index-math rule), and deciding that once per (op, dtype) keeps the order and the outcome
        # of every match. An op with no rules has no entry, so the walk skips its nodes with one lookup.
        self.dispatch: dict[Ops, dict[Any, Compiled]] = {op: {} for op in self.rules_by_op}

    def compiled(self, op: Ops, dtype: Any) -> Compiled:
        """The function trying this matcher's rules on a node of `op` and `dtype` (False: no rule can apply)."""
        rules = tuple((r.index, r) for r in self.rules_by_op.get(op, ())
                      if r.pat.dtype is None or dtype in r.pat.dtype or dtype.scalar() in r.pat.dtype)
        fn: Compiled = compile_rules(rules, self._rule_list, _note, _bad_result) if rules else False
        self.dispatch[op][dtype] = fn
        return fn

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.patterns + other.patterns)

    def __len__(self) -> int:
        return len(self.patterns)

    def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
        """The first rule's replacement for `u`, or None if no rule rewrites it."""
        hit = self._rewrite(u, ctx)
        return None if hit is None else hit[0]

    def _rewrite(self, u: UOp, ctx: Any) -> tuple[UOp, int] | None:
        """The replacement and the index of the rule that made it, so that errors can name the rule."""
        by_dtype = self.dispatch.get(u.op)
        if by_dtype is None:
            return None
        fn = by_dtype.get(u.dtype)
        if fn is None:
            fn = self.compiled(u.op, u.dtype)
        return fn(u, ctx) if fn else None


class RewriteError(RuntimeError):
    pass


def _short(u: UOp, limit: int = 120) -> str:
    text = u.render()
    return text if len(text) <= limit else text[:limit // 2] + " ... " + text[-limit // 2:]


_BUSY: Any = object()  # the value in `done` of a node entered and not finished: reaching it again is a cycle


class _Rewriter:
    """Applies a PatternMatcher to every node of a graph until no rule applies anywhere."""

    def __init__(self, pm: PatternMatcher, ctx: Any):
        self.pm, self.ctx = pm, ctx
        self.applied = 0
        self.limit = REWRITE_STEP_LIMIT.value
        self.rule_counts = [0] * len(pm._rule_list)  # applications of each rule, by its index
        # each pending rewrite result -> (the node it replaced, the rule's index), to name the rules when a
        # rewrite loops; an entry is dropped once its node is done, so this holds only the current path
        self.made_by: dict[UOp, tuple[UOp, int]] = {}

    def _hit(self, u: UOp, hit: tuple[UOp, int]) -> UOp:
        """Count a rule application and remember what it replaced."""
        ret, idx = hit
        self.applied += 1
        self.rule_counts[idx] += 1
        self.made_by[ret] = (u, idx)
        if self.applied > self.limit:
            self._too_many(u, ret, idx)
        return ret

    def _rule_name(self, idx: int) -> str:
        rule = self.pm._rule_list[idx]
        return _describe(rule.fn, rule.pat)

    def _too_many(self, u: UOp, ret: UOp, idx: int) -> None:
        most = sorted(range(len(self.rule_counts)), key=lambda i: -self.rule_counts[i])[:3]
        top = ", ".join(f"{self._rule_name(i)} ({self.rule_counts[i]} times)" for i in most if self.rule_counts[i])
        raise RewriteError(f"graph_rewrite did not reach a fixed point after {self.applied} rule applications "
                           f"(REWRITE_STEP_LIMIT={self.limit}); the last rewrite, by {self._rule_name(idx)}, "
                           f"turned {_short(u)} into {_short(ret)}. Most applied: {top}. "
                           "A rule is probably undoing another one or growing the graph forever.")

    def _cycle(self, start: UOp, back: UOp) -> None:
        """`back`, still being rewritten, was reached again while rewriting `start`: list the rewrites between."""
        steps, node, seen = [], start, set()
        if back in self.made_by and self.made_by[back][0] is start:  # reached as the rewrite of start itself
            steps.append(f"{self._rule_name(self.made_by[back][1])} rewrote {_short(start)} into {_short(back)}")
        while node in self.made_by and node not in seen:
            seen.add(node)
            orig, idx = self.made_by[node]
            steps.append(f"{self._rule_name(idx)} rewrote {_short(orig)} into {_short(node)}")
            if orig is back:
                break
            node = orig
        how = "; ".join(reversed(steps)) or f"no rule applied yet to {_short(start)}"
        grows = back is not start and back in start.toposort()
        why = (f"the result contains {_short(back)} itself, so the graph would grow forever" if grows else
               f"this leads back to {_short(back)}, so the rules keep undoing each other")
        raise RewriteError(f"graph_rewrite does not terminate: {how}; {why}")

    def _busy_source(self, n: UOp, new_src: tuple) -> None:
        """A source of `n` is still being rewritten (its result contains `n`'s subgraph): report the cycle."""
        self._cycle(n, n.src[new_src.index(_BUSY)])

    def run(self, root: UOp, node_first: bool) -> UOp:
        """Rewrite every node reachable from `root` to a fixed point, with an explicit stack (graphs can be
        thousands of nodes deep). Stage 0 enters a node, stage 1 rebuilds it from its finished sources,
        stage 2 finishes a node as whatever its rewrite became.

        Sources first: rules run on the rebuilt node in stage 1. Node first: rules run in stage 0, before
        the sources are entered, and again on the rebuilt node if its sources changed. Either way a rule's
        result is processed from stage 0, so the final node is one no rule rewrites.

        This loop runs once or twice per node of every graph the compiler rewrites, so it is written out:
        a node entered and not finished is marked in `done` itself (one lookup tells new, busy and finished
        apart), sources are scanned without building a list, and one- and two-source nodes are rebuilt from
        their sources' results without a comprehension."""
        done: dict[UOp, UOp] = {}
        stack: list[tuple[int, UOp, UOp | None]] = [(0, root, None)]
        pop, push = stack.pop, stack.append
        dispatch, compiled, ctx, hit_, busy = self.pm.dispatch, self.pm.compiled, self.ctx, self._hit, _BUSY
        ret: UOp | None
        while stack:
            stage, n, aux = pop()
            if stage == 0:
                if n in done:
                    if done[n] is busy:
                        self._cycle(aux if aux is not None else n, n)
                    continue
                if node_first:
                    by_dtype = dispatch.get(n.op)
                    if by_dtype is not None:
                        fn = by_dtype.get(n.dtype)
                        if fn is None:
                            fn = compiled(n.op, n.dtype)
                        hit = fn(n, ctx) if fn else None
                        if hit is not None:
                            ret = hit_(n, hit)
                            done[n] = busy
                            push((2, n, ret))
                            push((0, ret, n))
                            continue
                pending = False
                for s in n.src:
                    if s not in done:
                        if not pending:  # stage 1 goes below the sources it waits for
                            pending = True
                            done[n] = busy
                            push((1, n, None))
                        push((0, s, n))
                if pending:
                    continue
                # every source is finished: stage 1 right away (what popping it next would do)
            elif stage == 2:
                assert aux is not None  # stage 2 entries carry the node's rewrite
                done[n] = done[aux]
                self.made_by.pop(aux, None)
                continue
            # stage 1: rebuild from the finished sources, then rewrite (sources first)
            src = n.src
            if len(src) == 2:
                s0, s1 = src
                a, b = done[s0], done[s1]
                if a is s0 and b is s1:
                    nn = n
                else:
                    if a is busy or b is busy:
                        self._busy_source(n, (a, b))
                    nn = UOp(n.op, n.dtype, (a, b), n.arg, n.tag)
            elif len(src) == 1:
                a = done[src[0]]
                if a is src[0]:
                    nn = n
                else:
                    if a is busy:
                        self._busy_source(n, (a,))
                    nn = UOp(n.op, n.dtype, (a,), n.arg, n.tag)
            elif src:
                new_src = tuple([done[s] for s in src])
                if new_src == src:
                    nn = n
                else:
                    if busy in new_src:
                        self._busy_source(n, new_src)
                    nn = UOp(n.op, n.dtype, new_src, n.arg, n.tag)
            else:
                nn = n
            if node_first:
                if nn is n:
                    done[n] = n
                    continue
                ret = nn  # a rebuilt node gets its rules from stage 0
            else:
                ret = None
                by_dtype = dispatch.get(nn.op)
                if by_dtype is not None:
                    fn = by_dtype.get(nn.dtype)
                    if fn is None:
                        fn = compiled(nn.op, nn.dtype)
                    hit = fn(nn, ctx) if fn else None
                    if hit is not None:
                        ret = hit_(nn, hit)
                if ret is None:
                    done[n] = nn
                    if nn is not n:
                        done.setdefault(nn, nn)
                    continue
            done[n] = busy
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
