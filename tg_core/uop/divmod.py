"""Folding integer division, remainder and comparisons by constants, using linear forms and ranges.

IDIV truncates toward zero and MOD takes the sign of the dividend (C semantics). The identities below
are the floor-division ones, so each rule first establishes non-negativity where floor and truncation
could differ. Scaling by a common factor is exact under both semantics and needs no such check.
"""
from __future__ import annotations

import math

from tg_core.dtype import dtypes
from tg_core.uop.linear import MAX_TERMS, ExactTerms, decompose, rebuild
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

_WEAKINT = dtypes.weakint
_ADD, _MUL, _CONST, _IDIV, _MOD = Ops.ADD, Ops.MUL, Ops.CONST, Ops.IDIV, Ops.MOD  # Ops.X is slow on Python 3.11


def _nonneg(u: UOp) -> bool:
    return u.vmin >= 0


def no_overflow(u: UOp) -> bool:
    """True when `u` is computed without wrapping. Range analysis saturates to the dtype's full range
    wherever a strong int may overflow, so a range strictly inside the dtype proves there was none.
    Only then do identities of exact integer arithmetic hold for it."""
    if u.dtype is _WEAKINT:
        return True
    dt = u.dtype.scalar()
    return dt is _WEAKINT or dtypes.min(dt) < u.vmin and u.vmax < dtypes.max(dt)


def fold_divmod(x: UOp) -> UOp | None:
    num, d = x.src
    c = d.arg
    if c == 0:
        return None
    if c < 0:
        # x // -c == -(x // c) and x % -c == x % c under truncation
        if not _fits(x.dtype, -c):
            return None  # the dtype's minimum has no positive counterpart (int8: 128 wraps back to -128)
        if x.op is _MOD:
            return UOp(_MOD, x.dtype, (num, d.const_like(-c)))
        return UOp(_MUL, x.dtype, (UOp(_IDIV, x.dtype, (num, d.const_like(-c))), d.const_like(-1)))
    mm = num._minmax  # read once: vmin and vmax are a property call each
    lo, hi = mm if mm is not None else num._compute_minmax()
    # the numerator stays in one period: the quotient is fixed and the remainder is a shift
    if lo >= 0 and lo // c == hi // c:
        q = lo // c
        return num.const_like(q) if x.op is _IDIV else (num if q == 0 else num + num.const_like(-q * c))
    if x.op is _MOD and hi <= 0 and lo > -c:
        return num
    if num.dtype is not _WEAKINT and not no_overflow(num):
        return None
    nop = num.op
    if nop is _IDIV or nop is _MOD:
        nested = _fold_nested(x, num, c)
        if nested is not None:
            return nested
    if lo >= 0 and x.tag is None and x.arg is None and num.dtype is x.dtype and _declines(num, c):
        return None
    terms, const = decompose(num)
    # divide everything by a common factor: (g*a) // (g*b) == a // b and (g*a) % (g*b) == g * (a % b)
    g = math.gcd(c, const, *terms.values())
    if g > 1:
        small = rebuild(x.dtype, {b: k // g for b, k in terms.items()}, const // g)
        if x.op is _IDIV:
            return UOp(_IDIV, x.dtype, (small, d.const_like(c // g)))
        return UOp(_MUL, x.dtype, (UOp(_MOD, x.dtype, (small, d.const_like(c // g))), d.const_like(g)))
    if lo < 0:
        return None
    return _split_by_divisor(x, terms, const, c)


def _declines(num: UOp, c: int) -> bool:
    """True when the rest of fold_divmod is known to give back x (for c > 0, a non-negative numerator that
    does not overflow and is not in one period), read off the numerator's cached linear form without
    decomposing or rebuilding anything: no common factor with c, no coefficient or constant to move out of
    the remainder, every base non-negative. Then _split_by_divisor's remainder is the numerator itself and
    its quotient 0, so it builds x again. Only numerators whose rebuild is known to be themselves qualify: a
    single opaque term, or a sum whose terms are ExactTerms."""
    lin = num._lin
    if lin is not None and type(lin[0]) is ExactTerms:
        terms, const = lin
        if len(terms) > MAX_TERMS or not 0 <= const < c:
            return False
        g = math.gcd(c, const)
        for b, k in terms.items():
            if not 0 <= k < c:
                return False
            mm = b._minmax
            if (mm if mm is not None else b._compute_minmax())[0] < 0:
                return False
            g = math.gcd(g, k)
        return g == 1
    op = num.op
    if op is _ADD or op is _CONST or op is _MUL and num.src[1].op is _CONST:
        return False
    return 1 < c  # {num: 1}: 1 is a remainder and shares no factor with c


def _fold_nested(x: UOp, num: UOp, c: int) -> UOp | None:
    if num.op is _IDIV and num.src[1].op is _CONST and num.src[1].arg > 0 and x.op is _IDIV \
            and _fits(x.dtype, num.src[1].arg * c):
        # trunc(trunc(a/b)/c) == trunc(a/(b*c)) for positive b, c (and b*c must not wrap in a strong dtype)
        return UOp(_IDIV, x.dtype, (num.src[0], num.src[1].const_like(num.src[1].arg * c)))
    if num.op is _MOD and num.src[1].op is _CONST and x.op is _MOD:
        m = abs(num.src[1].arg)
        if m != 0 and m % c == 0:
            # a % (k*c) keeps a's sign and is congruent to a mod c, so (a % (k*c)) % c == a % c
            return UOp(_MOD, x.dtype, (num.src[0], num.src[1].const_like(c)))
    return None


def _split_by_divisor(x: UOp, terms: dict[UOp, int], const: int, c: int) -> UOp | None:
    """For a non-negative numerator: split each coefficient into a multiple of c and a remainder.
    With non-negative bases, num = c*q + r where q, r >= 0, so num // c == q + r // c and num % c == r % c."""
    q_terms: dict[UOp, int] = {}
    r_terms: dict[UOp, int] = {}
    q_const, r_const = const // c, const % c
    r_hi: int | float = r_const  # the remainder's maximum, as range analysis of the sum rebuild writes gives it in index math
    for b, k in terms.items():
        mm = b._minmax
        if mm is None:
            mm = b._compute_minmax()
        if k < 0 or mm[0] < 0:
            return _split_exact(x, terms, const, c)
        q_terms[b], rk = divmod(k, c)
        r_terms[b] = rk
        r_hi += rk * mm[1]
    if x.op is _IDIV and x.dtype is _WEAKINT and r_hi < c:
        q = rebuild(_WEAKINT, q_terms, q_const)  # the remainder part never reaches c: it is not even built
        return None if q is x else q
    r = rebuild(x.dtype, r_terms, r_const)
    if r.dtype is not _WEAKINT and not no_overflow(r):
        return None  # r >= 0 in exact arithmetic, but in a strong dtype it may wrap (a negative constant moved into it)
    small = r.vmax < c  # the remainder part never reaches c
    # only the node the result needs is built: a declining call (r is the numerator) then builds nothing new
    if x.op is _MOD:
        new = r if small else UOp(_MOD, x.dtype, (r, x.src[1]))
    else:
        q = rebuild(x.dtype, q_terms, q_const)
        if small:
            new = q
        else:
            rdiv = UOp(_IDIV, x.dtype, (r, x.src[1]))
            new = rdiv if q.op is _CONST and q.arg == 0 else q + rdiv
    return None if new is x else new


def _split_exact(x: UOp, terms: dict[UOp, int], const: int, c: int) -> UOp | None:
    """Move out only the terms whose coefficient c divides; valid when what remains is non-negative."""
    exact = {b: k // c for b, k in terms.items() if k % c == 0}
    if not exact:
        return None
    rest = rebuild(x.dtype, {b: k for b, k in terms.items() if k % c != 0}, const)
    if rest.vmin < 0:
        return None
    if x.op is _MOD:
        return UOp(_MOD, x.dtype, (rest, x.src[1]))
    return rebuild(x.dtype, exact, 0) + UOp(_IDIV, x.dtype, (rest, x.src[1]))


def fold_int_compare(x: UOp) -> UOp | None:
    """`sum + k < c` -> `sum < c - k`; `g*sum < c` -> `sum < ceil(c/g)`; `g*sum != c` with g not dividing c is True."""
    lhs, rhs = x.src
    if lhs.dtype.count != 1 or not dtypes.is_int(lhs.dtype) or not no_overflow(lhs):
        return None
    terms, const = decompose(lhs)
    terms = {b: k for b, k in terms.items() if k != 0}  # node-first, x - x is still there to read
    if not terms:
        return None
    c = rhs.arg - const
    g = math.gcd(*terms.values())
    if any(k < 0 for k in terms.values()):
        g = -g if all(k < 0 for k in terms.values()) else g
    if x.op is Ops.CMPLT:
        if g < 0:
            return None  # dividing by a negative flips the comparison; leave such forms alone
        bound = -((-c) // g)  # ceil(c / g): g*s < c  <=>  s < ceil(c/g) for integer s
        new_terms = {b: k // g for b, k in terms.items()}
    else:
        if c % g != 0:
            return UOp.const(dtypes.bool, x.op is Ops.CMPNE)
        bound = c // g
        new_terms = {b: k // g for b, k in terms.items()}
    if not _fits(lhs.dtype, bound):
        return None
    new_lhs = rebuild(lhs.dtype, new_terms, 0)
    if not no_overflow(new_lhs):
        return None  # without the constant the sum may wrap where lhs did not: int8 x+y+100 < 0 is not x+y < -100
    new = UOp(x.op, dtypes.bool, (new_lhs, UOp.const(lhs.dtype, bound)))
    return None if new is x else new


def _fits(dt, v: int) -> bool:
    return dtypes.min(dt) <= v <= dtypes.max(dt) or dt is dtypes.weakint

