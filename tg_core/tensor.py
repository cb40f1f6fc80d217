"""Tensor: a lazy n-dimensional array whose value is a tensor graph of UOps, computed on `realize()`.

The API follows tinygrad's Tensor (names, signatures, broadcasting, dtype promotion); where tinygrad and
PyTorch differ in what a user sees, PyTorch's semantics win. This module holds the primitives every other
operation is built from: creation, realization, elementwise ops with broadcasting and promotion, the six
movement ops, and reductions.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tg_core.device import Buffer, Device
from tg_core.dtype import (ConstType, DType, dtypes, from_numpy_dtype, least_upper_dtype, least_upper_float,
                           sum_acc_dtype, to_dtype, to_numpy_dtype)
from tg_core.engine import checks
from tg_core.engine.realize import attach, buffer_of, build, capture, prepare, realize
from tg_core.helpers import prod
from tg_core.tensor_args import axes_arg, axis_arg, ints_arg
from tg_core.tensor_creation import CreationMixin, checked_scalar, scalar_dtype
from tg_core.tensor_elementwise import ElementwiseMixin
from tg_core.tensor_movement import MovementMixin
from tg_core.tensor_nn import NNMixin
from tg_core.tensor_reduce import ReduceMixin
from tg_core.uop.alu import cast_const
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

Shape = tuple[int, ...]


def _concrete(dt: DType) -> DType:
    """The dtype a weak value takes when it becomes a tensor on its own."""
    if dt is dtypes.weakint:
        return dtypes.default_int
    if dt is dtypes.weakfloat:
        return dtypes.default_float
    return dt


def _to_numpy(data: Any, dtype: DType | None) -> np.ndarray:
    if isinstance(data, (np.ndarray, np.generic)):
        arr = np.asarray(data)
    else:
        inferred = dtypes.from_py(data) if dtype is None else dtype
        if inferred is dtypes.weakint:
            return _int_array(data)
        arr = np.array(data, dtype=to_numpy_dtype(_concrete(inferred)))
    if dtype is not None and from_numpy_dtype(arr.dtype) is not dtype:
        arr = arr.astype(to_numpy_dtype(dtype))
    return arr


def _int_array(data: Any) -> np.ndarray:
    """Python ints as the default int, or int64 when they do not all fit (as a single scalar widens)."""
    for dt in (dtypes.default_int, dtypes.int64):
        try:
            return np.array(data, dtype=to_numpy_dtype(dt))
        except OverflowError:
            continue
    raise OverflowError(f"integers in the data do not fit in int64 (the widest int dtype a tensor infers); pass "
                        "dtype=dtypes.uint64 for values up to 2**64-1")


class Tensor(CreationMixin, ElementwiseMixin, MovementMixin, ReduceMixin, NNMixin):
    """A lazy tensor. `Tensor(data, device=None, dtype=None, requires_grad=None)` takes a Python scalar, a
    (nested) list, a numpy array, or a UOp of a tensor graph. The ops beyond the primitives below live in
    the mixins: tensor_creation, tensor_elementwise, tensor_movement, tensor_reduce and tensor_nn."""
    __slots__ = ("uop", "_device", "_requires_grad", "grad", "__weakref__")
    training: bool = False
    # numpy then leaves `ndarray + tensor` and `np.float32(2) * tensor` to Tensor's reflected operators
    # instead of treating the tensor as a sequence of elements
    __array_ufunc__ = None

    def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
                 requires_grad: bool | None = None):
        dt = to_dtype(dtype) if dtype is not None else None
        if dt is not None and dtypes.is_weak(dt):
            raise TypeError(f"a tensor cannot have the weak dtype {dt!r}; weak dtypes belong to Python scalars")
        self._device = Device.canonicalize(device) if device is not None else Device.DEFAULT
        self._requires_grad, self.grad = None, None
        if isinstance(data, UOp):
            self.uop = data if dt is None else data.cast(dt)
        elif isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
            self.uop = UOp.const(dt or scalar_dtype(data), checked_scalar(data, dt or scalar_dtype(data)))
        elif isinstance(data, (list, tuple, np.ndarray, np.generic)):
            arr = np.require(_to_numpy(data, dt), requirements="C")  # ascontiguousarray would make 0-d 1-d
            node = UOp.new_buffer(self._device, max(arr.size, 1), from_numpy_dtype(arr.dtype))
            if arr.size:
                attach(node, Buffer.from_numpy(arr.reshape(-1), self._device))
            self.uop = node.reshape(arr.shape) if arr.size else node.shrink(((0, 0),)).reshape(arr.shape)
        else:
            raise TypeError(f"cannot make a Tensor from {type(data).__name__}; expected a scalar, list, numpy array "
                            "or UOp")
        self.requires_grad = requires_grad  # checked by the autograd section: only floats take gradients
        _register_new(self)  # autograd section: no_grad detaching, the registry of live tensors

    # ---- properties ----------------------------------------------------------------------------------------

    @property
    def shape(self) -> Shape:
        return self.uop.shape

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def device(self) -> str:
        return self._device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return prod(self.shape)

    def __repr__(self) -> str:
        return f"<Tensor {self.shape} {self.dtype!r} on {self.device}>"

    def size(self, dim: int | None = None) -> Shape | int:
        return self.shape if dim is None else self.shape[self._axis(dim, "dim")]

    def __bool__(self) -> bool:
        # PyTorch's rule: only a one-element tensor has a truth value (this realizes it)
        if self.numel() != 1:
            raise RuntimeError(f"the truth value of a tensor of shape {self.shape} is ambiguous; use .any() or .all()")
        return bool(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self) -> Any:
        # without it Python iterates through __getitem__ until an IndexError, and a 0-d tensor gives []
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    # ---- realization ------------------------------------------------------------------------------------

    def realize(self) -> Tensor:
        """Compute this tensor's value now; afterwards it reads from its own buffer."""
        Tensor.realize_all(self)
        return self

    @staticmethod
    def realize_all(*tensors: Tensor) -> None:
        tensors = _distinct_values(tensors)  # autograd section: equal graphs must not end up sharing storage
        # a view of storage is never replaced by a copy: it must keep showing the storage's contents
        todo = [t for t in tensors if not t._is_realized() and _storage(t.uop) is None]
        if not todo:
            return
        for t in todo:
            if dtypes.is_weak(t.dtype):
                raise TypeError(f"cannot realize a tensor of the weak dtype {t.dtype!r} (shape {t.shape}); "
                                f"cast it to a concrete dtype")
        before = [(t, t.uop) for t in todo]
        results = realize([t.uop for t in todo], devices=[t.device for t in todo])
        for t in todo:
            buf, shape = results[t.uop], t.shape
            if shape != (buf.arg,):  # a flat buffer is its own 1-d view
                t.uop = buf.reshape(shape) if t.numel() else t.uop
            else:
                t.uop = buf
        _note_origins(before)  # autograd section: gradients keep flowing through what was realized
        return None

    def _is_realized(self) -> bool:
        u = self.uop
        return u.op is Ops.BUFFER or u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER or self.numel() == 0

    def numpy(self) -> np.ndarray:
        """The value as a new numpy array."""
        if capture.active is not None:
            from tg_core.engine.jit import JitError
            raise JitError(f"reading a {self.shape} tensor on the host (.numpy()/.item()/.tolist()) while "
                           f"TinyJit({capture.active}) captures: a replay would not read it again; return the tensor")
        if dtypes.is_weak(self.dtype):
            raise TypeError(f"cannot realize the weak dtype {self.dtype!r}")
        if self.numel() == 0:
            checks.report()
            return np.zeros(self.shape, dtype=to_numpy_dtype(self.dtype))
        self.realize()
        u = self.uop
        if self._is_realized():
            base = u if u.op is Ops.BUFFER else u.src[0]
        else:
            # a strided view of storage: its elements are gathered into a temporary buffer
            base = realize([u], devices=[self.device])[u]
        checks.report()  # a device-side check that failed in what ran so far is an error here, not a value
        return buffer_of(base).numpy().reshape(self.shape).copy()

    @staticmethod
    def synchronize(device: str | None = None) -> None:
        """Wait for the work queued on `device` (the default device when None), then raise the error of any
        device-side check (an index out of range) that failed in the kernels run so far."""
        Device[Device.canonicalize(device) if device is not None else Device.DEFAULT].synchronize()
        checks.report()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> ConstType:
        if self.numel() != 1:
            raise ValueError(f"item() needs a tensor of one element, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    # ---- elementwise --------------------------------------------------------------------------------------

    def _operand(self, x: Tensor | ConstType) -> Tensor:
        if isinstance(x, Tensor):
            return x
        if isinstance(x, np.generic) and not isinstance(x, np.ndarray):
            x = x.item()
        if isinstance(x, (bool, int, float)):
            return Tensor(UOp.const(dtypes.from_py(x), x), device=self.device)
        if isinstance(x, (list, tuple, np.ndarray)):
            return Tensor(x, device=self.device)
        raise TypeError(f"cannot combine a Tensor with {type(x).__name__}")

    def _broadcasted(self, x: Tensor | ConstType, reverse: bool = False) -> tuple[Tensor, Tensor]:
        tx = type(x)
        if (tx is int or tx is float or tx is bool) and not Tensor.no_grad:
            # the common `t + 1`: the constant is made in the result dtype and broadcast as one node chain,
            # the same nodes the general path below builds through three intermediate tensors
            dt = self.dtype
            if tx is float and not dtypes.is_float(dt):  # least_upper_dtype's rules for a weak scalar, inlined
                dt = dtypes.default_float
            elif tx is bool or dtypes.is_weak(dt):
                dt = _concrete(least_upper_dtype(dt, dtypes.from_py(x)))
            elif dt is dtypes.bool:
                dt = dtypes.default_int
            a, c, shape = self._cast_to(dt), UOp.const(dt, checked_scalar(x, dt)), self.shape
            if shape:  # what c.reshape(ones).expand(shape) gives, without re-checking shapes known to be valid
                ones = (1,) * len(shape)
                c = UOp(Ops.RESHAPE, dt, (c,), ones)
                c = c if shape == ones else UOp(Ops.EXPAND, dt, (c,), shape)
            b = Tensor(c, device=self.device)
            return (b, a) if reverse else (a, b)
        a, b = self, self._operand(x)
        if reverse:
            a, b = b, a
        if a.device != b.device:
            raise ValueError(f"tensors on different devices ({a.device} and {b.device}, shapes {a.shape} and "
                             f"{b.shape}); move one with .to()")
        dt = least_upper_dtype(a.dtype, b.dtype)
        if dtypes.is_weak(dt):
            dt = _concrete(dt)
        shape = _broadcast_shape(a.shape, b.shape)
        return a._cast_to(dt)._broadcast_to(shape), b._cast_to(dt)._broadcast_to(shape)

    def _cast_to(self, dt: DType) -> Tensor:
        if self.dtype is dt:
            return self
        if self.uop.op is Ops.CONST:  # the CAST's value (alu.py), made as a constant of the new dtype
            # a Python int adopting a strong int dtype must fit it (numpy 2 and PyTorch raise too)
            arg = checked_scalar(self.uop.arg, dt) if self.dtype is dtypes.weakint else self.uop.arg
            return Tensor(UOp.const(dt, cast_const(arg, self.dtype, dt)), device=self.device)
        return self._new(self.uop.cast(dt))

    def _broadcast_to(self, shape: Shape) -> Tensor:
        if self.shape == shape:
            return self
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        u = self.uop.reshape(padded) if padded != self.shape else self.uop
        return self._new(u.expand(shape))

    def _new(self, u: UOp) -> Tensor:
        return Tensor(u, device=self.device)

    def _binop(self, op: Ops, x: Tensor | ConstType, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        return a._new(a.uop.alu(op, b.uop))

    def add(self, x, reverse=False): return self._binop(Ops.ADD, x, reverse)
    def mul(self, x, reverse=False): return self._binop(Ops.MUL, x, reverse)
    def sub(self, x, reverse=False):
        a, b = self._broadcasted(x, reverse)
        if a.dtype is dtypes.bool:
            raise TypeError("subtracting bool tensors is not supported (as in PyTorch); use logical_xor or ^")
        return a + (-b)

    def div(self, x, reverse=False, rounding_mode: str | None = None) -> Tensor:
        """True division: integers are divided as floats (PyTorch). rounding_mode "trunc" or "floor" rounds
        the quotient and keeps an int dtype."""
        if rounding_mode == "floor":
            return self.floordiv(x, reverse)
        a, b = self._broadcasted(x, reverse)
        if rounding_mode == "trunc":
            if dtypes.is_float(a.dtype):
                return (a / b).trunc()
            a, b = (a._cast_to(dtypes.default_int), b._cast_to(dtypes.default_int)) if a.dtype is dtypes.bool else (a, b)
            return a._new(a.uop.alu(Ops.IDIV, b.uop))
        if rounding_mode is not None:
            raise ValueError(f"rounding_mode is None, 'trunc' or 'floor', got {rounding_mode!r}")
        ft = least_upper_float(a.dtype)
        return a._cast_to(ft)._new(a._cast_to(ft).uop.alu(Ops.FDIV, b._cast_to(ft).uop))

    def maximum(self, x) -> Tensor: return self._binop(Ops.MAX, x)
    def minimum(self, x) -> Tensor:
        a, b = self._broadcasted(x)
        return a._reversed_order().maximum(b._reversed_order())._reversed_order()

    def __add__(self, x): return self.add(x)
    def __radd__(self, x): return self.add(x, True)
    def __sub__(self, x): return self.sub(x)
    def __rsub__(self, x): return self.sub(x, True)
    def __mul__(self, x): return self.mul(x)
    def __rmul__(self, x): return self.mul(x, True)
    def __truediv__(self, x): return self.div(x)
    def __rtruediv__(self, x): return self.div(x, True)

    def __neg__(self) -> Tensor:
        if self.dtype is dtypes.bool:
            return self.logical_not()
        # an unsigned int negates modulo 2**bits: times its max, which is -1 there
        return self * (dtypes.max(self.dtype) if dtypes.is_unsigned(self.dtype) else -1)

    def __lt__(self, x): return self._cmp(Ops.CMPLT, x)
    def __gt__(self, x): return self._cmp(Ops.CMPLT, x, True)
    def __le__(self, x): return (self > x).logical_not() if not dtypes.is_float(self.dtype) else (self < x) | self.eq(x)
    def __ge__(self, x): return (self < x).logical_not() if not dtypes.is_float(self.dtype) else (self > x) | self.eq(x)
    def ne(self, x): return self._cmp(Ops.CMPNE, x)
    def eq(self, x): return self._cmp(Ops.CMPEQ, x)
    __ne__ = ne  # type: ignore[assignment]
    __eq__ = eq  # type: ignore[assignment]
    __hash__ = object.__hash__

    def _cmp(self, op: Ops, x, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        return a._new(UOp(op, dtypes.bool, (a.uop, b.uop)))

    def logical_not(self) -> Tensor:
        return self._cast_to(dtypes.bool).ne(True)

    def where(self, x, y) -> Tensor:
        cond = self._cast_to(dtypes.bool)
        xt, yt = cond._operand(x), cond._operand(y)
        xt, yt = xt._broadcasted(yt)
        if cond.device != xt.device:
            raise ValueError(f"where: the condition is on {cond.device} and the values on {xt.device}; move one with .to()")
        shape = _broadcast_shape(cond.shape, xt.shape)
        c, xt, yt = cond._broadcast_to(shape), xt._broadcast_to(shape), yt._broadcast_to(shape)
        return c._new(UOp(Ops.WHERE, xt.dtype, (c.uop, xt.uop, yt.uop)))

    def cast(self, dtype: DType | str) -> Tensor:
        dt = to_dtype(dtype)
        if dtypes.is_weak(dt):
            raise TypeError(f"cannot cast a tensor to the weak dtype {dt!r}")
        return self._cast_to(dt)

    def _unary(self, op: Ops) -> Tensor:
        x = self._cast_to(least_upper_float(self.dtype))
        return x._new(x.uop.alu(op))

    def exp2(self) -> Tensor: return self._unary(Ops.EXP2)
    def log2(self) -> Tensor: return self._unary(Ops.LOG2)
    def sqrt(self) -> Tensor: return self._unary(Ops.SQRT)
    def sin(self) -> Tensor: return self._unary(Ops.SIN)
    def reciprocal(self) -> Tensor: return self._unary(Ops.RECIPROCAL)
    def exp(self) -> Tensor: return (self._cast_to(least_upper_float(self.dtype)) * (1 / math.log(2))).exp2()
    def log(self) -> Tensor: return self.log2() * math.log(2)
    def relu(self) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return self if self.dtype is dtypes.bool else (self > 0).where(self, 0)
        # NaN stays NaN and -0.0 becomes 0 (numpy's maximum(x, 0), PyTorch); selects, not an OR of the two
        # compares, so that the X86 renderer packs the epilogue into vectors
        return self.isnan().where(self, (self > 0).where(self, 0))

    # ---- movement -----------------------------------------------------------------------------------------

    def reshape(self, shape: int | Sequence[int], *args: int) -> Tensor:
        new = _shape_arg(shape, args)
        if new.count(-1) > 1:
            raise ValueError(f"reshape {new}: only one axis can be -1")
        if -1 in new:
            known = prod(s for s in new if s != -1)
            if known == 0 or self.numel() % known:
                raise ValueError(f"cannot reshape {self.shape} to {new}")
            new = tuple(self.numel() // known if s == -1 else s for s in new)
        return self._new(self.uop.reshape(new))

    def permute(self, order: int | Sequence[int], *args: int) -> Tensor:
        return self._new(self.uop.permute(tuple(self._axis(a) for a in _shape_arg(order, args))))

    def expand(self, shape: int | Sequence[int], *args: int) -> Tensor:
        new = ints_arg(_shape_arg(shape, args), "expand: the shape", lo=-1)
        if len(new) < self.ndim:
            raise ValueError(f"cannot expand {self.shape} to {new}: the new shape has fewer axes")
        padded = (1,) * (len(new) - self.ndim) + self.shape
        new = tuple(p if s == -1 else s for s, p in zip(new, padded))
        return self._broadcast_to(new)

    def shrink(self, bounds: Sequence[tuple[int, int] | None]) -> Tensor:
        """Keep [start, end) of each axis (None keeps the whole axis)."""
        if not isinstance(bounds, (tuple, list)) or len(bounds) != self.ndim:
            raise ValueError(f"shrink needs one (start, end) or None per axis of {self.shape}, got {bounds!r}")
        full = tuple((0, n) if b is None else ints_arg(b, "shrink: a (start, end) bound") for b, n in
                     zip(bounds, self.shape))
        return self._new(self.uop.shrink(full))

    def flip(self, axis: int | Sequence[int], *args: int) -> Tensor:
        axes = axes_arg(_shape_arg(axis, args), self.ndim, self.shape)
        return self._new(self.uop.flip(tuple(i in axes for i in range(self.ndim))))

    def _axis(self, a: int, name: str = "axis") -> int:
        return axis_arg(a, self.ndim, self.shape, name)

    def _axes(self, axis: int | Sequence[int] | None, name: str = "axis") -> tuple[int, ...]:
        """None (all axes), one axis or distinct axes, normalized; anything else is an error naming it."""
        return axes_arg(axis, self.ndim, self.shape, name)

    # ---- reductions ---------------------------------------------------------------------------------------

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool, dtype: DType | None = None) -> Tensor:
        axes = self._axes(axis)
        x = self if dtype is None else self._cast_to(dtype)
        out_shape = tuple(1 if i in axes else n for i, n in enumerate(self.shape))
        # an empty axis too: the scheduler gives its identity, and the graph keeps x for gradients
        red = x._new(x.uop.reduce_axis(op, axes)) if axes else x
        return red if keepdim else red.reshape(tuple(n for i, n in enumerate(out_shape) if i not in axes))

    def sum(self, axis=None, keepdim: bool = False, dtype: DType | None = None) -> Tensor:
        """Ints and bools sum in int32 (or wider); halves sum in float32 and come back as halves."""
        out = self._reduce(Ops.ADD, axis, keepdim, dtype or sum_acc_dtype(self.dtype))
        return out.cast(self.dtype) if dtype is None and self.dtype in (dtypes.float16, dtypes.bfloat16) else out

    def max(self, axis=None, keepdim: bool = False) -> Tensor:
        self._check_nonempty("max", axis)
        return self._reduce(Ops.MAX, axis, keepdim)


def _shape_arg(first: int | Sequence[int], rest: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(first) if isinstance(first, Sequence) and not rest else (first, *rest)


def _broadcast_shape(a: Shape, b: Shape) -> Shape:
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"shapes {a} and {b} cannot be broadcast together (axis sizes {x} and {y})")
        out.append(y if x == 1 else x)
    return tuple(out)


__all__ = ["Tensor"]


# =========================================================================================================
# Autograd and assignment
#
# This section belongs to the autograd work; everything above it belongs to the Tensor core. Its methods are
# written on `_AutogradMixin` and installed on Tensor at the bottom. It wraps Tensor.__init__ to keep a weak
# registry of the live tensors: `backward()` finds the tensors that require grad in a graph through it (as
# tinygrad does), and a write into a buffer finds the unrealized values that still read the old contents. It
# wraps Tensor.realize_all to remember the graph each realized buffer was computed from.
#
# Storage model. A tensor whose node is a chain of view ops (RESHAPE, PERMUTE, EXPAND, SHRINK, FLIP, DETACH)
# over a BUFFER is a view of that storage: it always shows the storage's current contents. Any other tensor
# is a value: it means what its graph computed when it was built. `assign` into storage runs at once, in one
# schedule with every live unrealized value that reads the storage (those are computed first, from the old
# contents), so laziness never changes what a program means. Assigning to a value gives it new storage.
#
# Realizing never changes gradients either: differentiation follows a realized buffer into the graph it was
# computed from (while the backward graph reads the buffer wherever it needs the value), unless storage that
# graph read has been assigned since, which is an error (PyTorch's "modified by an inplace operation").
# =========================================================================================================
import contextlib as _contextlib  # noqa: E402
import weakref as _weakref  # noqa: E402

from tg_core.gradient import compute_gradient as _compute_gradient  # noqa: E402

_live: dict[int, _weakref.ref] = {}
# BUFFER -> (the graph its value was computed from, {storage BUFFER that graph read: its version then})
_origins: _weakref.WeakKeyDictionary[UOp, tuple[UOp, dict[UOp, int]]] = _weakref.WeakKeyDictionary()
# BUFFER -> how many times it has been written since it was made
_versions: _weakref.WeakKeyDictionary[UOp, int] = _weakref.WeakKeyDictionary()
_VIEW_OPS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP, Ops.DETACH})


def _track(t: Tensor) -> None:
    key = id(t)

    def forget(ref: _weakref.ref, key: int = key) -> None:
        if _live.get(key) is ref:
            del _live[key]
    _live[key] = _weakref.ref(t, forget)


def _live_tensors() -> list[Tensor]:
    return [t for r in list(_live.values()) if (t := r()) is not None]


def _storage(u: UOp) -> UOp | None:
    """The BUFFER a node is a view of, or None for a value."""
    while u.op in _VIEW_OPS:
        u = u.src[0]
    return u if u.op is Ops.BUFFER else None


def _note_origin(buf: UOp, graph: UOp) -> None:
    # a write into buf itself (assigning to a value, clone) computed its value
    while graph.op is Ops.ASSIGN and _storage(graph.src[0]) is buf:
        graph = graph.src[1]
    if graph.op is Ops.DETACH:  # nothing flows back through it: keeping it would only keep its inputs alive
        _origins.pop(buf, None)
        return
    reads = {n: _versions.get(n, 0) for n in _buffers_in(graph)}
    if buf not in reads:  # a graph that reads buf's old contents cannot stand for its new ones
        _origins[buf] = (graph, reads)


def _buffers_in(root: UOp) -> list[UOp]:
    """The BUFFER nodes in a graph (one pass that stops at buffers: this runs on every realize)."""
    seen: set[UOp] = set()
    out: list[UOp] = []
    stack = [root]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op is Ops.BUFFER:
            out.append(n)
        else:
            stack.extend(n.src)
    return out


def _realized_base(n: UOp) -> UOp | None:
    base = n if n.op is Ops.BUFFER else n.src[0] if n.op is Ops.RESHAPE and n.src[0].op is Ops.BUFFER else None
    return base if base is not None and base in _origins else None


def _through_realized(roots: list[UOp]) -> tuple[dict[UOp, UOp], list[UOp]]:
    """For every realized BUFFER in the graphs of `roots` (and, transitively, in the graphs they were realized
    from): the graph that computed it, flattened like it. Also the graphs computed from storage that has been
    assigned since (stale: differentiating through them would use the new contents)."""
    through: dict[UOp, UOp] = {}
    stale: list[UOp] = []
    seen: set[UOp] = set()
    stack = list(roots)
    while stack:
        for n in stack.pop().toposort():
            if n in seen:
                continue
            seen.add(n)
            if n.op is not Ops.BUFFER or n not in _origins:
                continue
            # only the flat BUFFER links to its graph: its views reach it through their own gradient rules
            graph, reads = _origins[n]
            through[n] = graph.reshape(n.shape)
            if any(_versions.get(b, 0) != v for b, v in reads.items()):
                stale.append(graph)
            stack.append(graph)
    return through, stale


def _origin(u: UOp) -> UOp:
    """The graph a realized tensor node was first computed from (u itself if it was not realized)."""
    while (base := _realized_base(u)) is not None and _origins[base][0].shape == u.shape:
        u = _origins[base][0]
    return u


def _fresh_write(value: UOp, device: str) -> UOp:
    """`value` written into new storage of its own."""
    buf = UOp.new_buffer(device, max(prod(value.shape), 1), value.dtype)
    # its memory now (allocated on first use): a schedule that writes it on the way to something else must
    # not take it for an intermediate whose memory can be shared, since this tensor keeps it
    buffer_of(buf)
    return UOp(Ops.ASSIGN, value.dtype, (buf.reshape(value.shape), value))


def _write(pairs: list[tuple[Tensor, UOp]], others: Sequence[Tensor] = ()) -> None:
    """Write each value into the storage its tensor views, all in one schedule (simultaneously: every value
    is what it was before any of the writes), after computing the live values that read those buffers.
    `others` are realized in the same schedule.

    Computing those readers now is only the cheap way to keep their values. A reader the device cannot
    build (a dtype it cannot compile) stays lazy instead, reading a copy of the old contents made in the
    schedule, so its error is raised when it is realized itself and the write goes ahead."""
    bases = {_storage(t.uop) for t, _ in pairs}
    skip = {id(t) for t, _ in pairs}
    lazy = [r for r in _live_tensors() if id(r) not in skip and r.numel() and _storage(r.uop) is None
            and not bases.isdisjoint(r.uop.toposort())]
    others = [o for o in others if not o._is_realized() and _storage(o.uop) is None and all(o is not r for r in lazy)]
    for t, v in pairs:
        if v.shape != t.shape or v.dtype != t.dtype:
            raise ValueError(f"cannot write a {v.dtype!r} value of shape {v.shape} into a {t.dtype!r} tensor "
                             f"of shape {t.shape}")
    writes = [UOp(Ops.ASSIGN, t.dtype, (t.uop, v)) for t, v in pairs]
    if not lazy and not others and not writes:
        return
    write_devs = [t.device for t, _ in pairs]
    readers, stale, snapshots = lazy + others, [], {}
    targets = _reader_targets(readers)
    try:
        run = prepare(targets + writes, devices=[r.device for r in readers] + write_devs)
    except Exception:  # nothing ran (prepare builds every kernel first)
        stale = [r for r in lazy if not _builds(r)]
        if not stale:
            raise  # the writes (or `others`) cannot be built: that is the error
        snapshots = {b: UOp(Ops.COPY, b.dtype, (b, UOp(Ops.DEVICE, dtypes.void, (), b.src[1].arg))) for b in bases
                     if any(b in r.uop.toposort() for r in stale)}
        readers = [r for r in readers if all(r is not s for s in stale)]
        targets = _reader_targets(readers) + list(snapshots.values())
        run = prepare(targets + writes, devices=[r.device for r in readers] + [b.src[1].arg for b in snapshots]
                      + write_devs)
    out = run()
    for r, u in zip(readers, targets):
        _note_origin(out[u], r.uop)
        r.uop = out[u].reshape(r.shape)
    copies = {b: out[c] for b, c in snapshots.items()}
    for b, c in copies.items():
        _note_origin(c, b)  # gradients into the old contents stop as they do for the readers realized above
    for r in stale:
        r.uop = r.uop.substitute(copies)
    for b in bases:
        # what was computed from the old contents can no longer be differentiated through them
        _versions[b] = _versions.get(b, 0) + 1
        _origins.pop(b, None)


def _reader_targets(readers: list[Tensor]) -> list[UOp]:
    targets: list[UOp] = []
    seen: set[UOp] = set()
    for r in readers:
        # hash-consing gives equal graphs one node; realized once, they would share one buffer
        targets.append(r.uop if r.uop not in seen else _fresh_write(r.uop, r.device))
        seen.add(r.uop)
    return targets


def _builds(t: Tensor) -> bool:
    """Whether the device can build the kernels that compute `t` (nothing is run)."""
    try:
        build([t.uop], [t.device])
    except Exception:  # whatever it is, realizing `t` itself raises it again
        return False
    return True


class _FlagScope(_contextlib.ContextDecorator):
    """A scope (`with` or decorator) in which the class-level Tensor flag `attr` is `mode`:
    `Tensor.train()` sets `training`, `Tensor.test()` sets `no_grad`."""

    def __init__(self, attr: str, mode: bool = True):
        self.attr, self.mode = attr, mode
        self.saved: list[bool] = []  # a stack: one decorated recursive function enters it repeatedly

    def __enter__(self) -> None:
        self.saved.append(getattr(Tensor, self.attr))
        setattr(Tensor, self.attr, self.mode)

    def __exit__(self, *exc: object) -> None:
        setattr(Tensor, self.attr, self.saved.pop())


class _AutogradMixin:
    __slots__ = ()

    # ---- autograd ------------------------------------------------------------------------------------------

    def gradient(self: Tensor, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """The gradients of this tensor with respect to `targets`, as lazy tensors (zeros for a target this
        tensor does not depend on). `gradient` is this tensor's own gradient; only a scalar may omit it."""
        if not dtypes.is_float(self.dtype):
            raise RuntimeError(f"only float tensors have gradients; this one is {self.dtype!r}")
        if gradient is None:
            if self.shape != ():
                raise RuntimeError(f"a gradient can be implied only for a scalar: this tensor has shape {self.shape}, "
                                   "so pass gradient= (a tensor of that shape)")
            root_grad = UOp.const(self.dtype, 1.0)
        else:
            g = gradient if isinstance(gradient, Tensor) else self._operand(gradient)
            if g.shape != self.shape:
                raise RuntimeError(f"the gradient has shape {g.shape} but the tensor has shape {self.shape}")
            root_grad = g._cast_to(self.dtype).uop
        wrt = [_origin(t.uop) for t in targets]
        through, stale = _through_realized([self.uop])
        for graph in stale:
            if any(u in graph.toposort() for u in wrt):
                raise RuntimeError(f"cannot differentiate through a realized {graph.shape} tensor: storage it was "
                                   "computed from has been assigned since")
        grads = _compute_gradient(self.uop, root_grad, set(wrt), through)
        return [Tensor(grads[u], device=t.device) if u in grads else t.zeros_like() for t, u in zip(targets, wrt)]

    def backward(self: Tensor, gradient: Tensor | None = None) -> Tensor:
        """Add this tensor's gradient with respect to every live tensor in its graph that requires grad to
        that tensor's `.grad` (lazily; an optimizer step realizes them)."""
        through, _ = _through_realized([self.uop])
        # the part of the graph gradients flow through: not below DETACH or values that are not floats
        differentiable = lambda n: n.op is not Ops.DETACH and dtypes.is_float(n.dtype)  # noqa: E731
        in_graph: set[UOp] = set()
        stack = [self.uop]
        while stack:
            for n in stack.pop().toposort(gate=differentiable):
                if n not in in_graph:
                    in_graph.add(n)
                    if n in through:
                        stack.append(through[n])
        leaves = [t for t in _live_tensors() if t.requires_grad and (t.uop in in_graph or _origin(t.uop) in in_graph)]
        if not leaves:
            raise RuntimeError(f"backward: no tensor in the graph of this {self.shape} tensor requires grad")
        for t, g in zip(leaves, self.gradient(*leaves, gradient=gradient)):
            t.grad = g if t.grad is None else t.grad + g
        return self

    @property
    def requires_grad(self: Tensor) -> bool | None:
        """True: gradients flow to this tensor; None: not decided (an optimizer switches it on); False: never."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self: Tensor, value: bool | None) -> None:
        if value and not dtypes.is_float(self.dtype):
            # as PyTorch: gradients are defined only for floats, and a silent "nothing requires grad" later hides it
            raise TypeError(f"only floating point tensors can require gradients; this {self.shape} tensor is "
                            f"{self.dtype!r} (cast it to a float dtype first)")
        self._requires_grad = value

    def requires_grad_(self: Tensor, requires_grad: bool = True) -> Tensor:
        self.requires_grad = requires_grad
        return self

    def detach(self: Tensor) -> Tensor:
        """The same value with no gradient path; a view of a realized tensor's storage shares it."""
        return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)), device=self.device, requires_grad=False)

    # ---- storage ---------------------------------------------------------------------------------------------

    def assign(self: Tensor, x: Tensor | ConstType) -> Tensor:
        """Give this tensor the value `x` (broadcast and cast to this tensor's shape and dtype). A view of
        storage has `x` written into it, seen by every view of that storage; any other tensor gets new storage.
        A tensor on another device is copied to this one."""
        v = self._operand(x).to(self.device)._cast_to(self.dtype)._broadcast_to(self.shape)
        if v.uop is self.uop:
            return self
        base = _storage(self.uop)
        if base is None or self.numel() == 0:
            self.uop = _fresh_write(v.uop, self.device) if self.numel() else v.uop
            return self
        if any(n.op is Ops.EXPAND for n in self.uop.toposort(gate=lambda n: n.op is not Ops.BUFFER)):
            raise RuntimeError(f"cannot assign to an expanded view of shape {self.shape}: several of its elements "
                               "are one element of the storage")
        _write([(self, v.uop)])
        return self

    def clone(self: Tensor) -> Tensor:
        """A copy in storage of its own, holding this tensor's value as of now (even if this tensor is
        assigned before the copy is realized)."""
        if self.numel() == 0:
            return Tensor(self.uop, device=self.device)
        return Tensor(_fresh_write(self.uop, self.device), device=self.device)

    def contiguous(self: Tensor) -> Tensor:
        """This value laid out densely in a buffer of its own shape. It only asks for a layout: a tensor that
        already is one dense buffer is returned as is (so it may share storage), anything else is realized
        into a buffer when it is realized."""
        if self._is_realized():
            return self
        return Tensor(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)), device=self.device)


def _distinct_values(tensors: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """Each tensor once; two tensors whose (hash-consed, so identical) graphs are equal get separate writes,
    or realized as one node they would share storage."""
    if len(tensors) == 1:
        return tensors
    tensors = tuple({id(t): t for t in tensors}.values())
    seen: dict[UOp, Tensor] = {}
    for t in tensors:
        if t.numel() and not t._is_realized() and _storage(t.uop) is None:
            if seen.setdefault(t.uop, t) is not t:
                t.uop = _fresh_write(t.uop, t.device)
    return tensors


def _note_origins(before: list[tuple[Tensor, UOp]]) -> None:
    for t, u in before:
        if t.uop is not u and (buf := _storage(t.uop)) is not None:
            _note_origin(buf, u)


def _register_new(t: Tensor) -> None:
    if Tensor.no_grad and dtypes.is_float(t.dtype) and not dtypes.is_weak(t.dtype) \
            and t.uop.op not in (Ops.DETACH, Ops.CONST) and not t._is_realized():
        # made under no_grad: no gradient flows back through this tensor into what it was computed from
        t.uop = UOp(Ops.DETACH, t.dtype, (t.uop,))
    _track(t)


def _install() -> None:
    clash = sorted(n for n in vars(_AutogradMixin) if not n.startswith("__") and hasattr(Tensor, n))
    if clash:
        raise TypeError(f"the autograd section of tensor.py and the Tensor class both define {clash}; keep one")
    for name, fn in vars(_AutogradMixin).items():
        if not name.startswith("__"):
            setattr(Tensor, name, fn)
    Tensor.no_grad = False
    Tensor.train = staticmethod(lambda mode=True: _FlagScope("training", mode))
    Tensor.test = staticmethod(lambda mode=True: _FlagScope("no_grad", mode))


_install()
