"""Floating-point semantics numpy lacks: fused multiply-add, the division macro's scale/fmas/fixup steps,
conversions that saturate, and the hardware's flushing transcendental units.

All functions are elementwise over numpy arrays (or scalars) of the operand's float type and return that type.
"""
from __future__ import annotations

import numpy as np

f16, f32, f64 = np.float16, np.float32, np.float64
EXP_BITS: dict[type, tuple[int, int]] = {f16: (10, 0x1F), f32: (23, 0xFF), f64: (52, 0x7FF)}
UINT: dict[type, type[np.unsignedinteger]] = {f16: np.uint16, f32: np.uint32, f64: np.uint64}


SINT = {f16: np.int16, f32: np.int32, f64: np.int64}
LIMITS: dict[type, tuple[np.floating, np.floating]] = {t: (np.finfo(t).tiny, np.finfo(t).max) for t in (f16, f32, f64)}


def exponent(x: np.ndarray) -> np.ndarray:
    """The biased exponent field of x (a signed integer array: differences of exponents stay meaningful)."""
    x = np.asarray(x)
    t = x.dtype.type
    shift, mask = EXP_BITS[t]
    e = (x.view(SINT[t]) >> shift) & mask
    return e.astype(np.int32) if t == f16 else e


def _same_shape(*xs: np.ndarray) -> list[np.ndarray]:
    """The arrays broadcast to one shape (without numpy's broadcast machinery when they already agree)."""
    shape = xs[0].shape
    if all(x.shape == shape for x in xs):
        return list(xs)
    return list(np.broadcast_arrays(*xs))


def _round_to_odd_f64(p: np.ndarray, c: np.ndarray) -> np.ndarray:
    """p + c in f64 rounded to odd (exact sticky bit), so that a later rounding to a narrower type is correct.
    p and c are f64 and p + c's exact value needs at most one rounding (p is an exact product of narrower values)."""
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)          # exact error of the f64 sum (TwoSum)
    bits = s.view(np.int64)
    inexact = (err != 0) & np.isfinite(s) & ((bits & 1) == 0)
    step = np.where((err > 0) == (s > 0), 1, -1)
    return np.where(inexact, bits + step, bits).view(np.float64)


def _needs_exact(s: np.ndarray, t: type) -> np.ndarray:
    """Where s (the f64-rounded sum) rounded to t may differ from the exact sum rounded to t: s sits exactly halfway
    between two t values (the first rounding may have put it there), or in t's denormal or overflow range."""
    drop = 52 - EXP_BITS[t][0]
    half = (s.view(np.int64) & ((1 << drop) - 1)) == (1 << (drop - 1))
    tiny, big = LIMITS[t]
    mag = np.abs(s)
    return half | ((mag < tiny) & (s != 0)) | (mag > big)


def fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c with one rounding, in the type of a."""
    t = np.result_type(a, b, c).type
    if t in (f32, f16):
        p = np.asarray(a, f64) * np.asarray(b, f64)       # exact: 2 x 24 bits < 53
        p, c = _same_shape(p, np.asarray(c, f64))
        s = p + c
        out = s.astype(t)
        exact = _needs_exact(s, t)
        if exact.any():     # only those lanes pay for the exact sum
            out[exact] = _round_to_odd_f64(p[exact], c[exact]).astype(t)
        return out
    # f64: the product is split exactly (Dekker) and the three terms are summed with one final rounding in most cases
    a, b, c = np.asarray(a, f64), np.asarray(b, f64), np.asarray(c, f64)
    p = a * b
    e = np.asarray(_two_prod_err(a, b, p))
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    out = s + (err + e)
    # inf/nan inputs: the error terms are meaningless there
    return np.where(np.isfinite(p) & np.isfinite(c), out, a * b + c)


def _two_prod_err(a: np.ndarray, b: np.ndarray, p: np.ndarray) -> np.ndarray:
    split = 134217729.0   # 2**27 + 1
    ah = a * split
    ah = ah - (ah - a)
    al = a - ah
    bh = b * split
    bh = bh - (bh - b)
    bl = b - bh
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


def frexp_mant(a: np.ndarray) -> np.ndarray:
    """V_FREXP_MANT: the mantissa in [0.5, 1) of finite values; inf and NaN pass through."""
    return np.where(np.isfinite(a), np.frexp(a)[0], a).astype(a.dtype)


def ldexp(x: np.ndarray, e: np.ndarray | np.integer) -> np.ndarray:
    t = np.asarray(x).dtype.type
    return np.ldexp(x, np.clip(np.asarray(e, np.int64), -2000, 2000).astype(np.int32)).astype(t)


def is_denorm(x: np.ndarray) -> np.ndarray:
    return (exponent(x) == 0) & (x != 0)


def flush(x: np.ndarray) -> np.ndarray:
    """Denormals to zero of the same sign (what the transcendental units do to inputs and results)."""
    return np.where(is_denorm(x), np.copysign(np.zeros_like(x), x), x)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """The bfloat16 bits (uint16) of x (f64), rounded once to nearest even: x is first rounded to f32 *to odd*
    (truncated, the last bit set when inexact), which keeps the sticky bit since f32 has 16 more fraction bits."""
    x = np.asarray(x, f64)
    t = x.astype(f32)
    t = np.where(np.abs(t.astype(f64)) > np.abs(x), np.nextafter(t, f32(0)), t)   # toward zero where RN went up
    bits = t.view(np.uint32)
    bits = np.where((t.astype(f64) != x) & ~np.isnan(x), bits | np.uint32(1), bits)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return np.where(np.isnan(x), (bits >> np.uint32(16)) | np.uint32(0x40), rounded).astype(np.uint16)


def div_scale(s0: np.ndarray, den: np.ndarray, num: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """V_DIV_SCALE: (scaled value, VCC bit) following the ISA's pseudocode; 64 is the f32 scale, 128 the f64 one."""
    t = np.asarray(s0).dtype.type
    scale = 128 if t == f64 else 64
    mant = 52 if t == f64 else 23
    big = 768 if t == f64 else 96
    s0, den, num = _same_shape(np.asarray(s0, t), np.asarray(den, t), np.asarray(num, t))
    ed, en = exponent(den), exponent(num)
    emax = EXP_BITS[t][1]
    # the common case: the numerator is normal and not tiny, the denominator and its reciprocal are normal, and the
    # quotient's exponent is far from both ends; there the value passes unchanged and VCC is clear
    special = ~((en > mant + 1) & (en < emax) & (ed > 0) & (ed < emax - 3) & (en - ed < big - 2)
                & (en - ed > mant + 3 - emax // 2))
    out, vcc = s0.copy(), np.zeros(s0.shape, bool)
    if special.any():
        out[special], vcc[special] = _div_scale_cases(s0[special], den[special], num[special], scale, mant, big)
    return out, vcc


def _div_scale_cases(s0: np.ndarray, den: np.ndarray, num: np.ndarray, scale: int, mant: int,
                     big: int) -> tuple[np.ndarray, np.ndarray]:
    t = s0.dtype.type
    ed, en = exponent(den), exponent(num)
    with np.errstate(all="ignore"):
        inv_den = np.asarray(1.0, f64) / np.asarray(den, f64)
        quot = (num / den).astype(t)
    inv_den_tiny = is_denorm(inv_den.astype(t)) if t != f64 else is_denorm(inv_den)
    quot_tiny = is_denorm(quot)
    s0_is_den, s0_is_num = s0 == den, s0 == num
    up, down = ldexp(s0, np.int64(scale)), ldexp(s0, np.int64(-scale))
    zero = (num == 0) | (den == 0)
    c1 = ~zero & (en - ed >= big)
    c2 = ~zero & ~c1 & is_denorm(den)
    c3 = ~zero & ~c1 & ~c2 & inv_den_tiny & quot_tiny
    c4 = ~zero & ~c1 & ~c2 & ~c3 & inv_den_tiny
    c5 = ~zero & ~c1 & ~c2 & ~c3 & ~c4 & quot_tiny
    c6 = ~zero & ~c1 & ~c2 & ~c3 & ~c4 & ~c5 & (en <= mant)
    out = np.where(zero, t(np.nan), s0)
    out = np.where(c1 & s0_is_den, up, out)
    # a huge denominator with a tiny quotient: the ISA text says scale it up by 2**64, which overflows; scaling it
    # down (and the quotient back down in V_DIV_FMAS, VCC set) is what keeps the Newton steps out of denormals
    out = np.where(c3 & s0_is_den, down, out)
    out = np.where(c2 | c6, up, out)
    out = np.where(c4, down, out)
    out = np.where(c5 & s0_is_num, up, out)
    vcc = c1 | c3 | c5
    return out.astype(t), vcc


def div_fmas(a: np.ndarray, b: np.ndarray, c: np.ndarray, vcc: np.ndarray) -> np.ndarray:
    """V_DIV_FMAS: fma, then undo V_DIV_SCALE's scaling where VCC is set (up or down by the scale, told apart by
    the quotient's exponent; the ISA text's fixed 2**32 does not match what the scale step did)."""
    t = np.asarray(a).dtype.type
    scale, bias = (128, 1023) if t == f64 else (64, 127)
    k = np.where(vcc, np.where(exponent(c) > bias, scale, -scale), 0)
    if t == f64:
        return ldexp(fma(a, b, c), k)
    # f32: scale the exact (round-to-odd) f64 sum before the one rounding to f32, so a quotient that lands among
    # the denormals is rounded once, as the hardware's scaled FMA does
    p, c64, k = _same_shape(np.asarray(a, f64) * np.asarray(b, f64), np.asarray(c, f64), np.asarray(k))
    s = np.ldexp(p + c64, k)
    out = s.astype(t)
    exact = _needs_exact(s, t)
    if exact.any():
        out[exact] = np.ldexp(_round_to_odd_f64(p[exact], c64[exact]), k[exact]).astype(t)
    return out


def div_fixup(q: np.ndarray, den: np.ndarray, num: np.ndarray) -> np.ndarray:
    """V_DIV_FIXUP: the special cases of num / den, else q with the quotient's sign."""
    t = np.asarray(q).dtype.type
    q, den, num = _same_shape(np.asarray(q, t), np.asarray(den, t), np.asarray(num, t))
    emax = EXP_BITS[t][1]
    ed, en = exponent(den), exponent(num)
    lim = {f16: -25, f32: -150, f64: -1075}[t]
    out = np.where(np.signbit(den) ^ np.signbit(num), -np.abs(q), np.abs(q))   # normal operands: q with the sign
    special = ~((ed > 0) & (ed < emax) & (en > 0) & (en < emax) & (en - ed >= lim))
    if special.any():
        out[special] = _div_fixup_cases(q[special], den[special], num[special], lim)
    return out


def _div_fixup_cases(q: np.ndarray, den: np.ndarray, num: np.ndarray, lim: int) -> np.ndarray:
    t = q.dtype.type
    emax = EXP_BITS[t][1]
    neg = np.signbit(den) ^ np.signbit(num)
    inf = np.where(neg, t(-np.inf), t(np.inf))
    zero = np.where(neg, t(-0.0), t(0.0))
    under = 0.0   # the ISA's UNDERFLOW value: a quotient this far below the smallest denormal rounds to zero
    over = np.finfo(t).max
    out = np.where(neg, -np.abs(q), np.abs(q))
    out = np.where(exponent(den) == emax, np.where(neg, t(-over), t(over)), out)
    out = np.where(exponent(num) - exponent(den) < lim, np.where(neg, t(-under), t(under)), out)
    out = np.where((np.abs(den) == np.inf) | (num == 0), zero, out)
    out = np.where((den == 0) | (np.abs(num) == np.inf), inf, out)
    out = np.where((np.abs(den) == np.inf) & (np.abs(num) == np.inf), t(np.nan), out)
    out = np.where((den == 0) & (num == 0), t(np.nan), out)
    out = np.where(np.isnan(den), den, out)
    out = np.where(np.isnan(num), num, out)
    return out.astype(t)


def to_int(x: np.ndarray, dtype: type) -> np.ndarray:
    """Float to integer: truncate, saturate out-of-range values, NaN to 0."""
    info = np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        y = np.clip(np.trunc(np.asarray(x, f64)), info.min, info.max)
    return np.where(np.isnan(y), 0, y).astype(dtype)


def fract(x: np.ndarray) -> np.ndarray:
    t = np.asarray(x).dtype.type
    r = x - np.floor(x)
    return np.where(np.isinf(x), t(np.nan), np.minimum(r, np.nextafter(t(1), t(0)))).astype(t)


def sin_rev(x: np.ndarray) -> np.ndarray:
    """V_SIN: the sine of x revolutions (x * 2 pi radians)."""
    t = np.asarray(x).dtype.type
    xd = np.asarray(x, f64)
    return np.sin(2 * np.pi * (xd - np.round(xd))).astype(t)


def cos_rev(x: np.ndarray) -> np.ndarray:
    t = np.asarray(x).dtype.type
    xd = np.asarray(x, f64)
    return np.cos(2 * np.pi * (xd - np.round(xd))).astype(t)


def trans(fn, x: np.ndarray) -> np.ndarray:
    """A transcendental unit op, computed in f64 and rounded once: f32/f16 flush denormal inputs and results (the
    ISA's notes for exp/log/rcp/rsq/sqrt), f64 keeps them."""
    t = np.asarray(x).dtype.type
    if t == f64:
        return fn(np.asarray(x, f64))
    return flush(fn(np.asarray(flush(x), f64)).astype(t))


def fmax(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE maxNum: a NaN operand gives the other one."""
    return np.fmax(a, b)


def fmin(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.fmin(a, b)


CLASS_BITS = ("snan", "qnan", "-inf", "-norm", "-denorm", "-0", "+0", "+denorm", "+norm", "+inf")


def fp_class(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """V_CMP_CLASS: whether x's class is one of the bits set in mask (bit i = CLASS_BITS[i])."""
    t = np.asarray(x).dtype.type
    mant_bits = EXP_BITS[t][0]
    bits = np.asarray(x).view(UINT[t])
    quiet = ((bits >> UINT[t](mant_bits - 1)) & UINT[t](1)).astype(bool)
    neg = np.signbit(x)
    nan, inf, zero, den = np.isnan(x), np.isinf(x), x == 0, is_denorm(x)
    norm = ~nan & ~inf & ~zero & ~den
    classes = (nan & ~quiet, nan & quiet, inf & neg, norm & neg, den & neg, zero & neg, zero & ~neg, den & ~neg,
               norm & ~neg, inf & ~neg)
    mask = np.asarray(mask).astype(np.uint32)
    out = np.zeros(np.broadcast_shapes(np.shape(x), np.shape(mask)), bool)
    for i, c in enumerate(classes):
        out |= c & ((mask >> np.uint32(i)) & np.uint32(1)).astype(bool)
    return out
