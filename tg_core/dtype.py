"""Data types, the promotion lattice, and conversion to and from numpy.

A `DType` is an immutable value; scalar dtypes live on `dtypes`. Vector dtypes (`dt.vec(4)`) and
pointer dtypes (`dt.ptr(size)`) are built from scalars and hash-consed by their fields.

The weak dtypes `weakint` and `weakfloat` are what Python scalars get: a weak value takes the dtype of
whatever strong value it meets (`int8 + 3` is int8, `int32 + 2.5` is the default float). They are also
the dtype of symbolic index math, which is unbounded until a backend lowers it. A weak dtype never
reaches a realized buffer.
"""
from __future__ import annotations

import builtins
import functools
import math
import struct
from dataclasses import dataclass
from enum import Enum
from typing import Final, cast

import numpy as np

ConstType = bool | int | float


class AddrSpace(Enum):
    GLOBAL = "global"
    LOCAL = "local"
    REG = "reg"


@dataclass(frozen=True, eq=False, slots=True)
class DType:
    """A scalar or vector value type. `priority` orders dtypes inside one kind for promotion.

    DTypes are interned (scalars are the attributes of `dtypes`, vectors and pointers are cached), so
    they compare and hash by identity: that keeps hashing a UOp's key cheap."""
    priority: int
    itemsize: int          # bytes per scalar element
    name: str
    fmt: str | None        # struct/array format character; None where Python has none
    count: int = 1         # vector width
    _scalar: DType | None = None

    def __repr__(self) -> str:
        return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.scalar().name}.vec({self.count})"

    def __lt__(self, other: DType) -> bool:
        return (self.priority, self.itemsize, self.name, self.count) < (other.priority, other.itemsize, other.name, other.count)

    @property
    def nbytes(self) -> int:
        return self.itemsize * self.count

    @property
    def base(self) -> DType:
        return self

    @property
    def min(self) -> ConstType:
        """The smallest value this dtype holds (-inf for floats): `dtypes.min(self)`, as tinygrad's `dt.min`."""
        return dtypes.min(self)

    @property
    def max(self) -> ConstType:
        """The largest value this dtype holds (inf for floats): `dtypes.max(self)`, as tinygrad's `dt.max`."""
        return dtypes.max(self)

    def scalar(self) -> DType:
        return self._scalar if self._scalar is not None else self

    def vec(self, count: int) -> DType:
        if count < 1:
            raise ValueError(f"vector width must be >= 1, got {count}")
        if self.count != 1:
            raise ValueError(f"cannot vectorize {self!r}: it is already a vector")
        if count == 1:
            return self
        return _vec(self, count)

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        """A pointer to `size` elements of this dtype (-1 when the size is not known)."""
        return _ptr(self, size, addrspace)

    def __reduce__(self) -> tuple:
        # unpickling must give back the interned object, since dtypes compare by identity
        if self._scalar is not None:
            return (_vec, (self._scalar, self.count))
        return (getattr, (dtypes, self.name if self.name in _BY_NAME else _SHORT_TO_NAME[self.name]))


@functools.cache
def _vec(scalar: DType, count: int) -> DType:
    return DType(scalar.priority, scalar.itemsize, f"{scalar.name}{count}", None, count, scalar)


@functools.cache
def _ptr(base: DType, size: int, addrspace: AddrSpace) -> PtrDType:
    return PtrDType(base.priority, base.itemsize, base.name, base.fmt, base.count, None, base, addrspace, size)


@dataclass(frozen=True, eq=False, slots=True)
class PtrDType(DType):
    """A pointer: the dtype of buffers and of INDEX into them."""
    _base: DType | None = None
    addrspace: AddrSpace = AddrSpace.GLOBAL
    size: int = -1

    def __repr__(self) -> str:
        space = "" if self.addrspace is AddrSpace.GLOBAL else f", {self.addrspace}"
        return f"{self._base!r}.ptr({self.size}{space})"

    @property
    def base(self) -> DType:
        return cast(DType, self._base)  # always set by _ptr, the one constructor (None is the field default)

    def scalar(self) -> DType:
        return self.base.scalar()

    def vec(self, count: int) -> DType:
        raise ValueError(f"cannot vectorize the pointer {self!r}")

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        raise ValueError(f"cannot take a pointer to the pointer {self!r}")

    def __reduce__(self) -> tuple:
        return (_ptr, (self._base, self.size, self.addrspace))


def _d(priority: int, itemsize: int, name: str, fmt: str | None) -> DType:
    return DType(priority, itemsize, name, fmt)


class dtypes:
    """The scalar dtypes, their aliases, and queries on dtypes."""
    # weak dtypes sort below everything: they adopt what they meet
    weakint: Final = _d(-2, 8, "weakint", None)
    weakfloat: Final = _d(-1, 8, "weakfloat", None)
    void: Final = _d(-3, 0, "void", None)
    bool: Final = _d(0, 1, "bool", "?")
    int8: Final = _d(1, 1, "char", "b")
    uint8: Final = _d(2, 1, "uchar", "B")
    int16: Final = _d(3, 2, "short", "h")
    uint16: Final = _d(4, 2, "ushort", "H")
    int32: Final = _d(5, 4, "int", "i")
    uint32: Final = _d(6, 4, "uint", "I")
    int64: Final = _d(7, 8, "long", "q")
    uint64: Final = _d(8, 8, "ulong", "Q")
    fp8e4m3: Final = _d(9, 1, "fp8e4m3", None)
    fp8e5m2: Final = _d(10, 1, "fp8e5m2", None)
    float16: Final = _d(11, 2, "half", "e")
    bfloat16: Final = _d(12, 2, "bfloat16", None)
    float32: Final = _d(13, 4, "float", "f")
    float64: Final = _d(14, 8, "double", "d")

    # aliases
    char, uchar, short, ushort = int8, uint8, int16, uint16
    int, uint, long, ulong = int32, uint32, int64, uint64
    half, float, double = float16, float32, float64
    index = weakint
    default_int: DType = int32
    default_float: DType = float32

    @staticmethod
    def is_weak(dt: DType) -> builtins.bool:
        return dt.scalar() in (dtypes.weakint, dtypes.weakfloat)

    @staticmethod
    def is_float(dt: DType) -> builtins.bool:
        return dt.scalar() in _FLOATS

    @staticmethod
    def is_int(dt: DType) -> builtins.bool:
        return dt.scalar() in _INTS

    @staticmethod
    def is_unsigned(dt: DType) -> builtins.bool:
        return dt.scalar() in _UNSIGNED

    @staticmethod
    def is_bool(dt: DType) -> builtins.bool:
        return dt.scalar() is dtypes.bool

    @staticmethod
    def is_fp8(dt: DType) -> builtins.bool:
        return dt.scalar() in (dtypes.fp8e4m3, dtypes.fp8e5m2)

    @staticmethod
    def min(dt: DType) -> ConstType:
        """The smallest value `dt` holds (-inf for floats)."""
        return _bounds(dt.scalar())[0]

    @staticmethod
    def max(dt: DType) -> ConstType:
        """The largest value `dt` holds (inf for floats)."""
        return _bounds(dt.scalar())[1]

    @staticmethod
    def finfo(dt: DType) -> tuple[builtins.int, builtins.int]:
        """(exponent bits, mantissa bits) of a float dtype."""
        if dt.scalar() not in _FINFO:
            raise ValueError(f"finfo needs a float dtype, got {dt!r}")
        return _FINFO[dt.scalar()]

    @staticmethod
    def from_py(x: object) -> DType:
        """The dtype a Python value gets: scalars are weak, lists take the upper bound of their items."""
        if isinstance(x, bool):
            return dtypes.bool
        if isinstance(x, np.generic):  # a numpy scalar keeps its numpy dtype (strong), as numpy and PyTorch do
            return from_numpy_dtype(x.dtype)
        if isinstance(x, int):
            return dtypes.weakint
        if isinstance(x, float):
            return dtypes.weakfloat
        if isinstance(x, (list, tuple)):
            if len(x) == 0:
                return dtypes.default_float
            return least_upper_dtype(*(dtypes.from_py(v) for v in x))
        raise TypeError(f"no dtype for a Python value of type {type(x).__name__}: {x!r}")

    @staticmethod
    def as_const(val: ConstType, dt: DType) -> ConstType:
        """`val` converted to what a constant of `dt` holds (ints wrap, floats round to the dtype's grid)."""
        return as_const(val, dt)

    @staticmethod
    def fields() -> dict[str, DType]:
        return dict(_BY_NAME)


_INTS = frozenset({dtypes.weakint, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64,
                   dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64})
_UNSIGNED = frozenset({dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64})
_FLOATS = frozenset({dtypes.weakfloat, dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.float16, dtypes.bfloat16,
                     dtypes.float32, dtypes.float64})
_FINFO = {dtypes.fp8e4m3: (4, 3), dtypes.fp8e5m2: (5, 2), dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7),
          dtypes.float32: (8, 23), dtypes.float64: (11, 52), dtypes.weakfloat: (11, 52)}
# the unbounded index type keeps a finite nominal range so range analysis stays in exact integers
WEAKINT_BOUND = 2 ** 127
_BY_NAME: dict[str, DType] = {
    name: v for name, v in vars(dtypes).items() if isinstance(v, DType) and name not in ("default_int", "default_float")}
_SHORT_TO_NAME = {v.name: k for k, v in reversed(list(_BY_NAME.items()))}


@functools.cache
def _bounds(dt: DType) -> tuple[ConstType, ConstType]:
    if dt is dtypes.bool:
        return False, True
    if dt is dtypes.weakint:
        return -WEAKINT_BOUND, WEAKINT_BOUND - 1
    if dt in _UNSIGNED:
        return 0, 2 ** (8 * dt.itemsize) - 1
    if dt in _INTS:
        return -(2 ** (8 * dt.itemsize - 1)), 2 ** (8 * dt.itemsize - 1) - 1
    if dt in _FLOATS:
        return -math.inf, math.inf
    raise ValueError(f"{dt!r} has no value range")


# Promotion lattice: each dtype and the dtypes it promotes to directly (as in tinygrad and JAX).
_PROMO: dict[DType, tuple[DType, ...]] = {
    dtypes.bool: (dtypes.int8, dtypes.uint8),
    dtypes.int8: (dtypes.int16,), dtypes.int16: (dtypes.int32,), dtypes.int32: (dtypes.int64,),
    dtypes.int64: (dtypes.fp8e4m3, dtypes.fp8e5m2),
    dtypes.uint8: (dtypes.int16, dtypes.uint16), dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64), dtypes.uint64: (dtypes.fp8e4m3, dtypes.fp8e5m2),
    dtypes.fp8e4m3: (dtypes.float16, dtypes.bfloat16), dtypes.fp8e5m2: (dtypes.float16, dtypes.bfloat16),
    dtypes.float16: (dtypes.float32,), dtypes.bfloat16: (dtypes.float32,), dtypes.float32: (dtypes.float64,),
    dtypes.float64: (),
}


@functools.cache
def _upward(dt: DType) -> frozenset[DType]:
    return frozenset({dt}).union(*(_upward(up) for up in _PROMO[dt]))


def least_upper_dtype(*ds: DType) -> DType:
    """The smallest dtype every argument promotes to. Weak dtypes adopt the strong ones they meet:
    a weakint meeting a bool gives the default int; a weakfloat meeting a non-float gives the default float."""
    if not ds:
        raise ValueError("least_upper_dtype needs at least one dtype")
    scalars = {d.scalar() for d in ds}
    weak = {d for d in scalars if d in (dtypes.weakint, dtypes.weakfloat)}
    strong = scalars - weak
    if not strong:
        return dtypes.weakfloat if dtypes.weakfloat in weak else dtypes.weakint
    if dtypes.void in strong:
        raise TypeError(f"void has no promotion: {sorted(ds)}")
    common = frozenset.intersection(*(_upward(d) for d in strong))
    result = min(common)
    if dtypes.is_float(result) and not any(dtypes.is_float(d) for d in strong):
        # uint64 with a signed int: no integer holds both, and the lattice's next stop (an fp8) would be
        # absurd. PyTorch refuses too; numpy's float64 would silently round large values.
        names = " and ".join(_SHORT_TO_NAME[d.name] for d in sorted(strong))
        raise TypeError(f"no common dtype for {names}: no integer dtype holds both uint64 and signed integers; "
                        "cast an operand explicitly (e.g. .cast(dtypes.int64), or dtypes.float64 as numpy does)")
    if dtypes.weakfloat in weak and not dtypes.is_float(result):
        return dtypes.default_float
    if dtypes.weakint in weak and result is dtypes.bool:
        return dtypes.default_int
    return result


def least_upper_float(dt: DType) -> DType:
    """The float dtype an op like exp or division gives for an input of `dt`."""
    return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.weakfloat)


def sum_acc_dtype(dt: DType) -> DType:
    """The accumulator dtype of a sum: ints and bools widen to the 32/64-bit int, halves to float32."""
    if dtypes.is_unsigned(dt):
        return least_upper_dtype(dt, dtypes.uint32)
    if dtypes.is_int(dt) or dt is dtypes.bool:
        return least_upper_dtype(dt, dtypes.int32)
    return least_upper_dtype(dt, dtypes.float32)


def truncate_to_int(x: float) -> int:
    """Float to int by truncation toward zero, as every backend converts."""
    return int(x)


def _round_float(x: float, dt: DType) -> float:
    if dt is dtypes.fp8e4m3 and math.isinf(x):
        return math.copysign(_LARGEST[dt], x)  # no infinity in e4m3: satfinite, like every other overflow below
    if dt is dtypes.float64 or dt is dtypes.weakfloat or math.isnan(x) or math.isinf(x):
        return float(x)
    if dt is dtypes.float32:
        # at or past the midpoint between FLT_MAX and 2**128 a float32 rounds to infinity (struct refuses to)
        return struct.unpack("f", struct.pack("f", x))[0] if abs(x) < 3.4028235677973366e38 else math.copysign(math.inf, x)
    if dt is dtypes.float16:
        # 65520, the midpoint between 65504 and 2**16, rounds to infinity (numpy would warn about the overflow)
        return float(np.float16(x)) if abs(x) < 65520.0 else math.copysign(math.inf, x)
    return _round_minifloat(x, *dtypes.finfo(dt), dt)


def _round_minifloat(x: float, ebits: int, mbits: int, dt: DType) -> float:
    """Round-to-nearest-even onto a float format with `ebits` exponent and `mbits` mantissa bits."""
    if x == 0:
        return x
    sign = -1.0 if x < 0 else 1.0
    ax = abs(x)
    bias = 2 ** (ebits - 1) - 1
    emin = 1 - bias
    e = max(math.frexp(ax)[1] - 1, emin)
    quantum = 2.0 ** (e - mbits)
    r = round(ax / quantum) * quantum  # Python's round is half-to-even
    largest = _LARGEST[dt]
    if r > largest:
        # e4m3 has no infinity (saturates to NaN in hardware; we follow the OCP "satfinite" convention for constants)
        return sign * (math.inf if dt is not dtypes.fp8e4m3 else largest)
    return sign * r


_LARGEST = {dtypes.bfloat16: 3.3895313892515355e38, dtypes.fp8e4m3: 448.0, dtypes.fp8e5m2: 57344.0}


def as_const(val: ConstType, dt: DType) -> ConstType:
    """`val` converted to what a constant of `dt` holds (ints wrap, floats round to the dtype's grid)."""
    s = dt.scalar()
    if s is dtypes.bool:
        return bool(val)
    if s in _INTS:
        if isinstance(val, float):
            if math.isnan(val) or math.isinf(val):
                raise ValueError(f"cannot convert {val} to the integer dtype {dt!r}")
            val = truncate_to_int(val)
        val = int(val)
        if s is dtypes.weakint:
            return val
        lo, hi = _bounds(s)
        span = hi - lo + 1
        return (val - lo) % span + lo
    if s in _FLOATS:
        return _round_float(val if isinstance(val, float) else _int_to_float(int(val), s), s)
    raise TypeError(f"{dt!r} holds no constants")


def _int_to_float(val: int, dt: DType) -> float:
    """`val` as a float64 from which `_round_float` gets the correctly rounded value of `dt`. A plain
    float(val) rounds to float64 first, and that double rounding can be wrong: 2**60 + 2**36 + 1 becomes the
    float64 2**60 + 2**36, a float32 tie that then rounds to even (down) although the int is above the tie."""
    mbits = dtypes.finfo(dt)[1]
    if abs(val) <= 2 ** 53 or mbits >= 52:
        try:
            return float(val)  # exact, or (float64) correctly rounded by Python
        except OverflowError:
            return math.inf if val > 0 else -math.inf
    # keep mbits+1 significant bits, rounding half to even; what is left converts to float64 exactly
    shift = abs(val).bit_length() - (mbits + 1)
    q, r = divmod(abs(val), 1 << shift)
    half = 1 << (shift - 1)
    if r > half or (r == half and q & 1):
        q += 1
    try:
        return float(q << shift) if val > 0 else -float(q << shift)
    except OverflowError:
        return math.inf if val > 0 else -math.inf


# numpy interop
_TO_NP: dict[DType, np.dtype] = {
    dtypes.bool: np.dtype(np.bool_), dtypes.int8: np.dtype(np.int8), dtypes.uint8: np.dtype(np.uint8),
    dtypes.int16: np.dtype(np.int16), dtypes.uint16: np.dtype(np.uint16), dtypes.int32: np.dtype(np.int32),
    dtypes.uint32: np.dtype(np.uint32), dtypes.int64: np.dtype(np.int64), dtypes.uint64: np.dtype(np.uint64),
    dtypes.float16: np.dtype(np.float16), dtypes.float32: np.dtype(np.float32), dtypes.float64: np.dtype(np.float64),
}
_FROM_NP = {v: k for k, v in _TO_NP.items()}


def to_numpy_dtype(dt: DType) -> np.dtype:
    """The numpy dtype with the same layout. bfloat16 and fp8 have none in numpy; they are stored as their
    raw bits (uint16 / uint8) and converted by the caller."""
    s = dt.scalar()
    if s in _TO_NP:
        return _TO_NP[s]
    if s is dtypes.bfloat16:
        return np.dtype(np.uint16)
    if s in (dtypes.fp8e4m3, dtypes.fp8e5m2):
        return np.dtype(np.uint8)
    raise TypeError(f"{dt!r} has no numpy equivalent (weak dtypes must be resolved before realizing)")


def from_numpy_dtype(npdt: np.dtype | type) -> DType:
    npdt = np.dtype(npdt)
    if npdt not in _FROM_NP:
        allowed = ", ".join(sorted(str(d) for d in _FROM_NP))
        raise TypeError(f"numpy dtype {npdt} is not supported; supported: {allowed}")
    return _FROM_NP[npdt]


def to_dtype(x: DType | str | np.dtype | type) -> DType:
    """Accept a DType, a dtype name ('float32', 'half', ...) or a numpy dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        if x in _BY_NAME:
            return _BY_NAME[x]
        by_short = {d.name: d for d in _BY_NAME.values()}
        if x in by_short:
            return by_short[x]
        import difflib
        close = difflib.get_close_matches(x, list(_BY_NAME), n=3)
        raise TypeError(f"unknown dtype {x!r}" + (f"; did you mean {', '.join(close)}?" if close else ""))
    # numpy reads None as float64 (and a few other objects as dtypes): only dtype-like values are dtypes here
    if x is None or not isinstance(x, (np.dtype, type)):
        raise TypeError(f"a dtype is a DType (dtypes.float32), a dtype name ('float32') or a numpy dtype, got {x!r}")
    return from_numpy_dtype(x)
