"""Tensor: a lazy n-dimensional array whose value is a tensor graph of UOps, computed on `realize()`.

The API follows tinygrad's Tensor (names, signatures, broadcasting, dtype promotion); where tinygrad and
PyTorch differ in what a user sees, PyTorch's semantics win. This module holds the primitives every other
operation is built from: creation, realization, elementwise ops with broadcasting and promotion, the six
movement ops, and reductions. The mixins build the rest of the API from them; base.py declares which
primitives they use.
"""
from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from tg_core.device import Buffer, Device
from tg_core.dtype import (
    ConstType,
    DType,
    dtypes,
    from_numpy_dtype,
    least_upper_dtype,
    least_upper_float,
    sum_acc_dtype,
    to_dtype,
    to_numpy_dtype,
)
from tg_core.engine import checks
from tg_core.engine.realize import attach, buffer_of, capture, realize
from tg_core.helpers import prod
from tg_core.tensor.args import axes_arg, axis_arg, broadcast_shape, pair_arg, shape_arg, sints_arg
from tg_core.tensor.autograd import AutogradMixin, register_new
from tg_core.tensor.creation import CreationMixin, checked_scalar, scalar_dtype
from tg_core.tensor.elementwise import ElementwiseMixin
from tg_core.tensor.movement import MovementMixin
from tg_core.tensor.multi import canonical_device, is_stored
from tg_core.tensor.multi import from_data as multi_from_data
from tg_core.tensor.multi import to_numpy as multi_to_numpy
from tg_core.tensor.nn import NNMixin
from tg_core.tensor.reduce import ReduceMixin
from tg_core.tensor.storage import (
    VIEW_OPS,
    StorageMixin,
    distinct_values,
    kept_intermediates,
    note_realized,
    note_view,
    storage_of,
)
from tg_core.tensor.weak import lower_weak
from tg_core.uop.alu import cast_const
from tg_core.uop.ops import Ops
from tg_core.uop.sint import as_dim, as_uop, buffer_view, canonical, check_sint, has_sym, resolve_shape
from tg_core.uop.uop import UOp

Shape = tuple[int, ...]

if TYPE_CHECKING:
    from tg_core.tensor.base import Operand


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
    raise OverflowError("integers in the data do not fit in int64 (the widest int dtype a tensor infers); pass "
                        "dtype=dtypes.uint64 for values up to 2**64-1")


def _dense_prefix(u: UOp) -> UOp | None:
    """The BUFFER of a view that is its first elements in order (a symbolic shape realized: RESHAPE of
    SHRINK((0, n)) of a BUFFER), or None."""
    if u.op is Ops.RESHAPE:
        u = u.src[0]
    if u.op is Ops.SHRINK and u.src[0].op is Ops.BUFFER and type(u.arg[0][0]) is int and u.arg[0][0] == 0:
        return u.src[0]
    return None


# (dtype, Python type, value, shape) -> a scalar broadcast to that shape: `t + 1` in a loop builds the same
# constant chain each time, and these nodes hold no buffers (a symbolic dim holds only its variables)
_scalar_nodes: dict[tuple, UOp] = {}
_WEAK = (dtypes.weakint, dtypes.weakfloat)


class Tensor(CreationMixin, ElementwiseMixin, MovementMixin, ReduceMixin, NNMixin, AutogradMixin, StorageMixin):
    """A lazy tensor. `Tensor(data, device=None, dtype=None, requires_grad=None)` takes a Python scalar, a
    (nested) list, a numpy array, or a UOp of a tensor graph. The ops beyond the primitives below live in
    the mixins of this package: creation, elementwise, movement, reduce, nn, autograd and storage."""
    __slots__ = ()  # the data slots are TensorBase's
    # numpy then leaves `ndarray + tensor` and `np.float32(2) * tensor` to Tensor's reflected operators
    # instead of treating the tensor as a sequence of elements
    __array_ufunc__ = None

    def __init__(self, data: Any, device: str | Sequence[str] | None = None, dtype: DType | str | None = None,
                 requires_grad: bool | None = None):
        dt = to_dtype(dtype) if dtype is not None else None
        if dt is not None and dtypes.is_weak(dt):
            raise TypeError(f"a tensor cannot have the weak dtype {dt!r}; weak dtypes belong to Python scalars")
        # a tuple of devices: a sharded tensor (multi.py); host data given one is put on each of them. Typed as
        # the single-device str that every op passes on unchanged; multi.py reads the tuple (is_sharded)
        self._device = (Device.canonicalize(device) if isinstance(device, str) else cast(str, canonical_device(device))) \
            if device is not None else Device.DEFAULT
        self._requires_grad, self.grad = None, None
        if not isinstance(device, str) and device is not None and isinstance(data, (list, tuple, np.ndarray, np.generic)):
            data, dt = multi_from_data(data, cast(tuple, self._device), dt), None
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
        self.requires_grad = requires_grad  # checked by the autograd mixin: only floats take gradients
        register_new(self)  # no_grad detaching, the registry of live tensors

    # ---- properties ----------------------------------------------------------------------------------------

    @property
    def shape(self) -> Shape:
        s = self.uop.shape
        if s is None:  # inline, not args.shape_of: this runs for nearly every op
            raise TypeError(f"this tensor's node ({self.uop.op}) has no shape: it is not a tensor-level node")
        return s

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
        n = prod(self.shape)
        return n if type(n) is int else as_dim(canonical(n))  # a symbolic shape's count is a symbolic int (sint.py)

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

    def realize(self, *others: Tensor) -> Tensor:
        """Compute this tensor's value now, and those of `others` in the same schedule (work they share is
        computed once; tinygrad's `Tensor.realize(a, b, c)`); afterwards each reads from its own buffer.
        Returns this tensor."""
        for i, o in enumerate(others):
            if not isinstance(o, Tensor):
                raise TypeError(f"realize(*others): others[{i}] is a {type(o).__name__}; only Tensors can be "
                                f"realized")
        Tensor.realize_all(self, *others)
        return self

    @staticmethod
    def realize_all(*tensors: Tensor) -> None:
        # (plain loops, not comprehensions: each of those is a call, and a tiny eager realize runs this whole path)
        tensors = distinct_values(tensors)  # equal graphs must not end up sharing storage
        todo: list[Tensor] = []
        for t in tensors:
            # a view of storage is never replaced by a copy: it must keep showing the storage's contents
            if not t._is_realized() and storage_of(t.uop) is None:
                if dtypes.is_weak(t.uop.dtype):
                    raise TypeError(f"cannot realize a tensor of the weak dtype {t.dtype!r} (shape {t.shape}); "
                                    f"cast it to a concrete dtype")
                todo.append(t)
        if not todo:
            return
        todo += kept_intermediates(todo)
        before, targets, devices = [], [], []
        for t in todo:
            u = t.uop
            before.append((t, u))
            targets.append(u)
            devices.append(t._device)
        results = realize(targets, devices=devices)
        for t, u in before:
            buf, shape = results[u], u.tensor_shape
            if shape != (buf.arg,):  # a flat buffer is its own 1-d view
                # (a symbolic shape's buffer holds its largest size: the view is its first numel elements)
                t.uop = buffer_view(buf, shape) if t.numel() != 0 else t.uop
            else:
                t.uop = buf
        note_realized(before)  # gradients keep flowing through what was realized
        return None

    def _is_realized(self) -> bool:
        u = self.uop
        op = u.op
        if op is Ops.BUFFER or op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER:
            return True
        shape = u.shape
        if shape is not None:
            for d in shape:  # int dims (the common case): no elements iff a dim is 0, without numel()'s product
                if type(d) is not int:
                    break
            else:
                return 0 in shape or op is Ops.MULTI and is_stored(u)
        return self.numel() == 0 or op is Ops.MULTI and is_stored(u)

    def data(self) -> memoryview:
        """The value as a read-only memoryview of the tensor's shape (numpy's format for its dtype).

        Where the device's memory is host memory (CPU devices) and the tensor is realized into a buffer of its
        own shape, this is a view of that buffer, not a copy (tg-mpi sends gradients from it): it is valid while
        the tensor lives and shows a later `assign` to it, so copy it (`np.array(t.data())`) to keep a value.
        Everywhere else it views a new copy, as `numpy()` makes."""
        if isinstance(self._device, str) and not has_sym(self.shape) and self.numel() > 0 and \
                capture.active is None and not dtypes.is_weak(self.dtype):
            self.realize()
            if self._is_realized():  # one device and numel > 0: a BUFFER, or a RESHAPE of one
                u = self.uop
                buf = buffer_of(u if u.op is Ops.BUFFER else u.src[0])
                checks.report()
                view = buf.allocator.host_view(buf.opaque)
                npdt = to_numpy_dtype(self.dtype)
                if view is not None and not view.readonly and view.nbytes == buf.nbytes and npdt.kind in "biuf":
                    # kernels of such devices finish before realize returns: the memory holds the final value. The
                    # view holds the Buffer (through a ctypes array over the same bytes), so the memory cannot go
                    # back to the allocator and be reused while the view lives, even when the tensor is dropped
                    holder = (ctypes.c_uint8 * buf.nbytes).from_buffer(view)
                    holder.tg_buffer = buf  # type: ignore[attr-defined]
                    return np.frombuffer(cast(Any, holder), npdt).reshape(self.shape).data.toreadonly()
        return memoryview(cast(Any, self.numpy())).toreadonly()

    def numpy(self) -> np.ndarray:
        """The value as a new numpy array."""
        if capture.active is not None:
            from tg_core.engine.jit import JitError
            raise JitError(f"reading a {self.shape} tensor on the host (.numpy()/.item()/.tolist()) while "
                           f"TinyJit({capture.active}) captures: a replay would not read it again; return the tensor")
        if dtypes.is_weak(self.dtype):
            raise TypeError(f"cannot realize the weak dtype {self.dtype!r}")
        # a symbolic shape has the values its variables are bound to (an unbound one is an error naming it)
        shape = resolve_shape(self.shape, "numpy() of a tensor of symbolic shape") if has_sym(self.shape) else self.shape
        if prod(shape) == 0:
            checks.report()
            return np.zeros(shape, dtype=to_numpy_dtype(self.dtype))
        if not isinstance(self._device, str):  # sharded: each shard read back into its place
            out = multi_to_numpy(self)
            checks.report()
            return out
        self.realize()
        u = self.uop
        if self._is_realized():
            base = u if u.op is Ops.BUFFER else u.src[0]
        elif (b := _dense_prefix(u)) is not None:
            base = b  # a symbolic shape's buffer: the first numel elements
        else:
            # a strided view of storage: its elements are gathered into a temporary buffer
            base = realize([u], devices=[self.device])[u]
        checks.report()  # a device-side check that failed in what ran so far is an error here, not a value
        flat = buffer_of(base).numpy()  # a new array: copied out of the buffer, owned by nobody else
        # only a symbolic shape's dense prefix is copied again, so the array does not hold the whole buffer
        return (flat if flat.size == prod(shape) else flat[:prod(shape)].copy()).reshape(shape)

    @staticmethod
    def custom_kernel(*tensors: Tensor, fxn: Callable[..., UOp]) -> tuple[Tensor, ...]:
        """Run the kernel AST `fxn(*params)` builds (one buffer PARAM per tensor) over these tensors' storage,
        writing them in place as `assign` does; returns the tensors. See tensor/custom.py."""
        from tg_core.tensor.custom import custom_kernel
        return custom_kernel(*tensors, fxn=fxn)

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

    def _operand(self, x: Operand) -> Tensor:
        if isinstance(x, Tensor):
            return x
        if isinstance(x, np.generic) and not isinstance(x, np.ndarray):
            x = x.item()
        if isinstance(x, (bool, int, float)):
            return Tensor(UOp.const(dtypes.from_py(x), x), device=self.device)
        if isinstance(x, (list, tuple, np.ndarray)):
            return Tensor(x, device=self.device)
        if isinstance(x, UOp):
            # a symbolic int (sint.py), `positions + start_pos`: a weak scalar whose value the kernel takes at run time
            return Tensor(as_uop(check_sint(x, "a UOp operand")), device=self.device)
        raise TypeError(f"cannot combine a Tensor with {type(x).__name__}")

    def _scalar_operand(self, x: ConstType) -> tuple[Tensor, UOp]:
        """The common `t + 1`: this tensor in the result dtype, and the constant made in that dtype and broadcast
        as one node chain (the same nodes the general path of `_broadcasted` builds through three intermediate
        tensors). Only for a Python scalar and outside no_grad."""
        tx = type(x)
        u = self.uop
        dt = u.dtype
        if tx is float and not dtypes.is_float(dt):  # least_upper_dtype's rules for a weak scalar, inlined
            dt = dtypes.default_float
        elif tx is bool or dt in _WEAK:  # (dtypes.is_weak for a tensor's dtype, which is never a vector)
            dt = _concrete(least_upper_dtype(dt, dtypes.from_py(x)))
        elif dt is dtypes.bool:
            dt = dtypes.default_int
        shape = u.tensor_shape
        # a float by its bits: 0.0 and -0.0 are different constants, and NaN equals no NaN as a dict key
        key = (dt, tx, x.hex() if tx is float else x, shape)  # type: ignore[union-attr]
        c = _scalar_nodes.get(key)
        if c is None:
            c = UOp.const(dt, checked_scalar(x, dt))
            if shape:  # what c.reshape(ones).expand(shape) gives, without re-checking shapes known to be valid
                ones = (1,) * len(shape)
                c = UOp(Ops.RESHAPE, dt, (c,), ones)
                c = c if shape == ones else UOp(Ops.EXPAND, dt, (c,), shape)
            if len(_scalar_nodes) >= 512:
                _scalar_nodes.clear()
            _scalar_nodes[key] = c
        return (self if u.dtype is dt else self._cast_to(dt)), c

    def _broadcasted(self, x: Operand, reverse: bool = False) -> tuple[Tensor, Tensor]:
        tx = type(x)
        if (tx is int or tx is float or tx is bool) and not Tensor.no_grad:
            # cast: `tx` tells it is a Python scalar, which the type checker cannot follow through `tx`
            a, c = self._scalar_operand(cast(ConstType, x))
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
        shape = broadcast_shape(a.shape, b.shape)
        return a._cast_to(dt)._broadcast_to(shape), b._cast_to(dt)._broadcast_to(shape)

    def _cast_to(self, dt: DType) -> Tensor:
        if self.dtype is dt:
            return self
        if self.uop.op is Ops.CONST:  # the CAST's value (alu.py), made as a constant of the new dtype
            # a Python int adopting a strong int dtype must fit it (numpy 2 and PyTorch raise too)
            arg = checked_scalar(self.uop.arg, dt) if self.dtype is dtypes.weakint else self.uop.arg
            return Tensor(UOp.const(dt, cast_const(arg, self.dtype, dt)), device=self.device)
        if dtypes.is_weak(self.dtype) and not dtypes.is_weak(dt):  # a lazy weak value meets its consumer
            return self._new(lower_weak(self.uop, dt))
        return self._new(self.uop.cast(dt))

    def _broadcast_to(self, shape: Shape) -> Tensor:
        if self.shape == shape:
            return self
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        u = self.uop.reshape(padded) if padded != self.shape else self.uop
        return self._new(u.expand(shape))

    @staticmethod
    def _wrap(u: UOp, device: str) -> Tensor:
        """What Tensor(u, device=device) makes, for a `device` already canonical (another tensor's) and a tensor-level
        node, without re-checking them (requires_grad None needs no check either): every op ends here."""
        t = object.__new__(Tensor)
        t._device, t._requires_grad, t.grad, t.uop = device, None, None, u
        register_new(t)
        return t

    def _new(self, u: UOp) -> Tensor:
        t = Tensor._wrap(u, self._device)
        if u.op in VIEW_OPS or u is self.uop:  # an assign into it writes into this tensor (storage.py, views of unrealized values)
            note_view(self, t)
        return t

    def _binop(self, op: Ops, x: Operand, reverse: bool = False) -> Tensor:
        tx = type(x)
        if (tx is int or tx is float or tx is bool) and not Tensor.no_grad:  # no tensor for the constant
            a, c = self._scalar_operand(cast(ConstType, x))
            return a._new(c.alu(op, a.uop) if reverse else a.uop.alu(op, c))
        a, b = self._broadcasted(x, reverse)
        return a._new(a.uop.alu(op, b.uop))

    def add(self, x: Operand, reverse: bool = False) -> Tensor: return self._binop(Ops.ADD, x, reverse)
    def mul(self, x: Operand, reverse: bool = False) -> Tensor: return self._binop(Ops.MUL, x, reverse)
    def sub(self, x: Operand, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if a.dtype is dtypes.bool:
            raise TypeError("subtracting bool tensors is not supported (as in PyTorch); use logical_xor or ^")
        return a + (-b)

    def div(self, x: Operand, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
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

    def maximum(self, x: Operand) -> Tensor: return self._binop(Ops.MAX, x)
    def minimum(self, x: Operand) -> Tensor:
        a, b = self._broadcasted(x)
        return a._reversed_order().maximum(b._reversed_order())._reversed_order()

    def __add__(self, x: Operand) -> Tensor: return self.add(x)
    def __radd__(self, x: Operand) -> Tensor: return self.add(x, True)
    def __sub__(self, x: Operand) -> Tensor: return self.sub(x)
    def __rsub__(self, x: Operand) -> Tensor: return self.sub(x, True)
    def __mul__(self, x: Operand) -> Tensor: return self.mul(x)
    def __rmul__(self, x: Operand) -> Tensor: return self.mul(x, True)
    def __truediv__(self, x: Operand) -> Tensor: return self.div(x)
    def __rtruediv__(self, x: Operand) -> Tensor: return self.div(x, True)

    def __neg__(self) -> Tensor:
        if self.dtype is dtypes.bool:
            return self.logical_not()
        # an unsigned int negates modulo 2**bits: times its max, which is -1 there
        return self * (dtypes.max(self.dtype) if dtypes.is_unsigned(self.dtype) else -1)

    def __lt__(self, x: Operand) -> Tensor: return self._cmp(Ops.CMPLT, x)
    def __gt__(self, x: Operand) -> Tensor: return self._cmp(Ops.CMPLT, x, True)
    def __le__(self, x: Operand) -> Tensor: return (self > x).logical_not() if not dtypes.is_float(self.dtype) else (self < x) | self.eq(x)
    def __ge__(self, x: Operand) -> Tensor: return (self < x).logical_not() if not dtypes.is_float(self.dtype) else (self > x) | self.eq(x)
    def ne(self, x: Operand) -> Tensor: return self._cmp(Ops.CMPNE, x)
    def eq(self, x: Operand) -> Tensor: return self._cmp(Ops.CMPEQ, x)
    __ne__ = ne  # type: ignore[assignment]
    __eq__ = eq  # type: ignore[assignment]
    __hash__ = object.__hash__

    def _cmp(self, op: Ops, x: Operand, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        return a._new(UOp(op, dtypes.bool, (a.uop, b.uop)))

    def logical_not(self) -> Tensor:
        return self._cast_to(dtypes.bool).ne(True)

    def where(self, x: Operand, y: Operand) -> Tensor:
        cond = self._cast_to(dtypes.bool)
        ty = type(y)
        if type(x) is Tensor and (ty is int or ty is float or ty is bool) and not Tensor.no_grad:
            # where(c, t, 0) (relu's): the constant made as `t + 0` makes it, the nodes the general path builds
            xt, const = x._scalar_operand(cast(ConstType, y))
            yt = Tensor._wrap(const, xt._device)
        else:
            xt, yt = cond._operand(x), cond._operand(y)
            xt, yt = xt._broadcasted(yt)
        if cond.device != xt.device:
            raise ValueError(f"where: the condition is on {cond.device} and the values on {xt.device}; move one with .to()")
        shape = broadcast_shape(cond.shape, xt.shape)
        c, xt, yt = cond._broadcast_to(shape), xt._broadcast_to(shape), yt._broadcast_to(shape)
        return c._new(UOp(Ops.WHERE, xt.dtype, (c.uop, xt.uop, yt.uop)))

    def cast(self, dtype: DType | str) -> Tensor:
        """This value in `dtype`. A weak dtype gives a lazy value (tensor/weak.py): a float cast to weakint is
        truncated for every consumer; only realizing it is an error."""
        return self._cast_to(to_dtype(dtype))

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
        new = shape_arg(shape, args)
        if new.count(-1) > 1:
            raise ValueError(f"reshape {new}: only one axis can be -1")
        if -1 in new:
            known = prod(s for s in new if s != -1)
            n = self.numel()
            if type(known) is not int or type(n) is not int:  # symbolic (sint.py): -1 is numel // known, if exact
                q = canonical(n // known)
                if canonical(q * known - n) != 0:  # a symbolic remainder is not known to be 0
                    raise ValueError(f"cannot reshape {self.shape} to {new}: -1 would not be a whole number of "
                                     "elements for every value of the variables")
                return self._new(self.uop.reshape(tuple(as_dim(q) if s == -1 else s for s in new)))
            if known == 0 or n % known:
                raise ValueError(f"cannot reshape {self.shape} to {new}")
            new = tuple(n // known if s == -1 else s for s in new)
        return self._new(self.uop.reshape(new))

    def permute(self, order: int | Sequence[int], *args: int) -> Tensor:
        return self._new(self.uop.permute(tuple(self._axis(a) for a in shape_arg(order, args))))

    def expand(self, shape: int | Sequence[int], *args: int) -> Tensor:
        new = sints_arg(shape_arg(shape, args), "expand: the shape", lo=-1)
        if len(new) < self.ndim:
            raise ValueError(f"cannot expand {self.shape} to {new}: the new shape has fewer axes")
        padded = (1,) * (len(new) - self.ndim) + self.shape
        new = tuple(p if s == -1 else s for s, p in zip(new, padded))
        return self._broadcast_to(new)

    def shrink(self, bounds: Sequence[tuple[int, int] | None]) -> Tensor:
        """Keep [start, end) of each axis (None keeps the whole axis)."""
        if not isinstance(bounds, (tuple, list)) or len(bounds) != self.ndim:
            raise ValueError(f"shrink needs one (start, end) or None per axis of {self.shape}, got {bounds!r}")
        full = tuple((0, n) if b is None else pair_arg(b, "shrink: a (start, end) bound") for b, n in
                     zip(bounds, self.shape))
        return self._new(self.uop.shrink(full))

    def flip(self, axis: int | Sequence[int], *args: int) -> Tensor:
        axes = axes_arg(shape_arg(axis, args), self.ndim, self.shape)
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


__all__ = ["Tensor"]
