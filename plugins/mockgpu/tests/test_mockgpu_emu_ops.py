"""Instruction semantics one by one: each case assembles a kernel (llvm-mc-19) that loads two 32-bit values per lane
into v2 and v3, runs the instruction(s) under test into v4 and stores v4; the result is compared with numpy on
random inputs (special values included). Scalar cases read lane 0 of each wave into SGPRs (v_readfirstlane) and
compare with numpy applied to lane 0."""
import numpy as np
import pytest
from mockgpu_helpers import Runner, asm_kernel, needs_llvm_mc

pytestmark = needs_llvm_mc

u32, i32, f32, f16, u64 = np.uint32, np.int32, np.float32, np.float16, np.uint64
N = 256

PROLOGUE = """
s_load_b128 s[4:7], s[0:1], 0x0
s_load_b64 s[8:9], s[0:1], 0x10
v_lshlrev_b32 v1, 2, v0
v_lshl_or_b32 v1, s2, 8, v1
s_waitcnt lgkmcnt(0)
global_load_b32 v2, v1, s[6:7]
global_load_b32 v3, v1, s[8:9]
s_waitcnt vmcnt(0)
v_mov_b32 v4, 0
"""
EPILOGUE = "\nglobal_store_b32 v1, v4, s[4:5]\n"


def rand_inputs(kind: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if kind == "f32":
        x = (rng.standard_normal((2, N)) * np.exp2(rng.integers(-10, 10, (2, N)))).astype(f32)
        x[:, :6] = np.array([[0.0, -0.0, np.inf, np.nan, 1.5, -2.5], [-0.0, 3.0, 2.0, 1.0, np.inf, -2.5]], f32)
        return x[0].view(u32), x[1].view(u32)
    if kind == "f16":
        x = rng.uniform(-8, 8, (2, N, 2)).astype(f16)
        return x[0].view(u32).ravel(), x[1].view(u32).ravel()
    x = rng.integers(0, 2**32, (2, N), dtype=np.uint64).astype(u32)
    x[:, :8] = np.array([[0, 1, 0xFFFFFFFF, 0x80000000, 5, 31, 32, 7],
                         [0, 0xFFFFFFFF, 1, 0x7FFFFFFF, 3, 1, 33, 7]], u32)
    return x[0], x[1]


def F(x):
    return x.view(f32)


def I(x):  # noqa: E743
    return x.view(i32)


def H(x, hi=0):
    return x.view(f16).reshape(-1, 2)[:, hi]


def packh(lo, hi=None):
    lo = np.asarray(lo, f16).view(np.uint16).astype(u32)
    return lo if hi is None else lo | (np.asarray(hi, f16).view(np.uint16).astype(u32) << u32(16))


def mulhi_u(a, b):
    return ((a.astype(u64) * b.astype(u64)) >> u64(32)).astype(u32)


def fma32(a, b, c):
    return (F(a).astype(np.float64) * F(b) + F(c)).astype(f32)   # exact enough for these magnitudes


VECTOR = [
    ("v_add_nc_u32 v4, v2, v3", "u32", lambda a, b: a + b),
    ("v_sub_nc_u32 v4, v2, v3", "u32", lambda a, b: a - b),
    ("v_sub_nc_u32_e64 v4, v2, v3 clamp", "u32", lambda a, b: np.where(a > b, a - b, 0)),
    ("v_add_nc_i32 v4, v2, v3 clamp", "u32",
     lambda a, b: np.clip(I(a).astype(np.int64) + I(b), -2**31, 2**31 - 1).astype(i32)),
    ("v_add_nc_u16 v4, v2, v3 clamp", "u32", lambda a, b: np.minimum((a & 0xFFFF) + (b & 0xFFFF), 0xFFFF)),
    ("v_subrev_nc_u32 v4, v2, v3", "u32", lambda a, b: b - a),
    ("v_mul_lo_u32 v4, v2, v3", "u32", lambda a, b: a * b),
    ("v_mul_hi_u32 v4, v2, v3", "u32", mulhi_u),
    ("v_mul_hi_i32 v4, v2, v3", "u32", lambda a, b: ((I(a).astype(np.int64) * I(b)) >> 32).astype(i32).view(u32)),
    ("v_mul_u32_u24 v4, v2, v3", "u32", lambda a, b: (a & 0xFFFFFF) * (b & 0xFFFFFF)),
    ("v_lshlrev_b32 v4, v3, v2", "u32", lambda a, b: a << (b & 31)),
    ("v_lshrrev_b32 v4, v3, v2", "u32", lambda a, b: a >> (b & 31)),
    ("v_ashrrev_i32 v4, v3, v2", "u32", lambda a, b: (I(a) >> (b & 31).astype(i32)).view(u32)),
    ("v_and_b32 v4, v2, v3", "u32", lambda a, b: a & b),
    ("v_or_b32 v4, v2, v3", "u32", lambda a, b: a | b),
    ("v_xor_b32 v4, v2, v3", "u32", lambda a, b: a ^ b),
    ("v_not_b32 v4, v2", "u32", lambda a, b: ~a),
    ("v_bfe_u32 v4, v2, 5, 11", "u32", lambda a, b: (a >> 5) & 0x7FF),
    ("v_bfe_i32 v4, v2, 3, 9", "u32", lambda a, b: ((I(a) << 20) >> 23).view(u32)),
    ("v_bfi_b32 v4, v2, v3, 0x1234567", "u32", lambda a, b: (a & b) | (~a & 0x1234567)),
    ("v_alignbit_b32 v4, v2, v3, 7", "u32", lambda a, b: ((a.astype(u64) << 32 | b) >> 7).astype(u32)),
    ("v_perm_b32 v4, v2, v3, 0x0c050a01", "u32",
     lambda a, b: np.array([int.from_bytes(bytes([(int(y) >> 8) & 255, 0xFF if (int(x) >> 15) & 1 else 0,
                                                  (int(x) >> 8) & 255, 0]), "little") for x, y in zip(a, b)], u32)),
    ("v_lshl_add_u32 v4, v2, 3, v3", "u32", lambda a, b: (a << 3) + b),
    ("v_add3_u32 v4, v2, v3, 17", "u32", lambda a, b: a + b + 17),
    ("v_lshl_or_b32 v4, v2, 4, v3", "u32", lambda a, b: (a << 4) | b),
    ("v_and_or_b32 v4, v2, v3, 0xf0", "u32", lambda a, b: (a & b) | 0xF0),
    ("v_max_i32 v4, v2, v3", "u32", lambda a, b: np.maximum(I(a), I(b)).view(u32)),
    ("v_min_u32 v4, v2, v3", "u32", np.minimum),
    ("v_med3_i32 v4, v2, v3, 0", "u32",
     lambda a, b: np.median(np.stack([I(a), I(b), 0 * I(a)]), 0).astype(i32).view(u32)),
    ("v_bcnt_u32_b32 v4, v2, v3", "u32", lambda a, b: np.array([bin(x).count("1") for x in a.tolist()], u32) + b),
    ("v_clz_i32_u32 v4, v2", "u32",
     lambda a, b: np.array([32 - x.bit_length() if x else -1 for x in a.tolist()]).astype(u32)),
    ("v_ctz_i32_b32 v4, v2", "u32",
     lambda a, b: np.array([(x & -x).bit_length() - 1 if x else -1 for x in a.tolist()]).astype(u32)),
    ("v_mbcnt_lo_u32_b32 v4, v2, v3", "u32",
     lambda a, b: np.array([bin(int(x) & ((1 << (i % 32)) - 1)).count("1") for i, x in enumerate(a)], u32) + b),
    ("v_add_co_u32 v4, vcc_lo, v2, v3\nv_cndmask_b32 v4, 0, 1, vcc_lo", "u32",
     lambda a, b: (a.astype(u64) + b >= 2**32).astype(u32)),
    ("v_sub_co_u32 v4, s10, v2, v3\nv_cndmask_b32 v4, 0, 1, s10", "u32", lambda a, b: (a < b).astype(u32)),
    ("v_add_co_u32 v5, vcc_lo, v2, v3\nv_add_co_ci_u32_e32 v4, vcc_lo, 0, v3, vcc_lo", "u32",
     lambda a, b: b + (a.astype(u64) + b >= 2**32).astype(u32)),
    ("v_sub_co_u32 v5, vcc_lo, v2, v3\nv_sub_co_ci_u32_e64 v4, s10, v3, v2, vcc_lo", "u32",
     lambda a, b: b - a - (a < b).astype(u32)),
    ("v_cmp_gt_i32 vcc_lo, v2, v3\nv_cndmask_b32 v4, v3, v2, vcc_lo", "u32",
     lambda a, b: np.maximum(I(a), I(b)).view(u32)),
    ("v_cmp_ge_u32_e64 s10, v2, v3\nv_cndmask_b32_e64 v4, 5, 9, s10", "u32",
     lambda a, b: np.where(a >= b, 9, 5).astype(u32)),
    ("v_cmp_lt_f32 vcc_lo, v2, v3\nv_cndmask_b32 v4, 0, 1, vcc_lo", "f32", lambda a, b: (F(a) < F(b)).astype(u32)),
    ("v_cmp_neq_f32 vcc_lo, v2, v3\nv_cndmask_b32 v4, 0, 1, vcc_lo", "f32", lambda a, b: ~(F(a) == F(b)) * u32(1)),
    ("v_cmp_u_f32 vcc_lo, v2, v3\nv_cndmask_b32 v4, 0, 1, vcc_lo", "f32",
     lambda a, b: (np.isnan(F(a)) | np.isnan(F(b))) * u32(1)),
    ("v_cmp_class_f32 vcc_lo, v2, v3\nv_cndmask_b32 v4, 0, 1, vcc_lo", "f32",
     lambda a, b: np.where(np.isnan(F(a)), (b >> 1) & 1,
                           np.where(np.isinf(F(a)), np.where(F(a) < 0, (b >> 2) & 1, (b >> 9) & 1),
                           np.where(F(a) == 0, np.where(np.signbit(F(a)), (b >> 5) & 1, (b >> 6) & 1),
                                    np.where(F(a) < 0, (b >> 3) & 1, (b >> 8) & 1)))).astype(u32)),
    ("v_add_f32 v4, v2, v3", "f32", lambda a, b: F(a) + F(b)),
    ("v_sub_f32 v4, -v2, |v3|", "f32", lambda a, b: -F(a) - np.abs(F(b))),
    ("v_mul_f32 v4, v2, v3", "f32", lambda a, b: F(a) * F(b)),
    ("v_max_f32 v4, v2, v3", "f32", lambda a, b: np.fmax(F(a), F(b))),
    ("v_min_f32 v4, v2, 1.0", "f32", lambda a, b: np.fmin(F(a), f32(1))),
    ("v_fma_f32 v4, v2, v3, 0.5", "f32", lambda a, b: fma32(a, b, np.full(N, 0.5, f32).view(u32))),
    ("v_mov_b32 v4, v3\nv_fmac_f32 v4, v2, v3", "f32", lambda a, b: fma32(a, b, b)),
    ("v_fmaak_f32 v4, v2, v3, 0x40400000", "f32", lambda a, b: fma32(a, b, np.full(N, 3.0, f32).view(u32))),
    ("v_mul_f32_e64 v4, v2, v3 clamp", "f32",
     lambda a, b: np.where(np.isnan(F(a) * F(b)), 0, np.clip(F(a) * F(b), 0, 1))),
    ("v_cvt_f32_i32 v4, v2", "u32", lambda a, b: I(a).astype(f32)),
    ("v_cvt_f32_u32 v4, v2", "u32", lambda a, b: a.astype(f32)),
    ("v_cvt_i32_f32 v4, v2", "f32",
     lambda a, b: np.where(np.isnan(F(a)), 0,
                           np.clip(np.trunc(F(a).astype(np.float64)), -2**31, 2**31 - 1)).astype(i32)),
    ("v_cvt_u32_f32 v4, v2", "f32",
     lambda a, b: np.where(np.isnan(F(a)), 0, np.clip(np.trunc(F(a).astype(np.float64)), 0, 2**32 - 1)).astype(u32)),
    ("v_floor_f32 v4, v2", "f32", lambda a, b: np.floor(F(a))),
    ("v_rndne_f32 v4, v2", "f32", lambda a, b: np.rint(F(a))),
    ("v_trunc_f32 v4, v2", "f32", lambda a, b: np.trunc(F(a))),
    ("v_ldexp_f32 v4, v2, 5", "f32", lambda a, b: np.ldexp(F(a), 5)),
    ("v_sqrt_f32 v4, |v2|", "f32", lambda a, b: np.sqrt(np.abs(F(a)))),
    ("v_rcp_f32 v4, v2", "f32", lambda a, b: (1 / F(a).astype(np.float64)).astype(f32)),
    ("v_cvt_f16_f32 v4, v2", "f32", lambda a, b: packh(F(a))),
    ("v_cvt_f32_f16 v4, v2", "f16", lambda a, b: H(a).astype(f32)),
    ("v_add_f16 v4, v2, v3", "f16", lambda a, b: packh(H(a) + H(b))),
    ("v_mul_f16 v4.l, v2.h, v3.h", "f16", lambda a, b: packh(H(a, 1) * H(b, 1))),
    ("v_add_f16 v4.h, v2.l, v3.h", "f16", lambda a, b: packh(np.zeros(N, f16), H(a) + H(b, 1))),
    ("v_fma_f16 v4, v2, v3, v2 op_sel:[1,0,1,1]", "f16",
     lambda a, b: packh(np.zeros(N, f16), H(a, 1).astype(f32) * H(b) + H(a, 1))),
    ("v_fma_f16 v4, v2, v3, -v2", "f16", lambda a, b: packh(H(a) * H(b).astype(f32) - H(a))),
    ("v_pk_add_f16 v4, v2, v3", "f16", lambda a, b: packh(H(a) + H(b), H(a, 1) + H(b, 1))),
    ("v_pk_mul_f16 v4, v2, v3 op_sel:[1,0] op_sel_hi:[0,1]", "f16", lambda a, b: packh(H(a, 1) * H(b), H(a) * H(b, 1))),
    ("v_pk_fma_f16 v4, v2, v3, 1.0", "f16",
     lambda a, b: packh(H(a).astype(f32) * H(b) + 1, H(a, 1).astype(f32) * H(b, 1) + 1)),
    ("v_fma_mix_f32 v4, v2, v3, v2 op_sel_hi:[1,1,0]", "f16",
     lambda a, b: (H(a).astype(np.float64) * H(b) + F(a)).astype(f32)),
    ("v_dual_add_f32 v4, v2, v3 :: v_dual_mul_f32 v5, v3, v2\nv_sub_f32 v4, v4, v5", "f32",
     lambda a, b: (F(a) + F(b)) - F(a) * F(b)),
    ("v_readfirstlane_b32 s10, v2\nv_mov_b32 v4, s10", "u32", lambda a, b: np.repeat(a[::32], 32)),
    ("v_readlane_b32 s10, v2, 5\nv_mov_b32 v4, s10", "u32", lambda a, b: np.repeat(a[5::32], 32)),
    ("v_mov_b32 v4, v3\nv_writelane_b32 v4, 7, 3", "u32",
     lambda a, b: np.where(np.arange(N) % 32 == 3, 7, b).astype(u32)),
    ("v_swap_b32 v2, v3\nv_sub_nc_u32 v4, v2, v3", "u32", lambda a, b: b - a),
    ("v_bfrev_b32 v4, v2", "u32", lambda a, b: np.array([int(f"{x:032b}"[::-1], 2) for x in a.tolist()], u32)),
    ("v_lshlrev_b64 v[4:5], 3, v[2:3]", "u32", lambda a, b: a << 3),
    ("v_lshrrev_b64 v[4:5], 36, v[2:3]", "u32", lambda a, b: b >> 4),
    ("v_mad_u64_u32 v[4:5], null, v2, v3, 0", "u32", lambda a, b: a * b),
    ("v_mad_u64_u32 v[6:7], null, v2, v3, 0\nv_mov_b32 v4, v7", "u32", mulhi_u),
]


@pytest.fixture(scope="module")
def gpu():
    r = Runner()
    yield r
    r.close()


def run_case(gpu: Runner, asm: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bufs = [gpu.buffer(np.zeros(N, u32)), gpu.buffer(a), gpu.buffer(b)]
    gpu.run(asm_kernel(PROLOGUE + asm + EPILOGUE, vgprs=16), (N // 64, 1, 1), (64, 1, 1), *bufs)
    out = gpu.read(bufs[0], u32, N)
    for buf in bufs:
        gpu.gpu.free(buf)
    return out


@pytest.mark.parametrize("asm,kind,ref", VECTOR, ids=[c[0].split("\n")[-1] for c in VECTOR])
def test_vector_op(gpu, asm, kind, ref):
    a, b = rand_inputs(kind, np.random.default_rng(len(asm)))
    with np.errstate(all="ignore"):
        want = np.asarray(ref(a, b))
    if want.dtype == np.float64:
        want = want.astype(f32)
    want = want.view(u32) if want.dtype.itemsize == 4 else want.astype(u32)
    got = run_case(gpu, asm, a, b)
    if kind in ("f32",) and want.dtype == u32:
        same = (got == want) | (np.isnan(got.view(f32)) & np.isnan(want.view(f32)))
    else:
        same = got == want
    i = int(np.argmin(same))
    assert same.all(), f"{asm}: first mismatch at {i}: a={a[i]:#x} b={b[i]:#x} got {got[i]:#x} want {want[i]:#x}"


SCALAR = [
    ("s_add_u32 s12, s10, s11\ns_cselect_b32 s13, 1, 0",
     lambda a, b: (a + b, (a.astype(u64) + b >= 2**32).astype(u32))),
    ("s_sub_u32 s12, s10, s11\ns_subb_u32 s13, 0, 0",
     lambda a, b: (a - b, np.where(a < b, u32(0xFFFFFFFF), 0).astype(u32))),
    ("s_add_i32 s12, s10, s11\ns_cselect_b32 s13, 1, 0",
     lambda a, b: (a + b, ((I(a).astype(np.int64) + I(b) > 2**31 - 1)
                           | (I(a).astype(np.int64) + I(b) < -2**31)).astype(u32))),
    ("s_mul_i32 s12, s10, s11\ns_mul_hi_u32 s13, s10, s11", lambda a, b: (a * b, mulhi_u(a, b))),
    ("s_lshl_b32 s12, s10, s11\ns_lshr_b32 s13, s10, s11", lambda a, b: (a << (b & 31), a >> (b & 31))),
    ("s_ashr_i32 s12, s10, s11\ns_cselect_b32 s13, 1, 0",
     lambda a, b: ((I(a) >> (b & 31).astype(i32)).view(u32), ((I(a) >> (b & 31).astype(i32)) != 0).astype(u32))),
    ("s_and_not1_b32 s12, s10, s11\ns_cselect_b32 s13, 1, 0", lambda a, b: (a & ~b, ((a & ~b) != 0).astype(u32))),
    ("s_bfe_u32 s12, s10, 0x80004\ns_bfe_i32 s13, s10, 0x50003",
     lambda a, b: ((a >> 4) & 0xFF, ((I(a) << 24) >> 27).view(u32))),
    ("s_min_i32 s12, s10, s11\ns_max_u32 s13, s10, s11",
     lambda a, b: (np.minimum(I(a), I(b)).view(u32), np.maximum(a, b))),
    ("s_cmp_lt_i32 s10, s11\ns_cselect_b32 s12, s10, s11\ns_cmp_gt_u32 s10, s11\ns_cselect_b32 s13, 1, 0",
     lambda a, b: (np.where(I(a) < I(b), a, b), (a > b).astype(u32))),
    ("s_lshl2_add_u32 s12, s10, s11\ns_cselect_b32 s13, 1, 0",
     lambda a, b: ((a << 2) + b, ((a.astype(u64) << 2) + b >= 2**32).astype(u32))),
    ("s_lshl_b64 s[12:13], s[10:11], 3", lambda a, b: (a << 3, (b << 3) | (a >> 29))),
    ("s_ashr_i64 s[12:13], s[10:11], 33", lambda a, b: ((I(b) >> 1).view(u32), (I(b) >> 31).view(u32))),
    ("s_bcnt1_i32_b32 s12, s10\ns_ctz_i32_b32 s13, s11",
     lambda a, b: (np.array([bin(x).count("1") for x in a.tolist()], u32),
                   np.array([(x & -x).bit_length() - 1 if x else -1 for x in b.tolist()]).astype(u32))),
    ("s_sext_i32_i16 s12, s10\ns_movk_i32 s13, 0x8001",
     lambda a, b: (a.astype(np.int16).astype(i32).view(u32), np.full_like(a, 0xFFFF8001))),
    ("s_mov_b32 s12, s10\ns_addk_i32 s12, 0x7fff\ns_cmpk_lg_u32 s11, 0x7\ns_cselect_b32 s13, 1, 0",
     lambda a, b: (a + 0x7FFF, (b != 7).astype(u32))),
    ("s_brev_b32 s12, s10\ns_not_b32 s13, s11",
     lambda a, b: (np.array([int(f"{x:032b}"[::-1], 2) for x in a.tolist()], u32), ~b)),
    ("s_pack_ll_b32_b16 s12, s10, s11\ns_pack_hh_b32_b16 s13, s10, s11",
     lambda a, b: ((a & 0xFFFF) | (b << 16), (a >> 16) | (b & 0xFFFF0000))),
]


@pytest.mark.parametrize("asm,ref", SCALAR, ids=[c[0].split("\n")[0] for c in SCALAR])
def test_scalar_op(gpu, asm, ref):
    """s10/s11 = lane 0's a/b of each wave; the case writes s12 and s13; lanes 0/1 store them."""
    code = ("v_readfirstlane_b32 s10, v2\nv_readfirstlane_b32 s11, v3\n" + asm +
            "\nv_mov_b32 v4, s12\nv_and_b32 v5, 1, v0\nv_cmp_eq_u32 vcc_lo, 1, v5\nv_cndmask_b32 v4, v4, s13, vcc_lo")
    a, b = rand_inputs("u32", np.random.default_rng(len(asm)))
    got = run_case(gpu, code, a, b).reshape(-1, 32)[:, :2]
    lo, hi = ref(a[::32], b[::32])
    want = np.stack([np.asarray(lo).astype(u32), np.asarray(hi).astype(u32)], 1)
    assert (got == want).all(), f"{asm}\ngot  {got.tolist()}\nwant {want.tolist()}\na {a[::32]} b {b[::32]}"
