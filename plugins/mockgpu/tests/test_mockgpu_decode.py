"""The RDNA3 decoder against llvm-mc-19: instruction forms LLVM emits for tensor kernels are assembled by llvm-mc
(one call) and must decode to the same mnemonic, size, operand fields and text; operand codes; errors for what we
cannot decode."""
from __future__ import annotations

import re
import shutil
import struct
import subprocess

import pytest

from tg_mockgpu.rdna3.decode import DecodeError, branch_target, decode, decode_all, operand_regs, vgpr_half
from tg_mockgpu.rdna3.disasm import disasm
from tg_mockgpu.rdna3.gen_tables import llvm_mc
from tg_mockgpu.rdna3.operands import INLINE_FLOATS, inline_value, src_operand

needs_llvm = pytest.mark.skipif(shutil.which("llvm-mc-19") is None,
                                reason="llvm-mc-19 (Debian package llvm-19) is not installed")

# (assembly, expected encoding, expected fields): fields are checked where given (register numbers as the decoder
# reports them: 9-bit source codes, v = 256 + n), every case is checked for mnemonic, size and text.
V = 256
FORMS: list[tuple[str, str, dict]] = [
    # scalar ALU, 64-bit address math, compares, exec masking, constants and literals
    ("s_mov_b32 s0, 0x12345678", "SOP1", {"sdst": 0, "ssrc0": 255}),
    ("s_mov_b64 s[2:3], exec", "SOP1", {"sdst": 2, "ssrc0": 126}),
    ("s_and_saveexec_b32 s2, vcc_lo", "SOP1", {"sdst": 2, "ssrc0": 106}),
    ("s_or_b32 exec_lo, exec_lo, s2", "SOP2", {"sdst": 126, "ssrc0": 126, "ssrc1": 2}),
    ("s_andn2_b32 exec_lo, exec_lo, s2", "SOP2", {}),
    ("s_getpc_b64 s[4:5]", "SOP1", {"sdst": 4}),
    ("s_add_u32 s4, s4, 0x100", "SOP2", {"sdst": 4, "ssrc1": 255}),
    ("s_addc_u32 s5, s5, 0", "SOP2", {"ssrc1": 128}),
    ("s_lshl_b64 s[0:1], s[2:3], 2", "SOP2", {"sdst": 0, "ssrc0": 2, "ssrc1": 130}),
    ("s_ashr_i32 s3, s2, 31", "SOP2", {"ssrc1": 159}),
    ("s_lshl4_add_u32 s0, s15, s2", "SOP2", {}),
    ("s_mul_i32 s0, s1, -16", "SOP2", {"ssrc1": 208}),
    ("s_cselect_b32 s0, 1.0, 0.5", "SOP2", {"ssrc0": 242, "ssrc1": 240}),
    ("s_cmp_lt_i32 s0, 64", "SOPC", {"ssrc0": 0, "ssrc1": 192}),
    ("s_cmp_eq_u64 s[0:1], 0", "SOPC", {}),
    ("s_movk_i32 s0, 0x1234", "SOPK", {"sdst": 0, "simm16": 0x1234}),
    # control flow and waits
    ("s_cbranch_execz 5", "SOPP", {"simm16": 5}),
    ("s_branch -3", "SOPP", {"simm16": 0xFFFD}),
    ("s_cbranch_scc1 2", "SOPP", {}),
    ("s_cbranch_vccnz 1", "SOPP", {}),
    ("s_waitcnt vmcnt(0) lgkmcnt(0)", "SOPP", {"simm16": 0x0007}),
    ("s_waitcnt_vscnt null, 0x0", "SOPK", {"sdst": 124}),
    ("s_delay_alu instid0(VALU_DEP_1) | instskip(NEXT) | instid1(VALU_DEP_2)", "SOPP", {"simm16": 0x111}),
    ("s_waitcnt_depctr depctr_va_vdst(0)", "SOPP", {"simm16": 0x0F9F}),
    ("s_clause 0x3", "SOPP", {"simm16": 3}),
    ("s_barrier", "SOPP", {}),
    ("s_nop 7", "SOPP", {}),
    ("s_sendmsg sendmsg(MSG_DEALLOC_VGPRS)", "SOPP", {"simm16": 3}),
    ("s_endpgm", "SOPP", {}),
    ("s_code_end", "SOPP", {}),
    # scalar memory
    ("s_load_b64 s[2:3], s[0:1], 0x10", "SMEM", {"sdata": 2, "sbase": 0, "offset": 16, "soffset": 124}),
    ("s_load_b256 s[4:11], s[0:1], null", "SMEM", {"sdata": 4, "offset": 0}),
    ("s_load_b32 s2, s[4:5], s6 offset:0x20", "SMEM", {"sbase": 4, "soffset": 6, "offset": 32}),
    ("s_load_b32 s2, s[4:5], -0x8", "SMEM", {"offset": -8}),
    # VALU: f32/i32 elementwise, conversions, transcendentals
    ("v_add_f32_e32 v0, v1, v2", "VOP2", {"vdst": 0, "src0": V + 1, "vsrc1": 2}),
    ("v_mul_f32_e32 v3, 0x3fb8aa3b, v3", "VOP2", {"src0": 255}),
    ("v_fmac_f32_e32 v6, v7, v6", "VOP2", {}),
    ("v_fmamk_f32 v0, v1, 0x42280000, v2", "VOP2", {}),
    ("v_fmaak_f32 v0, v1, v2, 0x3f800000", "VOP2", {}),
    ("v_cndmask_b32_e32 v3, v3, v5, vcc_lo", "VOP2", {}),
    ("v_add_co_ci_u32_e32 v1, vcc_lo, s3, v1, vcc_lo", "VOP2", {"src0": 3}),
    ("v_lshlrev_b32_e32 v0, 2, v0", "VOP2", {"src0": 130}),
    ("v_ashrrev_i32_e32 v1, 31, v0", "VOP2", {}),
    ("v_and_b32_e32 v0, 0x3ff, v0", "VOP2", {}),
    ("v_max_f32_e32 v0, v0, v0", "VOP2", {}),
    ("v_add_nc_u32_e32 v0, s2, v0", "VOP2", {}),
    ("v_mov_b32_e32 v1, 1.0", "VOP1", {"vdst": 1, "src0": 242}),
    ("v_readfirstlane_b32 s0, v1", "VOP1", {"vdst": 0, "src0": V + 1}),
    ("v_cvt_f32_u32_e32 v1, v1", "VOP1", {}),
    ("v_cvt_i32_f32_e32 v0, v0", "VOP1", {}),
    ("v_cvt_f64_f32_e32 v[0:1], v2", "VOP1", {}),
    ("v_exp_f32_e32 v3, v3", "VOP1", {}),
    ("v_log_f32_e32 v0, v0", "VOP1", {}),
    ("v_sqrt_f32_e32 v5, v3", "VOP1", {}),
    ("v_rcp_f32_e32 v6, v5", "VOP1", {}),
    ("v_rcp_iflag_f32_e32 v1, v1", "VOP1", {}),
    ("v_sin_f32_e32 v0, v0", "VOP1", {}),
    ("v_fract_f32_e32 v0, v0", "VOP1", {}),
    ("v_cmp_gt_f32_e32 vcc_lo, 0xc2fc0000, v3", "VOPC", {"src0": 255, "vsrc1": 3}),
    ("v_cmp_gt_i32_e32 vcc_lo, s2, v0", "VOPC", {}),
    ("v_cmpx_eq_u32_e32 0, v0", "VOPC", {"src0": 128}),
    ("v_cmp_class_f32_e64 vcc_lo, v3, 0x260", "VOP3", {"vdst": 106, "src1": 255}),
    ("v_cmp_ge_f32_e64 s0, 0, v8", "VOP3", {"vdst": 0, "src0": 128, "src1": V + 8}),
    ("v_cndmask_b32_e64 v5, 0, 0x42800000, vcc_lo", "VOP3", {"src0": 128, "src1": 255, "src2": 106}),
    ("v_fma_f32 v0, -v1, v2, |v3| clamp", "VOP3", {"vdst": 0, "src0": V + 1, "src1": V + 2, "src2": V + 3, "neg": 1,
                                                  "abs": 4, "clamp": 1}),
    ("v_add_f32_e64 v0, v1, v2 mul:2", "VOP3", {"omod": 1}),
    ("v_ldexp_f32 v3, v3, v5", "VOP3", {}),
    ("v_lshl_or_b32 v0, s15, 8, v0", "VOP3", {"src0": 15, "src1": 136, "src2": V}),
    ("v_lshlrev_b64 v[1:2], 2, v[0:1]", "VOP3", {"vdst": 1, "src0": 130, "src1": V}),
    ("v_add3_u32 v0, v1, v2, v3", "VOP3", {}),
    ("v_mul_lo_u32 v0, v1, v2", "VOP3", {}),
    ("v_mul_hi_u32 v0, v1, v2", "VOP3", {}),
    ("v_mul_hi_i32 v4, 0x92492493, v0", "VOP3", {}),
    ("v_bfe_u32 v0, v1, 8, 4", "VOP3", {}),
    ("v_alignbit_b32 v0, v1, v2, 4", "VOP3", {}),
    ("v_max3_f32 v0, v1, v2, v3", "VOP3", {}),
    ("v_div_fixup_f32 v3, v5, v4, v3", "VOP3", {}),
    ("v_div_fmas_f32 v5, v5, v6, v7", "VOP3", {}),
    ("v_readlane_b32 s0, v1, 3", "VOP3", {"vdst": 0}),
    ("v_add_co_u32 v3, vcc_lo, s6, v1", "VOP3SD", {"vdst": 3, "sdst": 106, "src0": 6, "src1": V + 1}),
    ("v_add_co_ci_u32_e64 v4, null, s7, v2, vcc_lo", "VOP3SD", {"sdst": 124, "src2": 106}),
    ("v_sub_co_u32 v0, s0, v1, v2", "VOP3SD", {"sdst": 0}),
    ("v_div_scale_f32 v5, null, v4, v4, v3", "VOP3SD", {}),
    ("v_mad_u64_u32 v[0:1], null, v2, v3, v[4:5]", "VOP3SD", {"vdst": 0, "src2": V + 4}),
    ("v_add_f64 v[0:1], v[2:3], -v[4:5]", "VOP3", {"neg": 2}),
    ("v_fma_f64 v[0:1], v[2:3], v[4:5], 1.0", "VOP3", {"src2": 242}),
    # packed and dual issue
    # llvm-mc sets the unused third op_sel_hi bit (bit 14) of two-source ops
    ("v_pk_add_f16 v0, v1, v2 op_sel:[1,0] op_sel_hi:[0,1]", "VOP3P", {"opsel": 1, "opsel_hi": 6}),
    ("v_pk_fma_f16 v0, v1, v2, v3 neg_lo:[1,0,0] neg_hi:[0,1,0] clamp", "VOP3P", {"neg": 1, "neg_hi": 2, "clamp": 1,
                                                                                  "opsel_hi": 7}),
    ("v_pk_mul_lo_u16 v0, v1, v2", "VOP3P", {}),
    ("v_dual_mul_f32 v0, v1, v2 :: v_dual_add_f32 v3, v4, v5", "VOPD",
     {"vdstx": 0, "srcx0": V + 1, "vsrcx1": 2, "vdsty": 3, "srcy0": V + 4, "vsrcy1": 5}),
    ("v_dual_fmaak_f32 v0, v1, v2, 0x11223344 :: v_dual_mov_b32 v3, v4", "VOPD", {}),
    ("v_dual_mov_b32 v6, 0 :: v_dual_lshlrev_b32 v1, 2, v0", "VOPD", {"srcx0": 128}),
    # LDS, global, flat and scratch memory
    ("ds_store_b32 v1, v2 offset:1234", "DS", {"addr": 1, "data0": 2, "offset0": 1234 & 255, "offset1": 1234 >> 8}),
    ("ds_store_2addr_b32 v1, v2, v3 offset0:4 offset1:8", "DS", {"data1": 3, "offset0": 4, "offset1": 8}),
    ("ds_load_b32 v0, v1", "DS", {"vdst": 0, "addr": 1}),
    ("ds_load_b64 v[0:1], v2 offset:8", "DS", {}),
    ("ds_load_2addr_b32 v[0:1], v2 offset1:1", "DS", {}),
    ("ds_add_f32 v1, v2", "DS", {}),
    ("ds_bpermute_b32 v0, v1, v2", "DS", {}),
    ("global_load_b32 v0, v1, s[2:3]", "GLOBAL", {"vdst": 0, "addr": 1, "saddr": 2}),
    ("global_load_b32 v0, v[2:3], off offset:-16", "GLOBAL", {"saddr": 124, "offset": -16}),
    ("global_store_b32 v[1:2], v0, off", "GLOBAL", {"addr": 1, "data": 0}),
    ("global_store_b128 v0, v[4:7], s[0:1] offset:32", "GLOBAL", {}),
    ("global_load_d16_hi_b16 v0, v[7:8], off", "GLOBAL", {}),
    ("global_load_u8 v0, v1, s[2:3] glc slc dlc", "GLOBAL", {"glc": 1, "slc": 1, "dlc": 1}),
    ("global_atomic_add_u32 v0, v1, v2, s[4:5] glc", "GLOBAL", {"vdst": 0, "data": 2}),
    ("global_atomic_add_f32 v1, v2, s[4:5]", "GLOBAL", {}),
    ("flat_load_b32 v0, v[2:3] offset:16", "FLAT", {"offset": 16}),
    ("scratch_store_b32 off, v1, s3 offset:8", "SCRATCH", {"sve": 0, "saddr": 3, "data": 1}),
    ("scratch_load_b32 v0, v1, off", "SCRATCH", {"sve": 1, "addr": 1}),
]


def assemble(lines: list[str]) -> list[tuple[str, bytes]]:
    """llvm-mc-19's text and encoding of each line (one call)."""
    out = subprocess.run(["llvm-mc-19", "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx1100", "-show-encoding"],
                         input="\n".join(lines) + "\n", capture_output=True, text=True)
    assert not out.stderr.strip(), out.stderr
    got = [(m.group(1), bytes(int(x, 16) for x in m.group(2).split(",")))
           for m in re.finditer(r"^\s*(.*?)\s*; encoding: \[(.*)\]", out.stdout, re.M)]
    assert len(got) == len(lines)
    return got


@needs_llvm
def test_forms_decode_like_llvm_mc() -> None:
    """Mnemonic, size and fields against the assembler; text against llvm-mc's disassembly of the same bytes (the
    two print a few immediates differently, e.g. branch offsets: -3 vs 65533)."""
    bad = []
    assembled = assemble([f[0] for f in FORMS])
    shown = llvm_mc([code for _, code in assembled], "v_nop")    # FORMS has s_code_end, the default sentinel
    for (src, enc, fields), (text, code), dis in zip(FORMS, assembled, shown):
        inst = decode(code)
        mnemonic = text.split()[0]
        if enc == "VOPD":
            want_op = "::".join(half.split()[0] for half in text.split(" :: "))
        else:
            want_op = re.sub(r"_e(32|64)$", "", mnemonic)
        wrong = {k: (inst.fields.get(k), v) for k, v in fields.items() if inst.fields.get(k) != v}
        if (inst.enc, inst.op, inst.size) != (enc, want_op, len(code)) or wrong or disasm(inst, true16=False) != dis:
            bad.append(f"{src}: {code.hex()} -> {inst.enc} {inst.op} size {inst.size}, fields (ours, want) {wrong}, "
                       f"text {disasm(inst, true16=False)!r} vs {dis!r}")
    assert not bad, "\n".join(bad)


@needs_llvm
def test_literals_are_attached() -> None:
    (_, code), = assemble(["v_cndmask_b32_e64 v5, 0, 0xffffffc0, vcc_lo"])
    inst = decode(code + b"\xff" * 4)
    assert inst.literal == 0xFFFFFFC0 and inst.size == 12
    (_, code), = assemble(["v_dual_fmamk_f32 v0, v1, 0x40490fdb, v2 :: v_dual_mul_f32 v3, v4, v5"])
    assert decode(code).literal == 0x40490FDB


@needs_llvm
def test_operand_codes_match_llvm() -> None:
    """Every 9-bit source code through v_mov_b32 (and the 7-bit scalar destination codes through s_mov_b32)."""
    cases = [struct.pack("<I", (0x3F << 25) | (1 << 9) | c) + (struct.pack("<I", 0x12345678) if c == 255 else b"")
             for c in range(512)]
    texts = llvm_mc(cases)
    for code, text in enumerate(texts):
        try:
            kind, value = src_operand(code)
        except ValueError:
            assert text is None, f"code {code}: we reject it, llvm-mc reads {text!r}"
            continue
        if kind in ("dpp8", "dpp8_fi", "dpp16"):
            continue    # these need an extra dword; llvm-mc rejects the bare word
        shown = text.split(", ", 1)[1]
        want = {"sgpr": f"s{value}", "vgpr": f"v{value}", "ttmp": f"ttmp{value}", "inline_int": str(value),
                "literal": "0x12345678"}.get(kind)
        if kind == "inline_float":
            as_float = struct.unpack("<f", struct.pack("<I", inline_value(code, 32)))[0]
            assert as_float == pytest.approx(float(shown)), code
        elif want is not None:
            assert shown == want, (code, kind, value, shown)
        else:
            assert shown.removeprefix("src_") == kind.removeprefix("src_"), (code, kind, shown)
    scalar = llvm_mc([struct.pack("<I", (0x17D << 23) | (d << 16) | 0) for d in range(128)])
    names = {106: "vcc_lo", 107: "vcc_hi", 124: "null", 125: "m0", 126: "exec_lo", 127: "exec_hi"}
    for d, text in enumerate(scalar):
        kind, value = src_operand(d)
        assert text.split()[1].rstrip(",") == names.get(d, f"s{d}" if kind == "sgpr" else f"ttmp{value}")


def test_inline_constants_per_width() -> None:
    assert (inline_value(242, 32), inline_value(242, 16), inline_value(242, 64)) == (0x3F800000, 0x3C00, 0x3FF << 52)
    assert inline_value(193, 32) == 0xFFFFFFFF and inline_value(208, 16) == 0xFFF0 and inline_value(192, 64) == 64
    assert set(INLINE_FLOATS) == set(range(240, 249))
    with pytest.raises(ValueError, match="not an inline constant"):
        inline_value(5, 32)
    with pytest.raises(ValueError, match="reserved"):
        src_operand(220)


def test_branch_target_and_register_widths() -> None:
    code = struct.pack("<II", 0xBF800000, 0xBFA0FFFD)      # s_nop 0; s_branch -3
    insts = decode_all(code, addr=0x100)
    assert branch_target(insts[1]) == 0x104 + 4 - 12
    shift = decode(bytes.fromhex("01003cd782000200"))         # v_lshlrev_b64 v[1:2], 2, v[0:1]
    assert operand_regs(shift) == {"vdst": 2, "src0": 1, "src1": 2}


def test_true16_halves() -> None:
    mul = decode(struct.pack("<I", 0x6B030100))              # v_mul_f16_e32 v1.h, v0.l, v0.h
    assert mul.t16 == {"vdst", "src0", "vsrc1"}
    assert [vgpr_half(mul, f) for f in ("vdst", "src0", "vsrc1")] == [(1, 1), (0, 0), (0, 1)]
    assert disasm(mul) == "v_mul_f16_e32 v1.h, v0.l, v0.h"
    assert disasm(mul, true16=False) == "v_mul_f16_e32 v129, v0, v128"
    fma = decode(bytes.fromhex("011048d603070e04"))           # v_fma_f16 v1, v3, v3, v3 op_sel:[0,1,0,0]
    assert fma.op == "v_fma_f16" and vgpr_half(fma, "src1") == (3, 1) and vgpr_half(fma, "vdst") == (1, 0)
    assert disasm(fma) == "v_fma_f16 v1.l, v3.l, v3.h, v3.l"
    assert decode(struct.pack("<I", 0x06000501)).t16 == frozenset()      # f32 ops have none


def test_errors_name_word_address_and_kernel() -> None:
    with pytest.raises(DecodeError, match=r"0xFFFFFFFF at address 0x40 in kernel 'k'"):
        decode_all(struct.pack("<II", 0xBFB00000, 0xFFFFFFFF), addr=0x3C, kernel="k")
    with pytest.raises(DecodeError, match=r"unknown SOPP opcode 127: instruction 0xBFFF0000"):
        decode(struct.pack("<I", 0xBFFF0000))
    with pytest.raises(DecodeError, match="truncated VOP3"):
        decode(struct.pack("<I", 0xD6130000))
    with pytest.raises(DecodeError, match="truncated literal"):
        decode(struct.pack("<I", 0x7E0202FF))                # v_mov_b32 v1, <literal> without the literal
    with pytest.raises(DecodeError, match="DPP16 operand"):
        decode(struct.pack("<II", 0x7E0202FA, 0))
    with pytest.raises(DecodeError, match="operand code 220 is reserved"):
        decode(struct.pack("<I", 0x7E0202DC))                # v_mov_b32 v1, <reserved code 220>
    with pytest.raises(DecodeError, match="operand code 200 is not a scalar register"):
        decode(bytes.fromhex("c80002d401050200"))            # v_cmp_eq_f16_e64 with an inline constant as destination
    with pytest.raises(DecodeError, match="unsupported MIMG encoding"):
        decode(struct.pack("<II", 0xF0000000, 0))


@needs_llvm
def test_ds_swizzle_patterns_print_like_llvm() -> None:
    import random
    rng = random.Random(5)
    offsets = [0, 1, 0x8000, 0x80E4, 0x041F, 0x0C1F, 0x001F, 0x001E, 0x003C, 0x0020, 0x7FFF, 0x0C00, 0x81E4]
    offsets += [rng.randrange(1 << 16) for _ in range(300)] + [rng.randrange(1 << 15) for _ in range(300)]
    codes = [struct.pack("<II", (0x36 << 26) | (53 << 18) | o, 1 | (8 << 24)) for o in offsets]
    for code, text in zip(codes, llvm_mc(codes)):
        assert disasm(decode(code)) == text


@needs_llvm
def test_literals_print_by_the_value_the_operand_sees() -> None:
    """A literal equal to an inline constant prints like one, per operand class (f32/i32, f16, i16, f64, i64) and
    for K constants and s_setreg_imm32_b32: against llvm-mc-19."""
    import random
    rng = random.Random(11)
    lits = [0, 7, 64, 65, 0xFFFFFFF0, 0xFFFFFFEF, 0x3F800000, 0x3E22F983, 0x3FF00000, 0xBFF00000, 0x40000000, 0x3C00,
            0xBC00, 0x3118, 0x3FC45F30, 0x10007, 0xFFFF0007, 0xC000, 0x3800]
    lits += [rng.randrange(1 << 32) for _ in range(10)] + [rng.randrange(-16, 65) & 0xFFFFFFFF for _ in range(5)]
    vop3 = {259: "src0", 293: "src1", 306: "src0", 771: "src1", 807: "src0", 828: "src1", 395: "src0", 584: "src2"}
    cases = []
    for op, field in vop3.items():
        srcs = {"src0": V + 8, "src1": V + 12, "src2": V + 16, field: 255}
        hi = srcs["src0"] | srcs["src1"] << 9 | srcs["src2"] << 18
        cases += [struct.pack("<III", (0x35 << 26) | (op << 16) | 4, hi, lit) for lit in lits]
    for lit in lits:
        cases += [struct.pack("<II", (0x17D << 23) | (4 << 16) | (1 << 8) | 255, lit),      # s_mov_b64
                  struct.pack("<II", (44 << 25) | (4 << 17) | (12 << 9) | (V + 8), lit),       # v_fmamk_f32 K
                  struct.pack("<II", (55 << 25) | (4 << 17) | (12 << 9) | 255, lit),           # v_fmamk_f16 src0 = K
                  struct.pack("<II", (0xB << 28) | (19 << 23) | 0x1801, lit)]                 # s_setreg_imm32_b32
    compared = 0
    for code, text in zip(cases, llvm_mc(cases)):
        if text is not None and "nvalid" not in text:
            compared += 1
            assert disasm(decode(code), true16=False) == text, code.hex()
    assert compared > 150


def test_random_words_decode_or_raise_decode_error() -> None:
    """Garbage never crashes the decoder with anything but DecodeError, and whatever decodes can be disassembled."""
    import random
    rng = random.Random(2)
    decoded = 0
    for i in range(6000):
        w0 = rng.randrange(1 << 32)
        if i % 2:   # bias towards the 64-bit encodings
            w0 = (w0 & 0x03FFFFFF) | rng.choice([0x32, 0x33, 0x35, 0x36, 0x37, 0x38, 0x3D, 0x3E, 0x3F]) << 26
        code = struct.pack("<III", w0, rng.randrange(1 << 32), rng.randrange(1 << 32))
        try:
            inst = decode(code)
        except DecodeError:
            continue
        assert disasm(inst) and disasm(inst, true16=False)
        decoded += 1
    assert decoded > 1500
