"""Integer POW as multiplies and selects, for renderers whose target has no integer power instruction (LLVM has
no intrinsic for one): the CPU's LLVM path and the AMD renderer use it.

alu.py defines `x ** y` on ints: for y >= 0 the exact power wrapped to the dtype, for y < 0 the real power
truncated toward zero (so 1 for x == 1, +-1 for x == -1 by the parity of y, and 0 otherwise, 0 ** -n
included). Square-and-multiply over the bits of y: `acc` takes `base` (x, x**2, x**4, ...) wherever bit i of
y is set. With a constant y only its set bits are used (`i ** 5` is three multiplies); otherwise every bit a
non-negative y of the dtype can have is tested.
"""
from __future__ import annotations

from tg_core.dtype import dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import PatternMatcher
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat


def int_pow(x: UOp, y: UOp) -> UOp:
    """x ** y for ints of x's dtype (y of the same dtype), with alu.py's semantics."""
    dt = x.dtype
    one = UOp.const(dt, 1)
    acc, base = one, x
    if y.op is Ops.CONST:
        bits = [(y.arg >> i) & 1 == 1 for i in range(max(y.arg, 0).bit_length())]
        for i, bit in enumerate(bits):
            if bit:
                acc = base if acc is one else acc * base
            if i < len(bits) - 1:
                base = base * base
    else:
        width = 8 * dt.itemsize - (0 if dtypes.is_unsigned(dt) else 1)  # a non-negative signed y has no top bit
        for i in range(width):
            acc = ((y >> i) & 1).ne(0).where(acc * base, acc)
            if i < width - 1:
                base = base * base
    if dtypes.is_unsigned(dt) or (y.op is Ops.CONST and y.arg >= 0):
        return acc
    odd = (y & 1).ne(0)
    negative = x.eq(1).where(one, x.eq(-1).where(odd.where(UOp.const(dt, -1), one), UOp.const(dt, 0)))
    return (y < 0).where(negative, acc)


def _rule(u: UOp) -> UOp | None:
    if u.dtype.count != 1 or not dtypes.is_int(u.dtype) or u.dtype in (dtypes.bool, dtypes.weakint):
        return None
    x, y = u.src
    return int_pow(x, y if y.dtype is x.dtype else y.cast(x.dtype))


pm_int_pow = PatternMatcher([(UPat(Ops.POW, name="u"), _rule)])
