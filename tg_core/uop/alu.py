"""Exact evaluation of ALU ops on Python scalars, with the semantics every backend implements:
integer division truncates toward zero, the remainder has the sign of the dividend, integers wrap to
their dtype, floats round to their dtype's grid. Constant folding and the tests' oracles use this."""
from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import cast

import numpy as np

from tg_core.dtype import ConstType, DType, as_const, dtypes
from tg_core.helpers import cdiv, cmod
from tg_core.uop.ops import Ops


def _safe_exp2(x: float) -> float:
    try:
        return 2.0 ** x
    except OverflowError:
        return math.inf


def _log2(x: float) -> float:
    if math.isnan(x) or x < 0:
        return math.nan
    return -math.inf if x == 0 else math.log2(x)


def _sqrt(x: float) -> float:
    return math.nan if math.isnan(x) or x < 0 else math.sqrt(x)


def _sin(x: float) -> float:
    return math.nan if math.isinf(x) or math.isnan(x) else math.sin(x)


def _recip(x: float) -> float:
    if x == 0:
        return math.copysign(math.inf, x)
    return 1.0 / x


def _fdiv(x: float, y: float) -> float:
    if y == 0:
        if x == 0 or math.isnan(x):
            return math.nan
        return math.copysign(math.inf, x) * math.copysign(1.0, y)
    return x / y


def _idiv(x: int, y: int) -> int:
    return cdiv(x, y) if y != 0 else 0  # division by zero is undefined; we pick 0, like LLVM's poison made concrete


def _mod(x: int, y: int) -> int:
    return cmod(x, y) if y != 0 else 0


def _max(x: ConstType, y: ConstType) -> ConstType:
    if isinstance(x, float) and math.isnan(x) or isinstance(y, float) and math.isnan(y):
        return math.nan
    return max(x, y)


def _odd_integer(y: float) -> bool:
    return math.isfinite(y) and abs(math.fmod(y, 2.0)) == 1.0


def _pow(x: float, y: float) -> float:
    """C99's pow: where math.pow raises, the sign of a negative base survives an odd integer exponent."""
    try:
        return math.pow(x, y)
    except ValueError:  # zero to a negative power, or a negative base to a non-integer one
        if x == 0:
            return math.copysign(math.inf, x) if _odd_integer(y) else math.inf
        return math.nan
    except OverflowError:
        return -math.inf if x < 0 and _odd_integer(y) else math.inf


def _trunc(x: ConstType) -> ConstType:
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return x
    # copysign keeps IEEE trunc's sign of zero: trunc(-0.5) is -0.0
    return math.trunc(x) if isinstance(x, int) else math.copysign(float(math.trunc(x)), x)


python_alu: dict[Ops, Callable[..., ConstType]] = {
    Ops.EXP2: _safe_exp2, Ops.LOG2: _log2, Ops.SIN: _sin, Ops.SQRT: _sqrt, Ops.RECIPROCAL: _recip,
    Ops.NEG: lambda x: (not x) if isinstance(x, bool) else -x, Ops.TRUNC: _trunc,
    Ops.ADD: lambda x, y: x + y, Ops.SUB: lambda x, y: x - y, Ops.MUL: lambda x, y: x * y,
    Ops.FDIV: _fdiv, Ops.IDIV: _idiv, Ops.MOD: _mod, Ops.MAX: _max, Ops.POW: _pow,
    Ops.CMPLT: lambda x, y: x < y, Ops.CMPNE: lambda x, y: x != y, Ops.CMPEQ: lambda x, y: x == y,
    Ops.AND: lambda x, y: x & y, Ops.OR: lambda x, y: x | y, Ops.XOR: lambda x, y: x ^ y,
    Ops.SHL: lambda x, y: x << y, Ops.SHR: lambda x, y: x >> y,
    Ops.WHERE: lambda c, x, y: x if c else y, Ops.MULACC: lambda x, y, z: x * y + z,
}


def _as_operand(x: ConstType, dt: DType) -> ConstType:
    if dtypes.is_float(dt):
        return float(x)
    if dtypes.is_bool(dt):
        return bool(x)
    return int(x)


def exec_alu(op: Ops, dtype: DType, operands: tuple[ConstType, ...], src_dtypes: tuple[DType, ...] | None = None) -> ConstType:
    """The value of `op` on constant operands, as a constant of `dtype`."""
    if op not in python_alu:
        raise NotImplementedError(f"no constant evaluation for {op}")
    if src_dtypes is not None:
        operands = tuple(_as_operand(x, d) for x, d in zip(operands, src_dtypes))
    if op in (Ops.AND, Ops.OR, Ops.XOR) and dtypes.is_bool(dtype):
        operands = tuple(bool(x) for x in operands)
    if op is Ops.SHL and dtypes.is_int(dtype) and operands[1] < 0 or op is Ops.SHR and operands[1] < 0:
        return as_const(0, dtype)  # shifting by a negative amount is undefined; pick 0 like IDIV by zero
    if op in (Ops.SHL, Ops.SHR) and dtypes.is_int(dtype) and not dtypes.is_weak(dtype):
        # the exact shift wrapped: by the width or more, x << y is 0 and x >> y the sign. Capping y at the
        # width gives that without building a 2**y-bit number (codegen/shifts.py makes devices agree)
        operands = (operands[0], min(operands[1], 8 * dtype.itemsize))
    if op is Ops.POW and dtypes.is_int(dtype) and all(type(x) is int for x in operands) and operands[1] >= 0:
        # exact: math.pow goes through float64 and is wrong past 2**53; a strong int only keeps its low bits
        x, y = cast("tuple[int, int]", operands)  # both checked to be ints above
        if dtype.scalar() is not dtypes.weakint:
            return as_const(pow(x, y, 1 << (8 * dtype.itemsize)), dtype)
        if abs(x) <= 1 or y * x.bit_length() <= 1 << 16:  # an unbounded result must still fit in memory
            return x ** y
    try:
        ret = python_alu[op](*operands)
    except OverflowError:
        return as_const(math.inf, dtype) if dtypes.is_float(dtype) else as_const(0, dtype)
    if isinstance(ret, float) and dtypes.is_int(dtype) and (math.isnan(ret) or math.isinf(ret)):
        return as_const(0, dtype)  # e.g. int FDIV/POW by zero: undefined, the same 0 as IDIV by zero and cast_const
    return as_const(ret, dtype)


def cast_const(x: ConstType, src: DType, dst: DType) -> ConstType:
    """CAST of a constant: float to int truncates, int to narrower int wraps, to bool tests != 0. A float whose
    truncation the int dtype cannot hold (NaN, inf, out of range) gives 0: undefined in C and poison in LLVM,
    fixed here and on every device (`float_to_int_range` gives them the test)."""
    if dtypes.is_float(src) and dtypes.is_int(dst):
        if math.isnan(x) or math.isinf(x):
            return 0
        if not dtypes.is_weak(dst) and not dtypes.min(dst) <= math.trunc(x) <= dtypes.max(dst):
            return 0
    return as_const(x, dst)


def float_to_int_range(src: DType, dst: DType) -> tuple[float, float]:
    """(lo, hi) such that a float of `src` converts to the int dtype `dst` by truncation (rather than to
    cast_const's 0) exactly when lo < x < hi: false for NaN and infinities. Both bounds are values of float64
    for a float64 `src` and of float32 otherwise (so they are exact in a comparison in float32 or wider; any
    narrower float is a float32 value), the nearest ones outside [MIN - 1, MAX + 1], or infinite."""
    wide = np.float64 if src.scalar() is dtypes.float64 else np.float32
    lo, hi = dtypes.min(dst) - 1, dtypes.max(dst) + 1
    with np.errstate(over="ignore"):
        flo, fhi = wide(lo), wide(hi)  # round to nearest, then step outward where that rounded inward
    if float(flo) > lo:
        flo = np.nextafter(flo, wide(-np.inf))
    if float(fhi) < hi:
        fhi = np.nextafter(fhi, wide(np.inf))
    return float(flo), float(fhi)


_BITS_FMT = {1: "B", 2: "H", 4: "I", 8: "Q"}


def bitcast_const(x: ConstType, src: DType, dst: DType) -> ConstType:
    """BITCAST of a constant between dtypes of equal size."""
    if src.itemsize != dst.itemsize:
        raise ValueError(f"bitcast from {src!r} to {dst!r} changes the size ({src.itemsize} != {dst.itemsize} bytes)")
    raw = _to_bits(x, src)
    return _from_bits(raw, dst)


def _to_bits(x: ConstType, dt: DType) -> int:
    if dt in (dtypes.float16, dtypes.float32, dtypes.float64):
        fmt = {dtypes.float16: "e", dtypes.float32: "f", dtypes.float64: "d"}[dt]
        return int.from_bytes(struct.pack("<" + fmt, x), "little")
    if dt is dtypes.bfloat16:
        return int.from_bytes(struct.pack("<f", x), "little") >> 16
    if dtypes.is_int(dt) or dtypes.is_bool(dt):
        return int(x) & ((1 << (8 * dt.itemsize)) - 1)
    raise TypeError(f"bitcast of a constant of {dt!r} is not supported")


def _from_bits(raw: int, dt: DType) -> ConstType:
    if dt in (dtypes.float16, dtypes.float32, dtypes.float64):
        fmt = {dtypes.float16: "e", dtypes.float32: "f", dtypes.float64: "d"}[dt]
        return struct.unpack("<" + fmt, raw.to_bytes(dt.itemsize, "little"))[0]
    if dt is dtypes.bfloat16:
        return struct.unpack("<f", (raw << 16).to_bytes(4, "little"))[0]
    if dtypes.is_int(dt) or dtypes.is_bool(dt):
        return as_const(raw, dt)
    raise TypeError(f"bitcast of a constant to {dt!r} is not supported")
