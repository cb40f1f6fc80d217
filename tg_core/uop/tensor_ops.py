"""Tensor-level UOps: buffers, movement ops, reductions over axes, and the shape of each node.

A tensor graph is made of the IR's ALU ops plus the ops below; every node of it has a `shape` (a tuple of
ints; () for scalars). Kernel-level nodes (INDEX, LOAD, RANGE, ...) have no shape (None).

  BUFFER(UNIQUE, DEVICE)  arg: element count       a realized, flat buffer of `dtype`
  RESHAPE / EXPAND        arg: the new shape
  PERMUTE                 arg: the axis order
  PAD                     arg: ((before, after), ...) per axis, filled with zero
  SHRINK                  arg: ((start, end), ...) per axis
  FLIP                    arg: the axes flipped (tuple of bools, one per axis)
  REDUCE_AXIS             arg: (op, axes); reduced axes keep size 1
  ARANGE                  arg: n                  0, 1, ..., n-1 (an int dtype), shape (n,)
  CONTIGUOUS, DETACH      same shape as their source
  COPY(x, DEVICE)         x on another device
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from tg_core.dtype import DType, dtypes
from tg_core.helpers import prod
from tg_core.uop.ops import GroupOp, Ops

if TYPE_CHECKING:
    from tg_core.uop.uop import UOp

Shape = tuple[int, ...]
_unique_counter = itertools.count()


def _check_shape(shape: tuple, what: str) -> Shape:
    if not isinstance(shape, tuple):
        raise ValueError(f"{what}: a shape is a tuple of non-negative ints, got {shape!r}")
    if all(type(s) is int and s >= 0 for s in shape):
        return shape
    out = []
    for s in shape:
        if _is_uop(s):  # a symbolic dim (sint.py): non-negative for every value of its variables
            s = _sint(s, what)
            if _smin(s) < 0:
                raise ValueError(f"{what}: the symbolic dim {_show(s)} of {shape!r} can be negative (its smallest "
                                 f"value is {_smin(s)}); a dim is non-negative for every value of its variables")
        elif not isinstance(s, int) or isinstance(s, bool) or s < 0:
            raise ValueError(f"{what}: a shape is a tuple of non-negative ints (or symbolic ints over bound "
                             f"variables), got {shape!r}")
        out.append(s)
    return tuple(out)


# ---- symbolic ints (sint.py) in shapes; imported lazily: sint.py imports UOp, which mixes this module in ----

def _is_uop(x: Any) -> bool:
    return isinstance(x, TensorOps)  # UOp is the one class this mixin is mixed into


def _sint(x: Any, what: str) -> Any:
    """A bound of a movement op: an int, or a symbolic int (checked, canonical; a constant becomes an int)."""
    if _is_uop(x):
        from tg_core.uop.sint import check_sint
        return check_sint(x, what)
    return int(x)


def _canon(x: Any) -> Any:
    """The result of arithmetic on dims in canonical form (ints stay ints)."""
    if type(x) is int:
        return x
    from tg_core.uop.sint import canonical
    return canonical(x)


def _smin(x: Any) -> int:
    return x if type(x) is int else int(x.vmin)


def _smax(x: Any) -> int:
    return x if type(x) is int else int(x.vmax)


def _show(x: Any) -> str:
    return str(x) if type(x) is int else x.render()


def _equal(a: Any, b: Any) -> bool:
    """Whether two dims are equal for every value of their variables."""
    if type(a) is int and type(b) is int:
        return a == b
    d = _canon(a - b)
    return type(d) is int and d == 0


class TensorOps:
    """Mixed into UOp: constructors and the shape of tensor-level nodes."""
    __slots__ = ()
    if TYPE_CHECKING:  # the primitives of UOp this mixin builds on (UOp's slots and methods)
        op: Ops
        dtype: DType
        src: tuple[UOp, ...]
        arg: Any
        _shape: Shape | _NoShape | None

        def toposort(self, gate: Callable[[UOp], bool] | None = None) -> dict[UOp, None]: ...

    def _node(self) -> UOp:
        # TensorOps is only ever mixed into UOp: this is the node itself, typed as what it is
        return cast("UOp", self)

    @staticmethod
    def new_buffer(device: str, size: int, dtype: DType) -> UOp:
        """A fresh buffer node: UNIQUE makes two buffers of equal size and dtype distinct."""
        from tg_core.uop.uop import UOp
        if dtypes.is_weak(dtype):
            raise TypeError(f"a buffer cannot hold the weak dtype {dtype!r}; cast to a concrete dtype first")
        return UOp(Ops.BUFFER, dtype, (UOp(Ops.UNIQUE, dtypes.void, (), next(_unique_counter)),
                                       UOp(Ops.DEVICE, dtypes.void, (), device)), size)

    def fresh_buffer(self) -> UOp:
        """A new BUFFER node of this BUFFER's device, size and dtype (its DEVICE node reused)."""
        from tg_core.uop.uop import UOp
        return UOp(Ops.BUFFER, self.dtype, (UOp(Ops.UNIQUE, dtypes.void, (), next(_unique_counter)), self.src[1]),
                   self.arg)

    @property
    def shape(self) -> Shape | None:
        s = self._shape
        if s is None:
            s = _compute_shape_stack(self)
        return None if isinstance(s, _NoShape) else s

    @property
    def tensor_shape(self) -> Shape:
        """`shape` where the node must be tensor-level (the scheduler's, the Tensor layer's): a kernel-level
        node, which has none, is a TypeError naming its op."""
        s = self.shape
        if s is None:
            raise TypeError(f"{self.op} is a kernel-level node: it has no shape (only tensor-level nodes do)")
        return s

    @property
    def ndim(self) -> int:
        return len(self.tensor_shape)

    @property
    def numel(self) -> int:
        return prod(self.tensor_shape)

    @property
    def device(self) -> str | None:
        """The device of a tensor-level node: its buffers' (or COPY's) device; None for a pure constant."""
        for u in self.toposort(gate=lambda n: n.op not in (Ops.BUFFER, Ops.COPY)):
            if u.op is Ops.BUFFER:
                return u.src[1].arg
            if u.op is Ops.COPY:
                return u.src[1].arg
        return None

    # ---- movement ----------------------------------------------------------------------------------------

    def reshape(self, shape: Shape) -> UOp:
        from tg_core.uop.uop import UOp
        shape = _check_shape(tuple(shape), "reshape")
        if not _equal(prod(shape), self.numel):
            raise ValueError(f"cannot reshape {self.shape} ({self.numel} elements) to {shape} ({prod(shape)} elements)")
        return self._node() if shape == self.shape else UOp(Ops.RESHAPE, self.dtype, (self._node(),), shape)

    def permute(self, order: tuple[int, ...]) -> UOp:
        from tg_core.uop.uop import UOp
        order = tuple(order)
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"permute order {order} is not a permutation of the {self.ndim} axes of {self.shape}")
        return self._node() if order == tuple(range(self.ndim)) else UOp(Ops.PERMUTE, self.dtype, (self._node(),), order)

    def expand(self, shape: Shape) -> UOp:
        from tg_core.uop.uop import UOp
        shape = _check_shape(tuple(shape), "expand")
        if len(shape) != self.ndim or any(s != n and s != 1 for s, n in zip(self.tensor_shape, shape)):
            raise ValueError(f"cannot expand {self.shape} to {shape}: only axes of size 1 can grow, and the rank must match")
        return self._node() if shape == self.shape else UOp(Ops.EXPAND, self.dtype, (self._node(),), shape)

    def pad(self, padding: tuple[tuple[int, int], ...]) -> UOp:
        from tg_core.uop.uop import UOp
        padding = tuple((_sint(b, "pad"), _sint(a, "pad")) for b, a in padding)
        if len(padding) != self.ndim or any(_smin(b) < 0 or _smin(a) < 0 for b, a in padding):
            raise ValueError(f"pad needs one non-negative (before, after) pair per axis of {self.shape}, got {padding}")
        return self._node() if all(p == (0, 0) for p in padding) else UOp(Ops.PAD, self.dtype, (self._node(),), padding)

    def shrink(self, bounds: tuple[tuple[int, int], ...]) -> UOp:
        from tg_core.uop.uop import UOp
        bounds = tuple((_sint(s, "shrink"), _sint(e, "shrink")) for s, e in bounds)
        # symbolic bounds hold for every value of their variables: the kernel is compiled once for all of them
        if len(bounds) != self.ndim or any(_smin(s) < 0 or _smin(_canon(e - s)) < 0 or _smin(_canon(n - e)) < 0
                                           for (s, e), n in zip(bounds, self.tensor_shape)):
            raise ValueError(f"shrink needs one (start, end) per axis with 0 <= start <= end <= size (symbolic bounds "
                             f"for every value of their variables), got {bounds} for {self.shape}")
        if all(type(s) is int and s == 0 and _equal(e, n) for (s, e), n in zip(bounds, self.tensor_shape)):
            return self._node()
        return UOp(Ops.SHRINK, self.dtype, (self._node(),), bounds)

    def flip(self, axes: tuple[bool, ...]) -> UOp:
        from tg_core.uop.uop import UOp
        axes = tuple(bool(a) for a in axes)
        if len(axes) != self.ndim:
            raise ValueError(f"flip needs one flag per axis of {self.shape}, got {axes}")
        return self._node() if not any(axes) else UOp(Ops.FLIP, self.dtype, (self._node(),), axes)

    def reduce_axis(self, op: Ops, axes: tuple[int, ...]) -> UOp:
        from tg_core.uop.uop import UOp
        axes = tuple(sorted(set(axes)))
        if any(not 0 <= a < self.ndim for a in axes):
            raise ValueError(f"reduce axes {axes} out of range for shape {self.shape}")
        if op not in (Ops.ADD, Ops.MAX, Ops.MUL):
            raise ValueError(f"a reduction is ADD, MAX or MUL, not {op}")
        return UOp(Ops.REDUCE_AXIS, self.dtype, (self._node(),), (op, axes))


class _NoShape:
    def __repr__(self) -> str:
        return "<no shape>"


_NO_SHAPE = _NoShape()


def _shape_of(u) -> Shape | _NoShape:
    op, arg = u.op, u.arg
    if op is Ops.BUFFER or op is Ops.ARANGE:
        return (arg,)
    if op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND):
        return ()
    if op in (Ops.RESHAPE, Ops.EXPAND):
        return arg
    if op is Ops.PERMUTE:
        s = u.src[0]._shape
        return tuple(s[i] for i in arg)
    if op is Ops.PAD:
        return tuple(_canon(n + b + a) for n, (b, a) in zip(u.src[0]._shape, arg))
    if op is Ops.SHRINK:
        return tuple(_canon(e - s) for s, e in arg)
    if op is Ops.MULTI:  # the full shape its shards' boxes tile (schedule/multi.py)
        return tuple(max(box[i][1] for _, box in arg) for i in range(len(arg[0][1])))
    if op is Ops.REDUCE_AXIS:
        axes = arg[1]
        return tuple(1 if i in axes else n for i, n in enumerate(u.src[0]._shape))
    if op in (Ops.FLIP, Ops.CONTIGUOUS, Ops.DETACH, Ops.COPY, Ops.CAST, Ops.BITCAST, Ops.ASSIGN, Ops.AFTER):
        return u.src[0]._shape
    if op in GroupOp.ALU:
        shapes = [s._shape for s in u.src]
        return shapes[0] if shapes else _NO_SHAPE
    return _NO_SHAPE


def _compute_shape_stack(root):
    # iterative: tensor graphs of long training loops are deep
    stack = [(root, False)]
    while stack:
        u, ready = stack.pop()
        if u._shape is not None:
            continue
        if ready:
            u._shape = _shape_of(u)
            continue
        stack.append((u, True))
        stack.extend((s, False) for s in u.src if s._shape is None)
    return root._shape
