"""A PatternMatcher's rules for one (op, dtype), compiled into one Python function.

`UPat.match` is an interpreter: per node and rule it walks the pattern, builds a list of binding dicts and
calls the rule with `**store`. The compiled form is what that interpretation amounts to for a known list of
rules: the node's fields are tested in place, names are bound to local variables, and each rule function is
called with them as keywords. Alternatives (permuted sources, `UPat.any`) are tried in the order
`UPat.match` lists its bindings, so the first rule and binding whose function returns a node is the same one.
The node's op and dtype are known when compiling (the matcher keeps one function per pair), so the top
pattern's op and dtype tests are dropped.

The generated function takes `(u, ctx)` and returns `(replacement, rule index)` or None; an exception in a
rule gets a note naming the rule (what `PatternMatcher._rewrite` did). Identical rule structures share one
compiled code object (only the constants they are run with differ).
"""
from __future__ import annotations

from collections.abc import Callable
from types import CodeType
from typing import TYPE_CHECKING, Any

from tg_core.uop.uop import UOp
from tg_core.uop.upat import _ORDERED, _PERMUTED, _REPEATED, UPat, _num_eq, _permutations, _UPatAny

if TYPE_CHECKING:
    from tg_core.uop.rewrite import _Rule

Dispatch = Callable[[UOp, Any], "tuple[UOp, int] | None"]

_MAX_LINES = 600  # a rule whose alternatives multiply past this is matched by UPat.match instead
_MAX_DEPTH = 60   # and one nested deeper than this (Python allows 100 levels of indentation)
_code_cache: dict[str, CodeType] = {}  # generated source -> its compiled code


class _Unsupported(Exception):
    """A pattern shape the generator leaves to UPat.match."""


class _Gen:
    """The lines of one generated function and the constants its code names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.nvars = 0
        self.rule_start = 0  # the first line of the rule being generated

    def const(self, value: Any) -> str:
        name = f"k{len(self.consts)}"
        self.consts[name] = value
        return name

    def var(self) -> str:
        self.nvars += 1
        return f"v{self.nvars}"

    def emit(self, ind: int, line: str) -> None:
        self.lines.append(" " * ind + line)
        if len(self.lines) - self.rule_start > _MAX_LINES or ind > _MAX_DEPTH:
            raise _Unsupported


def _field_tests(g: _Gen, p: UPat, v: str, top: bool) -> list[str]:
    """The tests of `p`'s own op, dtype and arg on the node in variable `v` (what UPat.match checks first)."""
    conds = []
    if p.op is not None and not top:
        if len(p.op) == 1:
            conds.append(f"{v}.op is {g.const(next(iter(p.op)))}")
        else:
            conds.append(f"{v}.op in {g.const(p.op)}")
    if p.dtype is not None and not top:
        d = g.const(p.dtype)
        conds.append(f"({v}.dtype in {d} or {v}.dtype.scalar() in {d})")
    if p.arg is not None:
        a, ta = g.const(p.arg), g.const(type(p.arg))
        conds.append(f"not ({a} != {v}.arg) and (type({v}.arg) is {ta} or _num_eq({a}, {v}.arg))")
    return conds


def _match(g: _Gen, p: UPat, v: str, bound: dict[str, str], ind: int, top: bool,
           k: Callable[[dict[str, str], int], None]) -> None:
    """Code that matches `p` against the node in `v` with the names in `bound` already bound, and runs the
    continuation `k` (with the bindings and indentation at that point) for every way it matches, in order."""
    if isinstance(p, _UPatAny):
        if p.name is not None:
            if p.name in bound:
                g.emit(ind, f"if {v} is {bound[p.name]}:")
                ind += 1
            else:
                bound = {**bound, p.name: v}
        for alt in p.alternatives:
            _match(g, alt, v, bound, ind, False, k)
        return
    conds = _field_tests(g, p, v, top)
    if p.name is not None:
        if p.name in bound:
            conds.append(f"{v} is {bound[p.name]}")
        else:
            bound = {**bound, p.name: v}
    if conds:
        g.emit(ind, f"if {' and '.join(conds)}:")
        ind += 1
    if p.src is None:
        k(bound, ind)
        return
    if p.src_kind is _REPEATED:
        child = p.src[0]
        if isinstance(child, _UPatAny) or child.name is not None or child.src is not None:
            raise _Unsupported  # bindings threaded through every source: left to UPat.match
        s = g.var()
        tests = _field_tests(g, child, s, False)
        if not tests:
            k(bound, ind)
            return
        g.emit(ind, f"for {s} in {v}.src:")
        g.emit(ind + 1, f"if not ({' and '.join(tests)}):")
        g.emit(ind + 2, "break")
        g.emit(ind, "else:")
        k(bound, ind + 1)
        return
    n = len(p.src)
    srcv = [g.var() for _ in range(n)]
    if n == 0:
        if p.allow_any_len:
            k(bound, ind)
        else:
            g.emit(ind, f"if not {v}.src:")
            k(bound, ind + 1)
        return
    if p.allow_any_len:
        g.emit(ind, f"if len({v}.src) >= {n}:")
        ind += 1
        for i, sv in enumerate(srcv):
            g.emit(ind, f"{sv} = {v}.src[{i}]")
    else:
        g.emit(ind, f"if len({v}.src) == {n}:")
        ind += 1
        g.emit(ind, f"{', '.join(srcv)}{',' if n == 1 else ''} = {v}.src")
    orders = (p.src,) if p.src_kind is _ORDERED else _permutations(p.src)
    assert p.src_kind in (_ORDERED, _PERMUTED)
    for pats in orders:
        _chain(g, list(zip(pats, srcv)), bound, ind, k)


def _chain(g: _Gen, pairs: list[tuple[UPat, str]], bound: dict[str, str], ind: int,
           k: Callable[[dict[str, str], int], None]) -> None:
    """Match each (pattern, variable) pair in turn, the later ones inside every way the earlier match."""
    if not pairs:
        k(bound, ind)
        return
    (p, v), rest = pairs[0], pairs[1:]
    _match(g, p, v, bound, ind, False, lambda b, i: _chain(g, rest, b, i, k))


def _emit_rule(g: _Gen, rule: _Rule, idx: int, ind: int) -> None:
    """One rule's block: match, call the function with the bindings, return its node if it made one."""
    fn, ix = g.const(rule.fn), g.const(idx)  # the index a constant too: equal structures share their code
    g.emit(ind, f"i = {ix}")
    ctx = ", ctx=ctx" if rule.wants_ctx else ""

    def found(at: int) -> None:
        g.emit(at, "if r is not None and r is not u:")
        g.emit(at + 1, f"if type(r) is not UOp: _bad(r, _rules[{ix}])")
        g.emit(at + 1, f"return r, {ix}")

    def call(bound: dict[str, str], at: int) -> None:
        args = ", ".join(f"{name}={var}" for name, var in bound.items())
        g.emit(at, f"r = {fn}({args}{ctx})" if args else f"r = {fn}({ctx[2:]})")
        found(at)

    if rule.direct:
        g.emit(ind, f"r = {fn}(u)")
        found(ind)
        return
    if rule.trivial_name is not None:
        call({rule.trivial_name: "u"}, ind)
        return
    g.rule_start, nconsts, nvars = len(g.lines), dict(g.consts), g.nvars
    try:
        _match(g, rule.pat, "u", {}, ind, True, call)
    except _Unsupported:
        del g.lines[g.rule_start:]
        g.consts, g.nvars = nconsts, nvars
        pat = g.const(rule.pat)
        g.emit(ind, f"for st in {pat}.match(u, {{}}):")
        g.emit(ind + 1, f"r = {fn}(ctx=ctx, **st)" if rule.wants_ctx else f"r = {fn}(**st)")
        found(ind + 1)


def compile_rules(rules: tuple[tuple[int, _Rule], ...], all_rules: list[_Rule],
                  note: Callable[[Exception, _Rule, UOp], None],
                  bad: Callable[[Any, _Rule], None]) -> Dispatch:
    """The function that tries `rules` ((index in all_rules, rule), in order) on a node of one op and dtype."""
    g = _Gen()
    g.emit(0, "def dispatch(u, ctx):")
    g.emit(1, "i = -1")
    g.emit(1, "try:")
    for idx, rule in rules:
        _emit_rule(g, rule, idx, 2)
    g.emit(1, "except Exception as e:")
    g.emit(2, "_note(e, _rules[i], u)")
    g.emit(2, "raise")
    g.emit(1, "return None")
    src = "\n".join(g.lines) + "\n"

    ns: dict[str, Any] = {**g.consts, "_rules": all_rules, "_note": note, "_bad": bad, "_num_eq": _num_eq, "UOp": UOp}
    code = _code_cache.get(src)
    if code is None:
        code = _code_cache[src] = compile(src, "<compiled rules>", "exec")
    exec(code, ns)  # noqa: S102  # the source is generated above from the patterns' structure only
    return ns["dispatch"]
