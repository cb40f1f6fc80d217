"""Integer POW for the AMD renderer: gfx1100 has no integer power instruction and LLVM no intrinsic for one.

The meaning is alu.py's: for y >= 0 the exact power wrapped to the dtype; for y < 0 the real power truncated
toward zero, which is 1 for x == 1, 1 or -1 by the parity of y for x == -1, and 0 otherwise. The power is
built by binary exponentiation: the running product takes the current square x**(2**k) where bit k of y is
set. A constant y contributes only its set bits; a variable y has every bit a non-negative value can have
tested with a select.
"""
from __future__ import annotations

from tg_core.dtype import dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import PatternMatcher
from tg_core.uop.upat import UPat
from tg_core.uop.uop import UOp


def _power(x: UOp, y: UOp) -> UOp:
    dt = x.dtype
    one = UOp.const(dt, 1)
    bits = 8 * dt.itemsize - (0 if dtypes.is_unsigned(dt) else 1)  # the bits a non-negative y can have set
    if y.op is Ops.CONST:
        n = int(y.arg)
        if n < 0:
            return _negative_power(x, y)
        acc, square = one, x
        while n:
            if n & 1:
                acc = square if acc is one else acc * square
            n >>= 1
            if n:
                square = square * square
        return acc
    acc, square = one, x
    for k in range(bits):
        set_k = ((y >> UOp.const(dt, k)) & UOp.const(dt, 1)).ne(UOp.const(dt, 0))
        acc = set_k.where(acc * square, acc)
        if k + 1 < bits:
            square = square * square
    if dtypes.is_unsigned(dt):
        return acc
    return (y < UOp.const(dt, 0)).where(_negative_power(x, y), acc)


def _negative_power(x: UOp, y: UOp) -> UOp:
    dt = x.dtype
    one, zero = UOp.const(dt, 1), UOp.const(dt, 0)
    odd = (y & one).ne(zero)
    minus_one = odd.where(UOp.const(dt, -1), one)
    return x.eq(one).where(one, x.eq(UOp.const(dt, -1)).where(minus_one, zero))


def _rule(u: UOp) -> UOp | None:
    if not dtypes.is_int(u.dtype) or u.dtype in (dtypes.bool, dtypes.weakint) or u.dtype.count != 1:
        return None
    x, y = u.src
    return _power(x, y if y.dtype is x.dtype else y.cast(x.dtype))


pm_int_pow = PatternMatcher([(UPat(Ops.POW, name="u"), _rule)])
