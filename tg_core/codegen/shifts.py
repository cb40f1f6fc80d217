"""Shifts by any amount as shifts by an amount inside the width, so that a renderer can emit a machine shift.

alu.py defines `x << y` and `x >> y` on an int of `w` bits for every amount: the exact shift wrapped to the
dtype, so `x << y` is 0 for y >= w and `x >> y` is the sign (0 or -1, 0 for unsigned x); a negative y gives 0.
Machines and LLVM do not: x86 masks the count to 5 or 6 bits (`1 << 40` is 256 in 32 bits) and LLVM makes a
shift by w or more poison. After this pass (core's pipeline runs it for every renderer) a shift's amount is a
constant in [0, w) or is masked into it (range analysis proves it), and selects give alu.py's value for the
amounts outside, so every device computes the same thing.
"""
from __future__ import annotations

from collections.abc import Iterable

from tg_core.codegen.rewrite_walk import rewrite_walk
from tg_core.dtype import dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import PatternMatcher
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat


def _defined_shift(u: UOp) -> UOp | None:
    x, y = u.src
    dt = x.dtype
    if not dtypes.is_int(dt) or dtypes.is_weak(dt) or dt.count != 1:
        return None
    w = 8 * dt.itemsize
    neg_ok, big_ok = y.vmin >= 0, y.vmax < w
    if neg_ok and big_ok:
        return None
    arith = u.op is Ops.SHR and not dtypes.is_unsigned(dt)  # fills with the sign: saturates at w - 1
    zero = UOp.const(dt, 0)
    if y.op is Ops.CONST:  # decided now: a value outside [0, w)
        return UOp(Ops.SHR, dt, (x, UOp.const(y.dtype, w - 1))) if arith and y.arg >= w else zero
    amount = (y < w).where(y, y.const_like(w - 1)) if arith and not big_ok else y
    # the mask changes no amount that is used; it is what lets range analysis (and a renderer) see [0, w)
    out = UOp(u.op, dt, (x, amount & (w - 1)))
    if not big_ok and not arith:
        out = (y < w).where(out, zero)
    return out if neg_ok else (y < 0).where(zero, out)


pm_defined_shifts = PatternMatcher([(UPat((Ops.SHL, Ops.SHR), name="u"), _defined_shift)])


def has_shifts(order: Iterable[UOp]) -> bool:
    """Whether any of these nodes (a kernel's toposort) is a shift: without one, define_shifts has nothing to do."""
    return any(u.op is Ops.SHL or u.op is Ops.SHR for u in order)


def define_shifts(ast: UOp) -> UOp:
    """`ast` with every shift's amount inside its value's width (alu.py's value for the others)."""
    order = ast.toposort()
    if not has_shifts(order):
        return ast
    return rewrite_walk(ast, order, pm_defined_shifts)  # graph_rewrite's result, matching only the shifts
