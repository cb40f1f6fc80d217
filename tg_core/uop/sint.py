"""Symbolic ints: tensor dims and movement-op bounds that are expressions over bound variables.

A `sint` is a Python int or a weakint UOp built from integer constants, variables (DEFINE_VAR, or BIND: a
variable with the value of this call) and integer arithmetic: `start_pos + 1` with `start_pos =
UOp.variable("start_pos", 0, 1023).bind(5)`. The Tensor layer keeps such dims in the args of RESHAPE,
EXPAND, PAD, SHRINK and ARANGE (bound, so that a tensor knows its value); the schedule cache strips the
values (`unbind_arg`), so the kernels of every value of a variable are one kernel AST, compiled once, and the
values reach the kernel at run time as its int arguments.

Every sint is kept in one canonical form (`canonical`: simplified, weakint, a constant as an int), so equal
dims are the same object (hash-consing) and shapes compare with `==` as int shapes do. A bound that the Tensor
layer must check (0 <= start <= end <= size) is checked over the variables' whole ranges (vmin/vmax): a kernel
compiled once must be valid for every value it can be called with.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias, cast

from tg_core.dtype import dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.uop import _SINT_OPS, UOp

sint: TypeAlias = "int | UOp"

# the ops a symbolic dim may be built from: integer constants, variables and exact integer arithmetic (UOp's repr
# prints such an expression over bound variables on one line)
_SYM_OPS = _SINT_OPS


def as_dim(x: int | UOp) -> int:
    """`x` typed as a dim: Shape (tensor_ops.py) types its entries int for the type checker, and a symbolic dim is
    the UOp at run time (typing every shape as int | UOp would ripple through every op that does int math)."""
    return cast(int, x)


def as_uop(x: int | UOp) -> UOp:
    """A symbolic int as a weakint UOp (an int as a constant)."""
    return x if isinstance(x, UOp) else UOp.const(dtypes.weakint, x)


def is_sym(x: Any) -> bool:
    """Whether `x` is a symbolic (UOp) int rather than a Python int."""
    return isinstance(x, UOp)


def canonical(x: int | UOp) -> int | UOp:
    """The canonical form of a symbolic int: simplified weakint; a constant as a Python int (an int as is)."""
    if isinstance(x, int):
        return x
    if x.dtype is not dtypes.weakint:
        x = x.cast(dtypes.weakint)
    s = x.simplify()
    return int(s.arg) if s.op is Ops.CONST else s


def check_sint(x: UOp, what: str) -> int | UOp:
    """`x` as a canonical symbolic int, or a TypeError naming `what` and what a symbolic dim may be made of."""
    if not dtypes.is_int(x.dtype) or x.dtype.count != 1:
        raise TypeError(f"{what}: a symbolic size is an int expression over variables, got a {x.dtype!r} UOp "
                        f"({x.render()})")
    bad = next((u for u in x.toposort() if u.op not in _SYM_OPS), None)
    if bad is not None:
        raise TypeError(f"{what}: a symbolic size is built from ints, variables (UOp.variable(...).bind(v)) and "
                        f"+, *, //, %, max; {x.render()} contains {bad.op.name}")
    return canonical(_weak(x))


def _weak(x: UOp) -> UOp:
    """`x` computed exactly, in weakint: a variable of a strong int dtype is cast at the leaf rather than the sum it
    is part of, so that `(v + 2) - v` simplifies to 2 (a size is exact arithmetic, never wrapped)."""
    if x.dtype is dtypes.weakint:
        return x
    done: dict[UOp, UOp] = {}
    for u in x.toposort(gate=lambda n: n.op not in (Ops.BIND, Ops.DEFINE_VAR)):
        if u.op in (Ops.BIND, Ops.DEFINE_VAR):
            done[u] = u.cast(dtypes.weakint)
        elif u.op is Ops.CONST:
            done[u] = UOp.const(dtypes.weakint, int(u.arg))
        elif u.op is Ops.CAST:
            done[u] = done[u.src[0]]
        else:
            done[u] = UOp(u.op, dtypes.weakint, tuple(done[s] for s in u.src), u.arg)
    return done[x]


def smin(x: int | UOp) -> int:
    """The smallest value `x` can take (over its variables' ranges)."""
    return x if isinstance(x, int) else int(x.vmin)


def smax(x: int | UOp) -> int:
    """The largest value `x` can take (over its variables' ranges): what a buffer of this size must hold."""
    return x if isinstance(x, int) else int(x.vmax)


def binds_of(x: int | UOp) -> dict[str, int]:
    """The values `x`'s bound variables have, by name."""
    if isinstance(x, int):
        return {}
    return {u.src[0].arg[0]: u.src[1].arg for u in x.toposort() if u.op is Ops.BIND}


def unbound_vars(x: int | UOp) -> list[UOp]:
    """The DEFINE_VARs of `x` that no BIND gives a value."""
    if isinstance(x, int):
        return []
    bound = {u.src[0] for u in x.toposort() if u.op is Ops.BIND}
    return [u for u in x.toposort() if u.op is Ops.DEFINE_VAR and u not in bound]


def resolve(x: int | UOp, var_vals: Mapping[str, int] | None = None, what: str = "a size") -> int:
    """The value of `x`: bound variables take their bound values (or those of `var_vals`, by name). An unbound
    variable without a value is a ValueError naming it: only a bound dim has a value."""
    if isinstance(x, int):
        return x
    env: dict[UOp, int] = {}
    for u in x.toposort(gate=lambda n: n.op is not Ops.BIND):
        if u.op is Ops.BIND and var_vals is not None and u.src[0].arg[0] in var_vals:
            env[u] = var_vals[u.src[0].arg[0]]
        elif u.op is Ops.DEFINE_VAR:
            if var_vals is None or u.arg[0] not in var_vals:
                raise ValueError(f"{what} {x.render()} depends on the unbound variable {u.arg[0]} (range "
                                 f"[{u.arg[1]}, {u.arg[2]}]): bind it, UOp.variable(...).bind(value), to give it a value")
            env[u] = var_vals[u.arg[0]]
    return int(x.evaluate(env))


def resolve_shape(shape: tuple[int | UOp, ...], what: str = "a shape") -> tuple[int, ...]:
    """A shape with every symbolic dim replaced by its bound value."""
    return tuple(resolve(s, None, f"{what} {shape}: dim") for s in shape)


def has_sym(arg: Any) -> bool:
    """Whether a movement op's arg (nested tuples of ints) holds a symbolic int."""
    if isinstance(arg, UOp):
        return True
    if isinstance(arg, tuple):
        return any(has_sym(a) for a in arg)
    return False


def arg_vars(arg: Any) -> set[UOp]:
    """The DEFINE_VARs in a movement op's arg."""
    out: set[UOp] = set()
    _map_arg(arg, lambda u: out.update(v for v in u.toposort() if v.op is Ops.DEFINE_VAR))
    return out


def arg_binds(arg: Any) -> list[UOp]:
    """The BIND nodes in a movement op's arg."""
    out: dict[UOp, None] = {}
    _map_arg(arg, lambda u: out.update((b, None) for b in u.toposort() if b.op is Ops.BIND))
    return list(out)


def binds_of_arg(arg: Any) -> dict[str, int]:
    """The values of the variables bound in a movement op's arg, by name."""
    return {b.src[0].arg[0]: b.src[1].arg for b in arg_binds(arg)}


def _map_arg(arg: Any, fn: Any) -> Any:
    if isinstance(arg, UOp):
        return fn(arg)
    if isinstance(arg, tuple):
        return tuple(_map_arg(a, fn) for a in arg)
    return arg


def unbind(x: UOp, var_vals: dict[str, int]) -> UOp:
    """`x` with every BIND replaced by its variable; the values go into `var_vals` (one value per variable:
    two values for one name in one realize are a ValueError)."""
    binds = {u: u.src[0] for u in x.toposort() if u.op is Ops.BIND}
    for b in binds:
        name, val = b.src[0].arg[0], b.src[1].arg
        if var_vals.setdefault(name, val) != val:
            raise ValueError(f"variable {name} is bound to both {var_vals[name]} and {val} in one realize")
    return x.substitute(binds) if binds else x


def unbind_arg(arg: Any, var_vals: dict[str, int]) -> Any:
    """A movement op's arg with its symbolic ints unbound (`unbind`)."""
    return _map_arg(arg, lambda u: unbind(u, var_vals))


def rebind(x: UOp, var_vals: Mapping[str, int]) -> UOp:
    """`x` with each bound variable named in `var_vals` bound to that value instead."""
    binds = {u: u.src[0].bind(var_vals[u.src[0].arg[0]]) for u in x.toposort()
             if u.op is Ops.BIND and u.src[0].arg[0] in var_vals}
    return x.substitute(binds) if binds else x


def rebind_arg(arg: Any, var_vals: Mapping[str, int]) -> Any:
    """A movement op's arg with its variables bound to the values of `var_vals`."""
    return _map_arg(arg, lambda u: rebind(u, var_vals))


def rebind_graph(root: UOp, var_vals: Mapping[str, int]) -> UOp:
    """A tensor graph with its variables bound to the values of `var_vals` (BIND sources and the symbolic dims in
    movement ops' args alike): TinyJit gives a replay's outputs the shapes of this call's values."""
    done: dict[UOp, UOp] = {}
    for u in root.toposort():
        if u.op is Ops.BIND and u.src[0].arg[0] in var_vals:
            done[u] = u.src[0].bind(var_vals[u.src[0].arg[0]])
            continue
        src = tuple(done[s] for s in u.src)
        arg = rebind_arg(u.arg, var_vals) if has_sym(u.arg) else u.arg
        done[u] = u if arg is u.arg and all(a is b for a, b in zip(src, u.src)) else UOp(u.op, u.dtype, src, arg, u.tag)
    return done[root]


def buffer_view(buf: UOp, shape: tuple[int, ...]) -> UOp:
    """A flat BUFFER seen as `shape` (entries may be symbolic): its first numel elements. A symbolic shape's
    buffer holds its largest size, so its view is a SHRINK of the bound numel, then a RESHAPE."""
    if not has_sym(shape):
        return buf.reshape(shape)
    n: int | UOp = 1
    for d in shape:
        n = n * d
    n = canonical(n)
    if isinstance(n, int) and n == buf.arg:
        return buf.reshape(shape)
    return buf.shrink(((0, as_dim(n)),)).reshape(shape)


__all__ = ["arg_binds", "arg_vars", "binds_of_arg", "as_dim", "as_uop", "buffer_view", "rebind_graph", "binds_of", "canonical", "check_sint", "has_sym", "is_sym", "rebind", "rebind_arg", "resolve",
           "resolve_shape", "sint", "smax", "smin", "unbind", "unbind_arg", "unbound_vars"]
