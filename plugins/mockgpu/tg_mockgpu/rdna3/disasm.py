"""RDNA3 disassembler: Inst -> text in llvm-objdump-19's syntax (without its address/encoding comment).

Operands come from the operand template of the opcode (tables.py); constants print by the operand's width and type
as LLVM does (CONSTS); modifiers (MODS), offsets, cache bits and the named SOPP/SOPK immediates (waitcnt,
s_delay_alu, depctr, hwreg, sendmsg) and ds_swizzle patterns are formatted here. Tests compare every line with
llvm-objdump-19 and llvm-mc-19, and true16 forms with LLVM 22's own assembly.
"""
from __future__ import annotations

from tg_mockgpu.rdna3.decode import Inst, decode_all, template, vgpr_half
from tg_mockgpu.rdna3.operands import INLINE_FLOAT_TEXT, INLINE_FLOATS, src_operand
from tg_mockgpu.rdna3.tables import CONSTS, MODS, OPS, T16_SYNTAX

# Registers that print under their own names; 64-bit pairs starting there print as the pair's name.
SCALAR_NAMES = {106: "vcc_lo", 107: "vcc_hi", 124: "null", 125: "m0", 126: "exec_lo", 127: "exec_hi"}
PAIR_NAMES = {106: "vcc", 126: "exec"}
SRC_NAMES = {235: "src_shared_base", 236: "src_shared_limit", 237: "src_private_base", 238: "src_private_limit",
             239: "src_pops_exiting_wave_id", 251: "src_vccz", 252: "src_execz", 253: "src_scc", 254: "src_lds_direct"}
INV2PI_TEXT = {"b32": "0.15915494", "f16": "0.15915494", "f64": "0.15915494309189532", "i64": "0.15915494309189532"}
F16_INLINE_BITS = {240: 0x3800, 241: 0xB800, 242: 0x3C00, 243: 0xBC00, 244: 0x4000, 245: 0xC000, 246: 0x4400,
                   247: 0xC400, 248: 0x3118}
# bit patterns of the float inline constants per width -> their code, to print literals that equal one as LLVM does
F32_INLINE = {v[0]: c for c, v in INLINE_FLOATS.items()}
F16_INLINE = {v[1]: c for c, v in INLINE_FLOATS.items()}
F64_INLINE = {v[2]: c for c, v in INLINE_FLOATS.items()}

# s_waitcnt: (name, shift, width) in print order; a field at its maximum means "no wait" and is left out.
WAITCNT = (("vmcnt", 10, 6), ("expcnt", 0, 3), ("lgkmcnt", 4, 6))
# s_waitcnt_depctr: (name, shift, width); defaults are all ones. Bits 6:5 must be zero for the symbolic form.
DEPCTR = (("depctr_hold_cnt", 7, 1), ("depctr_sa_sdst", 0, 1), ("depctr_va_vdst", 12, 4), ("depctr_va_sdst", 9, 3),
          ("depctr_va_ssrc", 8, 1), ("depctr_va_vcc", 1, 1), ("depctr_vm_vsrc", 2, 3))
DELAY_IDS = ("NO_DEP", "VALU_DEP_1", "VALU_DEP_2", "VALU_DEP_3", "VALU_DEP_4", "TRANS32_DEP_1", "TRANS32_DEP_2",
             "TRANS32_DEP_3", "FMA_ACCUM_CYCLE_1", "SALU_CYCLE_1", "SALU_CYCLE_2", "SALU_CYCLE_3")
DELAY_SKIPS = ("SAME", "NEXT", "SKIP_1", "SKIP_2", "SKIP_3", "SKIP_4")
HWREGS = {1: "HW_REG_MODE", 2: "HW_REG_STATUS", 3: "HW_REG_TRAPSTS", 5: "HW_REG_GPR_ALLOC", 6: "HW_REG_LDS_ALLOC",
          7: "HW_REG_IB_STS", 15: "HW_REG_SH_MEM_BASES", 18: "HW_REG_PERF_SNAPSHOT_PC_LO",
          19: "HW_REG_PERF_SNAPSHOT_PC_HI", 20: "HW_REG_FLAT_SCR_LO", 21: "HW_REG_FLAT_SCR_HI", 23: "HW_REG_HW_ID1",
          24: "HW_REG_HW_ID2", 27: "HW_REG_PERF_SNAPSHOT_DATA", 29: "HW_REG_SHADER_CYCLES"}
UC_VERSIONS = {0: "UC_VERSION_GFX7", 4: "UC_VERSION_GFX10", 6: "UC_VERSION_GFX11", 9: "UC_VERSION_GFX12"}
UC_VERSION_BITS = ((0x8000, "UC_VERSION_MDP_BIT"), (0x4000, "UC_VERSION_W32_BIT"), (0x2000, "UC_VERSION_W64_BIT"))
SENDMSGS = {1: "MSG_INTERRUPT", 2: "MSG_HS_TESSFACTOR", 3: "MSG_DEALLOC_VGPRS", 5: "MSG_STALL_WAVE_GEN",
            6: "MSG_HALT_WAVES", 9: "MSG_GS_ALLOC_REQ", 128: "MSG_RTN_GET_DOORBELL", 129: "MSG_RTN_GET_DDID",
            130: "MSG_RTN_GET_TMA", 131: "MSG_RTN_GET_REALTIME", 132: "MSG_RTN_SAVE_WAVE", 133: "MSG_RTN_GET_TBA",
            134: "MSG_RTN_GET_TBA_TO_PC"}


def _regs(prefix: str, first: int, n: int) -> str:
    return f"{prefix}{first}" if n == 1 else f"{prefix}[{first}:{first + n - 1}]"


def scalar(code: int, n: int = 1) -> str:
    """A scalar register operand (SGPR, ttmp or special register) spanning n registers."""
    if code <= 105:
        return _regs("s", code, n)
    if 108 <= code <= 123:
        return _regs("ttmp", code - 108, n)
    if n == 2 and code in PAIR_NAMES:
        return PAIR_NAMES[code]
    if code in SCALAR_NAMES:
        return SCALAR_NAMES[code]
    raise ValueError(f"scalar operand code {code} is not a register")


def source(code: int, n: int, cls: str, literal: int | None) -> str:
    """A 9-bit source operand; cls (b32, f16, i16, f64, i64) says how LLVM prints constants in it."""
    kind, value = src_operand(code)
    if kind == "vgpr":
        return _regs("v", value, n)
    if code < 128:
        return scalar(code, n)
    if kind == "inline_int":
        return str(value)
    if kind == "inline_float":
        return f"0x{F16_INLINE_BITS[code]:x}" if cls == "i16" else _float_text(code, cls)
    if kind == "literal":
        if literal is None:
            raise ValueError("literal operand without a literal")
        return literal_text(literal, cls)
    if code in SRC_NAMES:
        return SRC_NAMES[code]
    raise ValueError(f"source operand code {code} ({kind}) has no text form")


def _float_text(code: int, cls: str) -> str:
    return INV2PI_TEXT[cls] if code == 248 else INLINE_FLOAT_TEXT[code]


def literal_text(literal: int, cls: str) -> str:
    """A 32-bit literal as LLVM prints it for an operand of class cls: by the value the operand sees, so a literal
    that equals an inline constant prints like one (7, 1.0); 16-bit operands see its low half, f64 operands its
    value shifted into the high dword, i64 and other 64-bit operands its zero extension."""
    signed = literal - (1 << 32) if literal >> 31 else literal
    if cls == "f16":
        half = literal & 0xFFFF
        small = half - (1 << 16) if half >> 15 else half
        return str(small) if -16 <= small <= 64 else _float_text(F16_INLINE[half], cls) if half in F16_INLINE \
            else f"0x{half:x}"
    if cls == "f64":
        return "0" if literal == 0 else _float_text(F64_INLINE[literal << 32], cls) if literal << 32 in F64_INLINE \
            else f"0x{literal:x}"
    if cls == "i64":
        return str(literal) if literal <= 64 else f"0x{literal:x}"
    if -16 <= signed <= 64:
        return str(signed)
    if literal in F32_INLINE:      # b32, and i16 operands too: LLVM compares the whole 32-bit value here
        return _float_text(F32_INLINE[literal], cls if cls == "b32" else "b32")
    return f"0x{literal & 0xFFFF:x}" if cls == "i16" else f"0x{literal:x}"


def _u16(value: int) -> str:
    return str(value) if value <= 64 else f"0x{value:x}"


def _signed_hex(value: int) -> str:
    return f"-0x{-value:x}" if value < 0 else f"0x{value:x}"


def _waitcnt(imm: int) -> str:
    parts = [(name, (imm >> shift) & ((1 << width) - 1), (1 << width) - 1) for name, shift, width in WAITCNT]
    shown = [p for p in parts if p[1] != p[2]] or parts
    return " ".join(f"{name}({v})" for name, v, _ in shown)


def _depctr(imm: int) -> str:
    if imm & 0x60:
        return f"0x{imm:x}"
    parts = [(name, (imm >> shift) & ((1 << width) - 1), (1 << width) - 1) for name, shift, width in DEPCTR]
    shown = [p for p in parts if p[1] != p[2]] or parts
    return " ".join(f"{name}({v})" for name, v, _ in shown)


def _delay_alu(imm: int) -> str:
    id0, skip, id1 = imm & 0xF, (imm >> 4) & 7, (imm >> 7) & 0xF
    def name(table: tuple[str, ...], v: int, what: str) -> str:
        return table[v] if v < len(table) else f"/* invalid {what} value */"
    parts = [f"instid0({name(DELAY_IDS, id0, 'instid')})"] if id0 else []
    parts += [f"instskip({name(DELAY_SKIPS, skip, 'instskip')})"] if skip else []
    parts += [f"instid1({name(DELAY_IDS, id1, 'instid')})"] if id1 else []
    return " | ".join(parts) or "0"


def _hwreg(imm: int) -> str:
    reg, offset, size = imm & 0x3F, (imm >> 6) & 0x1F, ((imm >> 11) & 0x1F) + 1
    name = HWREGS.get(reg, str(reg))
    return f"hwreg({name})" if offset == 0 and size == 32 else f"hwreg({name}, {offset}, {size})"


def _sendmsg(imm: int) -> str:
    if imm >= 256:
        return str(imm)
    return f"sendmsg({SENDMSGS[imm]})" if imm in SENDMSGS else f"sendmsg({imm}, 0, 0)"


def _uc_version(imm: int) -> str:
    if imm & 0x1F00 == 0 and imm & 0xFF in UC_VERSIONS:
        return "|".join([UC_VERSIONS[imm & 0xFF]] + [name for bit, name in UC_VERSION_BITS if imm & bit])
    return str(imm) if imm < 256 else f"0x{imm:x}"


def _format_imm(op: str, value: int, style: str) -> str:
    if op == "s_version":
        return _uc_version(value)
    if style == "hex":
        return f"0x{value:x}"
    if style == "u16":
        return _u16(value)
    if style == "dec":
        return str(value)
    formatter = {"s_waitcnt": _waitcnt, "s_waitcnt_depctr": _depctr, "s_delay_alu": _delay_alu, "s_getreg_b32": _hwreg,
                 "s_setreg_b32": _hwreg, "s_setreg_imm32_b32": _hwreg, "s_sendmsg": _sendmsg, "s_sendmsghalt": _sendmsg,
                 "s_sendmsg_rtn_b32": _sendmsg, "s_sendmsg_rtn_b64": _sendmsg}
    if op not in formatter:
        raise ValueError(f"no formatter for the immediate of {op}")
    return formatter[op](value)


def _const_class(inst: Inst, fld: str, n: int) -> str:
    table = "VOP3" if inst.enc == "VOP3SD" else inst.enc
    cls = CONSTS.get(table, {}).get(inst.opcode, {}).get(fld)
    return cls or ("i64" if n == 2 else "b32")      # scalar 64-bit operands print like i64


def _operand(inst: Inst, t: tuple | str, vop3_mods: bool, true16: bool) -> str:
    f = inst.fields
    if isinstance(t, str):
        if t == "off" and inst.enc in ("GLOBAL", "SCRATCH"):
            return "off" if f["saddr"] == 124 else scalar(f["saddr"], 2 if inst.enc == "GLOBAL" else 1)
        if t == "off" and inst.enc == "MUBUF":
            n = f["offen"] + f["idxen"]
            return _regs("v", f["vaddr"], n) if n else "off"
        return t
    fld, n, kind = t
    if fld == "literal":          # the K constant of fmamk/fmaak prints in hex; s_setreg_imm32_b32's as a b32 value
        assert inst.literal is not None, f"{inst.op}: a literal operand without a decoded literal"
        return literal_text(inst.literal, "b32") if inst.enc == "SOPK" else f"0x{inst.literal:x}"
    if kind in ("hex", "u16", "dec", "fmt"):
        return _format_imm(inst.op, f[fld], kind)
    if true16 and fld in inst.t16 and (kind == "v" or f[fld] >= 256):
        reg, hi = vgpr_half(inst, fld)
        text = f"v{reg}.{'h' if hi else 'l'}"
        return _with_mods(inst, fld, text) if vop3_mods else text
    if kind == "v":
        if fld == "addr" and inst.enc == "GLOBAL" and f["saddr"] != 124:
            n = 1
        if fld == "addr" and inst.enc == "SCRATCH" and not f["sve"]:
            return "off"
        return _regs("v", f[fld], n)
    if kind == "s":
        return scalar(f[fld], n)
    text = source(f[fld], n, _const_class(inst, fld, n), inst.literal)
    return _with_mods(inst, fld, text) if vop3_mods else text


def _with_mods(inst: Inst, fld: str, text: str) -> str:
    """A VOP3/VOP3P source with its abs/neg/sext modifiers, as far as LLVM prints them for the opcode."""
    f = inst.fields
    if fld in ("src0", "src1", "src2"):
        mods = _mods(inst)
        bit = 1 << ("src0", "src1", "src2").index(fld)
        # VOP3 keeps abs in its own field; v_fma_mix* (VOP3P) uses neg_hi as abs
        abs_bits = f.get("abs", 0) if inst.enc != "VOP3P" else f["neg_hi"]
        if mods.get("abs", 0) & abs_bits & bit:
            text = f"|{text}|"
        if mods.get("sext", 0) & f["neg"] & bit:
            text = f"sext({text})"
        elif mods.get("neg", 0) & f["neg"] & bit:
            # a negated constant prints as neg(c); registers and |c| take a plain minus
            constant = src_operand(f[fld])[0] in ("inline_int", "inline_float", "literal")
            text = f"neg({text})" if constant and text[0] != "|" else f"-{text}"
    return text


def _mods(inst: Inst) -> dict[str, int]:
    return MODS.get("VOP3" if inst.enc == "VOP3SD" else inst.enc, {}).get(inst.opcode, {})


def _swizzle(imm: int) -> str:
    """ds_swizzle_b32's offset as LLVM names the lane pattern: quad permute, or the and/or/xor masks of lane ids."""
    if imm & 0x8000:     # quad permute; with any of bits 14:8 set LLVM shows the plain number
        if imm & 0x7F00:
            return str(imm)
        return "swizzle(QUAD_PERM," + ",".join(str((imm >> 2 * i) & 3) for i in range(4)) + ")"
    and_m, or_m, xor_m = imm & 0x1F, (imm >> 5) & 0x1F, (imm >> 10) & 0x1F
    if and_m == 0x1F and or_m == 0 and xor_m and xor_m & (xor_m - 1) == 0:
        return f"swizzle(SWAP,{xor_m})"
    if and_m == 0x1F and or_m == 0 and xor_m and (xor_m + 1) & xor_m == 0:
        return f"swizzle(REVERSE,{xor_m + 1})"
    group = 32 - and_m
    if group > 1 and group & (group - 1) == 0 and or_m < group and xor_m == 0:
        return f"swizzle(BROADCAST,{group},{or_m})"
    # lane id bit i becomes ((id & and) | or) ^ xor: preserved, inverted, or a constant 0/1
    def bit(m: int, i: int) -> int:
        return (m >> i) & 1
    chars = [str(1 ^ bit(xor_m, i)) if bit(or_m, i) else str(bit(xor_m, i)) if not bit(and_m, i)
             else "ip"[1 - bit(xor_m, i)] for i in range(4, -1, -1)]
    return f'swizzle(BITMASK_PERM,"{"".join(chars)}")'


def _bits_list(value: int, n: int) -> str:
    return "[" + ",".join(str((value >> i) & 1) for i in range(n)) + "]"


def _suffix(inst: Inst, true16: bool) -> str:
    f, out = inst.fields, []
    mods = _mods(inst)
    if inst.enc in ("VOP3", "VOP3SD"):
        # in true16 syntax the halves op_sel picks show as .l/.h on the operands instead
        opsel = f.get("opsel", 0) & mods.get("op_sel", 0) if not (true16 and inst.t16) else 0
        if opsel:
            # one entry per source, then the destination's bit (bit 3 of the field)
            n = mods["op_sel#"]
            out.append("op_sel:" + _bits_list((opsel & ((1 << (n - 1)) - 1)) | ((opsel >> 3) << (n - 1)), n))
        if "clamp" in mods and f["clamp"]:
            out.append("clamp")
        if "omod" in mods and f["omod"]:
            out.append(("mul:2", "mul:4", "div:2")[f["omod"] - 1])
    elif inst.enc == "VOP3P":
        if f["opsel"] & mods.get("op_sel", 0):
            out.append("op_sel:" + _bits_list(f["opsel"], mods["op_sel#"]))
        if "op_sel_hi" in mods:
            n = mods["op_sel_hi#"]
            default_hi = 0 if inst.op.startswith("v_fma_mix") else (1 << n) - 1
            if f["opsel_hi"] & ((1 << n) - 1) != default_hi:
                out.append("op_sel_hi:" + _bits_list(f["opsel_hi"], n))
        if f["neg"] & mods.get("neg_lo", 0):
            out.append("neg_lo:" + _bits_list(f["neg"], mods["neg_lo#"]))
        if f["neg_hi"] & mods.get("neg_hi", 0):
            out.append("neg_hi:" + _bits_list(f["neg_hi"], mods["neg_hi#"]))
        if "clamp" in mods and f["clamp"]:
            out.append("clamp")
    elif inst.enc == "DS":
        if inst.op == "ds_swizzle_b32":
            out += [f"offset:{_swizzle(f['offset1'] << 8 | f['offset0'])}"] * bool(f["offset1"] << 8 | f["offset0"])
        elif "2addr" in inst.op:
            out += [f"offset0:{f['offset0']}"] * bool(f["offset0"]) + [f"offset1:{f['offset1']}"] * bool(f["offset1"])
        elif f["offset1"] << 8 | f["offset0"]:
            out.append(f"offset:{f['offset1'] << 8 | f['offset0']}")
        if f["gds"]:
            out.append("gds")
    elif inst.enc in ("FLAT", "GLOBAL", "SCRATCH", "MUBUF"):
        if inst.enc == "MUBUF":
            out += ["idxen"] * f["idxen"] + ["offen"] * f["offen"]
        if f["offset"]:
            out.append(f"offset:{f['offset']}")
        out += [name for name in ("glc", "slc", "dlc") if f[name]]
        if inst.enc == "MUBUF" and f["tfe"]:
            out.append("tfe")
    elif inst.enc == "SMEM":
        out += [name for name in ("glc", "dlc") if f[name]]
    return "".join(" " + s for s in out)


def _smem_offset(inst: Inst) -> str:
    f = inst.fields
    if f["soffset"] != 124:
        return scalar(f["soffset"]) + (f" offset:{_signed_hex(f['offset'])}" if f["offset"] else "")
    return _signed_hex(f["offset"]) if f["offset"] else "null"


def disasm(inst: Inst, true16: bool = True) -> str:
    """One instruction in llvm-objdump's syntax. 16-bit VALU operands print as VGPR halves (v1.l, v0.h) as LLVM 22
    writes them for gfx1100; true16=False gives LLVM 19's default syntax instead (v128 for v0.h in VOP1/2/C,
    op_sel:[...] in VOP3)."""
    if inst.enc == "VOPD":
        x = OPS["VOPDX"][inst.fields["opx"]]
        y = OPS["VOPDY"][inst.fields["opy"]]
        def half(row) -> str:
            return row[0] + " " + ", ".join(_operand(inst, t, False, true16) for t in row[1])
        return f"{half(x)} :: {half(y)}"
    tmpl = template(inst)
    mnemonic = OPS["VOP3" if inst.enc == "VOP3SD" else inst.enc][inst.opcode][0]
    true16 = true16 or inst.opcode in T16_SYNTAX.get(inst.enc, ())
    vop3 = inst.enc in ("VOP3", "VOP3SD", "VOP3P")
    if "_atomic_" in inst.op and inst.enc != "MUBUF" and inst.fields["glc"]:
        # with glc a FLAT atomic returns the old value: the destination comes first, as wide as the data
        # (half of it for cmpswap, whose data is the new value and the compare value)
        data = next(t for t in tmpl if isinstance(t, tuple) and t[0] == "data")
        tmpl = (("vdst", data[1] // 2 if "cmpswap" in inst.op else data[1], "v"),) + tmpl
    if inst.op == "s_endpgm" and inst.fields["simm16"]:
        return f"{mnemonic} {inst.fields['simm16']}"
    if inst.enc == "MUBUF" and not tmpl:     # buffer_gl0_inv, buffer_gl1_inv: LLVM shows no fields
        return mnemonic
    ops = [_smem_offset(inst) if isinstance(t, tuple) and t[0] == "offset" and inst.enc == "SMEM"
           else _operand(inst, t, vop3, true16) for t in tmpl]
    text = mnemonic + (" " + ", ".join(ops) if ops else "")
    return text + _suffix(inst, true16)


def disasm_all(code: bytes, addr: int = 0, true16: bool = True) -> list[str]:
    """Every instruction of a code buffer, one text line each."""
    return [disasm(i, true16) for i in decode_all(code, addr)]
