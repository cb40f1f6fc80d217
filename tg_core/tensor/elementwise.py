"""Elementwise Tensor ops built from the ALU primitives in tensor.py.

Integer division and remainder follow Python and PyTorch (floor division, remainder with the divisor's
sign) while the IR's IDIV/MOD truncate like C: the floor is the truncated quotient minus one where the
remainder is non-zero and the operands' signs differ. Float floor division is floor(a / b).
"""
from __future__ import annotations

import builtins
import math
from typing import TYPE_CHECKING, cast

from tg_core.dtype import DType, dtypes, least_upper_float, to_dtype
from tg_core.tensor.base import TensorBase
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

if TYPE_CHECKING:
    from tg_core.tensor.base import Operand
    from tg_core.tensor.tensor import Tensor


class ElementwiseMixin(TensorBase):
    __slots__ = ()

    # ---- division, remainder, power ----------------------------------------------------------------------

    def floordiv(self, x: Operand, reverse: bool = False) -> Tensor:
        """Floor division: rounds toward -inf, as Python's and PyTorch's `//`."""
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_bool(a.dtype):
            a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
        if dtypes.is_float(a.dtype):
            return (a / b).floor()
        q, r = a._new(a.uop.alu(Ops.IDIV, b.uop)), a._new(a.uop.alu(Ops.MOD, b.uop))
        if dtypes.is_unsigned(a.dtype):
            return q
        return q - (r.ne(0) & (r < 0).ne(b < 0)).cast(a.dtype)

    def mod(self, x: Operand, reverse: bool = False) -> Tensor:
        """The remainder with the sign of the divisor (Python's and PyTorch's `%`)."""
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_bool(a.dtype):
            a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
        if dtypes.is_float(a.dtype):
            return a - (a / b).floor() * b
        r = a._new(a.uop.alu(Ops.MOD, b.uop))
        if dtypes.is_unsigned(a.dtype):
            return r
        return (r.ne(0) & (r < 0).ne(b < 0)).where(r + b, r)

    def pow(self, x: Operand, reverse: bool = False) -> Tensor:
        if not reverse and isinstance(x, int) and not isinstance(x, bool) and x < 0 and \
                (dtypes.is_int(self.dtype) or dtypes.is_bool(self.dtype)):
            raise ValueError(f"a {self.dtype!r} tensor to the negative power {x}: integers to negative integer "
                             "powers are not allowed (as in PyTorch); cast to a float first")
        if not reverse and isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 4 \
                and not dtypes.is_bool(self.dtype):
            # small integer powers are exact products (x**2 of a negative float is fine, as it should be)
            out = self.ones_like() if x == 0 else cast("Tensor", self)
            for _ in range(x - 1):
                out = out * self
            return out
        if not reverse and isinstance(x, float) and x == 0.5 and dtypes.is_float(self.dtype):
            # sqrt is pow's value except where C99 says pow(-0, 0.5) = +0 and pow(-inf, 0.5) = +inf
            return self.eq(-math.inf).where(math.inf, (self + 0.0).sqrt())
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_bool(a.dtype):
            a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
        return a._new(a.uop.alu(Ops.POW, b.uop))

    def __floordiv__(self, x: Operand) -> Tensor: return self.floordiv(x)
    def __rfloordiv__(self, x: Operand) -> Tensor: return self.floordiv(x, True)
    def __mod__(self, x: Operand) -> Tensor: return self.mod(x)
    def __rmod__(self, x: Operand) -> Tensor: return self.mod(x, True)
    def __pow__(self, x: Operand) -> Tensor: return self.pow(x)
    def __rpow__(self, x: Operand) -> Tensor: return self.pow(x, True)
    def __abs__(self) -> Tensor: return self.abs()
    def __pos__(self) -> Tensor: return cast("Tensor", self)

    def neg(self) -> Tensor:
        return -self

    def square(self) -> Tensor:
        return self * self

    def abs(self) -> Tensor:
        if dtypes.is_unsigned(self.dtype) or dtypes.is_bool(self.dtype):
            return cast("Tensor", self)
        # 0 - x of what is not positive: both zeros give +0.0 (numpy, PyTorch), NaN stays NaN
        return (self > 0).where(self, 0 - self)

    def sign(self) -> Tensor:
        """-1, 0 or 1; NaN for NaN and +0.0 for either zero (numpy, PyTorch)."""
        # the neither-positive-nor-negative case: x + 0.0 is NaN for NaN and +0.0 for -0.0
        rest = self + 0.0 if dtypes.is_float(self.dtype) else self.zeros_like()
        if dtypes.is_unsigned(self.dtype) or dtypes.is_bool(self.dtype):
            return self.ne(0).where(self.full_like(1), rest)
        return (self > 0).where(self.full_like(1), (self < 0).where(self.full_like(-1), rest))

    # ---- rounding ----------------------------------------------------------------------------------------

    def trunc(self) -> Tensor:
        return cast("Tensor", self) if not dtypes.is_float(self.dtype) else self._new(self.uop.alu(Ops.TRUNC))

    def floor(self) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return cast("Tensor", self)
        t = self.trunc()
        return (t > self).where(t - 1, t)

    def ceil(self) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return cast("Tensor", self)
        t = self.trunc()
        return (t < self).where(t + 1, t)

    def round(self) -> Tensor:
        """Round half to even, as PyTorch and numpy."""
        if not dtypes.is_float(self.dtype):
            return cast("Tensor", self)
        f = self.floor()
        diff = self - f
        even = (f * 0.5).floor() * 2 == f
        out = (diff > 0.5).where(f + 1, (diff < 0.5).where(f, even.where(f, f + 1)))
        # a zero result keeps the sign of x (numpy: round(-0.4) is -0.0); floor(-0.4) + 1 is +0.0
        return out.eq(0).where(self * 0, out)

    # ---- transcendental and activations ------------------------------------------------------------------

    def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()
    def cos(self) -> Tensor: return (self._float() + math.pi / 2).sin()
    def tan(self) -> Tensor: return self.sin() / self.cos()

    def _float(self) -> Tensor:
        return self._cast_to(least_upper_float(self.dtype))

    def sigmoid(self) -> Tensor:
        x = self._float()
        # exp of -|x| never overflows; the two branches are the same function
        e = (-x.abs()).exp()
        return (x >= 0).where(1 / (1 + e), e / (1 + e))

    def tanh(self) -> Tensor:
        return 2.0 * (2.0 * self._float()).sigmoid() - 1.0

    def erf(self) -> Tensor:
        """Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7)."""
        x = self._float()
        ax = x.abs()
        t = 1.0 / (1.0 + 0.3275911 * ax)
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        y = 1.0 - poly * (-(ax * ax)).exp()
        return (x < 0).where(-y, y)

    def gelu(self, approximate: str = "none") -> Tensor:
        """PyTorch's GELU: x * Phi(x) with the exact erf, or its tanh approximation (tinygrad's) on request."""
        x = self._float()
        if approximate == "tanh":
            return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
        if approximate != "none":
            raise ValueError(f"gelu: approximate is 'none' or 'tanh', got {approximate!r}")
        return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())

    def quick_gelu(self) -> Tensor: return self * (self * 1.702).sigmoid()
    def silu(self) -> Tensor: return self * self.sigmoid()
    def swish(self) -> Tensor: return self.silu()
    def relu6(self) -> Tensor: return (self > 6).where(6, self.relu())  # relu(x) - relu(x-6) is NaN at inf
    def leaky_relu(self, neg_slope: float = 0.01) -> Tensor: return (self < 0).where(self * neg_slope, self)
    def elu(self, alpha: float = 1.0) -> Tensor: return self.relu() - alpha * (1 - self.exp()).relu()
    def hardtanh(self, min_val: float = -1, max_val: float = 1) -> Tensor: return self.clip(min_val, max_val)

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        """log(1 + exp(beta x)) / beta, linear above `threshold` as in PyTorch."""
        x = self._float() * beta
        sp = x.maximum(0) + (1 + (-x.abs()).exp()).log()
        return (x > threshold).where(self._float(), sp / beta)

    def clip(self, min_: Operand | None = None, max_: Operand | None = None) -> Tensor:
        if min_ is None and max_ is None:
            raise ValueError("clip needs at least one of min_ and max_")
        out = cast("Tensor", self)
        if min_ is not None:
            out = out.maximum(min_)
        if max_ is not None:
            out = out.minimum(max_)
        return out

    clamp = clip

    def masked_fill(self, mask: Tensor, value: Operand) -> Tensor:
        return mask.where(value, self)

    # ---- bitwise and logical -----------------------------------------------------------------------------

    def _bitwise(self, op: Ops, x: Operand, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if not (dtypes.is_int(a.dtype) or dtypes.is_bool(a.dtype)):
            raise TypeError(f"{op.name.lower()} needs int or bool tensors, got {self.dtype!r} and "
                            f"{x.dtype if hasattr(x, 'dtype') else type(x).__name__!r}")
        return a._new(a.uop.alu(op, b.uop))

    def bitwise_and(self, x: Operand, reverse: bool = False) -> Tensor: return self._bitwise(Ops.AND, x, reverse)
    def bitwise_or(self, x: Operand, reverse: bool = False) -> Tensor: return self._bitwise(Ops.OR, x, reverse)
    def bitwise_xor(self, x: Operand, reverse: bool = False) -> Tensor: return self._bitwise(Ops.XOR, x, reverse)

    def bitwise_not(self) -> Tensor:
        if dtypes.is_bool(self.dtype):
            return self.logical_not()
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"bitwise_not needs an int or bool tensor, got {self.dtype!r}")
        return self ^ -1 if not dtypes.is_unsigned(self.dtype) else self ^ dtypes.max(self.dtype)

    def _shift(self, op: Ops, x: Operand, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if not dtypes.is_int(a.dtype):
            raise TypeError(f"shifts need int tensors, got {a.dtype!r}")
        return a._new(a.uop.alu(op, b.uop))

    def lshift(self, x: Operand) -> Tensor: return self._shift(Ops.SHL, x)
    def rshift(self, x: Operand) -> Tensor: return self._shift(Ops.SHR, x)

    def __and__(self, x: Operand) -> Tensor: return self.bitwise_and(x)
    def __rand__(self, x: Operand) -> Tensor: return self.bitwise_and(x, True)
    def __or__(self, x: Operand) -> Tensor: return self.bitwise_or(x)
    def __ror__(self, x: Operand) -> Tensor: return self.bitwise_or(x, True)
    def __xor__(self, x: Operand) -> Tensor: return self.bitwise_xor(x)
    def __rxor__(self, x: Operand) -> Tensor: return self.bitwise_xor(x, True)
    def __invert__(self) -> Tensor: return self.bitwise_not()
    def __lshift__(self, x: Operand) -> Tensor: return self._shift(Ops.SHL, x)
    def __rlshift__(self, x: Operand) -> Tensor: return self._shift(Ops.SHL, x, True)
    def __rshift__(self, x: Operand) -> Tensor: return self._shift(Ops.SHR, x)
    def __rrshift__(self, x: Operand) -> Tensor: return self._shift(Ops.SHR, x, True)

    def _as_bool(self, x: Operand | None = None) -> Tensor:
        return (self if x is None else self._operand(x))._cast_to(dtypes.bool)

    def logical_and(self, x: Operand) -> Tensor: return self._as_bool()._bitwise(Ops.AND, self._as_bool(x))
    def logical_or(self, x: Operand) -> Tensor: return self._as_bool()._bitwise(Ops.OR, self._as_bool(x))
    def logical_xor(self, x: Operand) -> Tensor: return self._as_bool()._bitwise(Ops.XOR, self._as_bool(x))

    def isnan(self) -> Tensor: return self.ne(self)
    def isinf(self) -> Tensor:
        return self.abs().eq(math.inf) if dtypes.is_float(self.dtype) else self.zeros_like(dtype=dtypes.bool)

    # ---- casts -------------------------------------------------------------------------------------------

    def bitcast(self, dtype: DType | str) -> Tensor:
        """Reinterpret the bits of each element (same item size only)."""
        dt = to_dtype(dtype)
        if dt.itemsize != self.dtype.itemsize:
            raise ValueError(f"bitcast from {self.dtype!r} to {dt!r} changes the item size "
                             f"({self.dtype.itemsize} != {dt.itemsize} bytes)")
        if dtypes.is_weak(dt):
            raise TypeError(f"cannot bitcast to the weak dtype {dt!r}")
        return self._new(UOp(Ops.BITCAST, dt, (self.uop,))) if dt is not self.dtype else cast("Tensor", self)

    def float(self) -> Tensor: return self.cast(dtypes.float32)
    def half(self) -> Tensor: return self.cast(dtypes.float16)
    def int(self) -> Tensor: return self.cast(dtypes.int32)
    def long(self) -> Tensor: return self.cast(dtypes.int64)
    def bool(self) -> Tensor: return self.cast(dtypes.bool)
    def double(self) -> Tensor: return self.cast(dtypes.float64)

    def is_floating_point(self) -> builtins.bool:  # builtins: `bool` here is the method above
        return dtypes.is_float(self.dtype)

    def element_size(self) -> builtins.int:  # builtins: `int` here is the method above
        return self.dtype.itemsize

    def lerp(self, end: Operand, weight: Operand) -> Tensor:
        return self + (end - self) * weight

