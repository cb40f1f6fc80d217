"""dtypes: names, sizes, ranges, the promotion lattice, weak dtypes, constants on each dtype's grid, numpy interop.

Float grids are checked against numpy where numpy has the type, and against references written here
(independently of tg_core) for bfloat16 and fp8."""
import itertools
import math
import pickle
import struct
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tg_core.dtype import (
    DType,
    PtrDType,
    as_const,
    dtypes,
    from_numpy_dtype,
    least_upper_dtype,
    least_upper_float,
    sum_acc_dtype,
    to_dtype,
    to_numpy_dtype,
)
from tg_core.uop import UOp

NP_PAIRS = [(dtypes.bool, np.bool_), (dtypes.int8, np.int8), (dtypes.int16, np.int16), (dtypes.int32, np.int32),
            (dtypes.int64, np.int64), (dtypes.uint8, np.uint8), (dtypes.uint16, np.uint16), (dtypes.uint32, np.uint32),
            (dtypes.uint64, np.uint64), (dtypes.float16, np.float16), (dtypes.float32, np.float32),
            (dtypes.float64, np.float64)]
INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64]
FLOATS = [dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
STRONG = [dtypes.bool, *INTS, *FLOATS]


# ---- names, sizes, ranges -----------------------------------------------------------------------------

def test_tinygrad_names_and_aliases():
    assert dtypes.int is dtypes.int32 and dtypes.uint is dtypes.uint32
    assert dtypes.long is dtypes.int64 and dtypes.ulong is dtypes.uint64
    assert dtypes.char is dtypes.int8 and dtypes.uchar is dtypes.uint8
    assert dtypes.short is dtypes.int16 and dtypes.ushort is dtypes.uint16
    assert dtypes.half is dtypes.float16 and dtypes.float is dtypes.float32 and dtypes.double is dtypes.float64
    assert dtypes.index is dtypes.weakint
    assert dtypes.default_float is dtypes.float32 and dtypes.default_int is dtypes.int32
    assert len(set(STRONG) | {dtypes.weakint, dtypes.weakfloat}) == 17


@pytest.mark.parametrize("dt, npt", NP_PAIRS, ids=[d.name for d, _ in NP_PAIRS])
def test_itemsize_fmt_and_range_match_numpy(dt: DType, npt):
    assert dt.itemsize == np.dtype(npt).itemsize
    assert struct.calcsize(dt.fmt) == dt.itemsize
    # the struct format reads back a numpy value of that type unchanged
    val = np.array([1], dtype=npt)[0]
    assert struct.unpack(dt.fmt, val.tobytes())[0] == val
    if dt is dtypes.bool:
        assert (dtypes.min(dt), dtypes.max(dt)) == (False, True)
    elif dtypes.is_int(dt):
        info = np.iinfo(npt)
        assert (dtypes.min(dt), dtypes.max(dt)) == (int(info.min), int(info.max))
    else:
        assert (dtypes.min(dt), dtypes.max(dt)) == (-math.inf, math.inf)
        info = np.finfo(npt)
        assert dtypes.finfo(dt) == (info.nexp, info.nmant)


def test_sizes_and_formats_without_numpy_type():
    assert [d.itemsize for d in (dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2)] == [2, 1, 1]
    assert dtypes.bfloat16.fmt is None and dtypes.fp8e4m3.fmt is None
    assert dtypes.finfo(dtypes.bfloat16) == (8, 7)
    assert dtypes.finfo(dtypes.fp8e4m3) == (4, 3) and dtypes.finfo(dtypes.fp8e5m2) == (5, 2)
    with pytest.raises(ValueError, match="float dtype"):
        dtypes.finfo(dtypes.int32)
    with pytest.raises(ValueError, match="no value range"):
        dtypes.min(dtypes.void)


def test_kind_queries():
    assert [d for d in STRONG if dtypes.is_int(d)] == INTS
    assert [d for d in STRONG if dtypes.is_float(d)] == FLOATS
    assert [d for d in STRONG if dtypes.is_unsigned(d)] == INTS[4:]
    assert [d for d in STRONG if dtypes.is_fp8(d)] == [dtypes.fp8e4m3, dtypes.fp8e5m2]
    assert dtypes.is_bool(dtypes.bool) and not dtypes.is_int(dtypes.bool) and not dtypes.is_float(dtypes.bool)
    assert dtypes.is_int(dtypes.weakint) and dtypes.is_float(dtypes.weakfloat)
    assert dtypes.is_weak(dtypes.weakint) and dtypes.is_weak(dtypes.weakfloat.vec(2))
    assert not any(dtypes.is_weak(d) for d in STRONG)
    # vectors are classified by their scalar
    assert dtypes.is_float(dtypes.half.vec(4)) and dtypes.is_unsigned(dtypes.uint8.vec(2))


def test_vectors_and_pointers():
    v = dtypes.float32.vec(4)
    assert (v.count, v.itemsize, v.nbytes, v.scalar()) == (4, 4, 16, dtypes.float32)
    assert v is dtypes.float32.vec(4) and dtypes.float32.vec(1) is dtypes.float32
    assert repr(v) == "dtypes.float.vec(4)" and repr(dtypes.int8) == "dtypes.char"
    with pytest.raises(ValueError, match="already a vector"):
        v.vec(2)
    with pytest.raises(ValueError, match=">= 1"):
        dtypes.int32.vec(0)
    p = dtypes.int16.ptr(100)
    assert isinstance(p, PtrDType) and p.base is dtypes.int16 and p.size == 100 and p.scalar() is dtypes.int16
    assert p != dtypes.int16 and p is dtypes.int16.ptr(100) and p is not dtypes.int16.ptr(101)
    with pytest.raises(ValueError):
        p.ptr()
    with pytest.raises(ValueError):
        p.vec(2)


def test_dtypes_pickle_to_the_same_object():
    for dt in [*STRONG, dtypes.weakint, dtypes.float32.vec(4), dtypes.uint8.ptr(16)]:
        assert pickle.loads(pickle.dumps(dt)) is dt


def test_from_py():
    assert dtypes.from_py(True) is dtypes.bool
    assert dtypes.from_py(3) is dtypes.weakint and dtypes.from_py(3.0) is dtypes.weakfloat
    assert dtypes.from_py([1, 2]) is dtypes.weakint and dtypes.from_py([1, 2.5]) is dtypes.weakfloat
    assert dtypes.from_py([True, 1]) is dtypes.default_int
    assert dtypes.from_py([[True], [2.5]]) is dtypes.default_float
    with pytest.raises(TypeError, match="str"):
        dtypes.from_py("1")


def test_numpy_interop():
    for dt, npt in NP_PAIRS:
        assert to_numpy_dtype(dt) == np.dtype(npt)
        assert from_numpy_dtype(npt) is dt and from_numpy_dtype(np.dtype(npt)) is dt
        assert to_numpy_dtype(dt.vec(2)) == np.dtype(npt)
    # no numpy equivalent: stored as raw bits
    assert to_numpy_dtype(dtypes.bfloat16) == np.uint16 and to_numpy_dtype(dtypes.fp8e5m2) == np.uint8
    with pytest.raises(TypeError, match="weak"):
        to_numpy_dtype(dtypes.weakint)
    with pytest.raises(TypeError, match="complex64 is not supported; supported: .*float32"):
        from_numpy_dtype(np.complex64)


def test_to_dtype():
    assert to_dtype("float32") is dtypes.float32 and to_dtype("half") is dtypes.float16
    assert to_dtype("int") is dtypes.int32 and to_dtype("uchar") is dtypes.uint8
    assert to_dtype(np.int16) is dtypes.int16 and to_dtype(dtypes.bool) is dtypes.bool
    with pytest.raises(TypeError, match="did you mean float32"):
        to_dtype("flaot32")


# ---- promotion ----------------------------------------------------------------------------------------

def _torch_promote(a: DType, b: DType) -> DType | None:
    """PyTorch's result dtype for two tensors, written from its documented rules; None where PyTorch has no
    rule (it refuses to promote uint64 with a signed int, and fp8 types with each other)."""
    if a is b:
        return a
    fa, fb = dtypes.is_float(a), dtypes.is_float(b)
    if fa and not fb:
        return a  # a float tensor keeps its dtype when it meets an integer or bool tensor
    if fb and not fa:
        return b
    if not fa:
        if {a, b} & {dtypes.uint64} and {a, b} & {dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64}:
            return None
        return from_numpy_dtype(np.promote_types(to_numpy_dtype(a), to_numpy_dtype(b)))
    if dtypes.is_fp8(a) and dtypes.is_fp8(b):
        return None
    if dtypes.is_fp8(a) or dtypes.is_fp8(b):
        return b if dtypes.is_fp8(a) else a
    if {a, b} == {dtypes.float16, dtypes.bfloat16}:
        return dtypes.float32
    return max(a, b, key=lambda d: d.itemsize)


@pytest.mark.parametrize("a", STRONG, ids=[d.name for d in STRONG])
def test_promotion_matches_pytorch(a: DType):
    for b in STRONG:
        expected = _torch_promote(a, b)
        got = _lub_or_none(a, b)
        assert got is _lub_or_none(b, a)
        if expected is not None:
            assert got is expected, (a, b)


def test_promotion_where_pytorch_has_no_rule():
    # fp8e4m3 with fp8e5m2: the lattice has two minimal upper bounds; like tinygrad we take the lower priority
    assert least_upper_dtype(dtypes.fp8e4m3, dtypes.fp8e5m2) is dtypes.float16
    # uint64 with a signed int: no integer holds both; PyTorch raises, and so do we (never an fp8)
    for s in (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64):
        for args in ((s, dtypes.uint64), (dtypes.uint64, s), (s, dtypes.uint64, dtypes.bool),
                     (s, dtypes.uint64, dtypes.weakint), (dtypes.uint32, s, dtypes.uint64)):
            with pytest.raises(TypeError, match="no common dtype .*uint64.*cast an operand"):
                least_upper_dtype(*args)
    # with a float among them the float wins, as for any int: every pair has a join then
    assert least_upper_dtype(dtypes.int64, dtypes.uint64, dtypes.float16) is dtypes.float16


def _lub_or_none(*ds: DType) -> DType | None:
    try:
        return least_upper_dtype(*ds)
    except TypeError:
        return None


def test_promotion_of_every_pair_is_sane():
    """Every pair of dtypes (weak ones included): commutative, an upper bound of both (each operand converts
    to it without leaving its kind: an int never becomes a bool, a float never an int), idempotent, an fp8
    only when an operand is one, and an error only for uint64 with a signed int."""
    every = [dtypes.weakint, dtypes.weakfloat, *STRONG]
    signed = {dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64}
    for a, b in itertools.product(every, repeat=2):
        got = _lub_or_none(a, b)
        assert got is _lub_or_none(b, a), (a, b)
        if got is None:
            assert {a, b} & {dtypes.uint64} and {a, b} & signed, (a, b)
            continue
        assert _lub_or_none(a, got) is got and _lub_or_none(got, got) is got, (a, b, got)
        if dtypes.is_fp8(got):
            assert dtypes.is_fp8(a) or dtypes.is_fp8(b), (a, b, got)
        for d in (a, b):
            if dtypes.is_float(d):
                assert dtypes.is_float(got), (a, b, got)
            if dtypes.is_int(d):
                assert dtypes.is_int(got) or dtypes.is_float(got), (a, b, got)
            if not dtypes.is_weak(d) and dtypes.is_int(d) and dtypes.is_int(got) and not dtypes.is_weak(got):
                # an integer result holds every value of each integer operand
                assert dtypes.min(got) <= dtypes.min(d) and dtypes.max(d) <= dtypes.max(got), (a, b, got)


def test_promotion_is_a_join():
    ambiguous = {frozenset({dtypes.fp8e4m3, dtypes.fp8e5m2})}
    for a, b, c in itertools.product(STRONG, repeat=3):
        pairs = {frozenset({a, b}), frozenset({b, c}), frozenset({a, c})}
        ab = _lub_or_none(a, b)
        if ab is None:
            continue
        assert least_upper_dtype(a, a) is a and least_upper_dtype(a, ab) is ab
        bc, abc = _lub_or_none(b, c), _lub_or_none(a, b, c)
        if not pairs & ambiguous and frozenset({ab, c}) not in ambiguous and bc is not None and abc is not None:
            assert least_upper_dtype(ab, c) is least_upper_dtype(a, bc) is abc


def test_weak_dtypes_adopt_what_they_meet():
    for d in STRONG:
        want_int = dtypes.default_int if d is dtypes.bool else d
        assert least_upper_dtype(d, dtypes.weakint) is want_int
        assert least_upper_dtype(dtypes.weakint, d, dtypes.weakint) is want_int
        want_float = d if dtypes.is_float(d) else dtypes.default_float
        assert least_upper_dtype(d, dtypes.weakfloat) is want_float
        assert least_upper_dtype(d, dtypes.weakint, dtypes.weakfloat) is want_float
    assert least_upper_dtype(dtypes.weakint) is dtypes.weakint
    assert least_upper_dtype(dtypes.weakint, dtypes.weakfloat) is dtypes.weakfloat
    assert least_upper_dtype(dtypes.int8.vec(4), dtypes.weakint) is dtypes.int8
    with pytest.raises(ValueError):
        least_upper_dtype()
    with pytest.raises(TypeError, match="void"):
        least_upper_dtype(dtypes.void, dtypes.int32)


def test_python_scalars_are_weak_in_uop_arithmetic():
    x8 = UOp.variable("x8", -100, 100, dtypes.int8)
    assert (x8 + 3).dtype is dtypes.int8 and (3 * x8).dtype is dtypes.int8
    assert (x8 + 3).evaluate({x8: 126}) == -127  # int8 wraps
    # int + Python float is the default float (PyTorch), with the float's value kept
    y = x8 + 2.5
    assert y.dtype is dtypes.float32 and y.evaluate({x8: 1}) == 3.5
    assert (2.5 - x8).evaluate({x8: 1}) == 1.5 and (x8 * 0.5).evaluate({x8: 3}) == 1.5
    assert (x8 < 2.5).evaluate({x8: 2}) is True
    h = UOp.variable("h", -1.0, 1.0, dtypes.float16)
    assert (h + 1).dtype is dtypes.float16 and (h * 1e-3).dtype is dtypes.float16
    b = UOp.variable("b", False, True, dtypes.bool)
    assert (b + 1).dtype is dtypes.default_int and (b + 1).evaluate({b: True}) == 2
    assert (b - 1).evaluate({b: True}) == 0 and (b - 1).evaluate({b: False}) == -1
    assert (1 - b).evaluate({b: True}) == 0 and (1 - b).evaluate({b: False}) == 1
    assert (b * 2.5).dtype is dtypes.default_float and (b * 2.5).evaluate({b: True}) == 2.5
    assert (b & True).dtype is dtypes.bool
    with pytest.raises(TypeError, match="subtracting bools"):
        b - True
    i = UOp.variable("i", 0, 10)
    assert (i + 2.5).dtype is dtypes.weakfloat and (i + 2.5).evaluate({i: 1}) == 3.5
    assert (i + 2).dtype is dtypes.weakint


def test_where_with_python_branches_is_weak_too():
    x = UOp.variable("x", 0, 10, dtypes.int32)
    w = (x < 3).where(x, 2.5)
    assert w.dtype is dtypes.float32 and w.evaluate({x: 5}) == 2.5 and w.evaluate({x: 1}) == 1.0
    w2 = (x < 3).where(7, x)
    assert w2.dtype is dtypes.int32 and w2.evaluate({x: 1}) == 7
    w3 = (x < 3).where(1, 0.5)
    assert w3.dtype is dtypes.weakfloat and w3.evaluate({x: 9}) == 0.5


def test_weakint_of_a_float_truncates_for_every_consumer():
    f = UOp.variable("f", -2.75, 2.75, dtypes.float32)
    i = f.cast(dtypes.weakint)
    for v, want in [(2.75, 2), (-2.75, -2), (0.5, 0), (-0.5, 0)]:
        assert i.evaluate({f: v}) == want
        assert (i < 1).evaluate({f: v}) is (want < 1)          # compare
        assert (i * 3 + 1).evaluate({f: v}) == want * 3 + 1     # arithmetic
        assert (i // 2).evaluate({f: v}) == int(want / 2)
    assert (i.vmin, i.vmax) == (-2, 2)
    assert ((i < 3).vmin, (i < 3).vmax) == (True, True)
    assert (i * 3 + 1).vmax == 7 and (i * 3 + 1).vmin == -5
    assert UOp.const(dtypes.weakint, -2.75).arg == -2 and as_const(7.9, dtypes.weakint) == 7


def test_accumulator_and_float_dtypes():
    assert sum_acc_dtype(dtypes.bool) is dtypes.int32 and sum_acc_dtype(dtypes.int8) is dtypes.int32
    assert sum_acc_dtype(dtypes.uint8) is dtypes.uint32 and sum_acc_dtype(dtypes.int64) is dtypes.int64
    assert sum_acc_dtype(dtypes.uint64) is dtypes.uint64
    assert sum_acc_dtype(dtypes.float16) is dtypes.float32 and sum_acc_dtype(dtypes.float64) is dtypes.float64
    assert least_upper_float(dtypes.int64) is dtypes.float32 and least_upper_float(dtypes.half) is dtypes.half


# ---- constants: ints wrap, floats round to the grid --------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.integers(-2 ** 70, 2 ** 70), st.sampled_from(INTS))
def test_int_constants_wrap_like_numpy(v: int, dt: DType):
    want = np.array([v & (2 ** 64 - 1)], dtype=np.uint64).astype(to_numpy_dtype(dt))[0]
    assert as_const(v, dt) == int(want)
    assert as_const(v, dtypes.weakint) == v


def test_special_constants():
    assert as_const(2.9, dtypes.int32) == 2 and as_const(-2.9, dtypes.int8) == -2
    assert as_const(300.5, dtypes.uint8) == 44
    assert as_const(2, dtypes.bool) is True and as_const(0.0, dtypes.bool) is False
    assert as_const(math.nan, dtypes.bool) is True
    with pytest.raises(ValueError, match="nan"):
        as_const(math.nan, dtypes.int32)
    assert math.isnan(as_const(math.nan, dtypes.bfloat16))
    assert math.copysign(1.0, as_const(-0.0, dtypes.fp8e5m2)) == -1.0
    assert as_const(True, dtypes.float16) == 1.0 and type(as_const(1, dtypes.float32)) is float
    with pytest.raises(TypeError):
        as_const(1, dtypes.void)


finite_f64 = st.floats(allow_nan=False, allow_infinity=True, width=64)


@settings(max_examples=300, deadline=None)
@given(finite_f64)
def test_float16_float32_float64_grids_match_numpy(x: float):
    with np.errstate(over="ignore"):
        assert as_const(x, dtypes.float16) == float(np.float16(x))
        assert as_const(x, dtypes.float32) == float(np.float32(x))
    assert as_const(x, dtypes.float64) == x and as_const(x, dtypes.weakfloat) == x


def test_float32_and_float16_round_near_their_overflow_thresholds():
    fmax = float(np.finfo(np.float32).max)
    halfway = fmax + 2.0 ** 103
    assert as_const(np.nextafter(halfway, 0), dtypes.float32) == fmax
    assert as_const(halfway, dtypes.float32) == math.inf and as_const(-halfway, dtypes.float32) == -math.inf
    assert as_const(np.nextafter(65520.0, 0), dtypes.float16) == 65504.0 == float(np.float16(np.nextafter(65520.0, 0)))
    assert as_const(65520.0, dtypes.float16) == math.inf and as_const(-65520.0, dtypes.float16) == -math.inf


@settings(max_examples=300, deadline=None)
@given(st.integers(-2 ** 80, 2 ** 80))
def test_big_ints_round_once_onto_float_grids(v: int):
    # numpy converts int64 with the hardware, which rounds once: the reference for float32 and float64
    if -2 ** 63 <= v < 2 ** 63:
        assert as_const(v, dtypes.float32) == float(np.float32(np.int64(v)))
        assert as_const(v, dtypes.float64) == float(np.float64(np.int64(v)))
    assert as_const(v, dtypes.float32) == _round_exact(Fraction(v), 8, 23, inf=True)
    assert as_const(v, dtypes.bfloat16) == _round_exact(Fraction(v), 8, 7, inf=True)


def test_int_to_float32_double_rounding_case():
    v = 2 ** 60 + 2 ** 36 + 1  # float64(v) is a float32 tie; v itself is above it
    assert as_const(v, dtypes.float32) == 2 ** 60 + 2 ** 37 == float(np.float32(np.int64(v)))
    assert as_const(-v, dtypes.float32) == -(2 ** 60 + 2 ** 37)
    assert as_const(2 ** 2000, dtypes.float64) == math.inf and as_const(-(2 ** 2000), dtypes.float16) == -math.inf


def _bf16_reference(x: float) -> float:
    """bfloat16 of a float32 value: the top 16 bits of the float32, rounded to nearest even."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if math.isnan(x):
        return x
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return struct.unpack("<f", struct.pack("<I", (bits << 16) & 0xFFFFFFFF))[0]


@settings(max_examples=400, deadline=None)
@given(st.floats(width=32, allow_nan=False))
def test_bfloat16_grid(x: float):
    assert as_const(x, dtypes.bfloat16) == _bf16_reference(x)


def test_bfloat16_ties_and_edges():
    for x in [1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.3895313892515355e38, 3.3961e38, 1e-40, -1e-45, 2.0 ** -133]:
        x32 = float(np.float32(x))
        assert as_const(x32, dtypes.bfloat16) == _bf16_reference(x32), x
    assert as_const(1 + 2 ** -8, dtypes.bfloat16) == 1.0 and as_const(1 + 3 * 2 ** -8, dtypes.bfloat16) == 1 + 2 ** -6


def _fp8_values(ebits: int, mbits: int, ieee: bool) -> list[Fraction]:
    """Every finite non-negative value of a float format, enumerated from its bit patterns."""
    bias = 2 ** (ebits - 1) - 1
    out = []
    for e in range(2 ** ebits):
        for m in range(2 ** mbits):
            if ieee and e == 2 ** ebits - 1:
                continue  # inf / NaN
            if not ieee and e == 2 ** ebits - 1 and m == 2 ** mbits - 1:
                continue  # e4m3fn: the only NaN, and no infinity
            if e == 0:
                out.append(Fraction(m, 2 ** mbits) * Fraction(2) ** (1 - bias))
            else:
                out.append((1 + Fraction(m, 2 ** mbits)) * Fraction(2) ** (e - bias))
    return out


_GRIDS = {dtypes.fp8e4m3: _fp8_values(4, 3, False), dtypes.fp8e5m2: _fp8_values(5, 2, True)}


def _round_exact(x: Fraction, ebits: int, mbits: int, inf: bool, largest: Fraction | None = None) -> float:
    """Round-to-nearest-even of an exact value onto a binary format, by exact arithmetic on the grid
    spacing (independent of the float machinery under test). `inf`: overflow goes to infinity, else saturates."""
    if x == 0:
        return 0.0
    sign, ax = (-1 if x < 0 else 1), abs(x)
    bias = 2 ** (ebits - 1) - 1
    e = max(ax.numerator.bit_length() - ax.denominator.bit_length(), 1 - bias)
    while Fraction(2) ** (e + 1) <= ax:
        e += 1
    while e > 1 - bias and Fraction(2) ** e > ax:
        e -= 1
    q = Fraction(2) ** (e - mbits)
    n, r = divmod(ax, q)
    if r > q / 2 or (r == q / 2 and n % 2 == 1):
        n += 1
    val = n * q
    if largest is None:
        largest = (2 - Fraction(1, 2 ** mbits)) * Fraction(2) ** (2 ** ebits - 2 - bias)
    if val > largest:
        return sign * math.inf if inf else sign * float(largest)
    return sign * float(val)


@pytest.mark.parametrize("dt", [dtypes.fp8e4m3, dtypes.fp8e5m2])
def test_fp8_grid_holds_exactly_the_format_values(dt: DType):
    grid = _GRIDS[dt]
    for v in grid:
        assert as_const(float(v), dt) == float(v) and as_const(-float(v), dt) == -float(v)
    # midpoints round to the neighbour whose last mantissa bit is 0 (ties to even): every other one goes up
    ordered = sorted(set(grid))
    for i, (lo, hi) in enumerate(zip(ordered, ordered[1:])):
        mid = float((lo + hi) / 2)
        assert as_const(mid, dt) == float(lo if i % 2 == 0 else hi), (lo, hi)
    assert max(grid) == (448 if dt is dtypes.fp8e4m3 else 57344)


@settings(max_examples=400, deadline=None)
@given(st.floats(-70000, 70000, allow_nan=False), st.sampled_from([dtypes.fp8e4m3, dtypes.fp8e5m2]))
def test_fp8_rounding(x: float, dt: DType):
    ebits, mbits = dtypes.finfo(dt)
    # e4m3fn uses its top exponent for numbers (largest 448, no inf) and constants saturate ("satfinite")
    largest = Fraction(448) if dt is dtypes.fp8e4m3 else None
    assert as_const(x, dt) == _round_exact(Fraction(x), ebits, mbits, inf=dt is dtypes.fp8e5m2, largest=largest)


def test_fp8_overflow_and_infinity():
    assert as_const(1e6, dtypes.fp8e5m2) == math.inf and as_const(-1e6, dtypes.fp8e5m2) == -math.inf
    assert as_const(61439.0, dtypes.fp8e5m2) == 57344 and as_const(61440.0, dtypes.fp8e5m2) == math.inf
    # e4m3 has no infinity: every overflow, infinity included, saturates to the largest finite value
    for x in (464.0, 1e6, math.inf):
        assert as_const(x, dtypes.fp8e4m3) == 448 and as_const(-x, dtypes.fp8e4m3) == -448
    assert as_const(2.0 ** -10, dtypes.fp8e4m3) == 0.0 and as_const(2.0 ** -9, dtypes.fp8e4m3) == 2.0 ** -9
    assert math.isnan(as_const(math.nan, dtypes.fp8e4m3))
