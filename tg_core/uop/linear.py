"""Integer sums as linear forms: `sum(coeff_i * base_i) + const`.

The canonical form of an integer sum is a left-leaning chain of ADDs of `base*coeff` terms, each base
once, in first-appearance order, with the constant last. Reading a sum flattens nested ADDs and
distributes constant factors, so one rule application brings a whole linear subexpression to canonical
form. A canonical sum remembers its terms (`UOp._lin`), so extending it costs O(terms), and sums of
more than `MAX_TERMS` distinct terms are read as opaque terms of bigger sums (combining through them
would make long sums of distinct terms quadratic).
"""
from __future__ import annotations

from tg_core.dtype import ConstType, as_const, dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

MAX_TERMS = 64

# the ops the hot loops test, as module constants: on Python 3.11 `Ops.ADD` goes through EnumType's
# __getattr__ hook (several times a global lookup), and these loops run once per node of a sum
_ADD, _MUL, _CONST, _IDIV, _MOD = Ops.ADD, Ops.MUL, Ops.CONST, Ops.IDIV, Ops.MOD
_WEAKINT = dtypes.weakint


def _int_const(dtype, v: int) -> UOp:
    # index math is weakint, whose constants need no wrapping: skip UOp.const's checks on the hot path
    return UOp(_CONST, dtype, (), v) if dtype is dtypes.weakint else UOp.const(dtype, v)


def split_term(u: UOp) -> tuple[UOp, int]:
    """`u` as (base, coefficient): x*3 -> (x, 3); x -> (x, 1)."""
    if u.op is _MUL and u.src[1].op is _CONST:
        return u.src[0], u.src[1].arg
    return u, 1


_CANONICAL = (None, None)  # marks an inner node of a canonical chain whose terms were not cached


class ExactTerms(dict):
    """The terms of a sum that rebuild gives back as that very node (rebuild made it, or a walk found every node
    of the chain to be the one rebuild writes). fold_divmod may then decline without rebuilding anything; a sum
    only recognized as canonical keeps a plain dict (its nodes may differ in tags)."""
    __slots__ = ()


def decompose(u: UOp) -> tuple[dict[UOp, int], int]:
    """The terms (base -> summed coefficient) and constant of `u` read as a linear form: ADDs are
    flattened and products with constants distributed, so (a+b*2)*3+a is {a: 4, b: 6}. A fresh dict."""
    terms: dict[UOp, int] = {}
    const = 0
    stack: list[tuple[UOp, int]] = [(u, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        n, m = pop()
        # follow the left operand in place (it is the entry the stack would pop next): a left-leaning sum
        # then costs one push and pop per term instead of one per node
        while True:
            lin = n._lin
            if lin is not None and lin[0] is not None and len(lin[0]) <= MAX_TERMS:
                # a canonical sum built earlier: merge its remembered terms instead of walking it
                if not terms and m == 1:
                    terms = dict(lin[0])
                else:
                    for b, k in lin[0].items():
                        terms[b] = terms.get(b, 0) + k * m
                const += lin[1] * m
                break
            op = n.op
            if op is _ADD and (lin is None or len(terms) < MAX_TERMS):
                push((n.src[1], m))
                n = n.src[0]
            elif op is _MUL and n.src[1].op is _CONST:
                m *= n.src[1].arg
                n = n.src[0]
            elif op is _CONST:
                const += n.arg * m
                break
            else:
                terms[n] = terms.get(n, 0) + m
                break
    return terms, const


def rebuild(dtype, terms: dict[UOp, int], const: int) -> UOp:
    """The canonical chain for these terms (zero coefficients dropped) and constant. Every ADD it builds
    is marked canonical, and the top one remembers its terms, so later rules on it cost O(1).
    In a strong dtype the coefficients and constant wrap, as the constants holding them do, so that the
    remembered terms are the node's own (int8: 300*x is x*44; read back as 300 it would divide wrongly)."""
    if dtype is _WEAKINT:
        return _rebuild_index(terms, const)
    out: UOp | None = None
    kept: dict[UOp, int] = ExactTerms()  # what rebuild makes gives back the same node
    wrap = dtype.scalar() is not dtypes.weakint
    if wrap:  # an integer dtype: its constants are ints
        const = int(as_const(const, dtype))
    for base, coeff in terms.items():
        if wrap:
            coeff = int(as_const(coeff, dtype))
        if coeff == 0:
            continue
        kept[base] = coeff
        t = base if coeff == 1 else UOp(_MUL, dtype, (base, _int_const(dtype, coeff)))
        if out is None:
            out = t
        else:
            out = UOp(_ADD, dtype, (out, t))
            if out._lin is None:
                out._lin = _CANONICAL
    if out is None:
        return _int_const(dtype, const)
    if const != 0:
        out = UOp(_ADD, dtype, (out, _int_const(dtype, const)))
    if out.op is _ADD:
        out._lin = (kept, const)
    return out


def _rebuild_index(terms: dict[UOp, int], const: int) -> UOp:
    """rebuild for index math (weakint: nothing wraps), which also gives each node it makes the bounds range
    analysis would (vrange.minmax's weakint ADD and MUL by a constant) when its sources' are known: the rule
    that made the sum is followed by range rules on it, and filling them here skips a walk and calls per node."""
    out: UOp | None = None
    lo: ConstType = 0  # the bounds of out, when known
    hi: ConstType = 0
    tlo: ConstType = 0
    thi: ConstType = 0
    known = True
    kept: dict[UOp, int] = ExactTerms()  # what rebuild makes gives back the same node
    for base, coeff in terms.items():
        if coeff == 0:
            continue
        kept[base] = coeff
        bm = base._minmax
        if coeff == 1:
            t = base
            if bm is None:
                known = False
            else:
                tlo, thi = bm
        else:
            t = UOp(_MUL, _WEAKINT, (base, _weak_const(coeff)))
            if bm is None:
                known = False
            else:
                tlo, thi = (bm[0] * coeff, bm[1] * coeff) if coeff >= 0 else (bm[1] * coeff, bm[0] * coeff)
                if t._minmax is None:
                    t._minmax = (tlo, thi)
        if out is None:
            out = t
            lo, hi = (tlo, thi) if known else (0, 0)
        else:
            out = UOp(_ADD, _WEAKINT, (out, t))
            if out._lin is None:
                out._lin = _CANONICAL
            if known:
                lo, hi = lo + tlo, hi + thi
                if out._minmax is None:
                    out._minmax = (lo, hi)
    if out is None:
        return _weak_const(const)
    if const != 0:
        out = UOp(_ADD, _WEAKINT, (out, _weak_const(const)))
        if known and out._minmax is None:
            out._minmax = (lo + const, hi + const)
    if out.op is _ADD:
        out._lin = (kept, const)
    return out


_weak_consts: dict[int, UOp] = {}  # small index constants, kept alive: rebuild writes the same few again and again


def _weak_const(v: int) -> UOp:
    c = _weak_consts.get(v)
    if c is None:
        c = UOp(_CONST, _WEAKINT, (), v)
        if -1024 <= v <= 1024:
            _weak_consts[v] = c
    return c


def _merge_divmod_pairs(terms: dict[UOp, int]) -> int | None:
    """(x//c)*(k*c) + (x%c)*k -> x*k: the identity of truncating division, true for every x and c != 0
    (x%0 and x//0 are both 0). x is read as a linear form, so that a sum x combines with the other terms
    instead of becoming an opaque base. Returns the constant this adds, or None when no pair merged."""
    # plain loops, not comprehensions: this runs on every sum checked for canonical form, most with no MOD term
    mods: list[UOp] = []
    for b in terms:
        if b.op is _MOD:
            c = b.src[1]
            if c.op is _CONST and c.arg != 0:
                mods.append(b)
    if not mods:
        return None
    divs: dict[tuple[UOp, int], UOp] = {}
    for b in terms:
        if b.op is _IDIV and b.src[1].op is _CONST:
            divs[(b.src[0], b.src[1].arg)] = b
    if not divs:
        return None
    const = None
    for m in mods:
        x, c = m.src
        div = divs.get((x, c.arg))
        if div is not None and div in terms and m in terms and terms[div] == terms[m] * c.arg:
            k = terms.pop(m)
            del terms[div]
            x_terms, x_const = decompose(x)
            for b, kb in x_terms.items():
                terms[b] = terms.get(b, 0) + kb * k
            const = (const or 0) + x_const * k
    return const


def _rebuilt_const(c: UOp, dt) -> bool:
    """`c` is the constant node rebuild writes for its value in `dt`."""
    v = c.arg
    return c.tag is None and c.dtype is dt and type(v) is int and (dt is _WEAKINT or as_const(v, dt) == v)


_HAS_MOD, _HAS_DIV, _NOT_PLAIN = 1, 2, 4


def _scan_terms(terms: dict[UOp, int]) -> int:
    """_NOT_PLAIN if a base is a sum (rebuild also writes the opaque sums of long ones as bases: the walk below
    rejects those), else which of MOD and IDIV the bases include (flags)."""
    flags = 0
    for b in terms:
        op = b.op
        if op is _ADD:
            return _NOT_PLAIN
        if op is _MOD:
            flags |= _HAS_MOD
        elif op is _IDIV:
            flags |= _HAS_DIV
    return flags


def _canonical_terms(x: UOp) -> tuple[dict[UOp, int], int] | None:
    """The terms of `x` if it already is a canonical sum (checked by walking it, without building any
    node), else None. When every node of the chain is the one rebuild writes (no tag or arg, the sum's
    dtype, constants as rebuild makes them), the terms are ExactTerms. The walk stops at an inner sum
    whose terms are remembered (a rebuilt chain's sources are checked before it): its terms come first."""
    n: UOp | None = x
    const = 0
    dt = x.dtype
    exact = dt.count == 1
    if x.src[1].op is _CONST:
        c = x.src[1]
        const = c.arg
        if const == 0:
            return None
        exact = exact and _rebuilt_const(c, dt)
        n = x.src[0]
    found: list[tuple[UOp, int]] = []
    seen: set[UOp] = set()
    below: dict[UOp, int] | None = None  # the remembered terms of the inner sum the walk stopped at
    mods = divs = False  # whether the walk met MOD and IDIV bases: only they can make a div/mod pair
    while n is not None:
        if n.op is _ADD:
            lin = n._lin
            if lin is not None and lin[0] is not None and (flags := _scan_terms(lin[0])) != _NOT_PLAIN:
                if lin[1] != 0:
                    return None  # a constant inside the chain: not canonical
                below = lin[0]
                mods = mods or bool(flags & _HAS_MOD)
                divs = divs or bool(flags & _HAS_DIV)
                if exact and (type(below) is not ExactTerms or n.dtype is not dt):
                    exact = False
                break
            if exact and (n.tag is not None or n.arg is not None or n.dtype is not dt):
                exact = False
            t, n = n.src[1], n.src[0]
        else:
            t, n = n, None
        top = t.op
        if top is _ADD or top is _CONST:
            return None
        if top is _MUL and t.src[1].op is _CONST:
            c = t.src[1]
            base, coeff = t.src[0], c.arg
            if coeff == 0 or coeff == 1 or base.op is _MUL and base.src[1].op is _CONST:
                return None  # x*0, x*1 and (x*a)*b all have shorter forms
            if exact and (t.tag is not None or t.arg is not None or t.dtype is not dt or not _rebuilt_const(c, dt)):
                exact = False
        else:
            base, coeff = t, 1
        if base in seen:
            return None  # a repeated base combines: decided at the first repeat, not after walking the whole sum
        seen.add(base)
        found.append((base, coeff))
        bop = base.op
        if bop is _MOD:
            mods = True
        elif bop is _IDIV:
            divs = True
    if below is None:
        terms = dict(reversed(found))  # first-seen order, as rebuild writes it
    else:
        if not seen.isdisjoint(below):
            return None
        terms = dict(below)
        terms.update(reversed(found))
    # _merge_divmod_pairs changes terms only when it merges, and then they are dropped
    if mods and divs and _merge_divmod_pairs(terms) is not None:
        return None
    return (ExactTerms(terms) if exact else terms), const


def fold_linear_sum(x: UOp) -> UOp | None:
    """Rule for an integer ADD: combine like terms, fold constants, move the constant last."""
    if x._lin is not None:
        return None
    lin = _canonical_terms(x)
    if lin is not None:
        x._lin = lin  # already canonical: remember its terms for the sums it ends up in
        return None
    terms, const = decompose(x)
    while (extra := _merge_divmod_pairs(terms)) is not None:  # a merged x may bring further pairs
        const += extra
    new = rebuild(x.dtype, terms, const)
    return None if new is x else new
