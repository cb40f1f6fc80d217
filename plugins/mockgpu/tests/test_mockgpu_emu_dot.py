"""The dot-product instructions (VOP3P v_dot2/4/8, VOP3 v_dot2_f16_f16/bf16_bf16, VOP2 and VOPD dot2acc) and
s_cls: each case loads three 32-bit words per lane (a, b, c) into v2, v3, v5, runs the instruction into v4 and
stores v4. References are hand-computed values and, on random words, a per-lane Python loop over the elements."""
import numpy as np
import pytest
from mockgpu_helpers import Runner, asm_kernel, needs_llvm_mc

from tg_mockgpu.emu.machine import EmulatorError

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
