"""Integer sums as linear forms: `sum(coeff_i * base_i) + const`.

The canonical form of an integer sum is a left-leaning chain of ADDs of `base*coeff` terms, each base
once, in first-appearance order, with the constant last. Reading a sum flattens nested ADDs and
distributes constant factors, so one rule application brings a whole linear subexpression to canonical
form. A canonical sum remembers its terms (`UOp._lin`), so extending it costs O(terms), and sums of
more than `MAX_TERMS` distinct terms are read as opaque terms of bigger sums (combining through them
would make long sums of distinct terms quadratic).
"""
from __future__ import annotations

from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

MAX_TERMS = 64


def split_term(u: UOp) -> tuple[UOp, int]:
    """`u` as (base, coefficient): x*3 -> (x, 3); x -> (x, 1)."""
    if u.op is Ops.MUL and u.src[1].op is Ops.CONST:
        return u.src[0], u.src[1].arg
    return u, 1


_CANONICAL = (None, None)  # marks an inner node of a canonical chain whose terms were not cached


def decompose(u: UOp) -> tuple[dict[UOp, int], int]:
    """The terms (base -> summed coefficient) and constant of `u` read as a linear form: ADDs are
    flattened and products with constants distributed, so (a+b*2)*3+a is {a: 4, b: 6}. A fresh dict."""
    terms: dict[UOp, int] = {}
    const = 0
    stack: list[tuple[UOp, int]] = [(u, 1)]
    while stack:
        n, m = stack.pop()
        lin = n._lin
        if lin is not None and lin[0] is not None and len(lin[0]) <= MAX_TERMS:
            # a canonical sum built earlier: merge its remembered terms instead of walking it
            if not terms and m == 1:
                terms = dict(lin[0])
            else:
                for b, k in lin[0].items():
                    terms[b] = terms.get(b, 0) + k * m
            const += lin[1] * m
            continue
        op = n.op
        if op is Ops.ADD and (lin is None or len(terms) < MAX_TERMS):
            stack.append((n.src[1], m))
            stack.append((n.src[0], m))
        elif op is Ops.MUL and n.src[1].op is Ops.CONST:
            stack.append((n.src[0], m * n.src[1].arg))
        elif op is Ops.CONST:
            const += n.arg * m
        else:
            terms[n] = terms.get(n, 0) + m
    return terms, const


def rebuild(dtype, terms: dict[UOp, int], const: int) -> UOp:
    """The canonical chain for these terms (zero coefficients dropped) and constant. Every ADD it builds
    is marked canonical, and the top one remembers its terms, so later rules on it cost O(1)."""
    out: UOp | None = None
    kept: dict[UOp, int] = {}
    for base, coeff in terms.items():
        if coeff == 0:
            continue
        kept[base] = coeff
        t = base if coeff == 1 else UOp(Ops.MUL, dtype, (base, UOp.const(dtype, coeff)))
        if out is None:
            out = t
        else:
            out = UOp(Ops.ADD, dtype, (out, t))
            if out._lin is None:
                out._lin = _CANONICAL
    if out is None:
        return UOp.const(dtype, const)
    if const != 0:
        out = UOp(Ops.ADD, dtype, (out, UOp.const(dtype, const)))
    if out.op is Ops.ADD:
        out._lin = (kept, const)
    return out


def _merge_divmod_pairs(terms: dict[UOp, int]) -> bool:
    """(x//c)*(k*c) + (x%c)*k -> x*k: the identity of truncating division, true for every x."""
    changed = False
    for base in list(terms):
        if base.op is not Ops.MOD or base not in terms or base.src[1].op is not Ops.CONST:
            continue
        x, c = base.src
        k = terms[base]
        div = UOp(Ops.IDIV, base.dtype, (x, c))
        if terms.get(div) == k * c.arg:
            del terms[base], terms[div]
            terms[x] = terms.get(x, 0) + k
            changed = True
    return changed


def fold_linear_sum(x: UOp) -> UOp | None:
    """Rule for an integer ADD: combine like terms, fold constants, move the constant last. A sum already
    in canonical form rebuilds to itself (hash-consing makes that a cache hit), which ends the rewrite."""
    if x._lin is not None:
        return None
    terms, const = decompose(x)
    _merge_divmod_pairs(terms)
    new = rebuild(x.dtype, terms, const)
    return None if new is x else new
