"""RDNA3 (gfx1100, wave32) instruction decoder: machine code bytes -> Inst.

The encoding is identified from the first dword (bit prefixes, amd.md 8.1), its fields are cut out by the bit
ranges in FORMATS, the opcode number is named through the tables generated from llvm-mc-19 (tables.py), and a
trailing 32-bit literal is attached when a source field holds 255 (or the opcode always carries one: fmamk/fmaak,
s_setreg_imm32_b32).

Inst.fields holds the fields under the names of AMD's ISA guide. Register numbers are given as registers, not as
the encoding compresses them: SMEM `sbase` is the first SGPR of the pair (field x 2), MUBUF `srsrc` the first SGPR
of the quad (field x 4), VOPD `vdsty` the real destination VGPR. Memory offsets are signed where the hardware
treats them as signed (SMEM, GLOBAL, SCRATCH; DS and FLAT offsets are unsigned). SOPP/SOPK `simm16` stays the raw
16-bit value (see branch_target). VOP3P `opsel_hi` is the 3-bit value (bits 60:59 with bit 14 as its bit 2).
9-bit source codes are decoded by operands.src_operand.

16-bit VALU operands (Inst.t16) address halves of VGPRs: in VOP1/VOP2/VOPC a VGPR number's bit 7 picks the high
half of v(n & 127), in VOP3 op_sel does; vgpr_half() gives (register, half). LLVM 22 uses both for gfx1100
half-precision code.
"""
from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass, field

from tg_mockgpu.rdna3.operands import src_operand
from tg_mockgpu.rdna3.tables import CONSTS, OPS

LITERAL = 255
DPP_CODES = {233: "DPP8", 234: "DPP8 (fetch inactive)", 250: "DPP16"}
VOP3SD_OPCODES = frozenset({288, 289, 290, 764, 765, 766, 767, 768, 769, 770})
# Opcodes whose encoding always carries a 32-bit literal (the K constant or the immediate).
ALWAYS_LITERAL = {"VOP2": {44, 45, 55, 56}, "SOPK": {19}}
VOPD_LITERAL_OPS = {1, 2}               # v_dual_fmaak_f32, v_dual_fmamk_f32 in either half
SRC_FIELDS = ("ssrc0", "ssrc1", "src0", "src1", "src2", "srcx0", "srcy0")

# Bit ranges (hi, lo) over the whole instruction (dword 0 is bits 31:0, dword 1 bits 63:32).
FORMATS: dict[str, dict[str, tuple[int, int]]] = {
    "SOP2": {"op": (29, 23), "sdst": (22, 16), "ssrc1": (15, 8), "ssrc0": (7, 0)},
    "SOP1": {"sdst": (22, 16), "op": (15, 8), "ssrc0": (7, 0)},
    "SOPK": {"op": (27, 23), "sdst": (22, 16), "simm16": (15, 0)},
    "SOPC": {"op": (22, 16), "ssrc1": (15, 8), "ssrc0": (7, 0)},
    "SOPP": {"op": (22, 16), "simm16": (15, 0)},
    "SMEM": {"op": (25, 18), "glc": (14, 14), "dlc": (13, 13), "sdata": (12, 6), "sbase": (5, 0), "offset": (52, 32),
             "soffset": (63, 57)},
    "VOP1": {"vdst": (24, 17), "op": (16, 9), "src0": (8, 0)},
    "VOP2": {"op": (30, 25), "vdst": (24, 17), "vsrc1": (16, 9), "src0": (8, 0)},
    "VOPC": {"op": (24, 17), "vsrc1": (16, 9), "src0": (8, 0)},
    "VOP3": {"op": (25, 16), "clamp": (15, 15), "opsel": (14, 11), "abs": (10, 8), "vdst": (7, 0), "src0": (40, 32),
             "src1": (49, 41), "src2": (58, 50), "omod": (60, 59), "neg": (63, 61)},
    "VOP3SD": {"op": (25, 16), "clamp": (15, 15), "sdst": (14, 8), "vdst": (7, 0), "src0": (40, 32), "src1": (49, 41),
               "src2": (58, 50), "omod": (60, 59), "neg": (63, 61)},
    "VOP3P": {"op": (22, 16), "clamp": (15, 15), "opsel_hi2": (14, 14), "opsel": (13, 11), "neg_hi": (10, 8),
              "vdst": (7, 0), "src0": (40, 32), "src1": (49, 41), "src2": (58, 50), "opsel_hi": (60, 59),
              "neg": (63, 61)},
    "VOPD": {"opx": (25, 22), "opy": (21, 17), "vsrcx1": (16, 9), "srcx0": (8, 0), "vdstx": (63, 56), "vdsty": (55, 49),
             "vsrcy1": (48, 41), "srcy0": (40, 32)},
    "DS": {"op": (25, 18), "gds": (17, 17), "offset1": (15, 8), "offset0": (7, 0), "vdst": (63, 56), "data1": (55, 48),
           "data0": (47, 40), "addr": (39, 32)},
    "FLAT": {"op": (24, 18), "seg": (17, 16), "slc": (15, 15), "glc": (14, 14), "dlc": (13, 13), "offset": (12, 0),
             "vdst": (63, 56), "sve": (55, 55), "saddr": (54, 48), "data": (47, 40), "addr": (39, 32)},
    "MUBUF": {"op": (25, 18), "slc": (12, 12), "glc": (14, 14), "dlc": (13, 13), "offset": (11, 0),
              "soffset": (63, 56), "idxen": (55, 55), "offen": (54, 54), "tfe": (53, 53), "srsrc": (52, 48),
              "vdata": (47, 40), "vaddr": (39, 32)},
}
SIZES = {"SOP2": 4, "SOP1": 4, "SOPK": 4, "SOPC": 4, "SOPP": 4, "VOP1": 4, "VOP2": 4, "VOPC": 4}
FLAT_SEGMENTS = ("FLAT", "SCRATCH", "GLOBAL")


class DecodeError(ValueError):
    """An instruction this decoder does not know: the message names the word(s), the address and the kernel."""


@dataclass(frozen=True)
class Inst:
    addr: int
    size: int                      # bytes, including the literal
    enc: str                       # SOP1/2/K/C/P SMEM VOP1/2/C/3/3SD/3P VOPD DS FLAT GLOBAL SCRATCH MUBUF
    op: str                        # LLVM's mnemonic without _e32/_e64; VOPD: "<x>::<y>"
    opcode: int                    # VOPD: opx << 5 | opy
    fields: dict[str, int] = field(hash=False, compare=True)
    literal: int | None = None
    dual: tuple[str, str] | None = None   # VOPD only: the X and Y mnemonics, e.g. ("v_dual_mul_f32", "v_dual_add_f32")
    t16: frozenset[str] = frozenset()     # 16-bit operand fields, which address VGPR halves (see vgpr_half)


def identify(w0: int) -> str:
    """The encoding of an instruction from its first dword (amd.md 8.1); 'unknown' when none matches."""
    if w0 >> 23 == 0x17F:
        return "SOPP"
    if w0 >> 23 == 0x17E:
        return "SOPC"
    if w0 >> 23 == 0x17D:
        return "SOP1"
    if w0 >> 28 == 0xB:
        return "SOPK"
    if w0 >> 30 == 2:
        return "SOP2"
    if w0 >> 25 == 0x3F:
        return "VOP1"
    if w0 >> 25 == 0x3E:
        return "VOPC"
    if w0 >> 31 == 0:
        return "VOP2"
    top8, top6 = w0 >> 24, w0 >> 26
    named8 = {0xCC: "VOP3P", 0xCD: "VINTERP", 0xCE: "LDSDIR"}
    if top8 in named8:
        return named8[top8]
    named6 = {0x32: "VOPD", 0x35: "VOP3", 0x36: "DS", 0x37: "FLAT", 0x38: "MUBUF", 0x3A: "MTBUF", 0x3C: "MIMG",
              0x3D: "SMEM", 0x3E: "EXP"}
    return named6.get(top6, "unknown")


def _where(code: bytes, pos: int, addr: int, kernel: str | None) -> str:
    ws = [struct.unpack_from("<I", code, p)[0] for p in range(pos, min(pos + 8, len(code) - 3), 4)]
    words = " ".join(f"0x{w:08X}" for w in ws)
    return f"instruction {words} at address 0x{addr:X}" + (f" in kernel {kernel!r}" if kernel else "")


def _bits(value: int, hi: int, lo: int) -> int:
    return (value >> lo) & ((1 << (hi - lo + 1)) - 1)


def _sext(value: int, bits: int) -> int:
    return value - (1 << bits) if value >> (bits - 1) & 1 else value


def _name(table: str, opcode: int) -> str | None:
    row = OPS[table].get(opcode)
    return row[0] if row else None


def _strip(mnemonic: str) -> str:
    return mnemonic[:-4] if mnemonic.endswith(("_e32", "_e64")) else mnemonic


@functools.cache
def t16_fields(table: str, opcode: int) -> frozenset[str]:
    """The 16-bit operands of a VOP1/VOP2/VOPC/VOP3 opcode, which name a half of a VGPR (LLVM 22 emits these
    "true16" forms for gfx1100: `v_add_f16_e32 v1.h, v0.l, v0.h`). Sources: those whose constants LLVM prints as
    16-bit (CONSTS f16/i16; VOP2/VOPC vsrc1 has src0's type). Destination: when the result type, the first type in
    the mnemonic, is 16-bit, except packed results (_pk_, whose 16-bit halves fill a dword) and v_sad_u16 (a 32-bit
    sum); v_sat_pk_u8_i16 packs two bytes into 16 bits."""
    if table not in ("VOP1", "VOP2", "VOPC", "VOP3") or opcode not in OPS[table]:
        return frozenset()
    mnemonic, tmpl = OPS[table][opcode]
    consts = CONSTS.get(table, {}).get(opcode, {})
    out = {f for f, cls in consts.items() if cls in ("f16", "i16")}
    if "src0" in out and table in ("VOP2", "VOPC"):
        out.add("vsrc1")
    types = re.findall(r"_([fiub](?:8|16|32|64))(?=_|$)", _strip(mnemonic))
    sat_pk = mnemonic.startswith("v_sat_pk_u8_i16")
    if sat_pk or types and types[0].endswith("16") and "_pk_" not in mnemonic and not mnemonic.startswith("v_sad_"):
        out.add("vdst")
    fields = {t[0] for t in tmpl if isinstance(t, tuple) and t[2] in ("v", "src")}
    return frozenset(out & fields)


def vgpr_half(inst: Inst, field: str) -> tuple[int, int]:
    """(VGPR number, half: 0 low / 1 high) of a 16-bit operand field (one in inst.t16) that holds a VGPR.
    VOP1/VOP2/VOPC use bit 7 of the VGPR number for the half (so they reach v0-v127 only); VOP3 takes the half from
    op_sel (bit 0-2 for src0-src2, bit 3 for vdst)."""
    value = inst.fields[field] - (256 if field.startswith("src") else 0)
    if inst.enc in ("VOP3", "VOP3SD"):
        bit = 3 if field == "vdst" else int(field[-1])
        return value, (inst.fields.get("opsel", 0) >> bit) & 1
    return value & 127, value >> 7


def template(inst: Inst) -> tuple:
    """The operand template of the instruction (see tables.py); VOPD gives the X template followed by the Y template."""
    if inst.enc == "VOPD":
        return OPS["VOPDX"][inst.fields["opx"]][1] + OPS["VOPDY"][inst.fields["opy"]][1]
    table = "VOP3" if inst.enc == "VOP3SD" else inst.enc
    return OPS[table][inst.opcode][1]


def operand_regs(inst: Inst) -> dict[str, int]:
    """How many consecutive registers each register operand field spans (v_lshlrev_b64: vdst 2, src0 1, src1 2)."""
    return {t[0]: t[1] for t in template(inst) if isinstance(t, tuple) and t[2] != "imm"}


def _bad_operand(field: str, kind: str, value: int) -> str | None:
    """Why an operand field's value cannot be decoded (reserved codes, DPP, misplaced literals), or None."""
    if kind == "s" and value >= 128:
        return f"operand code {value} is not a scalar register"
    if kind != "src":
        return None
    if value in DPP_CODES:
        return f"{DPP_CODES[value]} operand (not supported)"
    if value == LITERAL and field not in SRC_FIELDS:
        return "a literal where none is allowed"
    try:
        src_operand(value)
    except ValueError as e:
        return str(e)
    return None


def decode(code: bytes, addr: int = 0, pos: int = 0, kernel: str | None = None) -> Inst:
    """Decode the instruction at byte `pos` of `code`; `addr` is its address (for Inst.addr and error messages)."""
    if pos + 4 > len(code):
        raise DecodeError(f"truncated instruction at address 0x{addr:X}: {len(code) - pos} byte(s) left, need 4")
    w0 = struct.unpack_from("<I", code, pos)[0]
    enc = identify(w0)
    if enc not in FORMATS:
        raise DecodeError(f"unsupported {enc} encoding: {_where(code, pos, addr, kernel)}")
    size = SIZES.get(enc, 8)
    if pos + size > len(code):
        raise DecodeError(f"truncated {enc} {_where(code, pos, addr, kernel)}: needs {size} bytes")
    raw = w0 if size == 4 else struct.unpack_from("<Q", code, pos)[0]
    if enc == "VOP3" and _bits(raw, 25, 16) in VOP3SD_OPCODES:
        enc = "VOP3SD"
    f = {k: _bits(raw, hi, lo) for k, (hi, lo) in FORMATS[enc].items()}
    opcode = f.pop("op", 0)
    dual: tuple[str, str] | None = None
    if enc == "VOPD":
        x, y = _name("VOPDX", f["opx"]), _name("VOPDY", f["opy"])
        name = f"{x}::{y}" if x and y else None
        dual = (x, y) if x and y else None
        opcode = f["opx"] << 5 | f["opy"]
        f["vdsty"] = (f["vdsty"] << 1) | ((f["vdstx"] & 1) ^ 1)
    elif enc == "FLAT":
        if f["seg"] == 3:
            raise DecodeError(f"FLAT segment 3 is reserved: {_where(code, pos, addr, kernel)}")
        enc = FLAT_SEGMENTS[f["seg"]]
        name = _name(enc, opcode)
        if enc != "FLAT":
            f["offset"] = _sext(f["offset"], 13)
    else:
        name = _name("VOP3" if enc == "VOP3SD" else enc, opcode)
    if name is None:
        raise DecodeError(f"unknown {enc} opcode {opcode}: {_where(code, pos, addr, kernel)}")
    if enc == "SMEM":
        # buffer forms take an SGPR quad (a buffer resource): the hardware (and LLVM) ignore the pair index's low bit
        quad = ("sbase", 4, "s") in OPS["SMEM"][opcode][1]
        f["sbase"] = f["sbase"] * 2 & ~3 if quad else f["sbase"] * 2
        f["offset"] = _sext(f["offset"], 21)
    elif enc == "MUBUF":
        f["srsrc"] *= 4
    elif enc == "VOP3P":
        f["opsel_hi"] |= f.pop("opsel_hi2") << 2
    inst = Inst(addr, size, enc, _strip(name), opcode, f, None, dual, t16_fields(enc, opcode))
    used = {t[0]: t[2] for t in template(inst) if isinstance(t, tuple) and t[0] in f}
    for k, kind in used.items():
        problem = _bad_operand(k, kind, f[k])
        if problem:
            raise DecodeError(f"{problem} in {k} of {inst.op}: {_where(code, pos, addr, kernel)}")
    needs_literal = (any(k in used and f[k] == LITERAL for k in SRC_FIELDS) or opcode in ALWAYS_LITERAL.get(enc, ())
                     or enc == "VOPD" and (f["opx"] in VOPD_LITERAL_OPS or f["opy"] in VOPD_LITERAL_OPS))
    if not needs_literal:
        return inst
    if pos + size + 4 > len(code):
        raise DecodeError(f"truncated literal after {_where(code, pos, addr, kernel)}")
    literal = struct.unpack_from("<I", code, pos + size)[0]
    return Inst(addr, size + 4, inst.enc, inst.op, opcode, f, literal, dual, inst.t16)


def decode_all(code: bytes, addr: int = 0, kernel: str | None = None) -> list[Inst]:
    """Decode a whole code buffer starting at address `addr`."""
    out, pos = [], 0
    while pos < len(code):
        inst = decode(code, addr + pos, pos, kernel)
        out.append(inst)
        pos += inst.size
    return out


def branch_target(inst: Inst) -> int:
    """Target address of an SOPP branch: PC + 4 + 4 * sext(simm16)."""
    return inst.addr + 4 + 4 * _sext(inst.fields["simm16"], 16)
