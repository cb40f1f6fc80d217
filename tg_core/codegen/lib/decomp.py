"""Transcendental functions as plain ALU ops, for backends that have no math library to call.

`decomp` is a PatternMatcher (a renderer's `extra_matcher`) rewriting EXP2, LOG2, SIN and POW of float32 and
float64 into adds, multiplies, compares, selects, casts, bitcasts and integer bit operations. float16 and
bfloat16 are computed in float32. The methods are the textbook ones (Muller, "Elementary Functions", ch. 6
and 11; Cody & Waite, "Software Manual for the Elementary Functions"):

- exp2: x = k + f with k = rint(x), |f| <= 1/2; 2**f by a polynomial; 2**k built from exponent bits in two
  factors, so that a result in the subnormal range is rounded once and a large x gives inf.
- log2: x = 2**e * (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2**mant first);
  log(1+f) = f - f*f/2 + s*(f*f/2 + R(s*s)) with s = f/(2+f) (the atanh series), then times 1/ln2 split into
  a short high part and a low part, and e added keeping its rounding error, as fdlibm's log2 does.
- sin: k = rint(|x| * 2/pi), r = |x| - k*pi/2, then sin or cos of r by k mod 4. The reduction is Cody-Waite
  (pi/2 split into parts whose products with k are exact) below 2**20 and Payne-Hanek above (the bits of 2/pi
  that matter for |x| picked by its exponent, multiplied exactly in 32-bit limbs). float32 reduces and
  evaluates in float64; float64 carries the reduced argument as a double-double.
- pow: exp2(y * log2|x|) in float64 with C99's special cases (pow(x, 0) = pow(1, y) = 1, negative x only with
  an integer y). log2|x| is a double-double good to about 2**-64 (s = (m-1)/(m+1) and the series' leading
  terms carried in two doubles), y times it is Dekker's exact product, and exp2 takes the low part into its
  reduced argument: the error of y*log2|x| does not grow with the size of the result.

Polynomials are near-minimax: Chebyshev interpolation in 50-digit arithmetic (mpmath.chebyfit) of 2**f on
[-1/2, 1/2], of R(z)/z on [0, (3-2*sqrt(2))**2] and of (sin(r)-r)/r**3 and (cos(r)-1+r*r/2)/r**4 in r*r on
[0, (pi/4)**2], with degrees that make the fit error a small fraction of an ulp. Measured against numpy in
extended precision (tests/test_decomp.py), the largest errors are: exp2 1.2 ulp, log2 0.71 ulp, sin 0.5 ulp
(float32) / 0.77 ulp (float64), pow 0.5 ulp (float32) / 1.6 ulp (float64).
The rules need strict IEEE arithmetic: a backend must not reassociate the additions (rint adds and subtracts
a magic constant) nor flush subnormals.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tg_core.dtype import DType, dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import PatternMatcher
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat


def _hex(*values: str) -> tuple[float, ...]:
    """Coefficients written exactly, as hex floats."""
    return tuple(float.fromhex(v) for v in values)


def _hex_pair(hi: str, lo: str) -> tuple[float, float]:
    """A constant split into hi + lo, as hex floats."""
    return float.fromhex(hi), float.fromhex(lo)


@dataclass(frozen=True)
class _Format:
    dtype: DType
    bits: DType       # the signed integer of the same width (bitcasts, exponent arithmetic)
    mant: int         # explicit mantissa bits
    bias: int
    exp2: tuple[float, ...]   # polynomial coefficients, lowest degree first
    log2: tuple[float, ...]
    ivln2: tuple[float, float]  # 1/ln2 = hi + lo, hi short enough that hi * (a trimmed value) is exact
    trim: int                   # the bits of a value kept for that product (sign, exponent, top mantissa bits)
    sin: tuple[float, ...]
    cos: tuple[float, ...]


_F32 = _Format(
    dtypes.float32, dtypes.int32, 23, 127,
    exp2=_hex("0x1.0p+0", "0x1.62e43p-1", "0x1.ebfbep-3", "0x1.c6aeccp-5", "0x1.3b2a1cp-7", "0x1.5f48cp-10",
              "0x1.444p-13"),
    log2=_hex("0x1.555556p-1", "0x1.9999ecp-2", "0x1.245c44p-2", "0x1.ddced8p-3"),
    ivln2=_hex_pair("0x1.714p+0", "0x1.47652cp-12"), trim=0xFFFFF000,
    # float32 sin is evaluated in float64: its polynomials are float64 fits of degree 4
    sin=_hex("-0x1.555555555516bp-3", "0x1.1111110fd3d43p-7", "-0x1.a019fd9b35ee5p-13", "0x1.71d9a9f41c5a9p-19",
             "-0x1.aa285788aaa42p-26"),
    cos=_hex("0x1.5555555555437p-5", "-0x1.6c16c16b614fcp-10", "0x1.a019ff53a6a1cp-16", "-0x1.27e25f4bb4e6fp-22",
             "0x1.1c81c3531fff2p-29"))
_F64 = _Format(
    dtypes.float64, dtypes.int64, 52, 1023,
    exp2=_hex("0x1.0p+0", "0x1.62e42fefa39efp-1", "0x1.ebfbdff82c5aep-3", "0x1.c6b08d704a0c6p-5",
              "0x1.3b2ab6fb9f1a5p-7", "0x1.5d87fe78a3f9cp-10", "0x1.430913112c61bp-13", "0x1.ffcbfc6da6ed1p-17",
              "0x1.62bfc2c86d700p-20", "0x1.b524ebd13a55fp-24", "0x1.e6228acd1c6e5p-28", "0x1.e9ec1fcb69a7fp-32"),
    log2=_hex("0x1.5555555555555p-1", "0x1.9999999999a38p-2", "0x1.2492492476cccp-2", "0x1.c71c720159177p-3",
              "0x1.745cf9048dd95p-3", "0x1.3b1c355a8f7a2p-3", "0x1.0fbe95d716020p-3", "0x1.0c039c49989c6p-3"),
    ivln2=_hex_pair("0x1.71547652p+0", "0x1.705fc2eefa2p-33"), trim=0xFFFFFFFF00000000,
    sin=_hex("-0x1.5555555555555p-3", "0x1.1111111111110p-7", "-0x1.a01a01a019938p-13", "0x1.71de3a546095bp-19",
             "-0x1.ae645412c560cp-26", "0x1.61217f0b800d5p-33", "-0x1.ab17d404de5b3p-41"),
    cos=_hex("0x1.5555555555555p-5", "-0x1.6c16c16c16c16p-10", "0x1.a01a01a019d0ap-16", "-0x1.27e4fb7712d65p-22",
             "0x1.1eed8deb97a97p-29", "-0x1.9394ba0cd6ed5p-37", "0x1.ab785b00b4646p-45"))
_FORMATS = {dtypes.float32: _F32, dtypes.float64: _F64}

# 2/pi in 32-bit words, most significant first (the first word holds the bits of weight 2**-1 .. 2**-32)
_TWO_OVER_PI = (
    0xa2f9836e, 0x4e441529, 0xfc2757d1, 0xf534ddc0, 0xdb629599, 0x3c439041, 0xfe5163ab, 0xdebbc561, 0xb7246e3a,
    0x424dd2e0, 0x06492eea, 0x09d1921c, 0xfe1deb1c, 0xb129a73e, 0xe88235f5, 0x2ebb4484, 0xe99c7026, 0xb45f7e41,
    0x3991d639, 0x835339f4, 0x9c845f8b, 0xbdf9283b, 0x1ff897ff, 0xde05980f, 0xef2f118b, 0x5a0a6d1f, 0x6d367ecf,
    0x27cb09b7, 0x4f463f66, 0x9e5fea2d, 0x7527bac7, 0xebe5f17b, 0x3d0739f7, 0x8a5292ea, 0x6bfb5fb1, 0x1f8d5d08,
    0x56033046, 0xfc7b6bab, 0xf0cfbc20)
# pi/2 as parts of 33, 33, 33 and 53 bits: k * part is exact for k < 2**20
_PIO2_PARTS = _hex("0x1.921fb544p+0", "0x1.0b4611a6p-34", "0x1.3198a2ep-69", "0x1.b839a252049c1p-104")
_PIO2_2M62 = _hex("0x1.921fb54442d18p-62", "0x1.1a62633145c06p-116")  # pi/2 * 2**-62 as a double-double
_CODY_WAITE_LIMIT = 2.0 ** 20
_MASK32 = 0xFFFFFFFF


def _c(dt: DType, v: float | int) -> UOp:
    return UOp.const(dt, v)


def _poly(x: UOp, coeffs: tuple[float, ...]) -> UOp:
    """coeffs[0] + coeffs[1]*x + ... by Horner's rule."""
    acc = _c(x.dtype, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = acc * x + _c(x.dtype, c)
    return acc


def _rint(x: UOp, fmt: _Format) -> UOp:
    """x rounded to the nearest integer (ties to even) for |x| < 2**(mant-1): adding 1.5*2**mant leaves no
    fraction bits, subtracting it back is exact."""
    magic = _c(fmt.dtype, 1.5 * 2.0 ** fmt.mant)
    return (x + magic) - magic


def _pow2(k: UOp, fmt: _Format) -> UOp:
    """2**k for an integral float k in the normal exponent range, from its exponent bits."""
    return ((k.cast(fmt.bits) + _c(fmt.bits, fmt.bias)) << _c(fmt.bits, fmt.mant)).bitcast(fmt.dtype)


def _is_nan(x: UOp) -> UOp:
    return x.ne(x)


def _sign_bit(x: UOp, fmt: _Format) -> UOp:
    return x.bitcast(fmt.bits) < _c(fmt.bits, 0)


def _abs(x: UOp, fmt: _Format) -> UOp:
    return (x.bitcast(fmt.bits) & _c(fmt.bits, (1 << (fmt.bits.itemsize * 8 - 1)) - 1)).bitcast(fmt.dtype)


# ---- exp2, log2 ----------------------------------------------------------------------------------------

def _exp2(x: UOp, fmt: _Format, lo: UOp | None = None) -> UOp:
    """2**(x + lo); lo (optional) is a small low part of the argument, used when x is finite."""
    dt = fmt.dtype
    xmin, xmax = -(fmt.bias + fmt.mant + 2), fmt.bias + 2  # beyond these the result is 0 or inf
    inside = (_c(dt, xmin) < x) & (x < _c(dt, xmax))
    xc = (x < xmin).where(_c(dt, xmin), (_c(dt, xmax) < x).where(_c(dt, xmax), x))
    k = _rint(xc, fmt)
    f = xc - k if lo is None else (xc - k) + inside.where(lo, _c(dt, 0.0))
    p = _poly(f, fmt.exp2)
    # 2**k as two factors, each a normal number: p * 2**k1 is exact, * 2**k2 rounds once (also to a subnormal)
    k1 = _rint(k * _c(dt, 0.5), fmt)
    return _is_nan(x).where(x, p * _pow2(k1, fmt) * _pow2(k - k1, fmt))


def _log2_parts(x: UOp, fmt: _Format) -> tuple[UOp, UOp]:
    """log2(x) = hi + lo for finite x > 0, lo much smaller than hi but not normalized (fdlibm's log2 method):
    x = 2**e * (1 + f), log(1+f) = f - f*f/2 + s*(f*f/2 + R(s*s)) with s = f/(2+f), the leading f - f*f/2
    trimmed so its product with the high part of 1/ln2 is exact, and e added with its rounding error kept."""
    dt, it = fmt.dtype, fmt.bits
    sub = x < _c(dt, 2.0 ** (1 - fmt.bias))  # subnormal: scaled into the normal range first
    bits = sub.where(x * _c(dt, 2.0 ** fmt.mant), x).bitcast(it)
    e = ((bits >> _c(it, fmt.mant)) - _c(it, fmt.bias)).cast(dt) - sub.where(_c(dt, fmt.mant), _c(dt, 0.0))
    m = ((bits & _c(it, (1 << fmt.mant) - 1)) | _c(it, fmt.bias << fmt.mant)).bitcast(dt)  # in [1, 2)
    big = _c(dt, math.sqrt(2.0)) < m
    m, e = big.where(m * _c(dt, 0.5), m), e + big.where(_c(dt, 1.0), _c(dt, 0.0))
    f = m - _c(dt, 1.0)  # exact
    hfsq = _c(dt, 0.5) * f * f
    s = f / (_c(dt, 2.0) + f)
    z = s * s
    hi = ((f - hfsq).bitcast(it) & _c(it, _as_signed(fmt.trim, it))).bitcast(dt)
    lo = ((f - hi) - hfsq) + s * (hfsq + z * _poly(z, fmt.log2))
    ih, il = (_c(dt, v) for v in fmt.ivln2)
    val_hi, val_lo = hi * ih, (lo + hi) * il + lo * ih
    w = e + val_hi
    return w, val_lo + ((e - w) + val_hi)  # |e| >= |val_hi| or e == 0: e - w + val_hi is w's rounding error


def _as_signed(v: int, dt: DType) -> int:
    bits = dt.itemsize * 8
    return v - (1 << bits) if v >> (bits - 1) else v


def _log2(x: UOp, fmt: _Format) -> UOp:
    dt = fmt.dtype
    hi, lo = _log2_parts(x, fmt)
    y = (x < _c(dt, 0.0)).where(_c(dt, math.nan), hi + lo)
    y = x.eq(_c(dt, 0.0)).where(_c(dt, -math.inf), y)
    y = x.eq(_c(dt, math.inf)).where(x, y)
    return _is_nan(x).where(x, y)


# ---- sin -----------------------------------------------------------------------------------------------

def _take(table: tuple[int, ...], j: UOp, count: int) -> list[UOp]:
    """table[j], table[j+1], ... table[j+count-1] as uint64s (0 outside the table), by selects: no memory, so
    any j is safe. The compares of j are shared by the count lookups."""
    hits = [j.eq(_c(j.dtype, i)) for i in range(len(table))]
    words = []
    for n in range(count):
        out = _c(dtypes.uint64, 0)
        for i, hit in enumerate(hits):
            if i + n < len(table) and table[i + n]:
                out = hit.where(_c(dtypes.uint64, table[i + n]), out)
        words.append(out)
    return words


def _payne_hanek(ax: UOp, fmt: _Format, words: int) -> tuple[UOp, UOp, UOp]:
    """ax * 2/pi for a large positive ax: (quadrant k mod 4 as int32, the fraction's top 62 bits and its next 62
    bits as int64, the fraction rounded to the nearest quadrant so in [-2**61, 2**61]).

    ax = M * 2**E (M an integer). Bits of 2/pi of weight 2**-i with i <= E-2 only add multiples of 4 to
    ax*2/pi, so a window of `words` 32-bit words of 2/pi starting at bit E-1 gives ax*2/pi mod 4 as
    M * window * 2**(2 - 32*words); the product is computed exactly in 32-bit limbs."""
    u64, i64, i32 = dtypes.uint64, dtypes.int64, dtypes.int32
    bits = ax.bitcast(fmt.bits).cast(u64)
    mant = (bits & _c(u64, (1 << fmt.mant) - 1)) | _c(u64, 1 << fmt.mant)
    e = (bits >> _c(u64, fmt.mant)).cast(i32) - _c(i32, fmt.bias + fmt.mant)
    # the table starts with zero words so that a window that starts above bit 1 (small E) is still inside it
    zeros = 2
    max_start = (1 << (fmt.bits.itemsize * 8 - 1 - fmt.mant)) - 2 - fmt.bias - fmt.mant - 2 + 32 * zeros
    table = ((0,) * zeros + _TWO_OVER_PI)[:(max_start >> 5) + words + 1]
    start = e - _c(i32, 1) + _c(i32, 32 * zeros - 1)  # position of bit E-1 counted from the table's first bit
    j, s = start >> _c(i32, 5), (start & _c(i32, 31)).cast(u64)
    t = _take(table, j, words + 1)
    win = [(((t[n] << _c(u64, 32)) | t[n + 1]) << s) >> _c(u64, 32) for n in range(words)]
    limbs = [mant >> _c(u64, 32), mant & _c(u64, _MASK32)] if fmt.mant > 32 else [mant]
    # column c holds the product bits of weight 2**(32*c) (c = 0: least significant); only c < words matter
    cols: list[UOp | None] = [None] * words
    for a, m in enumerate(limbs):
        for n, w in enumerate(win):
            c = (len(limbs) - 1 - a) + (words - 1 - n)
            prod = m * w
            for col, part in ((c, prod & _c(u64, _MASK32)), (c + 1, prod >> _c(u64, 32))):
                if col < words:
                    cols[col] = part if cols[col] is None else cols[col] + part
    carry = _c(u64, 0)
    digits: list[UOp] = []  # the columns with their carries propagated: 32-bit words
    for c in range(words):
        total = (cols[c] if cols[c] is not None else _c(u64, 0)) + carry
        digits.append(total & _c(u64, _MASK32))
        carry = total >> _c(u64, 32)
    top, w2, w3, w4 = digits[words - 1], digits[words - 2], digits[words - 3], digits[words - 4]
    hi = (((top & _c(u64, (1 << 30) - 1)) << _c(u64, 32)) | w2).cast(i64)  # 62 fraction bits
    lo = (((w3 << _c(u64, 30)) | (w4 >> _c(u64, 2))) & _c(u64, (1 << 62) - 1)).cast(i64)  # the next 62
    k = (top >> _c(u64, 30)).cast(i32)
    up = _c(i64, 1 << 61) <= hi  # fraction >= 1/2: round to the next quadrant, fraction - 1
    return (k + up.where(_c(i32, 1), _c(i32, 0))) & _c(i32, 3), up.where(hi - _c(i64, 1 << 62), hi), lo


def _sin_f32(x: UOp) -> UOp:
    """float32 sin, reduced and evaluated in float64 (the reduced argument keeps 29 bits more than needed)."""
    d, i32 = dtypes.float64, dtypes.int32
    ax = _abs(x, _F32)
    axd = ax.cast(d)
    # Cody-Waite: k < 2**20, k * part exact, the first subtraction exact (Sterbenz)
    k = _rint(axd * _c(d, 2 / math.pi), _F64)
    r_cw = ((axd - k * _c(d, _PIO2_PARTS[0])) - k * _c(d, _PIO2_PARTS[1])) - k * _c(d, _PIO2_PARTS[2])
    q_ph, hi, _ = _payne_hanek(ax, _F32, 4)
    r_ph = hi.cast(d) * _c(d, _PIO2_2M62[0])
    big = _c(dtypes.float32, _CODY_WAITE_LIMIT) <= ax
    q = big.where(q_ph, k.cast(i32) & _c(i32, 3))
    r = big.where(r_ph, r_cw)
    z = r * r
    s = r + r * z * _poly(z, _F32.sin)
    c = _c(d, 1.0) - _c(d, 0.5) * z + z * z * _poly(z, _F32.cos)
    return _finish_sin(x, q, s, c, _F32).cast(dtypes.float32)


def _two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """a + b = s + e exactly (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a: UOp) -> tuple[UOp, UOp]:
    """a = hi + lo with hi of 26 and lo of 26 significant bits (Veltkamp), for exact products of halves."""
    sp = a * _c(a.dtype, 134217729.0)  # 2**27 + 1
    hi = sp - (sp - a)
    return hi, a - hi


def _two_prod(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """a * b = p + e exactly (for products far from overflow), without FMA: Dekker's product."""
    p = a * b
    (ah, al), (bh, bl) = _split(a), _split(b)
    return p, (((ah * bh - p) + ah * bl) + al * bh) + al * bl


def _sin_f64(x: UOp) -> UOp:
    d, i32, i64 = dtypes.float64, dtypes.int32, dtypes.int64
    ax = _abs(x, _F64)
    # Cody-Waite into a double-double r_hi + r_lo
    k = _rint(ax * _c(d, 2 / math.pi), _F64)
    a = ax - k * _c(d, _PIO2_PARTS[0])
    b, b_err = _two_sum(a, -(k * _c(d, _PIO2_PARTS[1])))
    cw_hi, c_err = _two_sum(b, -(k * _c(d, _PIO2_PARTS[2])))
    cw_lo = (c_err + b_err) - k * _c(d, _PIO2_PARTS[3])
    # Payne-Hanek: the fraction hi*2**-62 + lo*2**-124 times pi/2
    q_ph, hi, lo = _payne_hanek(ax, _F64, 6)
    v_hi = hi.cast(d)
    v_lo = (hi - v_hi.cast(i64)).cast(d) + lo.cast(d) * _c(d, 2.0 ** -62)  # hi - v_hi is exact
    p, p_err = _two_prod(v_hi, _c(d, _PIO2_2M62[0]))
    ph_lo = p_err + v_hi * _c(d, _PIO2_2M62[1]) + v_lo * _c(d, _PIO2_2M62[0])
    big = _c(d, _CODY_WAITE_LIMIT) <= ax
    q = big.where(q_ph, k.cast(i32) & _c(i32, 3))
    r0, r1 = big.where(p, cw_hi), big.where(ph_lo, cw_lo)
    r_hi = r0 + r1
    r_lo = r1 - (r_hi - r0)
    z = r_hi * r_hi
    # sin(h + l) = sin h + l*cos h, cos(h + l) = cos h - l*sin h, to first order in l (|l| <= ulp(h)/2)
    s = r_hi + (r_hi * z * _poly(z, _F64.sin) + r_lo * (_c(d, 1.0) - _c(d, 0.5) * z))
    hz = _c(d, 0.5) * z
    w = _c(d, 1.0) - hz
    c = w + (((_c(d, 1.0) - w) - hz) + (z * z * _poly(z, _F64.cos) - r_hi * r_lo))
    return _finish_sin(x, q, s, c, _F64)


def _finish_sin(x: UOp, q: UOp, s: UOp, c: UOp, fmt: _Format) -> UOp:
    """sin(x) from sin(r) and cos(r) of |x| = k*pi/2 + r, q = k mod 4: sin, cos, -sin, -cos; odd in x."""
    i32 = dtypes.int32
    v = (q & _c(i32, 1)).ne(_c(i32, 0)).where(c, s)
    neg = (q & _c(i32, 2)).ne(_c(i32, 0)).ne(_sign_bit(x, fmt))
    v = neg.where(-v, v)
    return (_is_nan(x) | x.eq(_c(x.dtype, math.inf)) | x.eq(_c(x.dtype, -math.inf))).where(_c(s.dtype, math.nan), v)


# ---- pow -----------------------------------------------------------------------------------------------

# log2(m) = K*s + K/3*s**3 + s**5*P(s*s) with s = (m-1)/(m+1), K = 2/ln2: the first two terms as double-doubles
_K2_LN2 = _hex("0x1.71547652b82fep+1", "0x1.777d0ffda0d24p-55")
_K2_LN2_3 = _hex("0x1.ec709dc3a03fdp-1", "0x1.d27f05548af0cp-55")
_LOG2_TAIL = _hex("0x1.2776c50ef9c02p-1", "0x1.a61762a7a8378p-2", "0x1.484b13e3dc0ccp-2", "0x1.0c9a7afc044cfp-2",
                  "0x1.c69697bce732fp-3", "0x1.888d6c05fff82p-3", "0x1.7d8c1877de55ap-3")


def _log2_dd(x: UOp) -> tuple[UOp, UOp]:
    """log2(x) = hi + lo (|lo| <= ulp(hi)/2) good to about 2**-64 relative, for float64 x > 0 finite.

    s = (m-1)/(m+1) is carried as s_hi + s_lo (the division's remainder from an exact product), and the
    series' two leading terms, which are too large for a double's rounding, are double-double products."""
    d, it = dtypes.float64, dtypes.int64
    sub = x < _c(d, 2.0 ** -1022)
    bits = sub.where(x * _c(d, 2.0 ** 52), x).bitcast(it)
    e = ((bits >> _c(it, 52)) - _c(it, 1023)).cast(d) - sub.where(_c(d, 52.0), _c(d, 0.0))
    m = ((bits & _c(it, (1 << 52) - 1)) | _c(it, 1023 << 52)).bitcast(d)
    big = _c(d, math.sqrt(2.0)) < m
    m, e = big.where(m * _c(d, 0.5), m), e + big.where(_c(d, 1.0), _c(d, 0.0))
    u = m - _c(d, 1.0)  # exact
    v_hi, v_lo = _two_sum(m, _c(d, 1.0))
    s_hi = u / v_hi
    p, p_err = _two_prod(s_hi, v_hi)
    s_lo = (((u - p) - p_err) - s_hi * v_lo) / v_hi  # u - p is exact (Sterbenz)
    q, q_err = _two_prod(s_hi, s_hi)
    cube, cube_err = _two_prod(q, s_hi)
    cube_lo = cube_err + q_err * s_hi + _c(d, 3.0) * q * s_lo
    t1, t1_err = _two_prod(_c(d, _K2_LN2[0]), s_hi)
    t1_lo = t1_err + _c(d, _K2_LN2[0]) * s_lo + _c(d, _K2_LN2[1]) * s_hi
    t3, t3_err = _two_prod(_c(d, _K2_LN2_3[0]), cube)
    t3_lo = t3_err + _c(d, _K2_LN2_3[0]) * cube_lo + _c(d, _K2_LN2_3[1]) * cube
    h, h_err = _two_sum(t1, t3)
    lo = h_err + t1_lo + t3_lo + cube * q * _poly(q, _LOG2_TAIL)
    w, w_err = _two_sum(e, h)
    return _two_sum(w, w_err + lo)


def _pow(x: UOp, y: UOp, fmt: _Format) -> UOp:
    """pow(x, y) = exp2(y * log2|x|) in float64, the product as a double-double, with the sign and special
    cases of C99."""
    d = dtypes.float64
    xd, yd = x.cast(d), y.cast(d)
    ax = _abs(xd, _F64)
    regular = (_c(d, 0.0) < ax) & (ax < _c(d, math.inf))  # log2 of 0, inf, nan is -inf, inf, nan
    l_hi, l_lo = _log2_dd(regular.where(ax, _c(d, 1.0)))
    z, z_err = _two_prod(yd, l_hi)
    z = regular.where(z, yd * ax.eq(_c(d, 0.0)).where(_c(d, -math.inf), ax))
    mag = _exp2(z, _F64, regular.where(z_err + yd * l_lo, _c(d, 0.0)))
    half = yd * _c(d, 0.5)
    y_int = yd.trunc().eq(yd)  # an integer (or infinite) exponent
    y_odd = y_int & half.trunc().ne(half)
    v = (_sign_bit(xd, _F64) & y_odd).where(-mag, mag)
    finite_neg = (xd < _c(d, 0.0)) & (_c(d, -math.inf) < xd)
    v = (finite_neg & y_int.logical_not()).where(_c(d, math.nan), v)
    one = yd.eq(_c(d, 0.0)) | xd.eq(_c(d, 1.0)) | (xd.eq(_c(d, -1.0)) & _abs(yd, _F64).eq(_c(d, math.inf)))
    return one.where(_c(d, 1.0), v).cast(fmt.dtype)


# ---- rules ---------------------------------------------------------------------------------------------

_NARROW = (dtypes.float16, dtypes.bfloat16)


def _unary(fn_f32, fn_f64):
    def rule(u: UOp) -> UOp | None:
        x, dt = u.src[0], u.dtype
        if dt.count != 1:
            return None
        if dt in _NARROW:
            return fn_f32(x.cast(dtypes.float32)).cast(dt)
        return {dtypes.float32: fn_f32, dtypes.float64: fn_f64}[dt](x) if dt in _FORMATS else None
    return rule


def _pow_rule(u: UOp) -> UOp | None:
    x, y = u.src
    if u.dtype.count != 1 or not (u.dtype in _FORMATS or u.dtype in _NARROW):
        return None
    return _pow(x, y, _F32 if u.dtype in _NARROW else _FORMATS[u.dtype]).cast(u.dtype)


_FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
decomp = PatternMatcher([
    (UPat(Ops.EXP2, dtype=_FLOATS, name="u"), _unary(lambda x: _exp2(x, _F32), lambda x: _exp2(x, _F64))),
    (UPat(Ops.LOG2, dtype=_FLOATS, name="u"), _unary(lambda x: _log2(x, _F32), lambda x: _log2(x, _F64))),
    (UPat(Ops.SIN, dtype=_FLOATS, name="u"), _unary(_sin_f32, _sin_f64)),
    (UPat(Ops.POW, dtype=_FLOATS, name="u"), _pow_rule),
])
