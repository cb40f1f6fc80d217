"""Tensor creation: constants, ranges, identity matrices and random numbers, all built as tensor graphs.

Nothing here uploads data but the random key: a constant is a CONST node expanded to its shape, and
`arange` is the ARANGE primitive (the element index as a value), so creation ops fuse into whatever
consumes them and cost no kernel.

**Random numbers** come from a counter-based generator computed on the device: every element hashes
(key, its index), where the key mixes the seed with a counter that each random op advances. So a random
tensor is a pure function of (seed, call number, shape): reproducible after `manual_seed`, lazy, and fused
into its consumer (dropout is one kernel). The hash is a 32-bit integer finalizer applied twice. The key
(two uint32) is uploaded as a tiny buffer rather than baked in as a constant, so that the graphs of
successive calls are equal up to their input buffers and share one cached schedule.
"""
from __future__ import annotations

import math
import numbers
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from tg_core.dtype import ConstType, DType, dtypes, least_upper_dtype, to_dtype
from tg_core.helpers import prod
from tg_core.tensor.args import int_arg, sint_arg, sints_arg
from tg_core.tensor.base import TensorBase
from tg_core.uop.ops import Ops
from tg_core.uop.sint import as_dim, buffer_view, canonical, smax, smin
from tg_core.uop.uop import UOp

if TYPE_CHECKING:
    from tg_core.tensor.tensor import Tensor

_M32 = 0xFFFFFFFF
# the multipliers of a well-mixing 32-bit hash finalizer (each bit of the input flips about half the output)
_H1, _H2 = 0x7FEB352D, 0x846CA68B


def _hash32_py(x: int) -> int:
    """The on-device hash in Python ints: used to mix the seed and counter into a key on the host."""
    x &= _M32
    x ^= x >> 16
    x = (x * _H1) & _M32
    x ^= x >> 15
    x = (x * _H2) & _M32
    return x ^ (x >> 16)


def _shape(shape: Sequence[int] | int, rest: tuple[int, ...]) -> tuple[int, ...]:
    out: tuple[Any, ...] = tuple(shape) if isinstance(shape, Sequence) and not rest else (shape, *rest)
    if all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in out):
        return out
    if any(isinstance(s, UOp) for s in out) and all(isinstance(s, (int, UOp)) and not isinstance(s, bool) for s in out):
        # symbolic dims (tg_core/uop/sint.py): non-negative for every value of their variables
        return sints_arg(out, "a shape", lo=0)
    raise ValueError(f"a shape is a sequence of non-negative ints (or symbolic ints over bound variables), got {out!r}")


def _render(x: Any) -> str:
    return x.render() if isinstance(x, UOp) else str(x)


class _RNGState:
    """The generator's seed and call counter: one per process, shared by every thread (a lock orders the calls),
    kept out of the Tensor classes so that seeding never sets class attributes."""

    def __init__(self) -> None:
        self.seed, self.counter, self.lock = 0, 0, threading.Lock()


_rng = _RNGState()


class CreationMixin(TensorBase):
    __slots__ = ()

    # ---- constants ----------------------------------------------------------------------------------------

    @classmethod
    def full(cls, shape: Sequence[int] | int, fill_value: ConstType, dtype: DType | str | None = None,
             device: str | None = None, **kwargs) -> Tensor:
        """A tensor of `shape` whose elements are all `fill_value` (dtype from the value when not given)."""
        shape = _shape(shape, ())
        dt = to_dtype(dtype) if dtype is not None else scalar_dtype(fill_value)
        u = UOp.const(dt, checked_scalar(fill_value, dt))
        if shape:
            u = u.reshape((1,) * len(shape)).expand(shape)
        return cls(u, device=device, **_ctor(kwargs))

    @classmethod
    def zeros(cls, *shape, dtype: DType | str | None = None, device: str | None = None, **kwargs) -> Tensor:
        dims = _shape(shape[0], shape[1:]) if shape else ()
        return cls.full(dims, 0, dtype or dtypes.default_float, device, **kwargs)

    @classmethod
    def ones(cls, *shape, dtype: DType | str | None = None, device: str | None = None, **kwargs) -> Tensor:
        dims = _shape(shape[0], shape[1:]) if shape else ()
        return cls.full(dims, 1, dtype or dtypes.default_float, device, **kwargs)

    @classmethod
    def empty(cls, *shape, dtype: DType | str | None = None, device: str | None = None, **kwargs) -> Tensor:
        """A tensor whose values are unspecified: a fresh buffer, allocated (zeroed) when first used."""
        from tg_core.device import Device
        shape = _shape(shape[0], shape[1:]) if shape else ()
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        n = canonical(prod(shape))
        if smax(n) == 0:
            return cls.zeros(shape, dtype=dt, device=dev, **kwargs)
        # a symbolic shape: a buffer of its largest size, seen as its first numel elements
        return cls(buffer_view(UOp.new_buffer(dev, smax(n), dt), shape), device=dev, **kwargs)

    def full_like(self, fill_value: ConstType, dtype: DType | str | None = None, device: str | None = None,
                  **kwargs) -> Tensor:
        return type(self).full(self.shape, fill_value, dtype or self.dtype, device or self.device, **kwargs)

    def zeros_like(self, **kwargs) -> Tensor:
        return self.full_like(0, **kwargs)

    def ones_like(self, **kwargs) -> Tensor:
        return self.full_like(1, **kwargs)

    def empty_like(self, dtype: DType | str | None = None, device: str | None = None, **kwargs) -> Tensor:
        return type(self).empty(self.shape, dtype=dtype or self.dtype, device=device or self.device, **kwargs)

    # ---- ranges ------------------------------------------------------------------------------------------

    @classmethod
    def _iota(cls, n: int, device: str | None = None) -> Tensor:
        """0, 1, ..., n-1 as int32: the ARANGE primitive, the element index as a value."""
        return cls(UOp(Ops.ARANGE, dtypes.int32, (), n), device=device)

    @classmethod
    def arange(cls, start: int | float, stop: int | float | None = None, step: int | float = 1,
               dtype: DType | str | None = None, device: str | None = None, **kwargs) -> Tensor:
        """start, start+step, ... below stop (above it for a negative step); int32 when all are ints."""
        if stop is None:
            start, stop = 0, start
        if isinstance(start, UOp) or isinstance(stop, UOp):
            return cls._sym_arange(start, stop, step, dtype, device, **kwargs)
        # numpy scalars as the Python numbers they hold: np.int64(3) is an int bound, not a float one
        start, stop, step = (v.item() if isinstance(v, np.generic) else v for v in (start, stop, step))
        for name, v in (("start", start), ("stop", stop), ("step", step)):
            # numbers.Real takes numpy scalars too; a str or a Tensor failed later inside the arithmetic below
            if not isinstance(v, numbers.Real):
                raise TypeError(f"arange: {name} must be an int or a float, got {v!r} ({type(v).__name__})")
        if step == 0:
            raise ValueError("arange: step must not be zero")
        n = max(0, math.ceil((stop - start) / step))
        all_int = all(isinstance(v, int) for v in (start, stop, step))
        # computed in a dtype that holds every value: int64 past int32's range, float64 for a float64 result
        if all_int:
            last = start + max(n - 1, 0) * step
            acc = least_upper_dtype(scalar_dtype(start), scalar_dtype(last))
            checked_scalar(start, acc), checked_scalar(last, acc)
        else:
            acc = dtypes.float64 if dtype is not None and to_dtype(dtype) is dtypes.float64 else dtypes.float32
        dt = to_dtype(dtype) if dtype is not None else (acc if all_int else dtypes.default_float)
        idx = cls._iota(n, device).cast(acc)
        out = idx if (start, step) == (0, 1) else idx * step + start
        return cls(out.cast(dt).uop, device=device, **_ctor(kwargs))

    @classmethod
    def _sym_arange(cls, start: Any, stop: Any, step: Any, dtype: DType | str | None, device: str | None,
                    **kwargs) -> Tensor:
        """arange with symbolic bounds (tg_core/uop/sint.py): int bounds and a positive int step; the length
        (stop - start + step - 1) // step is a symbolic dim, so one kernel serves every value of the variables."""
        start, stop = sint_arg(start, "arange: start"), sint_arg(stop, "arange: stop")
        step = int_arg(step, "arange: step (with symbolic bounds an int >= 1)", lo=1)
        n = canonical((stop - start + (step - 1)) // step) if step > 1 else canonical(stop - start)
        if smin(n) < 0:
            raise ValueError(f"arange: stop {_render(stop)} can be below start {_render(start)} for some values of "
                             "their variables; with symbolic bounds start <= stop for every value")
        # int32 unless the largest value does not fit
        big = smax(start) + max(smax(n) - 1, 0) * step
        acc = dtypes.int32 if max(big, -smin(start)) < 2 ** 31 else dtypes.int64
        dt = to_dtype(dtype) if dtype is not None else acc
        idx = cls._iota(as_dim(n), device).cast(acc)
        out = idx * step if step != 1 else idx
        if isinstance(start, UOp):
            out = out + cls(start.cast(acc), device=device)
        elif start:
            out = out + start
        return cls(out.cast(dt).uop, device=device, **_ctor(kwargs))

    @classmethod
    def linspace(cls, start: int | float, stop: int | float, steps: int, dtype: DType | str | None = None,
                 device: str | None = None, **kwargs) -> Tensor:
        if steps < 0:
            raise ValueError(f"linspace: number of steps must be >= 0, got {steps}")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if steps == 1:
            return cls.full((1,), start, dt, device, **kwargs)
        delta = (stop - start) / (steps - 1) if steps > 1 else 0.0
        out = cls._iota(steps, device).cast(dtypes.float32) * delta + start
        return cls(out.cast(dt).uop, device=device, **_ctor(kwargs))

    @classmethod
    def eye(cls, n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None,
            **kwargs) -> Tensor:
        m = n if m is None else m
        n, m = int_arg(n, "eye: n", lo=0), int_arg(m, "eye: m", lo=0)
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        diag = cls._iota(n, device).reshape(n, 1).eq(cls._iota(m, device).reshape(1, m))
        return cls(diag.cast(dt).uop, device=device, **_ctor(kwargs))

    def tril(self, diagonal: int = 0) -> Tensor:
        """Keep the elements on and below the `diagonal`-th diagonal of the last two axes."""
        return self._triangle(diagonal, lower=True)

    def triu(self, diagonal: int = 0) -> Tensor:
        """Keep the elements on and above the `diagonal`-th diagonal of the last two axes."""
        return self._triangle(diagonal, lower=False)

    def _triangle(self, diagonal: int, lower: bool) -> Tensor:
        if self.ndim < 2:
            raise ValueError(f"tril/triu need at least 2 dimensions, got shape {self.shape}")
        r, c = self.shape[-2:]
        rows = type(self)._iota(r, self.device).reshape(r, 1)
        cols = type(self)._iota(c, self.device).reshape(1, c)
        keep = (cols - rows <= diagonal) if lower else (cols - rows >= diagonal)
        return keep.where(self, False if dtypes.is_bool(self.dtype) else 0)

    # ---- random ------------------------------------------------------------------------------------------

    @classmethod
    def manual_seed(cls, seed: int = 0) -> None:
        """Seed the generator: the random tensors made after it are the same on every run."""
        with _rng.lock:
            _rng.seed, _rng.counter = int(seed), 0

    @classmethod
    def _next_rng_key(cls) -> np.ndarray:
        """The key (k0, k1) of the next random op: the seed mixed with the call counter, which advances."""
        with _rng.lock:
            seed, counter = _rng.seed, _rng.counter
            _rng.counter += 1
        k0 = _hash32_py(_hash32_py(seed & _M32) ^ _hash32_py((seed >> 32) + 0x9E3779B9) ^ counter)
        return np.array([k0, _hash32_py(k0 ^ 0x85EBCA6B)], dtype=np.uint32)

    @classmethod
    def _random_bits(cls, shape: tuple[int, ...], device: str | None) -> Tensor:
        """uint32 random bits of `shape`: hash(hash(index ^ k0) + k1) for this call's key (k0, k1)."""
        from tg_core.engine.realize import buffer_of, capture
        # the key is data, not a constant in the graph: every call then has the same graph, and the
        # schedule cache (keyed by graphs up to input buffers) serves all of them
        key = cls(cls._next_rng_key(), device=device)
        if capture.active is not None:  # a TinyJit replay uploads the next key into this buffer
            capture.rng_keys.append(buffer_of(key.uop if key.uop.op is Ops.BUFFER else key.uop.src[0]))
        idx = cls._iota(prod(shape), device).cast(dtypes.uint32)
        x = _hash32(idx ^ key[0])
        x = _hash32(x + key[1])
        return x.reshape(shape)

    @classmethod
    def rand(cls, *shape, dtype: DType | str | None = None, device: str | None = None, **kwargs) -> Tensor:
        """Uniform numbers in [0, 1)."""
        shape = _shape(shape[0], shape[1:]) if shape else ()
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if not dtypes.is_float(dt):
            raise TypeError(f"rand makes floats, not {dt!r}")
        # the top 24 bits are exact in float32; the result stays below 1
        u = (cls._random_bits(shape, device) >> 8).cast(dtypes.float32) * (1.0 / (1 << 24))
        return cls(u.cast(dt).uop, device=device, **_ctor(kwargs))

    @classmethod
    def uniform(cls, *shape, low: float = 0.0, high: float = 1.0, dtype: DType | str | None = None,
                device: str | None = None, **kwargs) -> Tensor:
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        u = cls.rand(*shape, dtype=dtypes.float32, device=device) * (high - low) + low
        return cls(u.cast(dt).uop, device=device, **_ctor(kwargs))

    @classmethod
    def randn(cls, *shape, dtype: DType | str | None = None, device: str | None = None, **kwargs) -> Tensor:
        """Standard normal numbers (Box-Muller on two uniform streams)."""
        shape = _shape(shape[0], shape[1:]) if shape else ()
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        u = cls.rand((2, *shape), dtype=dtypes.float32, device=device)
        u1, u2 = u[0], u[1]
        z = (1 - u1).log().mul(-2).sqrt() * (u2 * (2 * math.pi)).cos()
        return cls(z.cast(dt).uop, device=device, **_ctor(kwargs))

    @classmethod
    def randint(cls, *shape, low: int = 0, high: int = 10, dtype: DType | str | None = None,
                device: str | None = None, **kwargs) -> Tensor:
        """Integers uniform in [low, high)."""
        if high <= low:
            raise ValueError(f"randint needs low < high, got low={low}, high={high}")
        dt = to_dtype(dtype) if dtype is not None else dtypes.int32
        shape = _shape(shape[0], shape[1:]) if shape else ()
        bits = cls._random_bits(shape, device)
        out = (bits % (high - low)).cast(dtypes.int64 if high - low > 2 ** 31 - 1 else dtypes.int32) + low
        return cls(out.cast(dt).uop, device=device, **_ctor(kwargs))

    @classmethod
    def normal(cls, *shape, mean: float = 0.0, std: float = 1.0, dtype: DType | str | None = None,
               device: str | None = None, **kwargs) -> Tensor:
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        z = cls.randn(*shape, dtype=dtypes.float32, device=device) * std + mean
        return cls(z.cast(dt).uop, device=device, **_ctor(kwargs))

    @classmethod
    def scaled_uniform(cls, *shape, **kwargs) -> Tensor:
        """Uniform in [-1, 1) scaled by 1/sqrt(numel)."""
        n = prod(_shape(shape[0], shape[1:]) if shape else ())
        return cls.uniform(*shape, low=-1.0, high=1.0, **kwargs) * (n ** -0.5 if n else 1.0)

    @classmethod
    def glorot_uniform(cls, *shape, **kwargs) -> Tensor:
        dims = _shape(shape[0], shape[1:]) if shape else ()
        bound = math.sqrt(6 / (dims[0] + prod(dims[1:])))
        return cls.uniform(*shape, low=-bound, high=bound, **kwargs)

    @classmethod
    def kaiming_uniform(cls, *shape, a: float = 0.01, **kwargs) -> Tensor:
        """PyTorch's kaiming_uniform_ with a leaky-relu gain; fan-in is the product of all but the first axis."""
        dims = _shape(shape[0], shape[1:]) if shape else ()
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(max(1, prod(dims[1:])))
        return cls.uniform(*shape, low=-bound, high=bound, **kwargs)

    @classmethod
    def kaiming_normal(cls, *shape, a: float = 0.01, **kwargs) -> Tensor:
        dims = _shape(shape[0], shape[1:]) if shape else ()
        std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(max(1, prod(dims[1:])))
        return cls.normal(*shape, mean=0.0, std=std, **kwargs)

    def rand_like(self, **kwargs) -> Tensor:
        dt, dev = kwargs.pop("dtype", self.dtype), kwargs.pop("device", self.device)
        return type(self).rand(self.shape, dtype=dt, device=dev, **kwargs)

    def randn_like(self, **kwargs) -> Tensor:
        dt, dev = kwargs.pop("dtype", self.dtype), kwargs.pop("device", self.device)
        return type(self).randn(self.shape, dtype=dt, device=dev, **kwargs)

    # ---- devices -----------------------------------------------------------------------------------------

    def to(self, device: str) -> Tensor:
        """This tensor on `device`: a COPY node (a constant is simply made there). A tuple of devices, or a
        sharded tensor: see multi.py `to` (gathered onto one device, or moved shard by shard)."""
        from tg_core.device import Device
        if not isinstance(device, str) or not isinstance(self.device, str):
            from tg_core.tensor import multi
            return multi.to(cast("Tensor", self), device)
        dev = Device.canonicalize(device)
        if dev == self.device:
            return cast("Tensor", self)
        if self.uop.device is None:
            return type(self)(self.uop, device=dev)
        return type(self)(UOp(Ops.COPY, self.dtype, (self.uop, UOp(Ops.DEVICE, dtypes.void, (), dev))), device=dev)


    def shard(self, devices: Sequence[Any], axis: int | Sequence[int] | None = None) -> Tensor:
        """This tensor split along `axis` over `devices` (None: a full copy on each device); `.device` of the result
        is the tuple of devices. Several axes take a grid of devices: `shard([[d0, d1], [d2, d3]], axis=(0, 1))`.
        An axis of size n over k devices splits into pieces of ceil(n/k) or floor(n/k) elements, the larger first;
        fewer elements than devices is an error. See docs/architecture.md, "Multi-device"."""
        from tg_core.tensor import multi
        return multi.shard(cast("Tensor", self), devices, axis)

    def shard_(self, devices: Sequence[Any], axis: int | Sequence[int] | None = None) -> Tensor:
        """`shard` in place: this tensor becomes the sharded one."""
        out = self.shard(devices, axis)
        self.uop, self._device = out.uop, out._device
        return cast("Tensor", self)


def _ctor(kwargs: dict) -> dict:
    """Constructor keywords: tinygrad's `contiguous=` of creation ops is accepted and has nothing to do here
    (a lazy tensor is computed contiguously when realized)."""
    return {k: v for k, v in kwargs.items() if k != "contiguous"}


def _hash32(x: Tensor) -> Tensor:
    x = x ^ (x >> 16)
    x = x * _H1
    x = x ^ (x >> 15)
    x = x * _H2
    return x ^ (x >> 16)


def scalar_dtype(v: ConstType) -> DType:
    """The dtype a tensor made from the Python scalar `v` gets: bool, the default int (int64 when `v` does
    not fit in it) or the default float."""
    if isinstance(v, bool):
        return dtypes.bool
    if isinstance(v, int):
        # a value the default int cannot hold widens instead of wrapping
        return dtypes.default_int if dtypes.min(dtypes.default_int) <= v <= dtypes.max(dtypes.default_int) else dtypes.int64
    return dtypes.default_float


def checked_scalar(v: ConstType, dt: DType) -> ConstType:
    """`v`, when an int dtype `dt` holds it: a Python int is never wrapped silently (numpy and PyTorch raise)."""
    if isinstance(v, int) and not isinstance(v, bool) and dtypes.is_int(dt) and not dtypes.is_weak(dt) \
            and not dtypes.min(dt) <= v <= dtypes.max(dt):
        hint = "; pass dtype=dtypes.uint64" if dt is dtypes.int64 and 0 <= v <= dtypes.max(dtypes.uint64) else ""
        raise OverflowError(f"the Python int {v} does not fit in {dt!r} (range {dtypes.min(dt)} to "
                            f"{dtypes.max(dt)}){hint}")
    return v

