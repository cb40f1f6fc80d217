"""Lazy values of a weak dtype: `t.cast(dtypes.weakint)` (or weakfloat) is a value no device can hold.

A weak dtype is unbounded (weakint: any integer, weakfloat: any real), so it is kept only in the graph and
lowered to the strong dtype its consumer asks for: `lower_weak(u, dt)` rebuilds the weak part of a graph
(casts into a weak dtype, weak constants, and the view ops above them) in `dt`. A cast of a float into
weakint truncates, so every consumer sees the truncated value: `x.cast(weakint).cast(float32)` is
`trunc(x)`, and `.cast(bool)` of 0.5 and -0.5 is False. Realizing a weak value itself is an error
(tensor.py).
"""
from __future__ import annotations

from tg_core.dtype import DType, dtypes
from tg_core.uop.alu import cast_const
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp


def _exact(dt: DType) -> DType:
    """The strong dtype a weak source is computed in before it is cast on (the weak dtype's default)."""
    return dtypes.default_int if dt is dtypes.weakint else dtypes.default_float


def lower_weak(u: UOp, dt: DType) -> UOp:
    """`u`, a node of a weak dtype, computed in the strong dtype `dt` (the nodes below the weak part are kept)."""
    if not dtypes.is_weak(u.dtype):
        return u.cast(dt)
    if u.op is Ops.CONST:
        return UOp.const(dt, cast_const(u.arg, u.dtype, dt))
    if u.op is Ops.DEFINE_VAR or u.op is Ops.BIND:
        return u.cast(dt)  # a variable (a symbolic int, sint.py) keeps its dtype: the kernel casts its value
    if u.op is Ops.CAST:
        (src,) = u.src
        x = src if not dtypes.is_weak(src.dtype) else lower_weak(src, _exact(src.dtype))
        if u.dtype is dtypes.weakint and dtypes.is_float(x.dtype):
            x = x.alu(Ops.TRUNC)  # weakint holds the integer part, whatever the consumer's dtype
        return x if x.dtype is dt else x.cast(dt)
    # view ops and anything else dtype-agnostic above a weak value: the same op on the lowered sources
    return UOp(u.op, dt, tuple(lower_weak(s, dt) if dtypes.is_weak(s.dtype) else s for s in u.src), u.arg)
