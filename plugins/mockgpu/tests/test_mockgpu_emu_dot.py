"""The dot-product instructions (VOP3P v_dot2/4/8, VOP3 v_dot2_f16_f16/bf16_bf16, VOP2 and VOPD dot2acc) and
s_cls: each case loads three 32-bit words per lane (a, b, c) into v2, v3, v5, runs the instruction into v4 and
stores v4. References are hand-computed values and, on random words, a per-lane Python loop over the elements; NaN and
inf, inactive lanes under EXEC, and the dot builtins compiled from LLVM IR (what tg-amd's kernels emit) too."""
import numpy as np
import pytest
from mockgpu_helpers import Runner, asm_kernel, ir_kernel, needs_llvm_mc

from tg_mockgpu.emu.machine import EmulatorError
from tg_mockgpu.rdna3.decode import decode_all

pytestmark = needs_llvm_mc

u32, f32, f16 = np.uint32, np.float32, np.float16
N = 64

PROLOGUE = """
s_load_b128 s[4:7], s[0:1], 0x0
s_load_b128 s[8:11], s[0:1], 0x10
v_lshlrev_b32 v1, 2, v0
s_waitcnt lgkmcnt(0)
global_load_b32 v2, v1, s[6:7]
global_load_b32 v3, v1, s[8:9]
global_load_b32 v5, v1, s[10:11]
s_waitcnt vmcnt(0)
v_mov_b32 v4, v5
"""
EPILOGUE = "\nglobal_store_b32 v1, v4, s[4:5]\n"


@pytest.fixture(scope="module")
def gpu():
    r = Runner()
    yield r
    r.close()


def run(gpu: Runner, asm: str, a, b, c) -> np.ndarray:
    """v4 after `asm` for per-lane words a, b, c (v4 starts as c)."""
    words = [np.resize(np.asarray(x, np.int64).astype(u32), N) for x in (a, b, c)]
    bufs = [gpu.buffer(np.zeros(N, u32))] + [gpu.buffer(w) for w in words]
    gpu.run(asm_kernel(PROLOGUE + asm + EPILOGUE, vgprs=16), (1, 1, 1), (N, 1, 1), *bufs)
    out = gpu.read(bufs[0], u32, N)
    for buf in bufs:
        gpu.gpu.free(buf)
    return out


def pack(vals, bits: int) -> int:
    """One 32-bit word from 32 // bits elements (lowest first), each taken modulo 2**bits."""
    return sum((int(v) % (1 << bits)) << (bits * i) for i, v in enumerate(vals))


def elements(word: int, bits: int, signed: bool) -> list[int]:
    out = []
    for i in range(32 // bits):
        e = (word >> (bits * i)) & ((1 << bits) - 1)
        out.append(e - (1 << bits) if signed and e >> (bits - 1) else e)
    return out


def int_dot(a: int, b: int, c: int, bits: int, sa: bool, sb: bool, result_signed: bool, clamp: bool) -> int:
    """The exact dot product plus c, wrapped to 32 bits or saturated to the result's range: the 32-bit word."""
    cv = c - (1 << 32) if result_signed and c >> 31 else c
    total = sum(x * y for x, y in zip(elements(a, bits, sa), elements(b, bits, sb))) + cv
    if clamp:
        lo, hi = (-(1 << 31), (1 << 31) - 1) if result_signed else (0, (1 << 32) - 1)
        total = min(max(total, lo), hi)
    return total % (1 << 32)


# (instruction, a, b, c, the result as hand-computed)
HAND = [
    ("v_dot4_u32_u8 v4, v2, v3, v5", pack([1, 2, 3, 4], 8), pack([5, 6, 7, 8], 8), 100, 100 + 5 + 12 + 21 + 32),
    ("v_dot4_u32_u8 v4, v2, v3, v5", 0xFFFFFFFF, 0xFFFFFFFF, 0, 4 * 255 * 255),
    ("v_dot4_u32_u8 v4, v2, v3, v5", 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 4 * 255 * 255 - 1),   # wraps
    ("v_dot4_u32_u8 v4, v2, v3, v5 clamp", 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF),    # saturates
    ("v_dot4_i32_iu8 v4, v2, v3, v5", 0xFFFFFFFF, pack([1, 1, 1, 1], 8), 0, 4 * 255),         # both unsigned
    ("v_dot4_i32_iu8 v4, v2, v3, v5 neg_lo:[1,0,0]", 0xFFFFFFFF, pack([1, 1, 1, 1], 8), 0, (-4) % 2**32),
    ("v_dot4_i32_iu8 v4, v2, v3, v5 neg_lo:[0,1,0]", pack([1, 1, 1, 1], 8), 0xFFFFFFFF, 10, 6),
    ("v_dot4_i32_iu8 v4, v2, v3, v5 neg_lo:[1,1,0]", pack([-128, 127, -1, 2], 8), pack([-128, -128, -1, 3], 8),
     (-7) % 2**32, 16384 - 16256 + 1 + 6 - 7),
    ("v_dot4_i32_iu8 v4, v2, v3, v5 neg_lo:[1,1,0] clamp", pack([-128] * 4, 8), pack([-128] * 4, 8), 0x7FFFFFFF,
     0x7FFFFFFF),
    ("v_dot4_i32_iu8 v4, v2, v3, v5 neg_lo:[1,0,0] clamp", pack([-128] * 4, 8), 0xFFFFFFFF, 0x80000000,
     0x80000000),
    ("v_dot8_u32_u4 v4, v2, v3, 7", 0x12345678, 0x11111111, 0, 7 + 36),
    ("v_dot8_u32_u4 v4, v2, v3, v5", 0xFFFFFFFF, 0xFFFFFFFF, 0, 8 * 225),
    ("v_dot8_i32_iu4 v4, v2, v3, v5 neg_lo:[1,0,0]", 0xFFFFFFFF, 0x11111111, 0, (-8) % 2**32),
    ("v_dot8_i32_iu4 v4, v2, v3, v5 neg_lo:[1,1,0]", pack([-8, 7, -1, 0, 1, 2, 3, -8], 4),
     pack([-8, -8, -1, 5, 1, 1, 1, 1], 4), 1, 64 - 56 + 1 + 1 + 2 + 3 - 8 + 1),
]


@pytest.mark.parametrize("asm, a, b, c, want", HAND, ids=[f"{h[0].split(' v4')[0]}-{i}" for i, h in enumerate(HAND)])
def test_integer_dot_hand_computed(gpu, asm, a, b, c, want):
    got = run(gpu, asm, [a], [b], [c])
    assert got[0] == want, f"{asm}: {got[0]:#x}, want {want:#x}"


INT_FORMS = [(op, neg, clamp) for op in ("v_dot4_u32_u8", "v_dot8_u32_u4") for neg in ("",) for clamp in ("", " clamp")]
INT_FORMS += [(op, neg, clamp) for op in ("v_dot4_i32_iu8", "v_dot8_i32_iu4")
              for neg in ("", " neg_lo:[1,0,0]", " neg_lo:[0,1,0]", " neg_lo:[1,1,0]") for clamp in ("", " clamp")]


@pytest.mark.parametrize("op, neg, clamp", INT_FORMS, ids=[f"{o}{n}{c}" for o, n, c in INT_FORMS])
def test_integer_dot_random_words(gpu, op, neg, clamp):
    rng = np.random.default_rng(len(op + neg + clamp))
    a, b = rng.integers(0, 2**32, N), rng.integers(0, 2**32, N)
    c = rng.integers(0, 2**32, N)
    c[:8] = [0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0, 0x7FFFFF00, 0x80000100, 0xFFFFFF00, 5]   # near the limits
    got = run(gpu, f"{op} v4, v2, v3, v5{neg}{clamp}", a, b, c)
    bits, iu = (8 if "dot4" in op else 4), "iu" in op
    sa, sb = "neg_lo:[1" in neg, "neg_lo:[0,1" in neg or "neg_lo:[1,1" in neg
    want = [int_dot(int(x), int(y), int(z), bits, sa, sb, iu, bool(clamp)) for x, y, z in zip(a, b, c)]
    assert got.tolist() == want


def h2(lo: float, hi: float, dt=f16) -> int:
    """A packed pair of 16-bit floats (bfloat16 as the top half of its f32)."""
    if dt == "bf16":
        return int(np.float32(lo).view(u32) >> 16) | int(np.float32(hi).view(u32) >> 16) << 16
    return int(np.float16(lo).view(np.uint16)) | int(np.float16(hi).view(np.uint16)) << 16


def f(x: float) -> int:
    return int(np.float32(x).view(u32))


FLOAT_HAND = [
    ("v_dot2_f32_f16 v4, v2, v3, v5", h2(1.5, -2), h2(4, 0.25), f(10), 10 + 6 - 0.5),
    ("v_dot2_f32_f16 v4, v2, v3, v5 neg_lo:[1,0,1]", h2(1.5, -2), h2(4, 0.25), f(10), -10 - 6 - 0.5),
    ("v_dot2_f32_f16 v4, v2, v3, v5 neg_hi:[0,1,0]", h2(1.5, -2), h2(4, 0.25), f(10), 10 + 6 + 0.5),
    ("v_dot2_f32_f16 v4, v2, v3, v5 op_sel:[1,0,0] op_sel_hi:[0,1,1]", h2(1.5, -2), h2(4, 0.25), f(0), -8 + 0.375),
    ("v_dot2_f32_f16 v4, v2, v3, v5 clamp", h2(1.5, -2), h2(4, 0.25), f(-10), 0.0),
    ("v_dot2_f32_f16 v4, v2, v3, v5 clamp", h2(0.25, 0.5), h2(1, 0.5), f(0.25), 0.75),
    ("v_dot2_f32_f16 v4, v2, v3, v5", h2(65504, 65504), h2(65504, 65504), f(0), 2 * 65504.0 ** 2),  # f16 overflow: no
    ("v_dot2_f32_bf16 v4, v2, v3, v5", h2(3, 1e30, "bf16"), h2(-0.5, 0, "bf16"), f(1), -0.5),
    ("v_dot2_f32_bf16 v4, v2, v3, v5 neg_lo:[0,1,0] clamp", h2(0.5, 0.25, "bf16"), h2(-1, 2, "bf16"), f(0.25),
     1.0),
    ("v_dot2_f32_bf16 v4, v2, v3, v5", h2(2.0 ** 100, 1, "bf16"), h2(2.0 ** 100, 1, "bf16"), f(0), np.inf),
]


@pytest.mark.parametrize("asm, a, b, c, want", FLOAT_HAND, ids=[f"{h[0].split(' v4')[0]}-{i}"
                                                              for i, h in enumerate(FLOAT_HAND)])
def test_float_dot_hand_computed(gpu, asm, a, b, c, want):
    got = run(gpu, asm, [a], [b], [c]).view(f32)[0]
    assert got == np.float32(want), f"{asm}: {got}, want {np.float32(want)}"


def test_dot16_vop3_with_op_sel(gpu):
    """v_dot2_f16_f16 / v_dot2_bf16_bf16: the accumulator half and the destination half come from op_sel[2], [3];
    the other destination half keeps its value (v4 starts as c)."""
    a, b = h2(1.5, -2), h2(4, 0.25)
    c = h2(100, 7)
    got = run(gpu, "v_dot2_f16_f16 v4, v2, v3, v5", [a], [b], [c])[0]
    assert got == h2(100 + 6 - 0.5, 7)
    got = run(gpu, "v_dot2_f16_f16 v4, v2, v3, v5 op_sel:[0,0,1,1]", [a], [b], [c])[0]
    assert got == h2(100, 7 + 6 - 0.5)
    ab, bb, cb = h2(1.5, -2, "bf16"), h2(4, 1, "bf16"), h2(256, 3, "bf16")
    assert run(gpu, "v_dot2_bf16_bf16 v4, v2, v3, v5", [ab], [bb], [cb])[0] == h2(256 + 6 - 2, 3, "bf16")
    # 1 + 0.5 + 256 = 257.5 lies between bfloat16's 256 and 258 (8 significant bits): it rounds to 258
    assert run(gpu, "v_dot2_bf16_bf16 v4, v2, v3, v5 op_sel:[0,0,1,1]", [h2(1, 1, "bf16")], [h2(1, 0.5, "bf16")],
               [h2(0, 256, "bf16")])[0] == h2(0, 258, "bf16")


def test_dot2acc_vop2_and_vopd(gpu):
    a, b, c = h2(1.5, -2), h2(4, 0.25), f(10)
    assert run(gpu, "v_dot2acc_f32_f16 v4, v2, v3", [a], [b], [c]).view(f32)[0] == 15.5
    # a VOPD pair: dot2acc into v4 and a mov into v7 (odd) together; both read before either writes
    got = run(gpu, "v_dual_dot2acc_f32_f16 v4, v2, v3 :: v_dual_mov_b32 v7, v4\nv_add_f32 v4, v4, v7",
              [a], [b], [c]).view(f32)[0]
    assert got == 15.5 + 10


def test_s_cls(gpu):
    """s_cls_i32: how many leading bits equal the sign bit (the sign bit included); -1 when all of them do."""
    cases = {0: -1, 0xFFFFFFFF: -1, 1: 31, 0x40000000: 1, 0x80000000: 1, 0xC0000000: 2, 0xFFFF0000: 16, 0x7FFF: 17}
    asm = "v_readfirstlane_b32 s12, v2\ns_cls_i32 s13, s12\nv_mov_b32 v4, s13"
    for x, want in cases.items():
        assert run(gpu, asm, [x], [0], [0])[0] == want % 2**32, hex(x)
    asm64 = "v_readfirstlane_b32 s12, v2\nv_readfirstlane_b32 s13, v3\ns_cls_i32_i64 s14, s[12:13]\nv_mov_b32 v4, s14"
    for (lo, hi), want in {(0, 0): -1, (0xFFFFFFFF, 0xFFFFFFFF): -1, (1, 0): 63, (0, 0xF0000000): 4}.items():
        assert run(gpu, asm64, [lo], [hi], [0])[0] == want % 2**32


def test_meaningless_modifiers_are_refused(gpu):
    with pytest.raises(EmulatorError, match="v_dot4_u32_u8: op_sel, neg_hi, neg"):
        run(gpu, "v_dot4_u32_u8 v4, v2, v3, v5 neg_lo:[1,0,0]", [1], [1], [1])


def test_float_dot_nan_inf(gpu):
    """NaN in any input gives NaN, inf * 0 gives NaN, inf + -inf gives NaN, a single inf stays inf; clamp sends NaN
    to 0 and inf to 1."""
    nan, inf = np.nan, np.inf
    cases = [(h2(nan, 1), h2(1, 1), f(0)), (h2(inf, 1), h2(0, 1), f(0)), (h2(inf, 1), h2(1, 1), f(-inf)),
             (h2(inf, 1), h2(2, 1), f(5)), (h2(1, 1), h2(1, 1), f(nan)), (h2(-inf, 2), h2(1, 3), f(1))]
    a, b, c = (np.array([x[k] for x in cases]) for k in range(3))

    def halves(word) -> np.ndarray:
        return np.array([int(word) & 0xFFFF, int(word) >> 16], np.uint16).view(f16).astype(np.float64)

    with np.errstate(invalid="ignore"):
        want = [float((halves(x) * halves(y)).sum() + np.uint32(z).view(f32)) for x, y, z in zip(a, b, c)]
    got = run(gpu, "v_dot2_f32_f16 v4, v2, v3, v5", a, b, c).view(f32)[:len(cases)]
    np.testing.assert_array_equal(got, np.array(want, f32))
    clamped = run(gpu, "v_dot2_f32_f16 v4, v2, v3, v5 clamp", a, b, c).view(f32)[:len(cases)]
    np.testing.assert_array_equal(clamped, np.where(np.isnan(want), 0, np.clip(want, 0, 1)).astype(f32))
    got16 = run(gpu, "v_dot2_f16_f16 v4, v2, v3, v5", a, b, [h2(float(np.uint32(z).view(f32)), 0) for z in c])
    np.testing.assert_array_equal(got16[:len(cases)].astype(np.uint16).view(f16), np.array(want, f16))


@pytest.mark.parametrize("asm", ["v_dot4_i32_iu8 v4, v2, v3, v5 neg_lo:[1,1,0]", "v_dot8_u32_u4 v4, v2, v3, v5 clamp",
                                 "v_dot2_f32_f16 v4, v2, v3, v5", "v_dot2_f16_f16 v4, v2, v3, v5"])
def test_dot_inactive_lanes_keep_their_value(gpu, asm):
    """Under EXEC (lanes with lane & 5 == 0 off), inactive lanes keep v4 (= c); active ones get the dot product."""
    rng = np.random.default_rng(8)
    a, b, c = (rng.integers(0, 2**32, N) for _ in range(3))
    masked = run(gpu, f"v_and_b32 v6, 5, v0\nv_cmpx_ne_u32_e32 0, v6\n{asm}\ns_mov_b32 exec_lo, -1", a, b, c)
    full = run(gpu, asm, a, b, c)
    off = (np.arange(N) & 5) == 0
    np.testing.assert_array_equal(masked[off], np.asarray(c, np.int64).astype(u32)[off])
    np.testing.assert_array_equal(masked[~off], full[~off])


DOT_IR = """target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
declare {rty} @{intr}({decl})
define amdgpu_kernel void @k(ptr addrspace(1) %out, ptr addrspace(1) %pa, ptr addrspace(1) %pb, ptr addrspace(1) %pc) {{
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %qa = getelementptr i32, ptr addrspace(1) %pa, i32 %t
  %qb = getelementptr i32, ptr addrspace(1) %pb, i32 %t
  %qc = getelementptr i32, ptr addrspace(1) %pc, i32 %t
  %qo = getelementptr i32, ptr addrspace(1) %out, i32 %t
  %ia = load i32, ptr addrspace(1) %qa
  %ib = load i32, ptr addrspace(1) %qb
  %ic = load i32, ptr addrspace(1) %qc
  %a = bitcast i32 %ia to {aty}
  %b = bitcast i32 %ib to {aty}
  {cload}
  %r = call {rty} @{intr}({args})
  {rstore}
  store i32 %ro, ptr addrspace(1) %qo
  ret void
}}
"""
# name -> (intrinsic, element type of a/b, result type, arguments, instruction LLVM must emit)
DOT_INTRINSICS = {
    "sudot4": ("llvm.amdgcn.sudot4", "i32", "i32", "i1 true, i32 %a, i1 false, i32 %b, i32 %c, i1 false",
               "v_dot4_i32_iu8"),
    "sudot4_clamp": ("llvm.amdgcn.sudot4", "i32", "i32", "i1 true, i32 %a, i1 true, i32 %b, i32 %c, i1 true",
                     "v_dot4_i32_iu8"),
    "sudot8": ("llvm.amdgcn.sudot8", "i32", "i32", "i1 false, i32 %a, i1 true, i32 %b, i32 %c, i1 false",
               "v_dot8_i32_iu4"),
    "udot4_clamp": ("llvm.amdgcn.udot4", "i32", "i32", "i32 %a, i32 %b, i32 %c, i1 true", "v_dot4_u32_u8"),
    "udot8": ("llvm.amdgcn.udot8", "i32", "i32", "i32 %a, i32 %b, i32 %c, i1 false", "v_dot8_u32_u4"),
    "fdot2": ("llvm.amdgcn.fdot2", "<2 x half>", "float", "<2 x half> %a, <2 x half> %b, float %c, i1 false",
              "v_dot2acc_f32_f16"),       # LLVM picks the VOP2 accumulate form without clamp
    "fdot2_clamp": ("llvm.amdgcn.fdot2", "<2 x half>", "float", "<2 x half> %a, <2 x half> %b, float %c, i1 true",
                    "v_dot2_f32_f16"),
    "fdot2_f32_bf16": ("llvm.amdgcn.fdot2.f32.bf16", "<2 x bfloat>", "float",
                       "<2 x bfloat> %a, <2 x bfloat> %b, float %c, i1 false", "v_dot2_f32_bf16"),
}


@pytest.mark.parametrize("form", DOT_INTRINSICS)
def test_dots_from_llvm_intrinsics(gpu, form):
    """What tg-amd's kernels get from LLVM for the dot builtins (sudot4 as __builtin_amdgcn_sudot4 etc.), against the
    per-lane references above."""
    intr, aty, rty, args, inst = DOT_INTRINSICS[form]
    decl = ", ".join(p.rsplit(" ", 1)[0] for p in args.split(", "))
    cload = "%c = bitcast i32 %ic to float" if rty == "float" else "%c = add i32 %ic, 0"
    rstore = "%ro = bitcast float %r to i32" if rty == "float" else "%ro = add i32 %r, 0"
    co = ir_kernel(DOT_IR.format(intr=intr, decl=decl, args=args, aty=aty, rty=rty, cload=cload, rstore=rstore))
    sym = co.kernel("k")
    assert inst in {i.op for i in decode_all(co.image[sym.code_offset:sym.code_offset + sym.code_size])}
    rng = np.random.default_rng(len(form))
    if rty == "float":
        bf = "bf16" in form
        vals = rng.integers(-64, 65, (4, N)) / 8.0
        a = [h2(x, y, "bf16" if bf else f16) for x, y in zip(vals[0], vals[1])]
        b = [h2(x, y, "bf16" if bf else f16) for x, y in zip(vals[2], vals[3])]
        c = [f(x) for x in rng.standard_normal(N) * 10]
        want = np.array([float(np.uint32(z).view(f32)) + vals[0][i] * vals[2][i] + vals[1][i] * vals[3][i]
                         for i, z in enumerate(c)], f32)
        if "clamp" in form:
            want = np.clip(want, f32(0), f32(1))
        want = want.view(u32)
    else:
        a, b, c = (rng.integers(0, 2**32, N) for _ in range(3))
        c[:4] = [0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFF00]
        bits = 8 if "4" in inst.split("_")[1] else 4
        flags = [p.split()[1] == "true" for p in args.split(", ") if p.startswith("i1")]
        iu = form.startswith("sudot")
        sa, sb, clamp = (flags[0], flags[1], flags[2]) if iu else (False, False, flags[0])
        want = np.array([int_dot(int(x), int(y), int(z), bits, sa, sb, iu, clamp) for x, y, z in zip(a, b, c)], u32)
    bufs = [gpu.buffer(np.zeros(N, u32))] + [gpu.buffer(np.asarray(x, np.int64).astype(u32)) for x in (a, b, c)]
    try:
        gpu.run(co, (1, 1, 1), (N, 1, 1), *bufs)
        got = gpu.read(bufs[0], u32, N)
    finally:
        for buf in bufs:
            gpu.gpu.free(buf)
    np.testing.assert_array_equal(got, want)
