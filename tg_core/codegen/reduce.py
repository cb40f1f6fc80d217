"""Lowering REDUCE to an accumulator in a register.

`REDUCE(value, *ranges, arg=op)` becomes

    acc = DEFINE_REG(dtype.ptr(1, REG))
    STORE(acc[0], identity)                       before the loops (ordered after the outer ranges)
    STORE(acc[0], LOAD(acc[0]) op value)          inside the reduced ranges, then END(..., *ranges)
    LOAD(acc[0])                                  after the END: the REDUCE's value

The order is carried by AFTER: the pointer the update uses is `acc.after(init, *ranges)`, the one the
result uses is `acc.after(END)`. That keeps the three accesses distinct nodes (hash-consing would merge
two identical LOADs of acc[0]) and tells the linearizer where each belongs.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable

from tg_core.dtype import AddrSpace, ConstType, DType, dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

# bools have no ADD/MUL: their sum and product are OR and AND
_BOOL_OP = {Ops.ADD: Ops.OR, Ops.MUL: Ops.AND, Ops.MAX: Ops.OR}


def reduce_identity(op: Ops, dt: DType) -> ConstType:
    """The value `op` starts from: ADD 0, MUL 1, MAX the dtype's minimum (-inf for floats)."""
    if op is Ops.ADD:
        return 0
    if op is Ops.MUL:
        return 1
    if op is Ops.MAX:
        return dtypes.min(dt)
    raise ValueError(f"no identity for a REDUCE of {op}")


def reduce_combine(op: Ops, a: UOp, b: UOp) -> UOp:
    """`a op b` for a REDUCE's op (bools combine with OR/AND)."""
    if dtypes.is_bool(a.dtype):
        op = _BOOL_OP[op]
    return UOp(op, a.dtype, (a, b))


def _lower(ctx: itertools.count, red: UOp, zero: UOp | None = None,
           end: Callable[[UOp], UOp] | None = None) -> UOp:
    """`red` as its accumulator; `zero` is the index of its one element (default the weakint 0) and `end`, if
    given, is applied to the END of its update (lower_walk.py passes its concrete 0 and its END splitting)."""
    value, *rngs = red.src
    if not rngs:
        return value
    dt = red.dtype
    if zero is None:
        zero = UOp.const(dtypes.weakint, 0)
    reg = UOp(Ops.DEFINE_REG, dt.ptr(1, AddrSpace.REG), (), next(ctx))
    outer = tuple(red.ranges)  # the init runs once per iteration of the loops the REDUCE is inside
    init = (reg.after(*outer) if outer else reg).index(zero).store(UOp.const(dt, reduce_identity(red.arg, dt)))
    acc = reg.after(init, *rngs).index(zero)
    update = acc.store(reduce_combine(red.arg, acc.load(), value)).end(*rngs)
    if end is not None:
        update = end(update)
    return reg.after(update).index(zero).load()


def lower_reduce(ast: UOp) -> UOp:
    """`ast` with every REDUCE lowered to an accumulator, each after the REDUCEs inside it.

    One sources-first walk instead of a graph_rewrite (a REDUCE is the only node that changes, and what it
    becomes needs no further rewriting). The walk visits sources last to first, as graph_rewrite does, so
    the accumulators are numbered as they were when this was a rewrite."""
    # numbered after the kernel's own registers (a custom kernel's DEFINE_REG 0 and an accumulator numbered 0
    # would be one hash-consed node, one register)
    count = itertools.count(1 + max((u.arg for u in ast.toposort() if u.op is Ops.DEFINE_REG and isinstance(u.arg, int)),
                                    default=-1))
    new: dict[UOp, UOp] = {}
    stack: list = [ast]  # a node, then (node,) again once its sources are lowered
    while stack:
        n = stack.pop()
        if type(n) is tuple:
            n = n[0]
        elif n in new:
            continue
        else:
            pending = [s for s in n.src if s not in new]
            if pending:
                stack.append((n,))
                stack += pending
                continue
        src = n.src
        lowered = tuple([new[s] for s in src])
        nn = n if lowered == src else UOp(n.op, n.dtype, lowered, n.arg, n.tag)
        new[n] = _lower(count, nn) if nn.op is Ops.REDUCE else nn
    return new[ast]
