"""Validating the int arguments of Tensor ops (axes, dims, sizes, bounds, shapes) when the op is built.

An invalid argument must fail in the op that got it, naming the argument, the value and what is allowed:
accepted, a float axis or a repeated one builds a graph that breaks much later, far from its cause.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tg_core.uop.uop import UOp


def int_arg(value: Any, name: str, lo: int | None = None) -> int:
    """`value` as an int (Python or numpy ints; not bools, not floats), at least `lo` when given."""
    from tg_core.uop.uop import UOp
    if isinstance(value, UOp):
        raise TypeError(f"{name} must be an int, got the UOp {value.render()}: a symbolic int (a dim over bound "
                        "variables) is allowed in shrink, slicing, pad, reshape, expand, empty/zeros/full and arange")
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    v = operator.index(value)
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")
    return v


def sint_arg(value: Any, name: str, lo: int | None = None) -> Any:
    """An int, or a symbolic int (tg_core/uop/sint.py: an int expression over bound variables, canonical; at
    least `lo` for every value of its variables when given)."""
    from tg_core.uop.uop import UOp
    if not isinstance(value, UOp):
        return int_arg(value, name, lo)
    from tg_core.uop.sint import check_sint
    v = check_sint(value, name)
    if lo is not None and (v if isinstance(v, int) else v.vmin) < lo:
        shown = v if isinstance(v, int) else f"{v.render()} (smallest value {v.vmin})"
        raise ValueError(f"{name} must be >= {lo} for every value of its variables, got {shown}")
    return v


def sints_arg(values: Sequence[Any], name: str, lo: int | None = None) -> tuple[Any, ...]:
    """A sequence of ints or symbolic ints (each at least `lo` when given)."""
    if not isinstance(values, (tuple, list)):
        raise TypeError(f"{name} must be a tuple or list of ints, got {values!r} ({type(values).__name__})")
    return tuple(sint_arg(v, f"{name} {tuple(values)!r}: each entry", lo) for v in values)


def axis_arg(a: Any, ndim: int, shape: tuple[int, ...], name: str = "axis") -> int:
    """An axis of a tensor of `shape` (negative counts from the end; a 0-d tensor has axes 0 and -1, as in
    PyTorch), normalized to 0 .. ndim-1."""
    a = int_arg(a, name)
    n = max(ndim, 1)
    if not -n <= a < n:
        raise IndexError(f"{name} {a} is out of range for a tensor of shape {shape} (allowed: {-n} to {n - 1})")
    return a % n


def axes_arg(axis: Any, ndim: int, shape: tuple[int, ...], name: str = "axis") -> tuple[int, ...]:
    """None (every axis), an axis, or a tuple/list of distinct axes, normalized."""
    if axis is None:
        return tuple(range(ndim))
    items = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    out = tuple(axis_arg(a, ndim, shape, name) for a in items)
    if len(set(out)) != len(out):
        dup = next(a for i, a in enumerate(out) if a in out[:i])
        raise ValueError(f"{name} {axis!r} names axis {dup} more than once (shape {shape})")
    return out


def ints_arg(values: Sequence[Any], name: str, lo: int | None = None) -> tuple[int, ...]:
    """A sequence of ints (each at least `lo` when given)."""
    if not isinstance(values, (tuple, list)):
        raise TypeError(f"{name} must be a tuple or list of ints, got {values!r} ({type(values).__name__})")
    return tuple(int_arg(v, f"{name} {tuple(values)!r}: each entry", lo) for v in values)


def pair_arg(values: Sequence[Any], name: str) -> tuple[int, int]:
    """Two ints (or symbolic ints): a (start, end) bound."""
    out = sints_arg(values, name)
    if len(out) != 2:
        raise ValueError(f"{name} must be two ints, got {tuple(values)!r}")
    return out[0], out[1]


def shape_of(u: UOp) -> tuple[int, ...]:
    """The shape of a tensor-level node (every node of a tensor graph has one; kernel-level nodes do not)."""
    s = u.shape
    if s is None:
        raise TypeError(f"a {u.op} node has no shape: it is not a tensor-level node")
    return s


def shape_arg(first: int | Sequence[int], rest: tuple[int, ...]) -> tuple[int, ...]:
    """A shape (or axes) given as one sequence or as separate ints: `reshape((2, 3))` and `reshape(2, 3)`."""
    if isinstance(first, Sequence) and not rest:
        return tuple(first)
    # the op validates the entries: a sequence among them (mixed forms) is rejected there
    out: tuple[Any, ...] = (first, *rest)
    return out


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The shape two shapes broadcast to (numpy's rule: aligned at the end, an axis of 1 stretches)."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"shapes {a} and {b} cannot be broadcast together (axis sizes {x} and {y})")
        out.append(y if x == 1 else x)
    return tuple(out)
