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

    def isinf(self, detect_positive: builtins.bool = True, detect_negative: builtins.bool = True) -> Tensor:
        """True at +inf (when detect_positive) and at -inf (when detect_negative), as tinygrad's isinf."""
        if not isinstance(detect_positive, builtins.bool) or not isinstance(detect_negative, builtins.bool):
            raise TypeError(f"isinf: detect_positive and detect_negative are bools, got {detect_positive!r} and "
                            f"{detect_negative!r}")
        if not dtypes.is_float(self.dtype) or not (detect_positive or detect_negative):
            return self.zeros_like(dtype=dtypes.bool)
        if detect_positive and detect_negative:
            return self.abs().eq(math.inf)
        return self.eq(math.inf if detect_positive else -math.inf)

    def isfinite(self) -> Tensor:
        """Neither infinite nor NaN (a NaN compares false with everything, so |x| < inf excludes it)."""
        if not dtypes.is_float(self.dtype):
            return self.ones_like(dtype=dtypes.bool)
        return self.abs() < math.inf

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


    # ---- more transcendental functions (PyTorch's numerics) ----------------------------------------------
    # Where a formula has a branch that would divide by zero or overflow, the unselected branch gets a safe
    # operand instead: WHERE's gradient sends 0 to that branch, and 0 times an infinite local derivative
    # would otherwise be NaN.

    def log10(self) -> Tensor: return self._float().log2() * (1 / math.log2(10))

    def log1p(self) -> Tensor:
        """log(1 + x), accurate for small x: log(u) * x / (u - 1) with u = 1 + x cancels u's rounding error."""
        x = self._float()
        small = x.abs() < 0.5
        xs = small.where(x, 0.25)
        u = 1 + xs
        exact = u.eq(1)
        near = exact.where(xs, u.log() * xs / exact.where(1, u - 1))
        return small.where(near, (1 + small.where(0, x)).log())

    def expm1(self) -> Tensor:
        """exp(x) - 1, accurate for small x: (u - 1) * x / log(u) with u = exp(x) (Kahan's trick)."""
        x = self._float()
        small = x.abs() < 0.5
        xs = small.where(x, 0.25)
        u = xs.exp()
        exact = u.eq(1)
        near = exact.where(xs, (u - 1) * xs / exact.where(1, u.log()))
        return small.where(near, small.where(0, x).exp() - 1)

    def sinh(self) -> Tensor:
        x = self._float()
        a = x.abs()
        small = a < 1
        # exp(a - ln 2) rather than exp(a) / 2: overflows only where sinh itself does
        big = (small.where(1, a) - math.log(2)).exp() - (-small.where(1, a) - math.log(2)).exp()
        xs = small.where(x, 0.5)
        return small.where((xs.expm1() - (-xs).expm1()) * 0.5, (x < 0).where(-big, big))

    def cosh(self) -> Tensor:
        a = self._float().abs()
        return (a - math.log(2)).exp() + (-a - math.log(2)).exp()

    def atan(self) -> Tensor:
        """Cephes' atanf: reduce |x| to [0, tan(pi/8)] (via pi/2 - atan(1/x) and pi/4 + atan((x-1)/(x+1))),
        then a degree-9 odd polynomial; float32 accuracy."""
        x = self._float()
        a = (x < 0).where(-x, x)  # not abs(): its derivative at 0 is -1, which would flip atan's there
        big, mid = a > 2.414213562373095, a > 0.4142135623730950
        z = big.where(-1 / big.where(a, 1), mid.where((a - 1) / (a + 1), a))
        base = big.where(math.pi / 2, mid.where(math.pi / 4, 0.0))
        z2 = z * z
        poly = ((8.05374449538e-2 * z2 - 1.38776856032e-1) * z2 + 1.99777106478e-1) * z2 - 3.33329491539e-1
        r = base + z + z * z2 * poly
        return (x < 0).where(-r, r)

    def asin(self) -> Tensor:
        """atan(x / sqrt(1 - x^2)): +-pi/2 at +-1 (x / 0 is +-inf), NaN outside [-1, 1] (sqrt of a negative)."""
        x = self._float()
        end = x.abs().eq(1)
        inner = end.where(0.5, x) / (1 - end.where(0.5, x) * end.where(0.5, x)).sqrt()
        return end.where(x * (math.pi / 2), inner.atan())

    def acos(self) -> Tensor: return math.pi / 2 - self.asin()

    def atan2(self, other: Operand) -> Tensor:
        """The angle of the point (other, self): torch.atan2(input=y, other=x), in [-pi, pi]."""
        y, x = self._broadcasted(other)
        y, x = y._float(), x._float()
        zero = x.eq(0)
        r = (y / zero.where(1, x)).atan()
        r = (x < 0).where((y < 0).where(r - math.pi, r + math.pi), r)
        on_axis = y.eq(0).where(y * 0, (y < 0).where(-math.pi / 2, math.pi / 2))  # x == 0: +-pi/2, or 0
        return zero.where(on_axis, r)

    def asinh(self) -> Tensor:
        """sign(x) * log1p(a + a^2 / (1 + sqrt(1 + a^2))), a = |x|; log(2a) where a^2 would overflow."""
        x = self._float()
        a = (x < 0).where(-x, x)  # not abs(): see atan
        big = a > 1e9
        s = big.where(1, a)
        r = big.where(big.where(a, 1).log() + math.log(2), (s + s * s / (1 + (1 + s * s).sqrt())).log1p())
        return (x < 0).where(-r, r)

    def acosh(self) -> Tensor:
        """log1p(t + sqrt(t * (x + 1))), t = x - 1 (accurate near 1); log(2x) where x^2 would overflow;
        NaN below 1."""
        x = self._float()
        big = x > 1e9
        s = big.where(2, x)
        t = s - 1
        return big.where(big.where(x, 2).log() + math.log(2), (t + (t * (s + 1)).sqrt()).log1p())

    def atanh(self) -> Tensor:
        """log1p(2x / (1 - x)) / 2: +-inf at +-1, NaN outside [-1, 1]."""
        x = self._float()
        end = x.abs().eq(1)
        xs = end.where(0.5, x)
        return end.where((x < 0).where(-math.inf, math.inf), (2 * xs / (1 - xs)).log1p() * 0.5)

    def _sign_bit(self) -> Tensor:
        """The sign bit of a float (set for -0.0 and a negative NaN), read through a bitcast to a signed int."""
        ints = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}
        return self.bitcast(ints[self.dtype.itemsize]) < 0

    def copysign(self, other: Operand) -> Tensor:
        """|self| with the sign bit of other (so -0.0 counts as negative), as a float (PyTorch)."""
        a, b = self._broadcasted(other)
        dt = least_upper_float(a.dtype)
        a, b = a._cast_to(dt), b._cast_to(dt)
        mag = a.abs()
        return b._sign_bit().where(-mag, mag)

    def fmod(self, other: Operand) -> Tensor:
        """C's fmod: the remainder of truncated division, with the sign of the dividend (unlike `%`)."""
        a, b = self._broadcasted(other)
        if dtypes.is_bool(a.dtype):
            raise TypeError(f"fmod needs int or float tensors, got {a.dtype!r}")
        if dtypes.is_float(a.dtype):
            return a - (a / b).trunc() * b
        return a._new(a.uop.alu(Ops.MOD, b.uop))  # the IR's MOD truncates like C

    def logaddexp(self, other: Operand) -> Tensor:
        """log(exp(self) + exp(other)) without overflow: max + log1p(exp(-|self - other|)). Equal inputs
        (also two equal infinities, whose difference is NaN) give x + log(2)."""
        a, b = self._broadcasted(other)
        a, b = a._float(), b._float()
        same = a.eq(b)
        d = same.where(0, a - b)
        return same.where((a + b) * 0.5 + math.log(2), a.maximum(b) + (-d.abs()).exp().log1p())

    def isclose(self, other: Operand, rtol: builtins.float = 1e-05, atol: builtins.float = 1e-08,
                equal_nan: builtins.bool = False) -> Tensor:
        """|self - other| <= atol + rtol * |other| elementwise (PyTorch's isclose); infinities are close
        only to themselves, NaNs only when equal_nan."""
        for name, v in (("rtol", rtol), ("atol", atol)):
            if isinstance(v, builtins.bool) or not isinstance(v, (builtins.int, builtins.float)) or not v >= 0:
                raise ValueError(f"isclose: {name} must be a non-negative number, got {v!r}")
        a, b = self._broadcasted(other)
        same = a.eq(b)
        if not dtypes.is_float(a.dtype):
            a, b = a._float(), b._float()
        near = a.isfinite() & b.isfinite() & ((a - b).abs() <= atol + rtol * b.abs())
        out = same | near
        return out | (a.isnan() & b.isnan()) if equal_nan else out

    def allclose(self, other: Operand, rtol: builtins.float = 1e-05, atol: builtins.float = 1e-08,
                 equal_nan: builtins.bool = False) -> builtins.bool:
        """Whether every element isclose (a Python bool, as in PyTorch: this realizes)."""
        return builtins.bool(self.isclose(other, rtol, atol, equal_nan).all().item())

    # ---- more activations (PyTorch's definitions) --------------------------------------------------------

    def softsign(self) -> Tensor: return self / (1 + self.abs())
    def hardsigmoid(self) -> Tensor: return (self._float() / 6 + 0.5).clip(0, 1)
    def hardswish(self) -> Tensor: return self * (self._float() / 6 + 0.5).clip(0, 1)
    def mish(self) -> Tensor: return self * self.softplus().tanh()

    def logsigmoid(self) -> Tensor:
        """min(x, 0) - log1p(exp(-|x|)): never exp of a large positive number."""
        x = self._float()
        return x.minimum(0) - (-x.abs()).exp().log1p()

    def celu(self, alpha: builtins.float = 1.0) -> Tensor:
        """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
        if isinstance(alpha, builtins.bool) or not isinstance(alpha, (builtins.int, builtins.float)) or alpha == 0:
            raise ValueError(f"celu: alpha must be a non-zero number, got {alpha!r}")
        x = self._float()
        return x.maximum(0) + (alpha * (x / alpha).expm1()).minimum(0)

    def selu(self) -> Tensor:
        """scale * (max(0, x) + min(0, alpha * (exp(x) - 1))) with the self-normalizing constants."""
        alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
        x = self._float()
        return scale * (x.maximum(0) + (alpha * x.minimum(0).expm1()))
