"""Evaluate a scalar UOp expression at a point: the oracle that checks simplification keeps values."""
from __future__ import annotations

from collections.abc import Mapping

from tg_core.dtype import ConstType
from tg_core.uop.alu import bitcast_const, cast_const, exec_alu, python_alu
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp


def evaluate(root: UOp, env: Mapping[UOp, ConstType]) -> ConstType:
    """The value of `root` where each DEFINE_VAR/RANGE/SPECIAL/PARAM key of `env` has the given value."""
    vals: dict[UOp, ConstType] = {}
    # a BIND carries its variable's value: the DEFINE_VAR under it needs no entry in env, so don't visit it
    for u in root.toposort(gate=lambda n: n.op is not Ops.BIND):
        if u in env:
            vals[u] = env[u]
        elif u.op is Ops.CONST:
            vals[u] = u.arg
        elif u.op is Ops.BIND:
            vals[u] = evaluate(u.src[1], env)
        elif u.op is Ops.CAST:
            vals[u] = cast_const(vals[u.src[0]], u.src[0].dtype, u.dtype)
        elif u.op is Ops.BITCAST:
            vals[u] = bitcast_const(vals[u.src[0]], u.src[0].dtype, u.dtype)
        elif u.op in python_alu:
            vals[u] = exec_alu(u.op, u.dtype, tuple(vals[s] for s in u.src), tuple(s.dtype for s in u.src))
        else:
            raise ValueError(f"cannot evaluate {u.op} ({u.render()}): give its value in env")
    return vals[root]
