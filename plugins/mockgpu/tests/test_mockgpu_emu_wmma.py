"""RDNA3 WMMA on the emulator against numpy: every v_wmma_*_16x16x16_* form LLVM emits for gfx1100 (f16/bf16 into
f32, f16 into f16, bf16 into bf16, iu8 and iu4 into i32), on two waves with different matrices each.

The test packs matrices into registers by the ISA's wave32 layout, written here independently of the emulator: lane
l holds row l % 16 of A and column l % 16 of B (K elements lowest first, lanes 16..31 repeating 0..15); VGPR i of
lane l holds C/D[2i + l // 16][l % 16]. Each lane loads its 8 A, 8 B and 8 C dwords from buffers at lane * 32."""
from __future__ import annotations

import numpy as np
import pytest
from mockgpu_helpers import Runner, asm_kernel, assemble, ir_kernel, needs_llvm_mc

from tg_mockgpu.emu.machine import EmulatorError
from tg_mockgpu.rdna3.decode import decode_all
from tg_mockgpu.rdna3.disasm import disasm

pytestmark = needs_llvm_mc

u8, u16, u32, f16, f32 = np.uint8, np.uint16, np.uint32, np.float16, np.float32
WAVES = 2
LANES = 32 * WAVES

KERNEL = """
s_load_b256 s[4:11], s[0:1], 0x0
v_lshlrev_b32 v1, 5, v0
s_waitcnt lgkmcnt(0)
global_load_b128 v[8:11], v1, s[6:7]
global_load_b128 v[12:15], v1, s[6:7] offset:16
global_load_b128 v[16:19], v1, s[8:9]
global_load_b128 v[20:23], v1, s[8:9] offset:16
global_load_b128 v[24:27], v1, s[10:11]
global_load_b128 v[28:31], v1, s[10:11] offset:16
s_waitcnt vmcnt(0)
{pre}
{inst}
global_store_b128 v1, v[24:27], s[4:5]
global_store_b128 v1, v[28:31], s[4:5] offset:16
"""
SRC_REGS = {8: ("v[8:15]", "v[16:23]"), 4: ("v[8:11]", "v[16:19]"), 2: ("v[8:9]", "v[16:17]")}


@pytest.fixture(scope="module")
def gpu():
    r = Runner()
    yield r
    r.close()


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """bfloat16 bits of float32 values that are exactly representable (the tests draw such values)."""
    b = np.asarray(x, f32).view(u32)
    assert not (b & u32(0xFFFF)).any(), "test values must be exact in bfloat16"
    return (b >> u32(16)).astype(u16)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(u32) << u32(16)).view(f32)


def pack_elements(elems: np.ndarray, kind: str) -> np.ndarray:
    """(16, 16) matrix rows (row r = the K elements of lane r) as (16, 8) dwords, little-endian, zero-padded."""
    if kind == "f16":
        raw = elems.astype(f16).view(u16)
    elif kind == "bf16":
        raw = bf16_bits(elems)
    elif kind == "iu8":
        raw = (elems.astype(np.int64) & 0xFF).astype(u8)
    else:   # iu4: element 2j in the low nibble of byte j
        nib = (elems.astype(np.int64) & 0xF).astype(u8)
        raw = nib[:, 0::2] | (nib[:, 1::2] << u8(4))
    words = np.ascontiguousarray(raw).view(u32)
    return np.pad(words, ((0, 0), (0, 8 - words.shape[1])))


def operand_words(mats: list[np.ndarray], kind: str, columns: bool) -> np.ndarray:
    """The per-lane dwords of A (rows) or B (columns, columns=True) for each wave: (LANES, 8)."""
    out = []
    for mat in mats:
        per_row = pack_elements(mat.T if columns else mat, kind)
        out.append(np.concatenate([per_row, per_row]))          # lanes 16..31 repeat lanes 0..15
    return np.concatenate(out)


def acc_words(mats: list[np.ndarray], out: str, other_half: np.ndarray | None = None, hi: int = 0) -> np.ndarray:
    """C as (LANES, 8) dwords: dword i of lane l is [2i + l // 16][l % 16]. A 16-bit C goes in half `hi` and
    `other_half` ((LANES, 8) uint16) in the other."""
    rows = []
    for mat in mats:
        lanes = np.empty((32, 8), u32)
        for lane in range(32):
            for i in range(8):
                v = mat[2 * i + lane // 16, lane % 16]
                if out == "f32":
                    lanes[lane, i] = np.float32(v).view(u32)
                elif out == "i32":
                    lanes[lane, i] = int(v) & 0xFFFFFFFF
                else:
                    lanes[lane, i] = int(np.float16(v).view(u16) if out == "f16" else bf16_bits(np.float32(v)))
        rows.append(lanes)
    words = np.concatenate(rows)
    if out in ("f16", "bf16"):
        other = np.zeros_like(words) if other_half is None else other_half.astype(u32)
        words = (words << u32(16)) | other if hi else words | (other << u32(16))
    return words


def result_matrices(words: np.ndarray, out: str, hi: int = 0) -> list[np.ndarray]:
    """The inverse of acc_words: D of each wave as float64 or int64 (16, 16)."""
    mats = []
    for w in range(len(words) // 32):
        lanes = words[32 * w:32 * (w + 1)]
        d = np.empty((16, 16), np.float64 if out != "i32" else np.int64)
        for lane in range(32):
            for i in range(8):
                x = lanes[lane, i]
                if out == "f32":
                    d[2 * i + lane // 16, lane % 16] = np.uint32(x).view(f32)
                elif out == "i32":
                    d[2 * i + lane // 16, lane % 16] = np.uint32(x).view(np.int32)
                else:
                    h = np.uint16((int(x) >> 16) if hi else (int(x) & 0xFFFF))
                    d[2 * i + lane // 16, lane % 16] = h.view(f16) if out == "f16" else bf16_value(h)
        mats.append(d)
    return mats


def run_wmma(gpu: Runner, inst: str, a_words, b_words, c_words, pre: str = "") -> np.ndarray:
    lanes = len(a_words)
    bufs = [gpu.buffer(np.zeros((lanes, 8), u32))] + [gpu.buffer(np.asarray(x, u32)) for x in (a_words, b_words,
                                                                                                 c_words)]
    try:
        gpu.run(asm_kernel(KERNEL.format(pre=pre, inst=inst), vgprs=32), (1, 1, 1), (lanes, 1, 1), *bufs)
        return gpu.read(bufs[0], u32, lanes * 8).reshape(lanes, 8)
    finally:
        for buf in bufs:
            gpu.gpu.free(buf)


def wmma_line(op: str, nregs: int, mods: str = "") -> str:
    a, b = SRC_REGS[nregs]
    return f"{op} v[24:31], {a}, {b}, v[24:31]{mods}"


def random_floats(rng, kind: str, shape=(16, 16)) -> np.ndarray:
    """Values exact in the input type: small multiples of 1/8 with a spread of magnitudes."""
    x = rng.integers(-64, 65, shape) / 8.0 * rng.choice([1.0, 4.0, 0.25, 64.0], shape)
    return x.astype(f32)


@pytest.mark.parametrize("kind, op", [("f16", "v_wmma_f32_16x16x16_f16"), ("bf16", "v_wmma_f32_16x16x16_bf16")])
@pytest.mark.parametrize("neg", ["", " neg_lo:[1,0,0]", " neg_lo:[0,1,0]", " neg_lo:[1,1,0]"])
def test_wmma_float_to_f32(gpu, kind, op, neg):
    rng = np.random.default_rng(len(op + neg))
    a = [random_floats(rng, kind) for _ in range(WAVES)]
    b = [random_floats(rng, kind) for _ in range(WAVES)]
    c = [rng.standard_normal((16, 16)).astype(f32) * 100 for _ in range(WAVES)]
    got = result_matrices(run_wmma(gpu, wmma_line(op, 8, neg), operand_words(a, kind, False),
                                   operand_words(b, kind, True), acc_words(c, "f32")), "f32")
    sa, sb = (-1 if "[1," in neg else 1), (-1 if neg in (" neg_lo:[0,1,0]", " neg_lo:[1,1,0]") else 1)
    for w in range(WAVES):
        want = (sa * a[w].astype(np.float64)) @ (sb * b[w].astype(np.float64)) + c[w]
        np.testing.assert_allclose(got[w], want, rtol=1e-6, atol=1e-4)


def test_wmma_f32_nan_inf_and_large_values(gpu):
    """inf and NaN in A and B reach exactly the outputs their row/column feeds (inf * 0 is NaN, inf - inf NaN);
    products of f16 maxima do not overflow the f32 accumulator."""
    a = [np.ones((16, 16), f32), np.zeros((16, 16), f32)]
    b = [np.ones((16, 16), f32), np.zeros((16, 16), f32)]
    a[0][3, 5] = np.inf                  # row 3 of D: +inf where column has B[5] > 0
    b[0][:, 7] = 0.0                     # column 7: inf * 0 -> NaN in D[3, 7]
    a[0][9, 0], a[0][9, 1] = np.inf, -np.inf   # row 9: inf - inf -> NaN
    b[0][2, 11] = np.nan                 # column 11: NaN everywhere
    a[1][:, :] = 65504.0
    b[1][:, :] = 65504.0                 # 16 * 65504^2 ~ 6.9e10: fine in f32
    c = [np.zeros((16, 16), f32), np.full((16, 16), -1.0, f32)]
    got = result_matrices(run_wmma(gpu, wmma_line("v_wmma_f32_16x16x16_f16", 8), operand_words(a, "f16", False),
                                   operand_words(b, "f16", True), acc_words(c, "f32")), "f32")
    for w in range(WAVES):
        with np.errstate(invalid="ignore"):
            want = a[w].astype(np.float64) @ b[w].astype(np.float64) + c[w]
        np.testing.assert_array_equal(np.isnan(got[w]), np.isnan(want))
        np.testing.assert_allclose(got[w], want, rtol=1e-6)
    assert np.isnan(got[0][3, 7]) and got[0][3, 0] == np.inf and np.isnan(got[0][9]).all()


@pytest.mark.parametrize("kind, op, out", [("f16", "v_wmma_f16_16x16x16_f16", "f16"),
                                           ("bf16", "v_wmma_bf16_16x16x16_bf16", "bf16")])
@pytest.mark.parametrize("hi", [0, 1])
def test_wmma_16bit_results_use_one_half(gpu, kind, op, out, hi):
    """op_sel[2] picks the half C is read from and D written to; the other half of every VGPR keeps its value.
    The result is the exact sum rounded once to the 16-bit type."""
    rng = np.random.default_rng(hi + len(op))
    a = [random_floats(rng, kind) / 4 for _ in range(WAVES)]
    b = [random_floats(rng, kind) / 4 for _ in range(WAVES)]
    c = [random_floats(rng, kind) for _ in range(WAVES)]
    other = rng.integers(0, 1 << 16, (LANES, 8)).astype(u16)
    mods = " op_sel:[0,0,1]" if hi else ""
    words = run_wmma(gpu, wmma_line(op, 8, mods), operand_words(a, kind, False), operand_words(b, kind, True),
                     acc_words(c, out, other, hi))
    kept = (words >> u32(16)) if not hi else (words & u32(0xFFFF))
    np.testing.assert_array_equal(kept.astype(u16), other)
    got = result_matrices(words, out, hi)
    for w in range(WAVES):
        exact = a[w].astype(np.float64) @ b[w].astype(np.float64) + c[w]
        if out == "f16":
            want = exact.astype(f16).astype(np.float64)
        else:   # round to nearest even at bfloat16's 8 significant bits (exact is small enough for f32 to be exact)
            bits = exact.astype(f32).view(u32).astype(np.uint64)
            want = bf16_value(((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(u16)).astype(np.float64)
        np.testing.assert_array_equal(got[w], want)


def test_wmma_f16_result_overflows_to_inf(gpu):
    a = [np.full((16, 16), 64.0, f32)] * WAVES
    b = [np.full((16, 16), 64.0, f32), np.full((16, 16), -64.0, f32)]
    c = [np.zeros((16, 16), f32)] * WAVES            # 16 * 4096 = 65536 > f16's max 65504 (rounds to inf)
    got = result_matrices(run_wmma(gpu, wmma_line("v_wmma_f16_16x16x16_f16", 8), operand_words(a, "f16", False),
                                   operand_words(b, "f16", True), acc_words(c, "f16")), "f16")
    assert (got[0] == np.inf).all() and (got[1] == -np.inf).all()


def int_elements(rng, kind: str, signed: bool) -> np.ndarray:
    bits = 8 if kind == "iu8" else 4
    lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if signed else (0, 1 << bits)
    x = rng.integers(lo, hi, (16, 16))
    x[0, :] = lo                                     # the extremes in one row and column
    x[:, 1] = hi - 1
    return x


INT_CASES = [(kind, neg, clamp) for kind in ("iu8", "iu4") for neg in ("", " neg_lo:[1,0,0]", " neg_lo:[0,1,0]",
                                                                        " neg_lo:[1,1,0]") for clamp in ("", " clamp")]


@pytest.mark.parametrize("kind, neg, clamp", INT_CASES, ids=[f"{k}{n}{c}" for k, n, c in INT_CASES])
def test_wmma_integer(gpu, kind, neg, clamp):
    """A / B are signed where neg_lo[0] / [1] is set; C near the int32 limits so the sum wraps, or saturates with
    clamp."""
    rng = np.random.default_rng(len(kind + neg + clamp))
    sa, sb = "neg_lo:[1" in neg, neg.endswith(("[0,1,0]", "[1,1,0]"))
    a = [int_elements(rng, kind, sa) for _ in range(WAVES)]
    b = [int_elements(rng, kind, sb) for _ in range(WAVES)]
    c = [rng.integers(-(1 << 31), 1 << 31, (16, 16)) for _ in range(WAVES)]
    c[0][:8] = (1 << 31) - 5
    c[1][:8] = -(1 << 31) + 5
    nregs = 4 if kind == "iu8" else 2
    op = f"v_wmma_i32_16x16x16_{kind}"
    got = result_matrices(run_wmma(gpu, wmma_line(op, nregs, neg + clamp), operand_words(a, kind, False),
                                   operand_words(b, kind, True), acc_words(c, "i32")), "i32")
    for w in range(WAVES):
        exact = a[w] @ b[w] + c[w]
        want = np.clip(exact, -(1 << 31), (1 << 31) - 1) if clamp else (exact + (1 << 31)) % (1 << 32) - (1 << 31)
        np.testing.assert_array_equal(got[w], want)
    assert (got[0][:8] != (a[0] @ b[0] + c[0])[:8]).any() or not (a[0] @ b[0] > 4).any()


def test_wmma_accumulator_inline_constant(gpu):
    rng = np.random.default_rng(3)
    a = [random_floats(rng, "f16") for _ in range(WAVES)]
    b = [random_floats(rng, "f16") for _ in range(WAVES)]
    inst = "v_wmma_f32_16x16x16_f16 v[24:31], v[8:15], v[16:23], 1.0"
    got = result_matrices(run_wmma(gpu, inst, operand_words(a, "f16", False), operand_words(b, "f16", True),
                                   np.zeros((LANES, 8), u32)), "f32")
    for w in range(WAVES):
        np.testing.assert_allclose(got[w], a[w].astype(np.float64) @ b[w] + 1.0, rtol=1e-6)


@pytest.mark.parametrize("op, kind, out", [("v_wmma_f32_16x16x16_f16", "f16", "f32"),
                                           ("v_wmma_f16_16x16x16_f16", "f16", "f16")])
def test_wmma_on_waves_that_are_not_adjacent(gpu, op, kind, out):
    """Three waves, the middle one branching over the WMMA: waves 0 and 2 run it as one batch of non-adjacent
    waves; wave 1 keeps C."""
    rng = np.random.default_rng(5)
    a = [random_floats(rng, kind) / 4 for _ in range(3)]
    b = [random_floats(rng, kind) / 4 for _ in range(3)]
    c = [random_floats(rng, kind) for _ in range(3)]
    skip = "v_readfirstlane_b32 s20, v0\ns_cmp_eq_u32 s20, 32\ns_cbranch_scc1 .Lskip\n{}\n.Lskip:"
    words = run_wmma(gpu, skip.format(wmma_line(op, 8)), operand_words(a, kind, False), operand_words(b, kind, True),
                     acc_words(c, out))
    got = result_matrices(words, out)
    for w in (0, 2):
        exact = a[w].astype(np.float64) @ b[w].astype(np.float64) + c[w]
        np.testing.assert_array_equal(got[w], exact.astype(f32 if out == "f32" else f16).astype(np.float64))
    np.testing.assert_array_equal(got[1], c[1])


def test_wmma_needs_full_exec(gpu):
    z = np.zeros((LANES, 8), u32)
    with pytest.raises(EmulatorError, match="needs EXEC all ones.*EXEC 0x0000ffff"):
        run_wmma(gpu, wmma_line("v_wmma_f32_16x16x16_f16", 8), z, z, z, pre="s_mov_b32 exec_lo, 0xffff")


def test_wmma_undefined_modifiers_are_refused(gpu):
    z = np.zeros((LANES, 8), u32)
    with pytest.raises(EmulatorError, match="only neg_lo on A and B"):
        run_wmma(gpu, wmma_line("v_wmma_f32_16x16x16_f16", 8, " neg_hi:[1,0,0]"), z, z, z)


WMMA_LINES = [wmma_line(op, n, mods) for op, n, mods in [
    ("v_wmma_f32_16x16x16_f16", 8, ""), ("v_wmma_f32_16x16x16_bf16", 8, " neg_lo:[1,1,0]"),
    ("v_wmma_f16_16x16x16_f16", 8, " op_sel:[0,0,1]"), ("v_wmma_bf16_16x16x16_bf16", 8, ""),
    ("v_wmma_i32_16x16x16_iu8", 4, " neg_lo:[1,0,0] clamp"), ("v_wmma_i32_16x16x16_iu4", 2, " neg_lo:[0,1,0]")]]


def test_wmma_encodings_round_trip_through_llvm_mc():
    """llvm-mc's bytes for each form decode to the op and register ranges written, and print back the same text."""
    for line in WMMA_LINES:
        (inst,) = decode_all(assemble(line))
        assert disasm(inst) == line


# ---- the forms as LLVM emits them from its intrinsics (tg-amd's compiler, llvmlite) ----

IR = """target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
declare {cty} @{intr}({decl})
define amdgpu_kernel void @k(ptr addrspace(1) %out, ptr addrspace(1) %a, ptr addrspace(1) %b, ptr addrspace(1) %c) {{
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %off = mul i32 %t, 8
  %pa = getelementptr i32, ptr addrspace(1) %a, i32 %off
  %pb = getelementptr i32, ptr addrspace(1) %b, i32 %off
  %pc = getelementptr i32, ptr addrspace(1) %c, i32 %off
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %off
  %ia = load <{na} x i32>, ptr addrspace(1) %pa
  %ib = load <{na} x i32>, ptr addrspace(1) %pb
  %ic = load <8 x i32>, ptr addrspace(1) %pc
  %va = bitcast <{na} x i32> %ia to {aty}
  %vb = bitcast <{na} x i32> %ib to {aty}
  %vc = bitcast <8 x i32> %ic to {cty}
  %d = call {cty} @{intr}({args})
  %id = bitcast {cty} %d to <8 x i32>
  store <8 x i32> %id, ptr addrspace(1) %po
  ret void
}}
"""
# intrinsic -> (A/B type, dwords per A/B, C/D type, how the call's arguments read, input kind, result kind)
INTRINSICS = {
    "f32_f16": ("llvm.amdgcn.wmma.f32.16x16x16.f16", "<16 x half>", 8, "<8 x float>", "{aty} %va, {aty} %vb, {cty} %vc",
                "f16", "f32"),
    "f32_bf16": ("llvm.amdgcn.wmma.f32.16x16x16.bf16", "<16 x i16>", 8, "<8 x float>",
                 "{aty} %va, {aty} %vb, {cty} %vc", "bf16", "f32"),
    "f16_f16_hi": ("llvm.amdgcn.wmma.f16.16x16x16.f16", "<16 x half>", 8, "<16 x half>",
                   "{aty} %va, {aty} %vb, {cty} %vc, i1 true", "f16", "f16"),
    "bf16_bf16": ("llvm.amdgcn.wmma.bf16.16x16x16.bf16", "<16 x i16>", 8, "<16 x i16>",
                  "{aty} %va, {aty} %vb, {cty} %vc, i1 false", "bf16", "bf16"),
    "i32_iu8_signed_clamp": ("llvm.amdgcn.wmma.i32.16x16x16.iu8", "<4 x i32>", 4, "<8 x i32>",
                             "i1 true, {aty} %va, i1 true, {aty} %vb, {cty} %vc, i1 true", "iu8", "i32"),
    "i32_iu8_unsigned_signed": ("llvm.amdgcn.wmma.i32.16x16x16.iu8", "<4 x i32>", 4, "<8 x i32>",
                                "i1 false, {aty} %va, i1 true, {aty} %vb, {cty} %vc, i1 false", "iu8", "i32"),
    "i32_iu4_signed": ("llvm.amdgcn.wmma.i32.16x16x16.iu4", "<2 x i32>", 2, "<8 x i32>",
                       "i1 true, {aty} %va, i1 true, {aty} %vb, {cty} %vc, i1 false", "iu4", "i32"),
}


@pytest.mark.parametrize("form", INTRINSICS)
def test_wmma_from_llvm_intrinsics(gpu, form):
    intr, aty, na, cty, args, kind, out = INTRINSICS[form]
    fmt = dict(aty=aty, cty=cty)
    decl = ", ".join(p.rsplit(" ", 1)[0] for p in args.format(**fmt).split(", "))   # the argument types
    co = ir_kernel(IR.format(intr=intr, decl=decl, args=args.format(**fmt), na=na, **fmt))
    rng = np.random.default_rng(len(form))
    hi = int("_hi" in form)
    if out == "i32":
        sa, sb = form.startswith(("i32_iu8_signed", "i32_iu4_signed")), True   # the call's first i1 / B signed
        a = [int_elements(rng, kind, sa) for _ in range(WAVES)]
        b = [int_elements(rng, kind, sb) for _ in range(WAVES)]
        c = [rng.integers(-(1 << 31), 1 << 31, (16, 16)) for _ in range(WAVES)]
        c[0][:4] = (1 << 31) - 3
    else:
        a = [random_floats(rng, kind) / 4 for _ in range(WAVES)]
        b = [random_floats(rng, kind) / 4 for _ in range(WAVES)]
        c = [random_floats(rng, kind) for _ in range(WAVES)]
    bufs = [gpu.buffer(np.zeros((LANES, 8), u32)), gpu.buffer(operand_words(a, kind, False)),
            gpu.buffer(operand_words(b, kind, True)), gpu.buffer(acc_words(c, out, None, hi))]
    try:
        gpu.run(co, (1, 1, 1), (LANES, 1, 1), *bufs)
        got = result_matrices(gpu.read(bufs[0], u32, LANES * 8).reshape(LANES, 8), out, hi)
    finally:
        for buf in bufs:
            gpu.gpu.free(buf)
    names = {i.op for i in decode_all(co.image[co.kernel("k").code_offset:][:co.kernel("k").code_size])}
    assert f"v_wmma_{intr.split('wmma.')[1].replace('.', '_')}" in names
    for w in range(WAVES):
        exact = a[w] @ b[w] + c[w] if out == "i32" else a[w].astype(np.float64) @ b[w].astype(np.float64) + c[w]
        if out == "i32":
            want = np.clip(exact, -(1 << 31), (1 << 31) - 1) if "clamp" in form else \
                (exact + (1 << 31)) % (1 << 32) - (1 << 31)
            np.testing.assert_array_equal(got[w], want)
        else:
            np.testing.assert_allclose(got[w], exact, rtol=1e-2 if out != "f32" else 1e-6, atol=1e-3)
