"""Transcendental decompositions (tg_core/codegen/lib/decomp.py): EXP2, LOG2, SIN and POW rewritten into plain ALU
ops, JIT-compiled through the LLVM renderer (strict IEEE, no math library left in the program) and compared
with numpy evaluated in extended precision: the maximum error in ulp over wide ranges, and exact results for
special values (nan, inf, signed zeros, subnormals)."""
import numpy as np
import pytest

from tg_core.codegen.lib.decomp import decomp
from tg_core.dtype import DType, dtypes, to_numpy_dtype
from tg_core.renderer.llvmir import LLVMRenderer
from tg_core.uop import Ops

pytest.importorskip("llvmlite.binding")
from test_llvmir import compile_and_run, elementwise  # noqa: E402  (shared JIT helpers)

if np.finfo(np.longdouble).nmant < 60:
    pytest.skip("needs an extended-precision numpy longdouble as the reference", allow_module_level=True)


class DecompRenderer(LLVMRenderer):
    extra_matcher = decomp


class ContractRenderer(DecompRenderer):
    float_flags = "contract"  # LLVM may fuse a multiply and an add (as CPU:LLVM allows): FMA must not hurt


# what the rules may produce: no transcendental op and nothing a backend would need a library call for
_BASIC = {Ops.ADD, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.NEG, Ops.TRUNC, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE, Ops.AND,
          Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.CAST, Ops.BITCAST, Ops.CONST, Ops.SUB}
_STRUCTURE = {Ops.PARAM, Ops.RANGE, Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.END, Ops.SINK, Ops.GROUP}
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0]


def run_decomposed(fn, inputs: list[np.ndarray], dt: DType, renderer: LLVMRenderer | None = None) -> np.ndarray:
    n = len(inputs[0])
    ast = elementwise(fn, [dt] * len(inputs), dt, n)
    renderer = renderer or DecompRenderer()
    prog = renderer.program(ast)
    ops = {u.op for u in prog.uops}
    assert ops <= _BASIC | _STRUCTURE, f"left for the backend: {ops - _BASIC - _STRUCTURE}"
    out = np.zeros(n, to_numpy_dtype(dt))
    compile_and_run(renderer.render(prog), prog, [*inputs, out])
    return out


def ulp_error(got: np.ndarray, want: np.ndarray, npdt) -> np.ndarray:
    """|got - want| in units of the last place of want rounded to the result dtype (finite values only)."""
    spacing = np.spacing(np.abs(want.astype(npdt))).astype(np.longdouble)
    return np.abs(got.astype(np.longdouble) - want) / spacing


def check(fn, ref, inputs: list[np.ndarray], dt: DType, max_ulp: float, renderer: LLVMRenderer | None = None) -> None:
    npdt = to_numpy_dtype(dt)
    inputs = [a.astype(npdt) for a in inputs]
    got = run_decomposed(fn, inputs, dt, renderer)
    with np.errstate(all="ignore"):
        want = ref(*[a.astype(np.longdouble) for a in inputs])
        want_t = want.astype(npdt)
    finite = np.isfinite(want_t)
    # non-finite results exactly (nan where numpy has nan, infinities with their sign)
    np.testing.assert_array_equal(got[~finite], want_t[~finite])
    assert np.isfinite(got[finite]).all(), inputs[0][finite][~np.isfinite(got[finite])][:5]
    err = ulp_error(got[finite], want[finite], npdt)
    worst = int(np.argmax(err))
    assert err[worst] <= max_ulp, (f"{err[worst]:.3f} ulp at {[a[finite][worst] for a in inputs]}: "
                                   f"got {got[finite][worst]!r}, want {want[finite][worst]!r}")
    # zeros keep their sign
    zero = finite & (want_t == 0)
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want_t[zero]))


RNG = np.random.default_rng(1234)
N = 40000


def positive_floats(dt: DType, n: int) -> np.ndarray:
    """Positive finite values spread over every exponent, subnormals included (uniform random bit patterns)."""
    if dt is dtypes.float32:
        return RNG.integers(1, 0x7F800000, n, dtype=np.int64).astype(np.int32).view(np.float32)
    return RNG.integers(1, 0x7FF0000000000000, n, dtype=np.int64).view(np.float64)


@pytest.mark.parametrize("renderer", [DecompRenderer(), ContractRenderer()], ids=["strict", "contract"])
@pytest.mark.parametrize("dt, max_ulp", [(dtypes.float32, 1.5), (dtypes.float64, 1.5)])
def test_exp2(dt, max_ulp, renderer):
    lo, hi = (-160, 140) if dt is dtypes.float32 else (-1100, 1040)
    sub = (-149, -126) if dt is dtypes.float32 else (-1074, -1022)  # subnormal results
    xs = np.concatenate([RNG.uniform(lo, hi, N), RNG.uniform(-1, 1, N // 4), RNG.uniform(*sub, N // 4),
                         np.arange(lo, hi, dtype=np.float64), SPECIAL])
    check(lambda x: x.exp2(), np.exp2, [xs], dt, max_ulp, renderer)


@pytest.mark.parametrize("renderer", [DecompRenderer(), ContractRenderer()], ids=["strict", "contract"])
@pytest.mark.parametrize("dt, max_ulp", [(dtypes.float32, 1.0), (dtypes.float64, 1.0)])
def test_log2(dt, max_ulp, renderer):
    tiny = np.finfo(to_numpy_dtype(dt)).tiny
    xs = np.concatenate([positive_floats(dt, N), RNG.uniform(0.7, 1.5, N // 4), 1 + RNG.uniform(-1e-6, 1e-6, N // 8),
                         2.0 ** np.arange(-60, 60), [tiny, tiny / 3, tiny / 2 ** 20, -1e-30, -np.finfo(np.float32).max],
                         SPECIAL])
    check(lambda x: x.log2(), np.log2, [xs], dt, max_ulp, renderer)


@pytest.mark.parametrize("renderer", [DecompRenderer(), ContractRenderer()], ids=["strict", "contract"])
@pytest.mark.parametrize("dt, max_ulp", [(dtypes.float32, 1.0), (dtypes.float64, 1.5)])
def test_sin(dt, max_ulp, renderer):
    top = 38 if dt is dtypes.float32 else 307
    huge = 10.0 ** RNG.uniform(-40, top, N // 2) * RNG.choice([-1, 1], N // 2)
    # the multiples of pi/2 that the Cody-Waite and Payne-Hanek reductions meet, and their neighbours
    near = [k * np.pi / 2 + d for k in (1, 2, 3, 100, 12345, 2 ** 19, 2 ** 21) for d in (0, 1e-7, -1e-7)]
    hard = [6381956970095103 * 2.0 ** 797, 5.319372648326541e255, 1e22, 2.0 ** 20, np.nextafter(2.0 ** 20, 0), 1e-310]
    xs = np.concatenate([RNG.uniform(-10, 10, N), RNG.uniform(-2e6, 2e6, N // 2), huge, near, hard, SPECIAL])
    if dt is dtypes.float32:
        xs = np.clip(xs, -3e38, 3e38)
    check(lambda x: x.sin(), np.sin, [xs], dt, max_ulp, renderer)


@pytest.mark.parametrize("renderer", [DecompRenderer(), ContractRenderer()], ids=["strict", "contract"])
@pytest.mark.parametrize("dt, max_ulp", [(dtypes.float32, 1.0), (dtypes.float64, 2.0)])
def test_pow(dt, max_ulp, renderer):
    n = N // 2
    lo, hi = (-150, 128) if dt is dtypes.float32 else (-1075, 1024)
    base = RNG.uniform(0.5, 4, n)  # results over the whole range: log2(x**y) spread from lo to hi
    xs = np.concatenate([RNG.uniform(0, 10, n), RNG.uniform(-10, 10, n), positive_floats(dt, n), base,
                         np.repeat(SPECIAL, len(SPECIAL))])
    ys = np.concatenate([RNG.uniform(-40, 40, n), RNG.integers(-30, 30, n).astype(np.float64),
                         RNG.uniform(-2, 2, n), RNG.uniform(lo, hi, n) / np.log2(base), np.tile(SPECIAL, len(SPECIAL))])
    check(lambda x, y: x ** y, np.power, [xs, ys], dt, max_ulp, renderer)


def test_half_precision_goes_through_float32():
    xs = np.concatenate([RNG.uniform(-20, 20, 2000), SPECIAL]).astype(np.float16)
    for fn, ref in ((lambda x: x.exp2(), np.exp2), (lambda x: x.sin(), np.sin)):
        got = run_decomposed(fn, [xs], dtypes.float16)
        with np.errstate(all="ignore"):
            want = ref(xs.astype(np.float64)).astype(np.float16)  # correctly rounded to half
        np.testing.assert_array_equal(got, want)
