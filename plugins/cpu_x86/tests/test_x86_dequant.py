"""Quantized weights in the X86 renderer's vectors: narrow ints (GGUF's uint8 blocks) as widening loads into
int32 lanes, the integer ops that unpack them, and the dequantizing matvec `x @ W.T` of every block type.

The integer part is checked bit-exactly against numpy on every byte value (0..255) and every shift amount;
the matvecs against a float64 product with gguf-py's own dequantization (a tolerance: the kernel sums in
float32, in another order). Both ISAs: AVX-512 kernels run only where the host has it (emit-only otherwise),
AVX2 kernels everywhere."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.dtype import dtypes

from test_x86_kernels import run_tensor
from x86_harness import runnable

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402

from tg_core.llm.dequant import BLOCK_TYPES, GGMLType, dequantize  # noqa: E402

ISAS = ("avx512", "avx2")
# where each block type keeps its float16 scale fields (random bytes there could be NaN or inf)
F16_FIELDS = {Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2), Q.Q8_0: (0,), Q.Q2_K: (80, 82),
              Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,), Q.IQ4_NL: (0,), Q.IQ4_XS: (0,),
              Q.MXFP4: ()}
# the types whose lookup tables are selected from a 64-bit word per element (no 64-bit lanes): scalar code
SCALAR = frozenset({Q.IQ4_NL, Q.IQ4_XS, Q.MXFP4})
VECTOR_REG = {"avx512": ("zmm", "ymm"), "avx2": ("ymm",)}  # Q5's 8-lane bit fields take ymm on AVX-512 too
RNG = np.random.default_rng(18)


def _skip_unless(isa: str) -> None:
    if not runnable(isa):
        pytest.skip(f"this host cannot run {isa} code")


def _asm(kernels) -> str:
    return "\n".join(k.asm_str() for k in kernels)


def _blocks(qtype: Q, n: int, rng: np.random.Generator) -> np.ndarray:
    """n random blocks of the type with finite float16 scales (MXFP4: exponents near 1)."""
    _, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n, nbytes), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = rng.uniform(-3, 3, size=(n, 1)).astype(np.float16).view(np.uint8)
    if qtype is Q.MXFP4:
        raw[:, 0] = rng.integers(120, 136, size=n)
    return raw


def test_every_block_type_is_covered():
    assert {GGMLType(int(t)) for t in F16_FIELDS} == set(BLOCK_TYPES)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("rows", (1, 3, 6), ids=("matvec", "rows3", "rows6"))
@pytest.mark.parametrize("qtype", list(F16_FIELDS), ids=lambda t: t.name)
def test_dequant_matmul_agrees_with_gguf(qtype, rows, isa):
    """x @ W.T over the packed bytes (decode's matvec, and rows as prefill has: 4 share each decoded weight
    vector, 6 leave a tail of 2) against float64 numpy of gguf.quants.dequantize(W): within float32 rounding of
    the sum, relative to sum |x| |w|."""
    _skip_unless(isa)
    out_f, in_f = 40, 512
    blk, _ = gguf.GGML_QUANT_SIZES[qtype]
    raw = _blocks(qtype, out_f * in_f // blk, RNG)
    x = RNG.standard_normal((rows, in_f)).astype(np.float32)
    w = dequantize(Tensor(raw).realize(), int(qtype)).reshape(out_f, in_f)
    got, kernels = run_tensor(Tensor(x).realize() @ w.T, own_opts=True, isa=isa)
    ref_w = gguf.quants.dequantize(raw, qtype).reshape(out_f, in_f).astype(np.float64)
    want = x.astype(np.float64) @ ref_w.T
    bound = 1e-5 * (np.abs(x).astype(np.float64) @ np.abs(ref_w).T) + 1e-30
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) / bound)
    if qtype not in SCALAR:
        asm = _asm(kernels)
        assert any(r in asm for r in VECTOR_REG[isa]), "the dequantizing matmul stayed scalar"
        assert "vpmovzxbd" in asm or "vpmovsxbd" in asm  # the weight's bytes are read by widening loads


def _matvec_asm(qtype: Q, isa: str) -> list[str]:
    blk, _ = gguf.GGML_QUANT_SIZES[qtype]
    raw = _blocks(qtype, 64 * 256 // blk, RNG)
    w = dequantize(Tensor(raw).realize(), int(qtype)).reshape(64, 256)
    x = RNG.standard_normal((1, 256)).astype(np.float32)
    got, kernels = run_tensor(Tensor(x).realize() @ w.T, own_opts=True, isa=isa)
    want = x.astype(np.float64) @ gguf.quants.dequantize(raw, qtype).reshape(64, 256).astype(np.float64).T
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return _asm(kernels).splitlines()


@pytest.mark.parametrize("isa", ISAS)
def test_q4_1_matvec_is_vector_code(isa):
    """The Q4_1 matvec: each block's bytes one widening load, the halves' nibbles a mask and a constant shift,
    int -> float conversions and FMAs (x read from memory by the FMA) on vectors; the block's float16 scales one
    load each straight into a vector register (vmovd of the 4 bytes at the scale, inside the block), not two byte
    loads nor a 16-bit load into a general register; no scalar float op but the final horizontal sum's."""
    _skip_unless(isa)
    asm = _matvec_asm(Q.Q4_1, isa)
    reg = "zmm" if isa == "avx512" else "ymm"
    for op in ("vpmovzxbd", "vpsrld", "vcvtdq2ps", "vfmadd213ps", "vfmadd231ps"):
        assert any(line.startswith(op) and reg in line for line in asm), op
    assert any(line.startswith("vfmadd231ps") and "word ptr" in line for line in asm)
    assert sum(line.startswith("vmovd") and "dword ptr" in line for line in asm) == 2
    assert not any(line.startswith("movzx") for line in asm)
    assert not any("byte ptr" in line for line in asm)
    assert not any(line.startswith(("vcvtsi2ss", "vmulss", "vfmadd231ss", "vpsrlvd")) for line in asm)


@pytest.mark.parametrize("isa", ISAS)
def test_float16_word_at_the_buffer_end_stays_a_16bit_load(isa):
    """A float16 read byte by byte whose last word ends the buffer: 4 bytes there would read past its end, so
    the words are 16-bit loads into a general register (and every value exact)."""
    _skip_unless(isa)
    vals = np.array([1.5, -2.25, 3.0, 65504.0, -0.0, 6.1e-5, 0.333, -7.0], np.float16)
    b = Tensor(vals.view(np.uint8).copy()).realize().reshape(8, 2)
    word = b[:, 0].cast(dtypes.uint16) | (b[:, 1].cast(dtypes.uint16) << 8)
    got, kernels = run_tensor(word.bitcast(dtypes.float16).float(), own_opts=True, isa=isa)
    np.testing.assert_array_equal(got, vals.astype(np.float32))
    asm = _asm(kernels).splitlines()
    assert any(line.startswith("movzx") and "word ptr" in line for line in asm)
    assert not any(line.startswith("vmovd") and "dword ptr" in line for line in asm)


@pytest.mark.parametrize("isa", ISAS)
def test_q8_0_bytes_load_sign_extended(isa):
    """Q8_0's uint8 bytes bitcast to int8 are sign-extending loads, not zero-extended and shifted back."""
    _skip_unless(isa)
    asm = _matvec_asm(Q.Q8_0, isa)
    assert any(line.startswith("vpmovsxbd") for line in asm)
    assert not any(line.startswith(("vpmovzxbd", "vpsrad")) for line in asm)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("rows", (1, 5))
def test_two_fused_quantized_matvecs(rows, isa):
    """SwiGLU's silu(x @ Wg.T) * (x @ Wu.T): one kernel with two interleaved quantized reductions, each with
    its halves unrolled as vectors (constant shifts: no per-lane shift instruction) and a residual added."""
    _skip_unless(isa)
    out_f, in_f = 32, 256
    rng = np.random.default_rng(rows)
    raws = [_blocks(Q.Q4_1, out_f * in_f // 32, rng) for _ in range(2)]
    ws = [dequantize(Tensor(r).realize(), int(Q.Q4_1)).reshape(out_f, in_f) for r in raws]
    # x small enough that the gate is O(1): silu neither saturates nor overflows
    x, res = (rng.standard_normal((rows, n)).astype(np.float32) * s for n, s in ((in_f, 0.01), (out_f, 1.0)))
    xt = Tensor(x).realize()
    got, kernels = run_tensor(Tensor(res).realize() + (xt @ ws[0].T).silu() * (xt @ ws[1].T), own_opts=True, isa=isa)
    g, u = (x.astype(np.float64) @ gguf.quants.dequantize(r, Q.Q4_1).reshape(out_f, in_f).astype(np.float64).T
            for r in raws)
    np.testing.assert_allclose(got, res + g / (1 + np.exp(-g)) * u, rtol=1e-4, atol=1e-4)
    asm = _asm(kernels)
    assert len(kernels) == 1 and "vpmovzxbd" in asm and "vpsrlvd" not in asm


# ---- the integer part, bit-exact -------------------------------------------------------------------------

BYTES = np.tile(np.arange(256, dtype=np.uint8), 3)[:700]  # every value, a length that leaves a scalar tail
SHIFTS = (BYTES * 7 % 8).astype(np.uint8)  # every amount 0..7, differing between neighbouring lanes

# name -> (the tensor expression on the uint8 bytes b and amounts s, the same in numpy); results cast to float32
# are exact (every integer here is below 2^24)
U8_CASES = {
    "shr_const": (lambda b, s: (b >> 3).float(), lambda b, s: b >> 3),
    "shr_and": (lambda b, s: ((b >> 4) & 0x0F).float() + (b & 0x0F).float() * 16,
                lambda b, s: ((b >> 4) & 0x0F) + (b & 0x0F).astype(np.int64) * 16),
    # amounts read from memory, per lane (`& 7` keeps them provably inside the width: codegen/shifts.py guards
    # other amounts with selects, which stay scalar)
    "shr_lanes": (lambda b, s: (b >> (s & 7)).float(), lambda b, s: b >> s),
    "shl_lanes_wraps": (lambda b, s: (b << (s & 7)).float(), lambda b, s: (b.astype(np.int64) << s) & 0xFF),
    "shl_const_wraps": (lambda b, s: (b << 3).float(), lambda b, s: (b.astype(np.int64) << 3) & 0xFF),
    "bits_or": (lambda b, s: ((b & 0x0F) | ((b >> 6) << 4)).float(), lambda b, s: (b & 0x0F) | ((b >> 6) << 4)),
    "xor": (lambda b, s: (b ^ s).float(), lambda b, s: b ^ s),
    "add_wraps": (lambda b, s: (b + s * 40).float(), lambda b, s: (b.astype(np.int64) + s * 40) & 0xFF),
    "mul_wraps": (lambda b, s: (b * 7).float(), lambda b, s: (b.astype(np.int64) * 7) & 0xFF),
    "sub_wraps": (lambda b, s: (s - b).float(), lambda b, s: (s.astype(np.int64) - b) & 0xFF),
    "as_int8": (lambda b, s: b.bitcast(dtypes.int8).float(), lambda b, s: b.view(np.int8)),
    "int8_sar": (lambda b, s: (b.bitcast(dtypes.int8) >> (s & 7).cast(dtypes.int8)).float(),
                 lambda b, s: b.view(np.int8) >> s.view(np.int8)),
    "int32_offset": (lambda b, s: ((b & 0x0F).cast(dtypes.int32) - 8).float(), lambda b, s: (b & 0x0F).astype(np.int64) - 8),
    "int8_cast_wraps": (lambda b, s: (b.cast(dtypes.int32) * 3).cast(dtypes.int8).float(),
                        lambda b, s: (b.astype(np.int32) * 3).astype(np.int8)),
    "uint16_words": (lambda b, s: ((b.cast(dtypes.uint16) << 8) | s.cast(dtypes.uint16)).float(),
                     lambda b, s: (b.astype(np.int64) << 8) | s),
    "int16_mul_wraps": (lambda b, s: (b.cast(dtypes.int16) * 300).float(),
                        lambda b, s: (b.astype(np.int16) * np.int16(300)).astype(np.int16)),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", U8_CASES)
def test_byte_ops_are_exact_in_int32_lanes(case, isa):
    """Every byte value through the ops a dequantization uses (and ones that leave the narrow range and must
    wrap), as vectors of widened bytes, bit-exact against numpy's narrow arithmetic."""
    _skip_unless(isa)
    build, ref = U8_CASES[case]
    b, s = Tensor(BYTES).realize(), Tensor(SHIFTS).realize()
    got, kernels = run_tensor(build(b, s), own_opts=True, isa=isa)
    want = ref(BYTES, SHIFTS).astype(np.float32)
    assert got.dtype == np.float32 and np.array_equal(got, want), np.flatnonzero(got != want)[:8]
    assert "vpmovzxbd" in _asm(kernels), "the bytes were not read as vectors"


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dt, widen", [(dtypes.int8, "vpmovsxbd"), (dtypes.uint16, "vpmovzxwd"),
                                       (dtypes.int16, "vpmovsxwd")], ids=lambda v: str(v))
def test_narrow_loads_extend_by_their_sign(dt, widen, isa):
    """int8/uint16/int16 buffers widen with their own extension: every int8 value, uint16 and int16 values at
    and around the ends of their range, shifted and masked as a dequantization does."""
    _skip_unless(isa)
    np_dt = {dtypes.int8: np.int8, dtypes.uint16: np.uint16, dtypes.int16: np.int16}[dt]
    info = np.iinfo(np_dt)
    edge = np.array([info.min, info.min + 1, -1 if info.min else 1, 0, 1, info.max - 1, info.max], dtype=np.int64)
    vals = np.concatenate([edge, RNG.integers(info.min, info.max + 1, size=600)]).astype(np_dt)
    if dt is dtypes.int8:
        vals[:256] = np.arange(-128, 128)
    x = Tensor(vals).realize()
    got, kernels = run_tensor(((x >> 3) & 0x1F).float() + x.float() * 0.5, own_opts=True, isa=isa)
    want = ((vals >> 3) & 0x1F).astype(np.float32) + vals.astype(np.float32) * np.float32(0.5)
    assert np.array_equal(got, want)
    assert widen in _asm(kernels)
