"""Development aid: regenerate tables.py from llvm-mc-19 (`python -m tg_mockgpu.rdna3.gen_tables > tables.py`).

Not imported at run time. For every encoding it builds instruction words for every opcode number with distinct,
known register numbers in each field, lets llvm-mc-19 disassemble them, and reads back
  - the mnemonic LLVM prints (the opcode table),
  - the operand template: which field each printed operand comes from and how many registers it spans, plus fixed
    text operands such as the implicit `vcc_lo` of v_add_co_ci_u32_e32,
  - for every 9-bit source field, how LLVM prints constants in it (32-bit, f16, i16 or 64-bit operand), found by
    putting the inline constant 1/(2pi) and a literal in it,
  - how SOPP/SOPK immediates print, and which VOP3/VOP3P modifiers LLVM prints per opcode and operand.
The resulting tables are committed as data; tests then check the decoder against llvm-mc independently (and that
a fresh generation gives the committed file).
"""
from __future__ import annotations

import pprint
import re
import struct
import subprocess
from collections.abc import Callable

LLVM_MC = ["llvm-mc-19", "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx1100", "-disassemble", "-show-encoding"]
SENTINELS = {"s_code_end": 0xBF9F0000, "v_nop": 0x7E000000}
LIT = 0x12345678                      # a literal no inline constant can stand for
V = 256                               # 9-bit source code of v0


def words(*ws: int) -> bytes:
    return struct.pack("<" + "I" * len(ws), *ws)


def llvm_mc(cases: list[bytes], sentinel: str = "s_code_end") -> list[str | None]:
    """Disassemble every case; the text of each, or None when llvm-mc does not read it as exactly one valid instruction.
    llvm-mc reads its input as one byte stream, so four copies of a sentinel instruction follow each case to keep
    them apart."""
    sent = words(SENTINELS[sentinel]) * 4
    text = "\n".join(" ".join(f"0x{b:02x}" for b in c + sent) for c in cases) + "\n"
    p = subprocess.run(LLVM_MC, input=text, capture_output=True, text=True, check=False)
    bad = {int(m.group(1)) - 1 for m in re.finditer(r"<stdin>:(\d+):\d+: warning", p.stderr)}
    insts = [m.group(1) for m in re.finditer(r"^\s*(.*?)\s*; encoding: \[.*\]", p.stdout, re.M)]
    out: list[str | None] = []
    k = 0
    for i in range(len(cases)):
        got = []
        while k < len(insts) and insts[k] != sentinel:
            got.append(insts[k])
            k += 1
        n = 0
        while k < len(insts) and insts[k] == sentinel and n < 4:
            k += 1
            n += 1
        out.append(got[0] if i not in bad and len(got) == 1 and n == 4 else None)
    assert k == len(insts), "lost track of llvm-mc's output"
    return out


VOP3SD_OPS = {288, 289, 290, 764, 765, 766, 767, 768, 769, 770}

# Register numbers put in each field, so a printed register tells which field it came from: (kind, number) -> field.
REGS = {
    "SOP2": {("s", 4): "sdst", ("s", 8): "ssrc0", ("s", 12): "ssrc1"},
    "SOP1": {("s", 4): "sdst", ("s", 8): "ssrc0"},
    "SOPK": {("s", 4): "sdst"},
    "SOPC": {("s", 8): "ssrc0", ("s", 12): "ssrc1"},
    "SOPP": {},
    "SMEM": {("s", 16): "sdata", ("s", 8): "sbase", ("s", 12): "soffset"},
    "VOP1": {("v", 4): "vdst", ("s", 4): "vdst", ("v", 8): "src0", ("s", 8): "src0"},
    "VOP2": {("v", 4): "vdst", ("v", 8): "src0", ("v", 12): "vsrc1"},
    "VOPC": {("v", 8): "src0", ("v", 12): "vsrc1"},
    "VOP3": {("v", 4): "vdst", ("s", 4): "vdst", ("s", 20): "sdst", ("v", 8): "src0", ("s", 8): "src0",
             ("v", 12): "src1", ("s", 12): "src1", ("v", 16): "src2", ("s", 16): "src2"},
    "VOP3P": {("v", 4): "vdst", ("v", 8): "src0", ("v", 12): "src1", ("v", 16): "src2"},
    "VOPD": {("v", 0): "vdstx", ("v", 1): "srcx0", ("v", 2): "vsrcx1", ("v", 3): "vdsty", ("v", 4): "srcy0",
             ("v", 5): "vsrcy1"},
    "DS": {("v", 1): "addr", ("v", 2): "data0", ("v", 4): "data1", ("v", 8): "vdst"},
    "FLAT": {("v", 2): "addr", ("v", 4): "data", ("s", 10): "saddr", ("v", 8): "vdst"},
    "MUBUF": {("v", 2): "vaddr", ("v", 4): "vdata", ("s", 8): "srsrc", ("v", 8): "vdata", ("s", 12): "soffset"},
}


def variants(enc: str, op: int) -> list[bytes]:
    """Candidate encodings of one opcode, most operands first; the first llvm-mc accepts cleanly gives the template."""
    lit = words(LIT)
    b: Callable[..., bytes]  # the encoding's instruction word(s) from its operand fields
    if enc == "SOP2":
        b = lambda s0: words((2 << 30) | (op << 23) | (4 << 16) | (12 << 8) | s0)
        return [b(8), b(255) + lit]
    if enc == "SOP1":
        b = lambda s0: words((0x17D << 23) | (4 << 16) | (op << 8) | s0)
        return [b(8), b(255) + lit]
    if enc == "SOPK":
        w = words((0xB << 28) | (op << 23) | (4 << 16) | 0x10)
        return [w, w + lit]
    if enc == "SOPC":
        b = lambda s0: words((0x17E << 23) | (op << 16) | (12 << 8) | s0)
        return [b(8), b(255) + lit]
    if enc == "SOPP":
        return [words((0x17F << 23) | (op << 16) | imm) for imm in (0, 3)]
    if enc == "SMEM":
        b = lambda soff: words((0x3D << 26) | (op << 18) | (16 << 6) | 4, (soff << 25) | 0x10)
        return [b(124), b(12)]
    if enc == "VOP1":
        b = lambda s0: words((0x3F << 25) | (4 << 17) | (op << 9) | s0)
        return [b(V + 8), b(8), b(255) + lit, words((0x3F << 25) | (op << 9))]     # the last for v_nop, v_pipeflush
    if enc == "VOP2":
        b = lambda s0: words((op << 25) | (4 << 17) | (12 << 9) | s0)
        return [b(V + 8), b(V + 8) + lit, b(255) + lit]
    if enc == "VOPC":
        b = lambda s0: words((0x3E << 25) | (op << 17) | (12 << 9) | s0)
        return [b(V + 8), b(255) + lit]
    if enc in ("VOP3", "VOP3P"):
        if enc == "VOP3":
            sd = (20 << 8) if op in VOP3SD_OPS else 0
            b = lambda s0, s1, s2: words((0x35 << 26) | (op << 16) | sd | 4, s0 | (s1 << 9) | (s2 << 18))
        else:   # op_sel_hi defaults to all ones, which LLVM does not print
            b = lambda s0, s1, s2: words((0xCC << 24) | (op << 16) | (1 << 14) | 4,
                                         s0 | (s1 << 9) | (s2 << 18) | (3 << 27))
        return [b(V + 8, V + 12, V + 16), b(V + 8, V + 12, 16), b(V + 8, 12, 16), b(V + 8, V + 12, 0),
                b(V + 8, 12, 0), b(V + 8, 0, 0), b(8, 12, 0), b(8, 0, 0), b(0, 0, 0), b(255, V + 12, V + 16) + lit,
                b(255, V + 12, 0) + lit] + ([words((0x35 << 26) | (op << 16), 0)] if enc == "VOP3" else [])
    if enc in ("VOPDX", "VOPDY"):
        opx, opy = (op, 4) if enc == "VOPDX" else (3, op)
        lo = lambda x1: (0x32 << 26) | (opx << 22) | (opy << 17) | (x1 << 9) | (V + 1)
        hi = lambda y1: (V + 4) | (y1 << 9) | (1 << 17)
        return [words(lo(2), hi(5)), words(lo(2), hi(5)) + lit, words(lo(0), hi(5)), words(lo(2), hi(0)),
                words(lo(0), hi(0)), words(lo(0), hi(5)) + lit, words(lo(2), hi(0)) + lit]
    if enc == "DS":
        b = lambda a, d0, d1, vd: words((0x36 << 26) | (op << 18), a | (d0 << 8) | (d1 << 16) | (vd << 24))
        return [b(1, 2, 4, 8), b(1, 2, 0, 8), b(1, 2, 4, 0), b(1, 2, 0, 0), b(1, 0, 0, 8), b(0, 2, 0, 0), b(0, 0, 0, 8),
                b(1, 0, 0, 0), b(0, 0, 0, 0)]
    if enc in ("FLAT", "SCRATCH", "GLOBAL"):
        seg = ("FLAT", "SCRATCH", "GLOBAL").index(enc)
        b = lambda saddr, sve: words((0x37 << 26) | (op << 18) | (seg << 16),
                                     2 | (4 << 8) | (saddr << 16) | (sve << 23) | (8 << 24))
        return [b(124, 1), b(124, 0), b(10, 0)] if enc == "SCRATCH" else [b(124, 0), b(10, 0), b(124, 1)]
    if enc == "MUBUF":
        return [words((0x38 << 26) | (op << 18), 2 | (4 << 8) | (2 << 16) | (12 << 24))]
    raise KeyError(enc)


OPCODE_SPACE = {"SOP2": 96, "SOP1": 256, "SOPK": 28, "SOPC": 128, "SOPP": 128, "SMEM": 256, "VOP1": 256, "VOP2": 62,
                "VOPC": 256, "VOP3": 1024, "VOP3P": 128, "VOPDX": 16, "VOPDY": 32, "DS": 256, "FLAT": 128,
                "SCRATCH": 128, "GLOBAL": 128, "MUBUF": 256}

REG_RE = re.compile(r"^([sv])(\d+)$|^([sv])\[(\d+):(\d+)\]$")
OPERAND_RE = re.compile(r"[^,\[\s(]+(?:\[[^\]]*\])?(?:\([^)]*\))?")
MODIFIERS = ("offset:", "offset0:", "offset1:", "op_sel:", "op_sel_hi:", "neg_lo:", "neg_hi:", "mul:", "div:")
FLAGS = ("glc", "slc", "dlc", "clamp", "gds", "offen", "idxen", "tfe")
# Source fields hold 9-bit (or, for scalar fields, 8-bit) operand codes: SGPRs, specials, constants or VGPRs.
SRC_CODE_FIELDS = {"ssrc0", "ssrc1", "src0", "src1", "src2", "srcx0", "srcy0", "soffset"}
# Immediates the disassembler formats itself (waitcnt fields, hwreg(), sendmsg(), offsets).
IMM_FIELD = {"SOPP": "simm16", "SOPK": "simm16", "SMEM": "offset"}


def template(enc: str, text: str) -> tuple[str, tuple]:
    """Split LLVM's text into the printed mnemonic and an operand template. Each operand is (field, register count,
    kind) with kind "v" (VGPR field), "s" (scalar operand code), "src" (9-bit source code: register or constant),
    "imm" (the literal),
    or for immediates "hex"/"dec"/"fmt" (printed in hex, in decimal, or by a named formatter), or a fixed string such as
    "vcc_lo" or "off". Modifiers (offset:, glc, clamp, ...) are dropped."""
    regs = REGS["VOPD" if enc.startswith("VOPD") else "FLAT" if enc in ("SCRATCH", "GLOBAL") else enc]
    mnem, _, rest = text.partition(" ")
    ops: list = []
    for tok in OPERAND_RE.findall(rest):
        if tok.startswith(MODIFIERS) or tok in FLAGS:
            continue
        m = REG_RE.match(re.sub(r"\.[lh]$", "", tok))     # v4.l: a 16-bit half (LLVM 19 prints v_mov_b16 so)
        if m:
            if m.group(1):
                kind, lo, hi = m.group(1), int(m.group(2)), int(m.group(2))
            else:
                kind, lo, hi = m.group(3), int(m.group(4)), int(m.group(5))
            if (kind, lo) not in regs:
                raise ValueError(f"{enc}: cannot place register {tok} of {text!r}")
            field = regs[(kind, lo)]
            ops.append((field, hi - lo + 1, "src" if field in SRC_CODE_FIELDS else kind))
        elif tok == f"0x{LIT:x}":
            ops.append(("literal", 1, "imm"))
        elif enc in IMM_FIELD and not (enc == "SMEM" and tok == "16"):
            # how LLVM prints it: "hex", "dec", or "fmt" (waitcnt, hwreg(), sendmsg(): named formatters)
            style = "hex" if tok.startswith("0x") else "dec" if re.match(r"^-?\d+$", tok) else "fmt"
            if not any(o[0] == IMM_FIELD[enc] for o in ops if isinstance(o, tuple)):
                ops.append((IMM_FIELD[enc], 0, style))
        elif enc == "SOP1" and tok.startswith("sendmsg("):
            ops.append(("ssrc0", 0, "fmt"))         # s_sendmsg_rtn_*: the message id sits in ssrc0
        elif enc == "SMEM":
            ops.append(("sdata", 0, "dec"))        # s_atc_probe's first operand is a number in the sdata field
        else:
            ops.append(tok)
    return mnem, tuple(ops)


def vopd_halves(text: str) -> tuple[str, str]:
    x, _, y = text.partition(" :: ")
    return x.strip(), y.strip()


def scan() -> dict[str, dict[int, str]]:
    """Opcode number -> LLVM's text of the best variant, per encoding."""
    found: dict[str, dict[int, str]] = {}
    for enc, n in OPCODE_SPACE.items():
        cases = [(op, v) for op in range(n) for v in variants(enc, op)]
        outs = llvm_mc([v for _, v in cases], "v_nop" if enc == "SOPP" else "s_code_end")
        got: dict[int, str] = {}
        for (op, _), text in zip(cases, outs):
            if text and (op not in got or ("Invalid" in got[op] and "Invalid" not in text)):
                got[op] = text
        found[enc] = got
    return found


SRC_FIELDS = {"VOP1": ("src0",), "VOP2": ("src0",), "VOPC": ("src0",), "VOP3": ("src0", "src1", "src2"),
              "VOP3P": ("src0", "src1", "src2")}
# (1/(2pi) inline, literal 0x12345678, literal 7) as printed -> the constant class of the operand
CONST_CLASS = {("0.15915494", "0x12345678", "7"): "b32", ("0.15915494", "0x5678", "7"): "f16",
               ("0x3118", "0x5678", "7"): "i16", ("0.15915494309189532", "0x12345678", "0x7"): "f64",
               ("0.15915494309189532", "0x12345678", "7"): "i64"}


def const_classes(enc: str, base: dict[int, bytes], texts: dict[int, tuple]) -> dict[int, dict[str, str]]:
    """How LLVM prints constants in each source field of each opcode (see CONST_CLASS)."""
    shift = {"src0": 0, "src1": 9, "src2": 18}
    cases, keys = [], []
    for op, word in base.items():
        _, ops = texts[op]
        for f in SRC_FIELDS[enc]:
            if not any(o[0] == f for o in ops if isinstance(o, tuple)):
                continue
            for code, literal in ((248, None), (255, LIT), (255, 7)):
                if enc in ("VOP3", "VOP3P"):
                    lo, hi = struct.unpack("<II", word[:8])
                    hi = (hi & ~(0x1FF << shift[f])) | (code << shift[f])
                    w = words(lo, hi)
                else:
                    w = words((struct.unpack("<I", word[:4])[0] & ~0x1FF) | code)
                # an opcode that always carries a literal keeps it; with src0 = 255 src0 shares it
                kept = word[len(w):]
                cases.append(w + (words(literal) if literal is not None else kept))
                keys.append((op, f))
    outs = llvm_mc(cases)
    seen: dict[tuple, list] = {}
    for key, text in zip(keys, outs):
        seen.setdefault(key, []).append(text)
    res: dict[int, dict[str, str]] = {}
    for (op, f), shown in seen.items():
        if None in shown or any("Invalid" in t for t in shown):   # the field takes no constants
            continue
        _, ops = texts[op]
        pos = [i for i, o in enumerate(ops) if o[0] == f][0]
        tok = lambda t, pos=pos: OPERAND_RE.findall(t.partition(" ")[2])[pos].strip("|-")
        cls = CONST_CLASS.get(tuple(tok(t) for t in shown))
        if cls is None:
            raise ValueError(f"{enc} op {op} {f}: unknown constant printing {shown!r}")
        res.setdefault(op, {})[f] = cls
    return res


def imm_styles(enc: str, rows: dict[int, tuple]) -> None:
    """Refine how SOPP/SOPK immediates print, from two probes (16 and 0x8123): "hex" always hex, "u16" decimal for
    0..64 and hex otherwise, "dec" unsigned decimal (branch offsets, s_call_b64), "fmt" a named formatter (waitcnt,
    hwreg, sendmsg)."""
    ops = [op for op, (_, t) in rows.items() if any(isinstance(o, tuple) and o[0] == "simm16" for o in t)]
    if enc == "SOPP":
        probe = lambda op, imm: words((0x17F << 23) | (op << 16) | imm)
    else:
        probe = lambda op, imm: words((0xB << 28) | (op << 23) | (4 << 16) | imm) + (words(LIT) if op == 19 else b"")
    outs = llvm_mc([probe(op, imm) for op in ops for imm in (0x10, 0x8123)], "v_nop" if enc == "SOPP" else "s_code_end")
    for i, op in enumerate(ops):
        t16, tbig = outs[2 * i], outs[2 * i + 1]
        mnem, tmpl = rows[op]
        style = ("hex" if t16 and "0x10" in t16 and tbig and "0x8123" in tbig else
                 "u16" if t16 and t16.endswith(" 16") and tbig and "0x8123" in tbig else
                 "dec" if t16 and t16.endswith(" 16") and tbig and "33059" in tbig else "fmt")
        rows[op] = (mnem, tuple((o[0], 0, style) if isinstance(o, tuple) and o[0] == "simm16" else o for o in tmpl))


# Modifier probes: name -> ((bits in dword 0, bits in dword 1) per probed operand bit, mark LLVM prints). A bit is
# probed on its own because LLVM rejects bits for operands an opcode does not have.
VOP3_MOD_PROBES = {"abs": ([(1 << 8 + i, 0) for i in range(3)], "|"),
                   "neg": ([(0, 1 << 29 + i) for i in range(3)], "-"),
                   "sext": ([(0, 1 << 29 + i) for i in range(3)], "sext("), "clamp": ([(1 << 15, 0)], "clamp"),
                   "omod": ([(0, 1 << 27)], "mul:2"), "op_sel": ([(1 << 11 + i, 0) for i in range(4)], "op_sel:")}
VOP3P_MOD_PROBES = {"op_sel": ([(1 << 11 + i, 0) for i in range(3)], "op_sel:"),
                    "op_sel_hi": ([(0, 1 << 27), (0, 1 << 28), (1 << 14, 0)], "op_sel_hi:"),
                    "neg_lo": ([(0, 1 << 29 + i) for i in range(3)], "neg_lo:"),
                    "neg_hi": ([(1 << 8 + i, 0) for i in range(3)], "neg_hi:"),
                    "clamp": ([(1 << 15, 0)], "clamp"), "neg": ([(0, 1 << 29 + i) for i in range(3)], "-"),
                    "abs": ([(1 << 8 + i, 0) for i in range(3)], "|")}


def modifiers(enc: str, base: dict[int, bytes]) -> dict[int, dict[str, int]]:
    """Which VOP3/VOP3P modifiers LLVM prints for each opcode, as a mask of the field bits it prints them for; for
    op_sel and op_sel_hi also the number of printed entries (MODS[...]["op_sel#"]). "sext" marks integer operands
    whose neg bit prints as sext(x); for VOP3P, "neg"/"abs" mean the neg/neg_hi bits print as -x / |x| on the
    operands (v_fma_mix*)."""
    probes = VOP3_MOD_PROBES if enc == "VOP3" else VOP3P_MOD_PROBES
    cases, keys = [], []
    for op, word in base.items():
        lo, hi = struct.unpack("<II", word[:8])
        for name, (bits, _) in probes.items():
            for i, (b0, b1) in enumerate(bits):
                cases.append(words(lo ^ b0, hi ^ b1) + word[8:])   # xor: op_sel_hi's base value is all ones
                keys.append((op, name, i))
    outs = llvm_mc(cases)
    plain = dict(zip(base, llvm_mc(list(base.values()))))
    res: dict[int, dict[str, int]] = {}
    for (op, name, i), text in zip(keys, outs):
        mark = probes[name][1]
        if text is None or "Invalid" in text or plain[op] is None or text == plain[op]:
            continue
        operands = text.partition(" ")[2]
        if name == "neg" and "sext(" in operands or name == "sext" and "sext(" not in operands or mark not in operands:
            continue
        mods = res.setdefault(op, {})
        mods[name] = mods.get(name, 0) | 1 << i
        m = re.search(re.escape(mark) + r"\[([^\]]*)\]", operands)
        if m:
            mods[name + "#"] = len(m.group(1).split(","))
    return res


def main() -> None:
    found = scan()
    tables: dict[str, dict[int, tuple]] = {}
    t16_syntax: dict[str, set[int]] = {}
    for enc, got in found.items():
        rows = {}
        for op, text in sorted(got.items()):
            if enc.startswith("VOPD"):
                text = vopd_halves(text)[0 if enc == "VOPDX" else 1]
            text = re.sub(r"/\*.*?\*/", "", text)
            rows[op] = template(enc, text)
            if re.search(r"\bv\d+\.[lh]\b", text):
                t16_syntax.setdefault(enc, set()).add(op)
        tables[enc] = rows
    for enc in ("SOPP", "SOPK"):
        imm_styles(enc, tables[enc])
    consts, mods = {}, {}
    for enc in SRC_FIELDS:
        cases = [(op, v) for op in tables[enc] for v in variants(enc, op)]
        base: dict[int, bytes] = {}
        for (op, v), shown in zip(cases, llvm_mc([v for _, v in cases])):
            if shown is not None and "Invalid" not in shown and op not in base:
                base[op] = v
        consts[enc] = const_classes(enc, base, tables[enc])
        if enc in ("VOP3", "VOP3P"):
            mods[enc] = modifiers(enc, base)
    print('"""RDNA3 (gfx1100) opcode tables, generated from llvm-mc-19 by gen_tables.py; data, do not edit by hand.\n')
    print("OPS[enc][opcode] = (LLVM's printed mnemonic, operand template); a template entry is (field, register")
    print("count, kind) or fixed text (see gen_tables.template). CONSTS[enc][opcode][field] says how constants print")
    print("in a source field: b32, f16, i16, f64 or i64. MODS[enc][opcode][modifier] is the mask of field bits whose")
    print("modifier LLVM prints (see gen_tables.modifiers). T16_SYNTAX[enc] holds the opcodes LLVM 19 prints with")
    print("16-bit register halves (v1.l) even without true16.\n\"\"\"")
    # annotated: the rows are heterogeneous tuples, which a type checker would otherwise read as `object`
    print("OPS: dict[str, dict[int, tuple[str, tuple[tuple[str, int, str] | str, ...]]]] = "
          + pprint.pformat(tables, width=120, compact=True))
    print("CONSTS: dict[str, dict[int, dict[str, str]]] = " + pprint.pformat(consts, width=120, compact=True))
    print("MODS: dict[str, dict[int, dict[str, int]]] = " + pprint.pformat(mods, width=120, compact=True))
    print("T16_SYNTAX: dict[str, set[int]] = " + pprint.pformat(t16_syntax, width=120, compact=True))


if __name__ == "__main__":
    main()
