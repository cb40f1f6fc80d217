"""Range analysis: for every node, bounds [vmin, vmax] that each value it takes lies within.

Bounds are sound for the semantics in `alu.py`, with one deliberate exception shared with C and LLVM:
a CAST of a value outside the destination's range is undefined, so a signed or float destination keeps
only the part of the source range that overlaps it. Integer arithmetic that may overflow its strong
dtype gives the dtype's full range; weak ints never overflow.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from tg_core.dtype import ConstType, DType, PtrDType, as_const, dtypes
from tg_core.helpers import cdiv, cmod
from tg_core.uop.ops import Ops

if TYPE_CHECKING:
    from tg_core.uop.uop import UOp

    class _Bounded(Protocol):
        """A source whose bounds are known: minmax runs after its sources' (vmin/vmax fill them first)."""
        op: Ops
        dtype: DType
        arg: Any
        _minmax: Bounds

Bounds = tuple[ConstType, ConstType]
IntBounds = tuple[int, int]  # the bounds of an int node (as_const gives its constants as ints)

# minmax runs once per new node: the ops and dtype it tests as module constants (on Python 3.11 `Ops.ADD`
# goes through EnumType's __getattr__ hook, several times the cost of a global)
_WEAKINT = dtypes.weakint
_ADD, _MUL, _IDIV, _MOD, _CONST, _VCONST = Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.CONST, Ops.VCONST
_DEFINE_VAR, _RANGE, _SPECIAL, _BIND, _AFTER, _REDUCE = (Ops.DEFINE_VAR, Ops.RANGE, Ops.SPECIAL, Ops.BIND, Ops.AFTER,
                                                         Ops.REDUCE)
_VECTORIZE, _GEP, _CAST, _BITCAST = Ops.VECTORIZE, Ops.GEP, Ops.CAST, Ops.BITCAST


def dtype_bounds(dt: DType) -> Bounds:
    if isinstance(dt, PtrDType) or dt.scalar() is dtypes.void:
        return -math.inf, math.inf
    return dtypes.min(dt), dtypes.max(dt)


def _isnan(x: ConstType) -> bool:
    return isinstance(x, float) and math.isnan(x)


def _fit(dt: DType, lo: ConstType, hi: ConstType) -> Bounds:
    """Bounds computed in exact arithmetic, made sound for `dt`: a possible overflow of a strong int gives
    the full range, floats land on the dtype's grid, and a NaN anywhere gives the full range."""
    s = dt.scalar()
    if _isnan(lo) or _isnan(hi):
        return dtype_bounds(dt)
    if s is dtypes.bool:
        return _to_bool(lo, hi)
    if dtypes.is_int(s):
        if s is dtypes.weakint:
            return lo, hi
        dlo, dhi = dtypes.min(s), dtypes.max(s)
        if lo < dlo or hi > dhi:
            return dlo, dhi
        return int(lo), int(hi)
    if dtypes.is_float(s):
        return as_const(lo, s), as_const(hi, s)
    return lo, hi


def _to_bool(lo: ConstType, hi: ConstType) -> Bounds:
    """Bounds of `x != 0` for x in [lo, hi]: truthiness is not monotonic, so [-1, 1] holds both False and True."""
    if lo == hi == 0:
        return False, False
    if lo > 0 or hi < 0:
        return True, True
    return False, True


def _corners(fn: Callable[[ConstType, ConstType], ConstType], a: Bounds, b: Bounds) -> Bounds | None:
    # a NaN corner (0 * inf, inf - inf) means the result can be anything
    vals = [fn(x, y) for x in a for y in b]
    if any(_isnan(v) for v in vals):
        return None
    return min(vals), max(vals)


def _cast(u_dtype: DType, src_dtype: DType, lo: ConstType, hi: ConstType) -> Bounds:
    dst = u_dtype.scalar()
    if _isnan(lo) or _isnan(hi):
        return dtype_bounds(dst)  # a NaN bound overlaps nothing
    if dst is dtypes.bool:
        return _to_bool(lo, hi)
    if dtypes.is_weak(dst):
        # weak dtypes are unbounded: no clamping; a weakint of a float truncates
        if dst is dtypes.weakint and dtypes.is_float(src_dtype):
            if math.isinf(lo) or math.isinf(hi):
                return dtype_bounds(dst)
            return math.trunc(lo), math.trunc(hi)
        return (float(lo), float(hi)) if dst is dtypes.weakfloat else (int(lo), int(hi))
    dlo, dhi = dtypes.min(dst), dtypes.max(dst)
    if dtypes.is_float(src_dtype) and dtypes.is_int(dst):
        # truncation, and alu.py's 0 for what dst cannot hold: NaN and inf (possible where a bound is
        # infinite, as for a loaded value) and values out of range
        tlo, thi = (b if math.isinf(b) else math.trunc(b) for b in (lo, hi))
        nlo, nhi = max(tlo, dlo), min(thi, dhi)
        if nlo > nhi:
            return 0, 0
        if tlo < dlo or thi > dhi:
            nlo, nhi = min(nlo, 0), max(nhi, 0)
        return int(nlo), int(nhi)
    if dtypes.is_int(dst):
        # int -> int wraps (alu.py), so only an in-range source keeps its bounds
        return (int(lo), int(hi)) if dlo <= lo and hi <= dhi else (dlo, dhi)
    # a float destination: casts are monotonic (overflow goes to inf, a bound of dst), so rounded bounds stay bounds
    return as_const(max(lo, dlo), dst), as_const(min(hi, dhi), dst)


def _idiv(a: IntBounds, b: IntBounds) -> IntBounds | None:
    if b[0] <= 0 <= b[1]:
        return None
    vals = [cdiv(x, y) for x in a for y in b]
    return min(vals), max(vals)


def _mod(a: IntBounds, b: IntBounds) -> IntBounds:
    m = max(abs(b[0]), abs(b[1]), 1) - 1  # |x % y| < |y|; x % 0 is 0 (alu.py), so a divisor range [0, 0] gives 0
    if b[0] == b[1] and b[0] != 0 and (a[0] >= 0 or a[1] <= 0):
        c = abs(b[0])
        if a[1] - a[0] < c and cmod(a[0], c) <= cmod(a[1], c):  # within one period: exact
            return cmod(a[0], c), cmod(a[1], c)
    if a[0] >= 0:
        return 0, min(a[1], m)
    if a[1] <= 0:
        return max(a[0], -m), 0
    return max(a[0], -m), min(a[1], m)


def _bitwise(op: Ops, a: Bounds, b: Bounds, dt: DType) -> Bounds:
    if dtypes.is_bool(dt):
        fn = {Ops.AND: lambda x, y: x and y, Ops.OR: lambda x, y: x or y, Ops.XOR: lambda x, y: x != y}[op]
        vals = {bool(fn(x, y)) for x in range(int(a[0]), int(a[1]) + 1) for y in range(int(b[0]), int(b[1]) + 1)}
        return min(vals), max(vals)
    if a[0] >= 0 and b[0] >= 0:
        if op is Ops.AND:
            return 0, min(a[1], b[1])
        top = (1 << max(int(a[1]), int(b[1])).bit_length()) - 1
        return 0, top
    if op is Ops.AND and (a[0] >= 0 or b[0] >= 0):  # two's complement: a mask without the sign bit bounds it
        return 0, int(a[1] if a[0] >= 0 else b[1])
    return dtype_bounds(dt)


class _TooDeep(Exception):
    pass


def fill(u: UOp) -> Bounds:
    """Bounds of `u`, computing (and caching in `_minmax`) those of every node below it that has none yet.
    Plain recursion is the fastest way to fill the few uncached nodes under a new one; graphs deeper than
    the limit fall back to an explicit stack."""
    for s in u.src:
        if s._minmax is None:
            break
    else:  # the common case in a rewrite: a new node over analyzed sources
        mm = u._minmax = minmax(u)
        return mm
    try:
        return _fill_recursive(u, 0)
    except _TooDeep:
        pass
    # a node stays on the stack until its sources are analyzed: seen once to push them, once more to compute
    stack: list[UOp] = [u]
    pop, push = stack.pop, stack.append
    while stack:
        node = stack[-1]
        if node._minmax is not None:
            pop()
            continue
        missing = False
        if node.op not in _FLOAT_BLIND or not _blind(node):
            for s in node.src:
                if s._minmax is None:
                    push(s)
                    missing = True
        if not missing:
            node._minmax = minmax(node)
            pop()
    filled = u._minmax
    assert filled is not None  # filled by the loop above
    return filled


def _blind(u: UOp) -> bool:
    """A float comparison's bounds ignore its operands' (_cmplt: NaN makes any outcome possible), so the float
    expression under a relu's `0 < x` is not analyzed for nothing."""
    return u.op in _FLOAT_BLIND and bool(u.src) and dtypes.is_float(u.src[0].dtype)


def _fill_recursive(u: UOp, depth: int) -> Bounds:
    if depth > 200:
        raise _TooDeep
    if u.op not in _FLOAT_BLIND or not u.src or not dtypes.is_float(u.src[0].dtype):
        for s in u.src:
            if s._minmax is None:
                _fill_recursive(s, depth + 1)
    mm = u._minmax = minmax(u)
    return mm


def minmax(u: UOp) -> Bounds:
    """Bounds of `u`, given that its sources' bounds are already known."""
    op, dt = u.op, u.dtype
    src: tuple[_Bounded, ...] = u.src  # type: ignore[assignment]  # (no typing.cast: a call per node)
    if dt is _WEAKINT:
        # index math: exact Python ints, no overflow; the hot path of every symbolic rewrite
        if op is _ADD:
            (a0, a1), (b0, b1) = src[0]._minmax, src[1]._minmax
            return a0 + b0, a1 + b1
        if op is _MUL:
            b = src[1]
            if b.op is _CONST:
                (a0, a1), c = src[0]._minmax, b.arg
                return (a0 * c, a1 * c) if c >= 0 else (a1 * c, a0 * c)
        elif op is _CONST:
            return u.arg, u.arg
        elif op is _IDIV or op is _MOD:
            b = src[1]
            if b.op is _CONST:
                (a0, a1), c = src[0]._minmax, b.arg
                if type(a0) is int and type(a1) is int and type(c) is int and c != 0:
                    # what _RULES and _fit give for these, without the generic dispatch: truncating division by
                    # a positive constant is monotonic (by a negative one, antitonic); _mod is the remainder's
                    # rule, its common case (a non-negative dividend, a positive divisor) written out
                    if op is _MOD:
                        if a0 >= 0 and c > 0:
                            if a1 - a0 < c and a0 % c <= a1 % c:  # within one period: exact
                                return a0 % c, a1 % c
                            return 0, min(a1, c - 1)
                        return _mod((a0, a1), (c, c))
                    if c > 0 and a0 >= 0:
                        return a0 // c, a1 // c
                    return (cdiv(a0, c), cdiv(a1, c)) if c > 0 else (cdiv(a1, c), cdiv(a0, c))
    if op is _CONST:
        v = u.arg
        return (dtype_bounds(dt) if _isnan(v) else (v, v))
    if op is _VCONST:
        if any(_isnan(v) for v in u.arg):
            return dtype_bounds(dt)
        return min(u.arg), max(u.arg)
    if op is _DEFINE_VAR:
        return u.arg[1], u.arg[2]
    if op in (_RANGE, _SPECIAL):
        end = src[0]._minmax[1]
        return 0, max(0, end - 1)
    if op is _BIND:
        return src[0]._minmax
    if op is _AFTER or op is _REDUCE and u.arg is Ops.MAX:
        return src[0]._minmax
    if op is _VECTORIZE and src:
        return min(s._minmax[0] for s in src), max(s._minmax[1] for s in src)
    if op is _GEP:
        return src[0]._minmax
    if op is _CAST:
        s = src[0]
        return _cast(dt, s.dtype.scalar(), *s._minmax)
    if op is _BITCAST:
        s = src[0]
        if dtypes.is_int(dt) and dtypes.is_int(s.dtype):
            lo, hi = s._minmax
            dlo, dhi = dtype_bounds(dt)
            if dlo <= lo and hi <= dhi:
                return lo, hi
        return dtype_bounds(dt)
    srcs = src
    if not srcs or op not in _RULES:
        return dtype_bounds(dt)
    if op in _FLOAT_BLIND and dtypes.is_float(srcs[0].dtype):
        return False, True  # a NaN operand makes every comparison false; its operands' bounds may be unknown
    r = _RULES[op](u, *(s._minmax for s in srcs))
    if r is None:
        return dtype_bounds(dt)
    return _fit(dt, *r)


def _add(u, a, b):
    return _corners(lambda x, y: x + y, a, b)


def _sub(u, a, b):
    return _corners(lambda x, y: x - y, a, b)


def _mulr(u, a, b):
    return _corners(lambda x, y: x * y, a, b)


def _max(u, a, b):
    return max(a[0], b[0]), max(a[1], b[1])


def _neg(u, a):
    if dtypes.is_bool(u.dtype):
        return not a[1], not a[0]  # NEG of a bool is logical not (alu.py), not -1
    return -a[1], -a[0]


def _cmplt(u, a, b):
    if a[1] < b[0]:
        return True, True
    if a[0] >= b[1]:
        return False, False
    return False, True


def _cmpne(u, a, b):
    if a[1] < b[0] or b[1] < a[0]:
        return True, True
    if a[0] == a[1] == b[0] == b[1]:
        return False, False
    return False, True


def _cmpeq(u, a, b):
    lo, hi = _cmpne(u, a, b)
    return not hi, not lo


def _where(u, c, x, y):
    if c[0]:
        return x
    if not c[1]:
        return y
    return min(x[0], y[0]), max(x[1], y[1])


def _shl(u, a, b):
    if b[0] == b[1] and b[0] >= 0 and a[0] >= 0:
        # past the width the exact shift would be a 2**b-bit number: 0 in a strong int (alu.py), unbounded weak
        if b[0] >= 8 * u.dtype.itemsize:
            return None if dtypes.is_weak(u.dtype) else (0, 0)
        return a[0] << int(b[0]), a[1] << int(b[0])
    return None


def _shr(u, a, b):
    if b[0] >= 0 and a[0] >= 0:
        return a[0] >> int(b[1]), a[1] >> int(b[0])
    return None


def _exp2(u, a):
    def e(x):
        try:
            return 2.0 ** x
        except OverflowError:
            return math.inf
    return e(a[0]), e(a[1])


def _sqrt(u, a):
    return (math.sqrt(a[0]), math.sqrt(a[1])) if a[0] >= 0 else None


def _trunc(u, a):
    def f(x):
        return x if math.isinf(x) else math.trunc(x)
    return f(a[0]), f(a[1])


def _mulacc(u, a, b, c):
    r = _corners(lambda x, y: x * y, a, b)
    return None if r is None else (r[0] + c[0], r[1] + c[1])


# comparisons of floats: any outcome, whatever the operands' bounds (minmax answers before reading them)
_FLOAT_BLIND = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})

_RULES: dict[Ops, Callable] = {
    Ops.ADD: _add, Ops.SUB: _sub, Ops.MUL: _mulr, Ops.MAX: _max, Ops.NEG: _neg,
    Ops.IDIV: lambda u, a, b: _idiv(a, b) if dtypes.is_int(u.dtype) else None,
    Ops.MOD: lambda u, a, b: _mod(a, b) if dtypes.is_int(u.dtype) else None,
    Ops.CMPLT: _cmplt, Ops.CMPNE: _cmpne, Ops.CMPEQ: _cmpeq, Ops.WHERE: _where,
    Ops.AND: lambda u, a, b: _bitwise(Ops.AND, a, b, u.dtype), Ops.OR: lambda u, a, b: _bitwise(Ops.OR, a, b, u.dtype),
    Ops.XOR: lambda u, a, b: _bitwise(Ops.XOR, a, b, u.dtype),
    Ops.SHL: _shl, Ops.SHR: _shr, Ops.EXP2: _exp2, Ops.SQRT: _sqrt, Ops.TRUNC: _trunc, Ops.MULACC: _mulacc,
}
