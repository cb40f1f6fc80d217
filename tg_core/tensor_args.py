"""Validating the int arguments of Tensor ops (axes, dims, sizes, bounds) when the op is built.

An invalid argument must fail in the op that got it, naming the argument, the value and what is allowed:
accepted, a float axis or a repeated one builds a graph that breaks much later, far from its cause.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any


def int_arg(value: Any, name: str, lo: int | None = None) -> int:
    """`value` as an int (Python or numpy ints; not bools, not floats), at least `lo` when given."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    v = operator.index(value)
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")
    return v


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
