"""alu.py's values where C and LLVM leave a result undefined, on every device: division and remainder by 0 and
of MIN by -1, shifts by negative amounts and by the width or more (the divisor or amount a tensor and a constant:
a constant used to skip the run-time guards), float -> int casts of what the int cannot hold, and C99 pow of
negative bases. Each kernel's output buffer starts as a sentinel, so a store LLVM dropped as undefined shows as
the sentinel instead of passing by luck."""
from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest

from tg_core.device import Buffer, Device
from tg_core.dtype import DType, dtypes, to_numpy_dtype
from tg_core.tensor import Tensor
from tg_core.uop import KernelInfo, Ops, UOp
from tg_core.uop.alu import cast_const, exec_alu

DEVICES = ["PYTHON", "CPU:X86", "CPU:LLVM", "AMD"]
INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64,
        dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64]
SENTINEL = 0x5A


@pytest.fixture(params=DEVICES, scope="module")
def device(request) -> Iterator[str]:
    """The device name to run on; a CPU renderer is selected for the module and put back after."""
    name, _, renderer = request.param.partition(":")
    try:
        dev = Device[name]
    except Exception as e:  # e.g. no AMD interface here
        pytest.skip(f"{name} does not open: {type(e).__name__}: {e}")
    if not renderer:
        yield name
        return
    if renderer.upper() not in {r.name.upper() for r in dev.renderers}:
        pytest.skip(f"{name} offers no {renderer} renderer")
    before = dev.renderer.name
    dev.select_renderer(renderer)
    yield name
    dev.select_renderer(before)


def run_binary(device: str, op: Ops, dt: DType, ydt: DType, xs: list[int], ys: list[int],
               consts: list[int]) -> list[list[int]]:
    """One kernel: out0[i] = op(x[i], y[i]) and out_k[i] = op(x[i], consts[k-1]); the outputs as lists."""
    n = len(xs)
    x, y = UOp.param(0, dt.ptr(n)), UOp.param(1, ydt.ptr(n))
    outs = [UOp.param(2 + k, dt.ptr(n)) for k in range(len(consts) + 1)]
    r = UOp.range(n, 0)
    xv = x.index(r).load()
    amounts = [y.index(r).load(), *(UOp.const(ydt, c) for c in consts)]
    stores = [o.index(r).store(UOp(op, dt, (xv, a))).end(r) for o, a in zip(outs, amounts)]
    ast = UOp(Ops.SINK, dtypes.void, tuple(stores), KernelInfo(f"{op.name.lower()}_{dt.name}"))
    npdt = to_numpy_dtype(dt)
    bufs = [Buffer.from_numpy(np.array(xs, npdt), device), Buffer.from_numpy(np.array(ys, to_numpy_dtype(ydt)), device)]
    bufs += [Buffer.from_numpy(np.full(n * dt.itemsize, SENTINEL, np.uint8).view(npdt), device) for _ in outs]
    Device[device].get_runner(ast)(bufs, {})
    return [b.numpy().tolist() for b in bufs[2:]]


def _fit(dt: DType, values: list[int]) -> list[int]:
    """The values `dt` holds, in order, without repeats."""
    return list(dict.fromkeys(v for v in values if dtypes.min(dt) <= v <= dtypes.max(dt)))


def check(device: str, op: Ops, dt: DType, ydt: DType, xs: list[int], ys: list[int], consts: list[int]) -> None:
    """Every pair of x and y (and every x with each constant) against exec_alu."""
    px, py = [a for a in xs for _ in ys], [b for _ in xs for b in ys]
    got = run_binary(device, op, dt, ydt, px, py, consts)
    want = [[exec_alu(op, dt, (a, b)) for a, b in zip(px, py)]]
    want += [[exec_alu(op, dt, (a, c)) for a in px] for c in consts]
    for k, (g, w) in enumerate(zip(got, want)):
        what = "a tensor" if k == 0 else f"the constant {consts[k - 1]}"
        ys = py if k == 0 else [consts[k - 1]] * len(px)
        bad = [(a, b, gv, wv) for a, b, gv, wv in zip(px, ys, g, w) if gv != wv]
        assert not bad, f"{op.name} {dt!r} by {what} on {device}: (x, y, got, want) {bad[:6]}"


def _edge_values(dt: DType) -> list[int]:
    lo, hi = dtypes.min(dt), dtypes.max(dt)
    return _fit(dt, [0, 1, -1, 7, -7, 100, -100, lo, lo + 1, hi, hi - 1])


@pytest.mark.parametrize("op", [Ops.IDIV, Ops.MOD], ids=lambda o: o.name)
@pytest.mark.parametrize("dt", INTS, ids=str)
def test_division_by_zero_and_min_by_minus_one(device, op, dt):
    divisors = _fit(dt, [0, -1, 1, 2, -2, 3, 7, -7, dtypes.min(dt), dtypes.max(dt)])
    check(device, op, dt, dt, _edge_values(dt), divisors,
          _fit(dt, [0, -1, 1, 3, -7, 7, dtypes.min(dt), dtypes.max(dt)]))


@pytest.mark.parametrize("dt", INTS, ids=str)
def test_int_pow_with_negative_and_large_exponents(device, dt):
    """alu.py: the exact power wrapped for y >= 0, the truncated real power for y < 0 (0 ** -1 is 0)."""
    exponents = _fit(dt, [0, 1, 2, 3, 7, 31, 64, -1, -2, -3, dtypes.max(dt)])
    check(device, Ops.POW, dt, dt, _fit(dt, [0, 1, -1, 2, -2, 3, -3, 100, dtypes.min(dt), dtypes.max(dt)]), exponents,
          _fit(dt, [-1, -2, 0, 5, 63]))


# (value dtype, amount dtype): the Tensor layer shifts by the value's dtype; kernels may use another
SHIFT_TYPES = [(dt, dt) for dt in INTS] + [(dtypes.int8, dtypes.int32), (dtypes.uint8, dtypes.int64),
                                           (dtypes.int64, dtypes.uint8), (dtypes.int32, dtypes.int16)]


@pytest.mark.parametrize("op", [Ops.SHL, Ops.SHR], ids=lambda o: o.name)
@pytest.mark.parametrize("dt, ydt", SHIFT_TYPES, ids=lambda d: str(d))
def test_shifts_by_any_amount(device, op, dt, ydt):
    w = 8 * dt.itemsize
    amounts = _fit(ydt, [-1, -w, dtypes.min(ydt), 0, 1, w - 1, w, w + 1, 2 * w, 255, 256, 256 + 3, dtypes.max(ydt)])
    consts = _fit(ydt, [-1, w - 1, w, w + 5, 256 + 2, dtypes.max(ydt), dtypes.min(ydt)])
    check(device, op, dt, ydt, _edge_values(dt), amounts, consts)


def test_issue_rows_through_tensors(device):
    """The reported cases as the Tensor layer builds them (a previous result fills the allocator's cache first:
    a dropped store used to leave its bytes in the output)."""
    def t(values, dt=dtypes.int32):
        return Tensor(values, dtype=dt, device=device)
    (Tensor([1.5, 2.5], device=device) * 2).numpy()
    assert (t([7, -7]) // 0).numpy().tolist() == [0, 0]
    assert (t([7, -7]) // 0 + 1).numpy().tolist() == [1, 1]
    assert (t([7, -7]) % 0).numpy().tolist() == [0, 0]
    assert (t([1, 2]) << 40).numpy().tolist() == [0, 0]
    assert (t([-8, 8]) >> 33).numpy().tolist() == [-1, 0]
    assert (t([1, 2], dtypes.int8) << 9).numpy().tolist() == [0, 0]
    assert (t([1, 2]) << t([40, 1])).numpy().tolist() == [0, 4]
    assert (t([-8, 8]) >> t([33, -1])).numpy().tolist() == [-1, 0]


# ---- float pow: a negative base with an integer exponent, and C99's special cases -----------------------

POW_BASES = [-2.0, -3.0, -0.5, -1.0, -0.0, 0.0, 1.0, 2.5, -math.inf, math.inf, math.nan]
POW_EXPONENTS = [0.0, 1.0, 2.0, 3.0, 5.0, -1.0, -2.0, -3.0, 0.5, 1 / 3, -0.5, 10.0, math.inf, -math.inf, math.nan]


def check_pow(got: np.ndarray, bases: list[float], exponents: list[float], dt: DType, max_ulp: float,
              what: str) -> None:
    """`got` against alu.py's pow (C99's, via math.pow), rounded to `dt`: specials (NaN, inf, zeros with their
    sign) and exactly representable results must be exact, the rest within `max_ulp`."""
    npdt = to_numpy_dtype(dt)
    want = np.array([exec_alu(Ops.POW, dt, (b, e)) for b, e in zip(bases, exponents)], npdt)
    for b, e, g, w in zip(bases, exponents, got.astype(npdt).tolist(), want.tolist()):
        if math.isnan(w) or math.isinf(w) or w == 0 or w == math.trunc(w):
            ok = (math.isnan(g) and math.isnan(w)) or (g == w and math.copysign(1, g) == math.copysign(1, w))
        else:
            ok = abs(g - w) <= max_ulp * float(np.spacing(np.array(abs(w), npdt)))
        assert ok, f"{what}: pow({b}, {e}) in {dt!r} gave {g}, want {w}"


@pytest.mark.parametrize("dt, max_ulp", [(dtypes.float32, 1.0), (dtypes.float64, 2.0), (dtypes.float16, 1.0)], ids=str)
def test_pow_of_negative_bases(device, dt, max_ulp):
    bases = [b for b in POW_BASES for _ in POW_EXPONENTS]
    exponents = [e for _ in POW_BASES for e in POW_EXPONENTS]
    got = (Tensor(bases, dtype=dt, device=device) ** Tensor(exponents, dtype=dt, device=device)).numpy()
    check_pow(got, bases, exponents, dt, max_ulp, f"tensor exponents on {device}")
    for e in (3.0, 0.5, -2.0, 1 / 3):  # a Python exponent: the Tensor layer may take another path, same values
        got = (Tensor(POW_BASES, dtype=dt, device=device) ** e).numpy()
        check_pow(got, POW_BASES, [e] * len(POW_BASES), dt, max_ulp, f"the constant exponent {e} on {device}")


def test_pow_issue_row(device):
    assert (Tensor([-2.0, -3.0], device=device) ** 3.0).numpy().tolist() == [-8.0, -27.0]
    got = Tensor([-2.0, -2.0, -3.0, -2.0], device=device) ** Tensor([2.0, 3.0, 2.0, -2.0], device=device)
    assert got.numpy().tolist() == [4.0, -8.0, 9.0, 0.25]


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.int32, dtypes.uint32, dtypes.int64], ids=str)
def test_llvm_renderer_decides_constant_divisors(dt):
    """Symbolic folds x // 0 before a renderer sees it; the LLVM renderer must still not emit `sdiv x, 0` or
    `sdiv MIN, -1` (UB: LLVM drops the store) for a program that has one."""
    pytest.importorskip("llvmlite.binding")
    from tg_core.codegen.pipeline import linearize_kernel
    from tg_core.codegen.program import Program
    from tg_core.renderer.llvmir import LLVMRenderer

    from test_llvmir import compile_and_run
    xs = _edge_values(dt)
    n, npdt = len(xs), to_numpy_dtype(dt)
    for op in (Ops.IDIV, Ops.MOD):
        for c in _fit(dt, [0, -1, 3]):
            x, d, out = UOp.param(0, dt.ptr(n)), UOp.param(1, dt.ptr(1)), UOp.param(2, dt.ptr(n))
            r = UOp.range(n, 0)
            divisor = d.index(UOp.const(dtypes.weakint, 0)).load()
            ast = UOp(Ops.SINK, dtypes.void, (out.index(r).store(UOp(op, dt, (x.index(r).load(), divisor))).end(r),))
            prog = linearize_kernel(ast)
            # the same program with the loaded divisor replaced by the constant
            new: dict[UOp, UOp] = {}
            for u in prog.uops:
                new[u] = UOp.const(dt, c) if u.op is Ops.LOAD and u.src[0].src[0].arg == 1 else \
                    UOp(u.op, u.dtype, tuple(new.get(s, s) for s in u.src), u.arg, u.tag)
            prog = Program(prog.name, tuple(new[u] for u in prog.uops), prog.params, prog.variables)
            src = LLVMRenderer().render(prog)
            got = np.full(n, SENTINEL, npdt)
            compile_and_run(src, prog, [np.array(xs, npdt), np.zeros(1, npdt), got])
            assert got.tolist() == [exec_alu(op, dt, (v, c)) for v in xs], f"{op.name} by {c}:\n{src}"


# ---- float -> int casts: NaN, inf and out-of-range values give 0 ------------------------------------------

CAST_VALUES = [3e9, -3e9, 1e20, -1e20, math.nan, math.inf, -math.inf, 2147483647.0, 2147483520.0, -2147483648.0,
               -2147483649.0, 2.0 ** 63, -(2.0 ** 63), 2.0 ** 64, 300.0, 65535.9, 65536.0, -32768.9, -32769.0, 255.9,
               256.0, 127.9, 128.0, -128.9, -129.0, -1.0, -0.9, -0.0, 0.5, 5.5]


@pytest.mark.parametrize("src", [dtypes.float16, dtypes.float32, dtypes.float64], ids=str)
def test_float_to_int_casts_of_what_the_int_cannot_hold(device, src):
    npsrc = to_numpy_dtype(src)
    with np.errstate(over="ignore"):
        xs = np.array(CAST_VALUES, npsrc)
    n = len(xs)
    x = UOp.param(0, src.ptr(n))
    outs = [UOp.param(1 + k, dt.ptr(n)) for k, dt in enumerate(INTS)]
    r = UOp.range(n, 0)
    v = x.index(r).load()
    ast = UOp(Ops.SINK, dtypes.void, tuple(o.index(r).store(v.cast(dt)).end(r) for o, dt in zip(outs, INTS)),
              KernelInfo(f"casts_{src.name}"))
    bufs = [Buffer.from_numpy(xs, device)]
    bufs += [Buffer.from_numpy(np.full(n * dt.itemsize, SENTINEL, np.uint8).view(to_numpy_dtype(dt)), device)
             for dt in INTS]
    Device[device].get_runner(ast)(bufs, {})
    for dt, b in zip(INTS, bufs[1:]):
        want = [cast_const(float(a), src, dt) for a in xs.tolist()]
        bad = [(a, g, w) for a, g, w in zip(xs.tolist(), b.numpy().tolist(), want) if g != w]
        assert not bad, f"{src!r} -> {dt!r} on {device}: (x, got, want) {bad[:6]}"


def test_float_to_int32_casts_in_vector_lanes(device):
    """64 lanes of float32 -> int32 -> float32: X86 packs this into vcvttps2dq, which gives MIN outside."""
    xs = np.array([v for v in CAST_VALUES if abs(v) < 2.0 ** 40 or not math.isfinite(v)] * 4, np.float32)[:64]
    n = len(xs)
    x, out = UOp.param(0, dtypes.float32.ptr(n)), UOp.param(1, dtypes.float32.ptr(n))
    r = UOp.range(n, 0)
    value = x.index(r).load().cast(dtypes.int32).cast(dtypes.float32)
    ast = UOp(Ops.SINK, dtypes.void, (out.index(r).store(value).end(r),), KernelInfo("cast_lanes"))
    bufs = [Buffer.from_numpy(xs, device), Buffer.from_numpy(np.full(n, np.nan, np.float32), device)]
    Device[device].get_runner(ast)(bufs, {})
    want = [float(cast_const(a, dtypes.float32, dtypes.int32)) for a in xs.tolist()]
    assert bufs[1].numpy().tolist() == [float(np.float32(w)) for w in want]
