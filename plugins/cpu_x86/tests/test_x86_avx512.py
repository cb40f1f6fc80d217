"""AVX-512 in the X86 renderer: the ISA choice (TG_X86_ISA against the host), and 16-lane zmm kernels with
opmask compares and blends. Kernels run against numpy where the host has AVX-512; on an AVX2-only host they
are still compiled and every instruction decoded by capstone (emit only), and the running tests skip."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.plugin_api import Opt, OptOps
from tg_core.testing.kernels import capture_kernels
from tg_cpu_x86.x86 import isa
from tg_cpu_x86.x86.renderer import X86Renderer

from test_x86_kernels import f32, run_tensor
from x86_harness import check_disassembly, renderer_for, run_x86, runnable

AVX2_ONLY = frozenset({"sse4.2", "avx", "avx2", "fma", "f16c"})
AVX512 = AVX2_ONLY | {"avx512f", "avx512vl", "avx512dq", "avx512bw"}
needs_avx512 = pytest.mark.skipif(not runnable("avx512"), reason="this host's CPU has no AVX-512 (emit-only tests "
                                                                 "still check the encodings)")


# ---- choosing the ISA ------------------------------------------------------------------------------------

def test_isa_from_the_variable_and_the_host(monkeypatch):
    monkeypatch.delenv(isa.ENV, raising=False)
    assert isa.resolve(features=AVX512) == "avx512" and isa.resolve(features=AVX2_ONLY) == "avx2"
    assert isa.resolve(features=AVX512 - {"avx512vl"}) == "avx2"  # auto needs every feature the code uses
    for value, want in (("auto", "avx512"), ("avx2", "avx2"), (" AVX512 ", "avx512"), ("", "avx512")):
        monkeypatch.setenv(isa.ENV, value)
        assert isa.resolve(features=AVX512) == want
    monkeypatch.setenv(isa.ENV, "sse")
    with pytest.raises(ValueError, match=r"TG_X86_ISA='sse' is not a vector ISA of the X86 renderer; "
                                         r"allowed: auto, avx2, avx512"):
        isa.resolve()
    with pytest.raises(ValueError, match=r"isa='zmm' is not a vector ISA"):
        X86Renderer(isa="zmm", emit_only=True)


def test_an_isa_the_host_lacks_cannot_run_but_can_emit(monkeypatch):
    monkeypatch.setattr(isa, "host_features", lambda: AVX2_ONLY)
    message = (r"vector ISA avx512 \(TG_X86_ISA\) needs CPU features this host lacks: avx512f, avx512vl, avx512dq, "
               r"avx512bw; use TG_X86_ISA=auto \(here: avx2\)")
    with pytest.raises(isa.UnsupportedISAError, match=message):
        X86Renderer(isa="avx512")
    monkeypatch.setenv(isa.ENV, "avx512")
    with pytest.raises(isa.UnsupportedISAError, match=message):
        X86Renderer()
    assert X86Renderer.vector_isa == "avx512"  # what a renderer built now would emit (tg bench's column)
    emitter = X86Renderer(emit_only=True)
    assert emitter.vector_isa == "avx512"
    (ast,) = _asts(lambda dev: Tensor(f32(64), device=dev) * 2)
    assert "zmm" in emitter.asm_str(emitter.program(ast))
    monkeypatch.delenv(isa.ENV)
    assert X86Renderer().vector_isa == "avx2" == X86Renderer.vector_isa  # auto on this pretend AVX2 host


# ---- kernels ---------------------------------------------------------------------------------------------

A, B = f32(40, 96), f32(96, 64)
CASES = {  # name: (tensor expression over a, b; the numpy value), all packing into zmm
    "elementwise": (lambda a, b: a * 2 + 1.5, lambda a, b: a * 2 + 1.5),
    "elementwise_tail": (lambda a, b: a[:, :21] * b[:40, 3:24], lambda a, b: a[:, :21] * b[:40, 3:24]),
    "sum_rows": (lambda a, b: a.sum(1), lambda a, b: a.sum(1)),
    "sum_all": (lambda a, b: a.sum(), lambda a, b: a.sum()),
    "max_rows": (lambda a, b: a.max(1), lambda a, b: a.max(1)),
    "matmul": (lambda a, b: a @ b, lambda a, b: a @ b),  # 8 x 32 tiles of packed panels
    "matmul_48_columns": (lambda a, b: a @ b[:, :48], lambda a, b: a @ b[:, :48]),  # one-zmm panels
    "matmul_bias_relu": (lambda a, b: (a @ b + b[0]).relu(), lambda a, b: np.maximum(a @ b + b[0], 0)),
    "softmax": (lambda a, b: a.softmax(), lambda a, b: np.exp(a - a.max(1, keepdims=True)) /
                np.exp(a - a.max(1, keepdims=True)).sum(1, keepdims=True)),
    "where_compare": (lambda a, b: (a < 0.25).where(a * 2, a - 1), lambda a, b: np.where(a < 0.25, a * 2, a - 1)),
    "int_roundtrip": (lambda a, b: (a * 100).cast("int32").cast("float32"),
                      lambda a, b: np.trunc(a * 100)),
}


def _tensor(name: str, device: str | None = None):
    return CASES[name][0](Tensor(A, device=device), Tensor(B, device=device))


def _asts(build) -> list:
    """The kernel ASTs of what build(device) returns, realized on the reference device."""
    return capture_kernels(lambda: build("PYTHON").realize())


@pytest.mark.parametrize("name", CASES)
def test_kernels_emit_zmm_code_capstone_reads(name):
    """On any host: the kernels compile to zmm code whose every instruction capstone decodes as asm_str."""
    r = renderer_for("avx512")
    texts = []
    for ast in _asts(lambda dev: _tensor(name, dev)):
        k = r.compile(r.program(ast))
        check_disassembly(k)
        texts.append(k.asm_str())
    assert any("zmm" in t for t in texts), texts
    # zmm values take zmm16-31 first (class zvec; only EVEX reaches them), then the zmm0-15 they share with scalar
    # and VEX code: a kernel with a zmm0-15 also used 16-31 (capstone's decoding checked every encoding above)
    for t in texts:
        used = {int(n) for n in re.findall(r"\bzmm(\d+)", t)}
        assert not used or min(used) >= 16 or max(used) >= 31, (sorted(used), t)


@needs_avx512
@pytest.mark.parametrize("name", CASES)
def test_kernels_match_numpy(name):
    got, kernels = run_tensor(_tensor(name), own_opts=True, isa="avx512")
    np.testing.assert_allclose(got, CASES[name][1](A, B), rtol=2e-5, atol=2e-5)
    assert any("zmm" in k.asm_str() for k in kernels)


@needs_avx512
def test_matmul_columns_past_whole_vectors_are_a_masked_vector():
    """40 columns: per row two whole zmm vectors and one of 8 lanes, whose panel loads are zero-masked and
    whose stores are masked (no scalar columns)."""
    a, b = f32(32, 40), f32(40, 40)
    got, kernels = run_tensor(Tensor(a) @ Tensor(b), own_opts=True, isa="avx512")
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    text = kernels[-1].asm_str()
    assert "vfmadd231ps zmm" in text and "] {k" in text and "vfmadd231ss" not in text


@needs_avx512
@pytest.mark.parametrize("cols", [9, 10, 13, 15])
def test_narrow_tiles_are_one_masked_zmm(cols):
    """A product of 9-15 columns (an MLP's 10 classes): one zero-masked zmm of B's panel row per k and one
    merge-masked zmm store per row, the rows' broadcasts read by their FMAs ({1to16}: one FMA each)."""
    a, b = f32(16, 64), f32(64, cols)
    got, kernels = run_tensor(Tensor(a) @ Tensor(b), own_opts=True, isa="avx512")
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    text = kernels[-1].asm_str()
    assert re.search(r"vfmadd231ps zmm\d+, zmm\d+, dword ptr \[.*\]\{1to16\}", text), text
    assert re.search(r"vmovups zmmword ptr \[.*\] \{k\d\}, zmm", text) and "ymm" not in text


@needs_avx512
@pytest.mark.parametrize("rows", [37, 8, 3])
def test_narrow_tile_rows_aliasing_in_l1(rows):
    """K = 1024 puts A's rows 4 KB apart, in one L1 set: the masked 10-column tile has 8 rows (not 16), a peeled
    tail of the rest (37 = 4 x 8 + 5), values as numpy's."""
    a, b = f32(rows, 1024), f32(1024, 10)
    got, kernels = run_tensor(Tensor(a) @ Tensor(b), own_opts=True, isa="avx512")
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)
    loop = kernels[-1].asm_str()
    assert len(re.findall(r"vfmadd231ps zmm\d+, zmm\d+, dword ptr \[.*\]\{1to16\}", loop)) <= 8 + 7


@needs_avx512
def test_half_vector_tiles_stay_ymm():
    """8 columns or fewer fill a ymm: that tile stays the 8-lane one (no half-empty masked zmm)."""
    a, b = f32(16, 64), f32(64, 8)
    got, kernels = run_tensor(Tensor(a) @ Tensor(b), own_opts=True, isa="avx512")
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    text = kernels[-1].asm_str()
    assert "vfmadd231ps ymm" in text and "zmm" not in text


@needs_avx512
def test_nan_and_out_of_range_lanes():
    """max keeps NaN from either side (vcmpunordps into an opmask, vblendmps); float -> int32 of NaN, inf and
    out-of-range lanes is 0 (two ordered compares under one opmask, a zero-masked vcvttps2dq)."""
    x = np.array([np.nan, 1, 2, 3, -1, np.nan, 5, 6] * 4, np.float32)
    y = np.array([1, np.nan, 1, 4, -2, np.nan, 9, 0] * 4, np.float32)
    got, kernels = run_tensor(Tensor(x).maximum(Tensor(y)), own_opts=True, isa="avx512")
    np.testing.assert_array_equal(got, np.maximum(x, y))
    assert "vblendmps zmm" in kernels[0].asm_str()
    rows = f32(4, 64)
    rows[1, 37], rows[3, 0] = np.nan, np.nan
    got, _ = run_tensor(Tensor(rows).max(1), own_opts=True, isa="avx512")
    np.testing.assert_array_equal(got, rows.max(1))
    big = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.5, -2.5, 2147483520.0] * 2, np.float32)
    got, kernels = run_tensor((Tensor(big) + 0).cast("int32").cast("float32"), own_opts=True, isa="avx512")
    np.testing.assert_array_equal(got, np.array([0, 0, 0, 0, 0, 2, -2, 2147483520.0] * 2, np.float32))


@needs_avx512
def test_register_tile_uses_all_32_zmm():
    """A 14 x 32 register tile: 28 zmm accumulators, the two B vectors and one broadcast at a time fill all 32
    registers (zmm16-31, then zmm0-15) without a spill, each row's broadcast feeding its two FMAs and dying."""
    a, b = f32(28, 24), f32(24, 64)
    (ast,) = _asts(lambda dev: Tensor(a, device=dev) @ Tensor(b, device=dev))
    opts = (Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.UPCAST, 0, 14))
    out = np.zeros((28, 64), np.float32)
    k = run_x86(ast, [out, a, b], opts=opts, isa="avx512")
    text = k.asm_str()
    assert not k.allocation.spilled and "zmmword ptr [rsp" not in text
    fmas = [line for line in text.splitlines() if line.startswith("vfmadd231ps zmm")]
    used = {int(r) for line in fmas for r in re.findall(r"zmm(\d+)", line)}
    assert len(fmas) == 28 and len(used) >= 31, used
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


@needs_avx512
def test_more_live_zmm_values_than_registers_spill():
    """A 16 x 32 register tile: 32 zmm accumulators, the B vectors and a broadcast do not fit 32 registers,
    so zmm values spill to 64-byte slots and come back, and the product is still right."""
    a, b = f32(32, 24), f32(24, 64)
    (ast,) = _asts(lambda dev: Tensor(a, device=dev) @ Tensor(b, device=dev))
    opts = (Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.UPCAST, 0, 16))
    out = np.zeros((32, 64), np.float32)
    k = run_x86(ast, [out, a, b], opts=opts, isa="avx512")
    assert k.allocation.spilled and "zmmword ptr [rsp" in k.asm_str()
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


# ---- partial vectors -------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", range(1, 16))
def test_rows_shorter_than_a_vector(n):
    """Rows of n < 16 elements: where codegen leaves a straight-line run of them (n >= 8 here) it is one zmm
    vector whose loads are zero-masked (vmovups zmm {k} {z}) and whose store is merge-masked, so nothing past
    the row is read or written; the elements after each row (the next row's) keep their values."""
    x, y = f32(8, n), f32(n)
    t = lambda dev: Tensor(x, device=dev) * Tensor(y, device=dev) + 1  # noqa: E731
    r = renderer_for("avx512")
    texts = []
    for ast in _asts(t):
        k = r.compile(r.program(ast))
        check_disassembly(k)
        texts.append(k.asm_str())
    if n >= 8:
        assert any("{z}, zmmword ptr [" in s and "] {k" in s for s in texts), texts
    if runnable("avx512"):
        got, _ = run_tensor(t(None), own_opts=True, isa="avx512")
        np.testing.assert_allclose(got, x * y + 1, rtol=1e-5, atol=1e-6)
