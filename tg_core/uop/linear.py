"""Integer sums as linear forms: `sum(coeff_i * base_i) + const`.

The canonical form of an integer sum is a left-leaning chain of ADDs of `base*coeff` terms, each base
once, in first-appearance order, with the constant last. Because rewriting works on sources first, the
left operand of every ADD is already canonical, so bringing one more term in only walks a short chain.
Chains longer than `MAX_TERMS` are left as they are beyond that window (combining there would make
long sums of distinct terms quadratic).
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


def decompose(u: UOp, limit: int = MAX_TERMS) -> tuple[dict[UOp, int], int, bool]:
    """The terms (base -> summed coefficient) and constant of the sum `u`, and whether any base or the
    constant occurred more than once (so that rebuilding would change the expression)."""
    terms: dict[UOp, int] = {}
    const = 0
    nconst = 0
    repeated = False
    # walk the ADD tree iteratively; most sums are left-leaning chains
    stack = [u]
    seen = 0
    while stack:
        n = stack.pop()
        if n.op is Ops.ADD and seen < limit:
            seen += 1
            stack.append(n.src[1])
            stack.append(n.src[0])
            continue
        if n.op is Ops.CONST:
            const += n.arg
            nconst += 1
            continue
        base, coeff = split_term(n)
        if base in terms:
            repeated = True
            terms[base] += coeff
        else:
            terms[base] = coeff
    return terms, const, repeated or nconst > 1


def rebuild(dtype, terms: dict[UOp, int], const: int) -> UOp:
    """The canonical chain for these terms (zero coefficients dropped) and constant."""
    out: UOp | None = None
    for base, coeff in terms.items():
        if coeff == 0:
            continue
        t = base if coeff == 1 else UOp(Ops.MUL, dtype, (base, UOp.const(dtype, coeff)))
        out = t if out is None else UOp(Ops.ADD, dtype, (out, t))
    if out is None:
        return UOp.const(dtype, const)
    if const != 0:
        out = UOp(Ops.ADD, dtype, (out, UOp.const(dtype, const)))
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
    terms, const, _ = decompose(x)
    _merge_divmod_pairs(terms)
    new = rebuild(x.dtype, terms, const)
    return None if new is x else new
