"""Exact scalar semantics of alu.py (exec_alu, cast_const, bitcast_const): C integer division, wrapping ints,
floats rounded to their dtype's grid. numpy is the reference where it has the type (array ops wrap silently);
bfloat16 and fp8 are checked against exact rational arithmetic rounded half-to-even here."""
import math
import struct
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tg_core.dtype import DType, dtypes, to_numpy_dtype
from tg_core.uop import Ops
from tg_core.uop.alu import bitcast_const, cast_const, exec_alu

INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64]
NP_FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]


def in_range(dt: DType) -> st.SearchStrategy[int]:
    return st.integers(dtypes.min(dt), dtypes.max(dt))


def np_arr(v, dt: DType) -> np.ndarray:
    return np.array([v], dtype=to_numpy_dtype(dt))


# ---- integers ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.int32, dtypes.int64, dtypes.weakint])
def test_idiv_truncates_and_mod_takes_the_dividends_sign(dt: DType):
    a = np.arange(-50, 51, dtype=np.int64)
    for b in [-7, -3, -2, -1, 1, 2, 3, 7, 50]:
        rem = np.fmod(a, b)  # C's %: the sign of the dividend
        quo = (a - rem) // b  # exact: a - rem is a multiple of b
        assert [exec_alu(Ops.IDIV, dt, (int(x), b)) for x in a] == quo.tolist()
        assert [exec_alu(Ops.MOD, dt, (int(x), b)) for x in a] == rem.tolist()
    assert exec_alu(Ops.IDIV, dt, (-7, 2)) == -3 and exec_alu(Ops.MOD, dt, (-7, 2)) == -1  # floor would give -4, 1
    assert exec_alu(Ops.IDIV, dt, (7, -2)) == -3 and exec_alu(Ops.MOD, dt, (7, -2)) == 1


def test_division_by_zero_is_zero():
    for dt in (dtypes.int32, dtypes.uint8, dtypes.weakint):
        assert exec_alu(Ops.IDIV, dt, (5, 0)) == 0 and exec_alu(Ops.MOD, dt, (-5, 0)) == 0
    # undefined int results from float math are the same 0, not an exception
    assert exec_alu(Ops.FDIV, dtypes.int32, (5, 0)) == 0 and exec_alu(Ops.POW, dtypes.int32, (0, -1)) == 0


def test_idiv_overflow_wraps():
    assert exec_alu(Ops.IDIV, dtypes.int32, (-2 ** 31, -1)) == -2 ** 31
    assert exec_alu(Ops.IDIV, dtypes.int8, (-128, -1)) == -128 and exec_alu(Ops.MOD, dtypes.int8, (-128, -1)) == 0


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_int_arithmetic_wraps_like_numpy(data):
    dt = data.draw(st.sampled_from(INTS))
    x, y = data.draw(in_range(dt)), data.draw(in_range(dt))
    a, b = np_arr(x, dt), np_arr(y, dt)
    with np.errstate(all="ignore"):
        cases = {Ops.ADD: a + b, Ops.SUB: a - b, Ops.MUL: a * b, Ops.MAX: np.maximum(a, b), Ops.AND: a & b,
                 Ops.OR: a | b, Ops.XOR: a ^ b, Ops.CMPLT: a < b, Ops.CMPNE: a != b, Ops.CMPEQ: a == b}
        for op, want in cases.items():
            out_dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt
            assert exec_alu(op, out_dt, (x, y), (dt, dt)) == want[0].item(), (op, dt, x, y)
        assert exec_alu(Ops.NEG, dt, (x,)) == (-a)[0].item()
        shift = data.draw(st.integers(0, 8 * dt.itemsize - 1))
        s = np_arr(shift, dt)
        assert exec_alu(Ops.SHL, dt, (x, shift)) == (a << s)[0].item()
        assert exec_alu(Ops.SHR, dt, (x, shift)) == (a >> s)[0].item()  # arithmetic for signed, as numpy
        if y != 0:
            rem = np.fmod(a, b)
            assert exec_alu(Ops.MOD, dt, (x, y)) == rem[0].item()
            if not (dtypes.min(dt) == x and y == -1):
                assert exec_alu(Ops.IDIV, dt, (x, y)) == ((a - rem) // b)[0].item()


def test_negative_shift_is_zero():
    assert exec_alu(Ops.SHL, dtypes.int32, (5, -1)) == 0 and exec_alu(Ops.SHR, dtypes.int32, (5, -1)) == 0


def test_weakint_never_wraps():
    big = 2 ** 100
    assert exec_alu(Ops.MUL, dtypes.weakint, (big, big)) == 2 ** 200
    assert exec_alu(Ops.ADD, dtypes.weakint, (-big, -1)) == -big - 1


def test_int_pow_is_exact():
    # math.pow would go through float64: 3**40 has more bits than a double keeps
    assert exec_alu(Ops.POW, dtypes.weakint, (3, 40)) == 3 ** 40
    assert exec_alu(Ops.POW, dtypes.int64, (3, 40)) == (np.array([3], np.int64) ** 40)[0].item()
    assert exec_alu(Ops.POW, dtypes.uint8, (3, 5)) == 243 and exec_alu(Ops.POW, dtypes.int8, (3, 5)) == 243 - 256
    assert exec_alu(Ops.POW, dtypes.int32, (-2, 3)) == -8 and exec_alu(Ops.POW, dtypes.int32, (7, 0)) == 1
    assert exec_alu(Ops.POW, dtypes.int32, (2, -1)) == 0 and exec_alu(Ops.POW, dtypes.int32, (-1, -3)) == -1


def test_bool_ops():
    assert exec_alu(Ops.NEG, dtypes.bool, (True,)) is False and exec_alu(Ops.NEG, dtypes.bool, (False,)) is True
    for x in (False, True):
        for y in (False, True):
            assert exec_alu(Ops.AND, dtypes.bool, (x, y)) is (x and y)
            assert exec_alu(Ops.OR, dtypes.bool, (x, y)) is (x or y)
            assert exec_alu(Ops.XOR, dtypes.bool, (x, y)) is (x != y)
            assert exec_alu(Ops.ADD, dtypes.bool, (x, y)) is (x or y)
            assert exec_alu(Ops.MUL, dtypes.bool, (x, y)) is (x and y)
            assert exec_alu(Ops.CMPLT, dtypes.bool, (x, y)) is (x < y)
    assert exec_alu(Ops.WHERE, dtypes.int8, (True, 1, 2), (dtypes.bool, dtypes.int8, dtypes.int8)) == 1
    assert exec_alu(Ops.WHERE, dtypes.int8, (0, 1, 2), (dtypes.bool, dtypes.int8, dtypes.int8)) == 2


def test_operands_are_converted_to_their_source_dtypes():
    # a weakint operand given as a float (e.g. from an env) truncates, a float operand is a float
    assert exec_alu(Ops.ADD, dtypes.weakint, (2.7, -2.7), (dtypes.weakint, dtypes.weakint)) == 0
    assert exec_alu(Ops.CMPLT, dtypes.bool, (2.7, 2), (dtypes.weakint, dtypes.weakint)) is False
    assert exec_alu(Ops.FDIV, dtypes.float32, (1, 4), (dtypes.float32, dtypes.float32)) == 0.25
    with pytest.raises(NotImplementedError, match="CAST"):
        exec_alu(Ops.CAST, dtypes.int32, (1,))


# ---- floats ---------------------------------------------------------------------------------------------

def np_float(x: float, dt: DType):
    return to_numpy_dtype(dt).type(x)


float_args = st.floats(allow_nan=True, allow_infinity=True, width=64)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(NP_FLOATS), float_args, float_args)
def test_float_binary_ops_round_like_numpy(dt: DType, x: float, y: float):
    with np.errstate(all="ignore"):
        a, b = np_float(x, dt), np_float(y, dt)
        fa, fb = float(a), float(b)  # operands on the dtype's grid, as constants of dt are
        cases = {Ops.ADD: a + b, Ops.SUB: a - b, Ops.MUL: a * b, Ops.FDIV: a / b, Ops.MAX: np.maximum(a, b),
                 Ops.CMPLT: a < b, Ops.CMPNE: a != b, Ops.CMPEQ: a == b}
    for op, want in cases.items():
        out_dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt
        got = exec_alu(op, out_dt, (fa, fb), (dt, dt))
        if op is Ops.MAX and got == 0 and want == 0:
            continue  # the sign of max(0.0, -0.0) is unspecified (IEEE), numpy and C differ
        assert same_float(got, want.item()), (op, dt, fa, fb, got, want)


def same_float(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1, a) == math.copysign(1, b)


def _correctly_rounded(fn: str, x: float, dt: DType):
    """exp2/log2 of x, computed with 200 bits by mpmath and rounded to dt: a reference that does not depend on
    the machine's libm or numpy's SIMD math (they differ by an ulp across CPUs)."""
    if math.isnan(x) or (fn == "log2" and x < 0):
        return np_float(math.nan, dt)
    if fn == "log2" and x == 0:
        return np_float(-math.inf, dt)
    if math.isinf(x):
        return np_float((math.inf if x > 0 else 0.0) if fn == "exp2" else math.inf, dt)
    with mpmath.workprec(200):
        v = mpmath.power(2, mpmath.mpf(x)) if fn == "exp2" else mpmath.log(mpmath.mpf(x), 2)
        # to float64 first (exact enough: the 1-ulp bound below covers the double rounding), then to dt
        return np_float(float(v) if abs(v) < 2 ** 1024 else math.inf, dt)


def within_one_ulp(got: float, want, dt: DType) -> bool:
    """got is want or one of its neighbours on dt's grid: exec_alu's exp2/log2 are libm's float64 results (within
    an ulp of the exact value, not always correctly rounded), rounded to dt."""
    t = to_numpy_dtype(dt).type
    if same_float(got, want.item()):
        return True
    return math.isfinite(want) and got in (np.nextafter(want, t(math.inf)).item(), np.nextafter(want, t(-math.inf)).item())


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(NP_FLOATS), float_args)
def test_float_unary_ops(dt: DType, x: float):
    with np.errstate(all="ignore"):
        a = np_float(x, dt)
        fa = float(a)
        # the reference for the exactly rounded ops: the float64 result (exact for these), rounded once to dt
        cases = {Ops.NEG: -a, Ops.TRUNC: np.trunc(a), Ops.SQRT: np_float(np.sqrt(np.float64(fa)), dt),
                 Ops.RECIPROCAL: np_float(np.float64(1.0) / np.float64(fa), dt)}
        transcendental = {Ops.EXP2: _correctly_rounded("exp2", fa, dt), Ops.LOG2: _correctly_rounded("log2", fa, dt)}
    for op, want in cases.items():
        assert same_float(exec_alu(op, dt, (fa,)), want.item()), (op, dt, fa)
    for op, want in transcendental.items():
        assert within_one_ulp(exec_alu(op, dt, (fa,)), want, dt), (op, dt, fa, exec_alu(op, dt, (fa,)), want)
    got = exec_alu(Ops.SIN, dt, (fa,))
    if math.isinf(fa) or math.isnan(fa):
        assert math.isnan(got)
    else:
        # exec_alu's sin is libm's sin rounded to dt, so this compares the same libm call with itself
        assert same_float(got, np_float(math.sin(fa), dt).item())


@pytest.mark.parametrize("fn,x", [("exp2", 1.90234375), ("log2", 1.061405429)])
def test_transcendental_cases_where_numpy_and_libm_differ(fn: str, x: float):
    # numpy's float64 exp2/log2 differ from libm by an ulp here on some CPUs (Sapphire Rapids): the reference
    # must not be either of them
    op = Ops.EXP2 if fn == "exp2" else Ops.LOG2
    for dt in NP_FLOATS:
        fa = float(np_float(x, dt))
        assert within_one_ulp(exec_alu(op, dt, (fa,)), _correctly_rounded(fn, fa, dt), dt)


def test_float_specials():
    f32 = dtypes.float32
    assert same_float(exec_alu(Ops.TRUNC, f32, (-0.5,)), -0.0) and same_float(exec_alu(Ops.TRUNC, f32, (0.5,)), 0.0)
    assert exec_alu(Ops.TRUNC, f32, (-2.5,)) == -2.0 and exec_alu(Ops.TRUNC, dtypes.float64, (1e300,)) == 1e300
    assert exec_alu(Ops.RECIPROCAL, f32, (-0.0,)) == -math.inf and exec_alu(Ops.RECIPROCAL, f32, (0.0,)) == math.inf
    assert exec_alu(Ops.LOG2, f32, (0.0,)) == -math.inf and math.isnan(exec_alu(Ops.LOG2, f32, (-1.0,)))
    assert math.isnan(exec_alu(Ops.SQRT, f32, (-1.0,))) and same_float(exec_alu(Ops.SQRT, f32, (-0.0,)), -0.0)
    assert exec_alu(Ops.EXP2, f32, (200.0,)) == math.inf and exec_alu(Ops.EXP2, dtypes.float64, (2000.0,)) == math.inf
    assert exec_alu(Ops.EXP2, f32, (-200.0,)) == 0.0
    assert math.isnan(exec_alu(Ops.FDIV, f32, (0.0, 0.0))) and exec_alu(Ops.FDIV, f32, (1.0, -0.0)) == -math.inf
    assert exec_alu(Ops.FDIV, f32, (-1.0, 0.0)) == -math.inf
    assert math.isnan(exec_alu(Ops.MAX, f32, (math.nan, 1.0))) and math.isnan(exec_alu(Ops.MAX, f32, (1.0, math.nan)))
    assert exec_alu(Ops.CMPNE, dtypes.bool, (math.nan, math.nan)) is True
    assert exec_alu(Ops.CMPEQ, dtypes.bool, (math.nan, math.nan)) is False
    assert exec_alu(Ops.POW, f32, (2.0, 0.5)) == float(np.float32(math.sqrt(2)))
    assert exec_alu(Ops.POW, f32, (0.0, -1.0)) == math.inf and math.isnan(exec_alu(Ops.POW, f32, (-8.0, 1 / 3)))
    assert exec_alu(Ops.POW, f32, (10.0, 400.0)) == math.inf
    # float32 arithmetic overflows to inf, it does not stay a large float64
    assert exec_alu(Ops.MUL, f32, (3e38, 10.0)) == math.inf and exec_alu(Ops.ADD, dtypes.float16, (65504.0, 8.0)) == 65504.0
    # 65520 is the tie between 65504 (odd mantissa) and 2**16: to even means up, to inf
    assert exec_alu(Ops.ADD, dtypes.float16, (65504.0, 16.0)) == math.inf
    assert exec_alu(Ops.MULACC, f32, (2.0, 3.0, 1.0)) == 7.0


def _bf16_round(x: Fraction) -> float:
    """Round an exact value to bfloat16 (8 exponent bits, 7 mantissa bits), half to even; overflow -> inf."""
    if x == 0:
        return 0.0
    ax = abs(x)
    e = -126
    while Fraction(2) ** (e + 1) <= ax:
        e += 1
    q = Fraction(2) ** (e - 7)
    n, r = divmod(ax, q)
    if r > q / 2 or (r == q / 2 and n % 2):
        n += 1
    v = n * q
    out = math.inf if v > (2 - Fraction(1, 128)) * Fraction(2) ** 127 else float(v)
    return out if x > 0 else -out


bf16_values = st.integers(0, 0xFFFF).map(lambda b: struct.unpack("<f", struct.pack("<I", b << 16))[0]).filter(
    lambda v: math.isfinite(v))


@settings(max_examples=300, deadline=None)
@given(bf16_values, bf16_values)
def test_bfloat16_arithmetic_is_rounded_once(x: float, y: float):
    bf = dtypes.bfloat16
    for op, exact in [(Ops.ADD, Fraction(x) + Fraction(y)), (Ops.MUL, Fraction(x) * Fraction(y)),
                      (Ops.SUB, Fraction(x) - Fraction(y))]:
        got = exec_alu(op, bf, (x, y), (bf, bf))
        want = _bf16_round(exact)
        assert got == want or (want == 0 and got == 0), (op, x, y)
    if y != 0:
        assert exec_alu(Ops.FDIV, bf, (x, y), (bf, bf)) == _bf16_round(Fraction(x) / Fraction(y)) or x == 0


def test_fp8_arithmetic_lands_on_the_grid():
    e4, e5 = dtypes.fp8e4m3, dtypes.fp8e5m2
    assert exec_alu(Ops.ADD, e4, (1.0, 0.0625)) == 1.0  # a tie (1 + half an ulp): to even
    assert exec_alu(Ops.ADD, e4, (1.125, 0.0625)) == 1.25  # tie, the other way
    assert exec_alu(Ops.MUL, e4, (400.0, 2.0)) == 448.0  # saturates: no inf in e4m3
    assert exec_alu(Ops.MUL, e5, (57344.0, 2.0)) == math.inf
    assert exec_alu(Ops.FDIV, e5, (1.0, 3.0)) == 0.3125  # 1/3 between 0.3125 and 0.375, nearer the first


# ---- casts ------------------------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.data())
def test_int_to_int_casts_wrap_like_numpy(data):
    src, dst = data.draw(st.sampled_from(INTS)), data.draw(st.sampled_from([*INTS, dtypes.bool]))
    x = data.draw(in_range(src))
    assert cast_const(x, src, dst) == np_arr(x, src).astype(to_numpy_dtype(dst))[0].item()


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e6, 1e6), st.sampled_from([dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint32]))
def test_float_to_int_casts_truncate(x: float, dst: DType):
    if dtypes.min(dst) <= math.trunc(x) <= dtypes.max(dst):
        assert cast_const(x, dtypes.float64, dst) == int(np.float64(x).astype(to_numpy_dtype(dst)))
        assert cast_const(x, dtypes.float64, dst) == math.trunc(x)
    assert cast_const(x, dtypes.float64, dtypes.weakint) == math.trunc(x)


def test_cast_specials():
    for v in (math.nan, math.inf, -math.inf):
        assert cast_const(v, dtypes.float32, dtypes.int32) == 0  # undefined in C; a fixed value
        assert cast_const(v, dtypes.float32, dtypes.weakint) == 0
    assert cast_const(math.nan, dtypes.float32, dtypes.bool) is True and cast_const(-0.0, dtypes.float32, dtypes.bool) is False
    assert cast_const(-0.9, dtypes.float32, dtypes.uint8) == 0 and cast_const(255.9, dtypes.float32, dtypes.uint8) == 255
    assert cast_const(True, dtypes.bool, dtypes.float16) == 1.0 and cast_const(True, dtypes.bool, dtypes.int8) == 1
    assert cast_const(2 ** 24 + 1, dtypes.int32, dtypes.float32) == 2 ** 24
    assert cast_const(65520.0, dtypes.float32, dtypes.float16) == math.inf
    assert cast_const(-300, dtypes.weakint, dtypes.uint8) == 212


@settings(max_examples=300, deadline=None)
@given(st.floats(width=64))
def test_float_to_float_casts_match_numpy(x: float):
    with np.errstate(all="ignore"):
        assert same_float(cast_const(x, dtypes.float64, dtypes.float32), float(np.float32(x)))
        x32 = float(np.float32(x))
        assert same_float(cast_const(x32, dtypes.float32, dtypes.float16), float(np.float16(np.float32(x32))))
        h = float(np.float16(x))
        assert same_float(cast_const(h, dtypes.float16, dtypes.float64), h)


@settings(max_examples=200, deadline=None)
@given(st.integers(-2 ** 63, 2 ** 63 - 1))
def test_int_to_float_casts_match_numpy(x: int):
    assert cast_const(x, dtypes.int64, dtypes.float32) == float(np.int64(x).astype(np.float32))
    assert cast_const(x, dtypes.int64, dtypes.float64) == float(np.int64(x).astype(np.float64))


# ---- bitcasts --------------------------------------------------------------------------------------------

BITCAST_PAIRS = [(dtypes.float32, dtypes.int32), (dtypes.float32, dtypes.uint32), (dtypes.float16, dtypes.int16),
                 (dtypes.float16, dtypes.uint16), (dtypes.float64, dtypes.int64), (dtypes.float64, dtypes.uint64),
                 (dtypes.int8, dtypes.uint8), (dtypes.int32, dtypes.uint32)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(BITCAST_PAIRS), st.data())
def test_bitcasts_match_numpy_views(pair, data):
    fdt, idt = pair
    x = data.draw(in_range(idt))
    want = np_arr(x, idt).view(to_numpy_dtype(fdt))[0].item()
    got = bitcast_const(x, idt, fdt)
    assert same_float(got, want) if dtypes.is_float(fdt) else got == want
    if dtypes.is_float(fdt) and not math.isnan(got):
        assert bitcast_const(got, fdt, idt) == x  # and back


def test_bfloat16_bitcasts():
    assert bitcast_const(1.0, dtypes.bfloat16, dtypes.uint16) == 0x3F80
    assert bitcast_const(-2.0, dtypes.bfloat16, dtypes.int16) == struct.unpack("<h", struct.pack("<H", 0xC000))[0]
    assert bitcast_const(0x3FC0, dtypes.uint16, dtypes.bfloat16) == 1.5
    assert bitcast_const(0x7F80, dtypes.uint16, dtypes.bfloat16) == math.inf
    assert bitcast_const(-1, dtypes.int16, dtypes.uint16) == 0xFFFF


def test_bitcast_errors():
    with pytest.raises(ValueError, match="changes the size"):
        bitcast_const(1.0, dtypes.float32, dtypes.int16)
    with pytest.raises(TypeError, match="not supported"):
        bitcast_const(1.0, dtypes.fp8e4m3, dtypes.uint8)
