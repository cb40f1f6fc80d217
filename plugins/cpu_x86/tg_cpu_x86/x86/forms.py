"""The instruction forms the encoder knows, as data.

A form is one row: mnemonic, operand kinds, encoding, operand roles. Encodings are written in a compact
notation close to the Intel SDM's opcode column:

  legacy:  [66|F2|F3]... [W] [0F|0F38|0F3A] <opcode>[+r] [/r|/0../7] [ib|iw|id|io]     (W = REX.W)
  VEX:     V.<128|256>.<NP|66|F3|F2>.<0F|0F38|0F3A>.<W0|W1> <opcode> [/r|/digit] [ib|is4]
  EVEX:    E.<128|256|512>.<pp>.<map>.<W0|W1> <opcode> [/r|/digit] [ib] <tuple>   (AVX-512; rows in evex.py)

An EVEX row's tuple type (Intel SDM vol. 2 2.7.5: FV full vector, FVM full vector memory, T1S one scalar, T2/T4/T8
that many elements, HVM/QVM half/quarter vector memory) gives N, the unit its 8-bit displacement counts in
(disp8*N compression: [rax + 0x40] of a zmm load is disp8 1).

Operand kinds: r8 r16 r32 r64 (general registers), x y z (xmm, ymm, zmm), k (opmask), wk (a write mask:
k1-k7), m8..m512 (memory of that many bits), m (memory of any size: lea), rmN (register or memory of N bits),
xmN / ymN / zmN / kmN (xmm / ymm / zmm / opmask or memory of N bits), xmNbE / ymNbE / zmNbE (also an E-bit
element broadcast to every lane: `dword ptr [rax]{1to16}`), vxN / vyN (gather addresses: memory with an
xmm / ymm index, N bits read), cl (that register), i8 i16 i32 (immediate sign-extended to the operand size),
i64, u8 (unsigned byte), p5 (a compare predicate 0..31 in a byte).

Roles, one letter per operand: R ModRM.reg, M ModRM.rm, V VEX/EVEX.vvvv, O low opcode bits (+r), I immediate,
L register in imm8[7:4] (is4), K EVEX.aaa merge masking (`zmm1 {k1}`), Z EVEX.aaa zero masking
(`zmm1 {k1} {z}`), "-" implicit (not encoded).
Rows are tried in order, so a shorter encoding is listed before a longer one that takes the same operands.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .evex import evex_rows

# condition codes in opcode order (jcc/setcc/cmovcc low nibble), named as capstone prints them
CONDITIONS: tuple[str, ...] = ("o", "no", "b", "ae", "e", "ne", "be", "a", "s", "ns", "p", "np", "l", "ge", "le", "g")
CONDITION_ALIASES: dict[str, str] = {"c": "b", "nae": "b", "nc": "ae", "nb": "ae", "z": "e", "nz": "ne", "na": "be",
                                     "nbe": "a", "pe": "p", "po": "np", "nge": "l", "nl": "ge", "ng": "le", "nle": "g"}
# vcmpps/pd/ss/sd predicate immediates 0..31, printed by capstone as pseudo-mnemonics vcmp<pred><suffix>
CMP_PREDICATES: tuple[str, ...] = (
    "eq", "lt", "le", "unord", "neq", "nlt", "nle", "ord", "eq_uq", "nge", "ngt", "false", "neq_oq", "ge", "gt",
    "true", "eq_os", "lt_oq", "le_oq", "unord_s", "neq_us", "nlt_uq", "nle_uq", "ord_s", "eq_us", "nge_uq",
    "ngt_uq", "false_os", "neq_os", "ge_oq", "gt_oq", "true_us")

_SIZE_SUFFIX = {1: "8", 2: "16", 4: "32", 8: "64"}
_IMM_TOKENS = {"ib": 1, "iw": 2, "id": 4, "io": 8}
_PP = {"NP": 0, "66": 1, "F3": 2, "F2": 3}
_MAPS = {"0F": 1, "0F38": 2, "0F3A": 3}
_MAP_BYTES = {"0F": b"\x0f", "0F38": b"\x0f\x38", "0F3A": b"\x0f\x3a"}


@dataclass(frozen=True)
class Form:
    mnemonic: str
    kinds: tuple[str, ...]
    roles: str
    prefixes: bytes        # legacy prefixes 66/F2/F3 (legacy encodings only)
    rex_w: bool
    escape: bytes          # legacy opcode map escape (0F, 0F 38, 0F 3A)
    vex: tuple[int, int, int, int] | None  # (L, pp, mmmmm, W)
    opcode: int
    digit: int | None      # /digit in ModRM.reg
    has_modrm: bool
    imm_size: int          # bytes of immediate (ib/iw/id/io), is4 counts as 1
    text: str              # the mnemonic as printed (movabs for mov r64, imm64)
    opsize: int            # bytes of the first general-purpose/memory operand: what an immediate extends to
    evex: tuple[int, int, int, int] | None = None  # (L'L, pp, mm, W) of an EVEX (AVX-512) encoding
    tuple_type: str = ""   # an EVEX row's tuple type: the unit of its compressed displacement

    def __str__(self) -> str:
        return f"{self.mnemonic} {', '.join(self.kinds)}"


def parse_form(mnemonic: str, kinds: str, encoding: str, roles: str, text: str | None = None) -> Form:
    ks = tuple(k for k in kinds.replace(",", " ").split())
    if len(ks) != len(roles): raise ValueError(f"form {mnemonic} {kinds}: {len(ks)} operands but roles {roles!r}")
    toks = encoding.split()
    prefixes, rex_w, escape, vex, digit, has_modrm, imm_size = b"", False, b"", None, None, False, 0
    evex, tuple_type = None, ""
    if toks[0].startswith("E."):
        _, bits, pp, mp, w = toks.pop(0).split(".")
        evex = ({"128": 0, "256": 1, "512": 2}[bits], _PP[pp], _MAPS[mp], {"W0": 0, "W1": 1}[w])
        tuple_type = toks.pop()
        if tuple_type not in TUPLE_TYPES:
            raise ValueError(f"form {mnemonic} {kinds}: tuple type {tuple_type!r} is not one of {', '.join(TUPLE_TYPES)}")
    elif toks[0].startswith("V."):
        _, vex_l, pp, mp, w = toks.pop(0).split(".")
        vex = ({"128": 0, "256": 1}[vex_l], _PP[pp], _MAPS[mp], {"W0": 0, "W1": 1}[w])
    else:
        while toks[0] in ("66", "F2", "F3"): prefixes += bytes.fromhex(toks.pop(0))
        if toks[0] == "W": rex_w = bool(toks.pop(0))
        if toks[0] in _MAP_BYTES: escape = _MAP_BYTES[toks.pop(0)]
    opcode = int(toks.pop(0).removesuffix("+r"), 16)
    for t in toks:
        if t == "/r": has_modrm = True
        elif t.startswith("/"): has_modrm, digit = True, int(t[1:])
        elif t in _IMM_TOKENS: imm_size = _IMM_TOKENS[t]
        elif t == "is4": imm_size = 1
        else: raise ValueError(f"form {mnemonic} {kinds}: bad encoding token {t!r}")
    if ("O" in roles) == has_modrm and ("O" in roles or "M" in roles):
        raise ValueError(f"form {mnemonic} {kinds}: roles {roles!r} do not fit encoding {encoding!r}")
    opsize = next((int(k.lstrip("rm")) // 8 for k in ks if k[0] in "rm" and k[-1].isdigit()), 8)
    return Form(mnemonic, ks, roles, prefixes, rex_w, escape, vex, opcode, digit, has_modrm, imm_size, text or mnemonic,
                opsize, evex, tuple_type)


# EVEX tuple types -> the displacement unit N as a function of (vector bytes, element bytes, broadcast)
TUPLE_TYPES: dict[str, Callable[[int, int, bool], int]] = {
    "FV": lambda vl, e, b: e if b else vl, "FVM": lambda vl, e, b: vl, "HV": lambda vl, e, b: e if b else vl // 2,
    "HVM": lambda vl, e, b: vl // 2, "QVM": lambda vl, e, b: vl // 4, "T1S": lambda vl, e, b: e,
    "T2": lambda vl, e, b: 2 * e, "T4": lambda vl, e, b: 4 * e, "T8": lambda vl, e, b: 8 * e,
    "NONE": lambda vl, e, b: 1}


def _sized(size: int) -> tuple[str, str]:
    """(legacy prefix tokens for an integer operand size, size suffix for kinds)."""
    return {1: "", 2: "66 ", 4: "", 8: "W "}[size], _SIZE_SUFFIX[size]


def _integer_rows() -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    add = rows.append
    # two-operand ALU ops: (base opcode, ModRM digit of the immediate group)
    alu = {"add": (0x00, 0), "or": (0x08, 1), "adc": (0x10, 2), "sbb": (0x18, 3), "and": (0x20, 4), "sub": (0x28, 5),
           "xor": (0x30, 6), "cmp": (0x38, 7)}
    for name, (base, d) in alu.items():
        for sz in (1, 2, 4, 8):
            p, s = _sized(sz)
            w = 0 if sz == 1 else 1
            add((name, f"rm{s} r{s}", f"{p}{base + w:02X} /r", "MR"))
            add((name, f"r{s} rm{s}", f"{p}{base + 2 + w:02X} /r", "RM"))
            if sz == 1: add((name, "rm8 i8", f"80 /{d} ib", "MI"))
            else:
                add((name, f"rm{s} i8", f"{p}83 /{d} ib", "MI"))
                add((name, f"rm{s} i{min(sz * 8, 32)}", f"{p}81 /{d} {'iw' if sz == 2 else 'id'}", "MI"))
    for sz in (1, 2, 4, 8):
        p, s = _sized(sz)
        w = 0 if sz == 1 else 1
        iw = {1: "ib", 2: "iw", 4: "id", 8: "id"}[sz]
        ik = f"i{min(sz * 8, 32)}"
        add(("test", f"rm{s} r{s}", f"{p}{0x84 + w:02X} /r", "MR"))
        add(("test", f"rm{s} {ik}", f"{p}{0xF6 + w:02X} /0 {iw}", "MI"))
        add(("mov", f"rm{s} r{s}", f"{p}{0x88 + w:02X} /r", "MR"))
        add(("mov", f"r{s} rm{s}", f"{p}{0x8A + w:02X} /r", "RM"))
        if sz != 8: add(("mov", f"r{s} {ik}", f"{p}{0xB0 if sz == 1 else 0xB8:02X}+r {iw}", "OI"))
        add(("mov", f"rm{s} {ik}", f"{p}{0xC6 + w:02X} /0 {iw}", "MI"))
        if sz == 8:
            add(("mov", "r64 i64", "W B8+r io", "OI", "movabs"))
            add(("movabs", "r64 i64", "W B8+r io", "OI"))
        for name, d in (("inc", 0), ("dec", 1)): add((name, f"rm{s}", f"{p}{0xFE + w:02X} /{d}", "M"))
        for name, d in (("not", 2), ("neg", 3), ("mul", 4), ("imul", 5), ("div", 6), ("idiv", 7)):
            add((name, f"rm{s}", f"{p}{0xF6 + w:02X} /{d}", "M"))
        for name, d in (("rol", 0), ("ror", 1), ("shl", 4), ("shr", 5), ("sar", 7)):
            add((name, f"rm{s} u8", f"{p}{0xC0 + w:02X} /{d} ib", "MI"))
            add((name, f"rm{s} cl", f"{p}{0xD2 + w:02X} /{d}", "M-"))
        if sz >= 2:
            add(("imul", f"r{s} rm{s}", f"{p}0F AF /r", "RM"))
            add(("imul", f"r{s} rm{s} i8", f"{p}6B /r ib", "RMI"))
            add(("imul", f"r{s} rm{s} {ik}", f"{p}69 /r {iw}", "RMI"))
            add(("lea", f"r{s} m", f"{p}8D /r", "RM"))
            add(("movzx", f"r{s} rm8", f"{p}0F B6 /r", "RM"))
            add(("movsx", f"r{s} rm8", f"{p}0F BE /r", "RM"))
            for cc, name in enumerate(CONDITIONS):
                add((f"cmov{name}", f"r{s} rm{s}", f"{p}0F {0x40 + cc:02X} /r", "RM"))
            for name, op in (("bsf", "BC"), ("bsr", "BD")): add((name, f"r{s} rm{s}", f"{p}0F {op} /r", "RM"))
            for name, op in (("popcnt", "B8"), ("tzcnt", "BC"), ("lzcnt", "BD")):
                add((name, f"r{s} rm{s}", f"F3 {p}0F {op} /r", "RM"))
        if sz >= 4:
            add(("movzx", f"r{s} rm16", f"{p}0F B7 /r", "RM"))
            add(("movsx", f"r{s} rm16", f"{p}0F BF /r", "RM"))
    add(("movsxd", "r64 rm32", "W 63 /r", "RM"))
    # BMI: shifts by any register (not only cl) and and-not, with a separate destination
    for sz, vex_w in ((4, "W0"), (8, "W1")):
        s = _SIZE_SUFFIX[sz]
        for name, pp in (("shlx", "66"), ("sarx", "F3"), ("shrx", "F2")):
            add((name, f"r{s} rm{s} r{s}", f"V.128.{pp}.0F38.{vex_w} F7 /r", "RMV"))
        add(("andn", f"r{s} r{s} rm{s}", f"V.128.NP.0F38.{vex_w} F2 /r", "RVM"))
    for name, d in (("prefetchnta", 0), ("prefetcht0", 1), ("prefetcht1", 2), ("prefetcht2", 3)):
        add((name, "m8", f"0F 18 /{d}", "M"))
    for cc, name in enumerate(CONDITIONS): add((f"set{name}", "rm8", f"0F {0x90 + cc:02X} /0", "M"))
    add(("cwd", "", "66 99", "")); add(("cdq", "", "99", "")); add(("cqo", "", "W 99", ""))
    add(("cwde", "", "98", "")); add(("cdqe", "", "W 98", ""))
    add(("push", "r64", "50+r", "O")); add(("push", "m64", "FF /6", "M"))
    add(("push", "i8", "6A ib", "I")); add(("push", "i32", "68 id", "I"))
    add(("pop", "r64", "58+r", "O")); add(("pop", "m64", "8F /0", "M"))
    add(("call", "rm64", "FF /2", "M")); add(("jmp", "rm64", "FF /4", "M"))
    add(("ret", "", "C3", "")); add(("nop", "", "90", "")); add(("int3", "", "CC", "")); add(("ud2", "", "0F 0B", ""))
    # the native core pool's waits (native_pool.py): a spin loop's hint, the time-stamp counter, futex calls
    add(("pause", "", "F3 90", "")); add(("rdtsc", "", "0F 31", "")); add(("syscall", "", "0F 05", ""))
    return rows


# VEX.66 integer vector ops on (register, register, register-or-memory): mnemonic, opcode map, opcode
_INT_VECTOR_RVM = """
vpaddb 0F FC     vpaddw 0F FD      vpaddd 0F FE       vpaddq 0F D4       vpsubb 0F F8      vpsubw 0F F9
vpsubd 0F FA     vpsubq 0F FB      vpmulld 0F38 40    vpmullw 0F D5      vpmuludq 0F F4    vpmuldq 0F38 28
vpcmpeqb 0F 74   vpcmpeqd 0F 76    vpcmpeqq 0F38 29   vpcmpgtb 0F 64     vpcmpgtd 0F 66    vpcmpgtq 0F38 37
vpand 0F DB      vpandn 0F DF      vpor 0F EB         vpxor 0F EF        vpminsd 0F38 39   vpmaxsd 0F38 3D
vpminud 0F38 3B  vpmaxud 0F38 3F   vpshufb 0F38 00    vpackssdw 0F 6B    vpacksswb 0F 63   vpunpckldq 0F 62
vpunpckhdq 0F 6A vpunpcklqdq 0F 6C vpunpckhqdq 0F 6D  vpsllvd 0F38 47    vpsrlvd 0F38 45   vpsravd 0F38 46
"""
# shifts by an immediate: mnemonic, opcode (map 0F), ModRM digit
_INT_VECTOR_SHIFTS = """
vpsrlw 71 2  vpsraw 71 4  vpsllw 71 6  vpsrld 72 2  vpsrad 72 4  vpslld 72 6  vpsrlq 73 2  vpsllq 73 6
"""
# sign/zero extensions (map 0F38): mnemonic, opcode, bits read by the 128-bit form
_INT_VECTOR_WIDEN = """
vpmovsxbd 21 32  vpmovzxbd 31 32  vpmovsxwd 23 64  vpmovzxwd 33 64  vpmovsxdq 25 64  vpmovzxdq 35 64
"""


# AVX2 gathers (destination, addresses base + index lanes, mask cleared as lanes load): mnemonic, opcode, W,
# operand kinds of the 128-bit and of the 256-bit form
_GATHERS = (
    ("vgatherdps", "92", "W0", "x vx128 x", "y vy256 y"), ("vpgatherdd", "90", "W0", "x vx128 x", "y vy256 y"),
    ("vgatherqps", "93", "W0", "x vx64 x", "x vy128 x"), ("vpgatherqd", "91", "W0", "x vx64 x", "x vy128 x"),
    ("vgatherdpd", "92", "W1", "x vx128 x", "y vx256 y"), ("vpgatherdq", "90", "W1", "x vx128 x", "y vx256 y"),
    ("vgatherqpd", "93", "W1", "x vx128 x", "y vy256 y"), ("vpgatherqq", "91", "W1", "x vx128 x", "y vy256 y"))


def _triples(table: str) -> list[tuple[str, str, str]]:
    words = table.split()
    return [(words[i], words[i + 1], words[i + 2]) for i in range(0, len(words), 3)]


def _vex_rows() -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    add = rows.append

    def packed(name: str, pp: str, mp: str, op: str, kinds: str, roles: str, w: str = "W0", tail: str = "/r",
               widths: tuple[int, ...] = (128, 256)) -> None:
        """One row per vector width; in kinds V is the vector register, VM vector-or-memory, MEM memory only."""
        for bits in widths:
            v = "x" if bits == 128 else "y"
            k = kinds.replace("MEM", f"m{bits}").replace("VM", f"{v}m{bits}").replace("V", v)
            add((name, k, f"V.{bits}.{pp}.{mp}.{w} {op} {tail}", roles))

    # float arithmetic: ps/pd packed, ss/sd scalar
    types = {"ps": ("NP", 32), "pd": ("66", 64), "ss": ("F3", 32), "sd": ("F2", 64)}
    for base, op in (("vadd", "58"), ("vmul", "59"), ("vsub", "5C"), ("vmin", "5D"), ("vdiv", "5E"), ("vmax", "5F"),
                     ("vsqrt", "51")):
        for t, (pp, bits) in types.items():
            if t[0] == "p":
                sqrt = base == "vsqrt"
                packed(base + t, pp, "0F", op, "V VM" if sqrt else "V V VM", "RM" if sqrt else "RVM")
            else: add((base + t, f"x x xm{bits}", f"V.128.{pp}.0F.W0 {op} /r", "RVM"))
    for base, op in (("vand", "54"), ("vandn", "55"), ("vor", "56"), ("vxor", "57"), ("vunpckl", "14"),
                     ("vunpckh", "15")):
        for t in ("ps", "pd"): packed(base + t, types[t][0], "0F", op, "V V VM", "RVM")
    for t in ("ps", "pd"):
        packed(f"vhadd{t}", {"ps": "F2", "pd": "66"}[t], "0F", "7C", "V V VM", "RVM")
        packed(f"vshuf{t}", types[t][0], "0F", "C6", "V V VM u8", "RVMI", tail="/r ib")
        packed(f"vcmp{t}", types[t][0], "0F", "C2", "V V VM u8", "RVMI", tail="/r ib")
        packed(f"vmovu{t}", types[t][0], "0F", "10", "V VM", "RM")
        packed(f"vmovu{t}", types[t][0], "0F", "11", "VM V", "MR")
        packed(f"vmova{t}", types[t][0], "0F", "28", "V VM", "RM")
        packed(f"vmova{t}", types[t][0], "0F", "29", "VM V", "MR")
        packed(f"vmovmsk{t}", types[t][0], "0F", "50", "r32 V", "RM")
        packed(f"vround{t}", "66", "0F3A", {"ps": "08", "pd": "09"}[t], "V VM u8", "RMI", tail="/r ib")
        packed(f"vblendv{t}", "66", "0F3A", {"ps": "4A", "pd": "4B"}[t], "V V VM V", "RVML", tail="/r is4")
        packed(f"vpermil{t}", "66", "0F3A", {"ps": "04", "pd": "05"}[t], "V VM u8", "RMI", tail="/r ib")
        packed(f"vpermil{t}", "66", "0F38", {"ps": "0C", "pd": "0D"}[t], "V V VM", "RVM")
    for t in ("ss", "sd"):
        pp, bits = types[t]
        add((f"vcmp{t}", f"x x xm{bits} u8", f"V.128.{pp}.0F.W0 C2 /r ib", "RVMI"))
        add((f"vround{t}", f"x x xm{bits} u8", f"V.128.66.0F3A.W0 {'0A' if t == 'ss' else '0B'} /r ib", "RVMI"))
        add((f"vmov{t}", f"x m{bits}", f"V.128.{pp}.0F.W0 10 /r", "RM"))
        add((f"vmov{t}", "x x x", f"V.128.{pp}.0F.W0 10 /r", "RVM"))
        add((f"vmov{t}", f"m{bits} x", f"V.128.{pp}.0F.W0 11 /r", "MR"))
        pre = "NP" if t == "ss" else "66"
        add((f"vucomi{t}", f"x xm{bits}", f"V.128.{pre}.0F.W0 2E /r", "RM"))
        add((f"vcomi{t}", f"x xm{bits}", f"V.128.{pre}.0F.W0 2F /r", "RM"))
        for w, s in (("W0", "32"), ("W1", "64")):
            add((f"vcvtsi2{t}", f"x x rm{s}", f"V.128.{pp}.0F.{w} 2A /r", "RVM"))
            add((f"vcvtt{t}2si", f"r{s} xm{bits}", f"V.128.{pp}.0F.{w} 2C /r", "RM"))
            add((f"vcvt{t}2si", f"r{s} xm{bits}", f"V.128.{pp}.0F.{w} 2D /r", "RM"))
    for fam, op_base in (("vfmadd", 0x98), ("vfmsub", 0x9A), ("vfnmadd", 0x9C), ("vfnmsub", 0x9E)):
        for order, off in (("132", 0x00), ("213", 0x10), ("231", 0x20)):
            for t, (_, bits) in types.items():
                w = "W0" if bits == 32 else "W1"
                op = f"{op_base + off + (t[0] == 's'):02X}"
                if t[0] == "p": packed(f"{fam}{order}{t}", "66", "0F38", op, "V V VM", "RVM", w=w)
                else: add((f"{fam}{order}{t}", f"x x xm{bits}", f"V.128.66.0F38.{w} {op} /r", "RVM"))
    for name, op in (("vrsqrt", "52"), ("vrcp", "53")):  # ~12-bit approximations
        packed(f"{name}ps", "NP", "0F", op, "V VM", "RM")
        add((f"{name}ss", "x x xm32", f"V.128.F3.0F.W0 {op} /r", "RVM"))
    packed("vmovsldup", "F3", "0F", "12", "V VM", "RM"); packed("vmovshdup", "F3", "0F", "16", "V VM", "RM")
    for name, load, store in (("vmaskmovps", "2C", "2E"), ("vmaskmovpd", "2D", "2F")):  # masked loads/stores (tails)
        packed(name, "66", "0F38", load, "V V MEM", "RVM"); packed(name, "66", "0F38", store, "MEM V V", "MVR")
    for name, w in (("vpmaskmovd", "W0"), ("vpmaskmovq", "W1")):
        packed(name, "66", "0F38", "8C", "V V MEM", "RVM", w=w); packed(name, "66", "0F38", "8E", "MEM V V", "MVR", w=w)
    add(("vcvtss2sd", "x x xm32", "V.128.F3.0F.W0 5A /r", "RVM"))
    add(("vcvtsd2ss", "x x xm64", "V.128.F2.0F.W0 5A /r", "RVM"))
    for name, pp, op in (("vcvtdq2ps", "NP", "5B"), ("vcvtps2dq", "66", "5B"), ("vcvttps2dq", "F3", "5B")):
        packed(name, pp, "0F", op, "V VM", "RM")
    # widening / narrowing conversions: the narrow side is half the width of the wide side
    add(("vcvtps2pd", "x xm64", "V.128.NP.0F.W0 5A /r", "RM"))
    add(("vcvtps2pd", "y xm128", "V.256.NP.0F.W0 5A /r", "RM"))
    add(("vcvtdq2pd", "x xm64", "V.128.F3.0F.W0 E6 /r", "RM"))
    add(("vcvtdq2pd", "y xm128", "V.256.F3.0F.W0 E6 /r", "RM"))
    for name, pp, op in (("vcvtpd2ps", "66", "5A"), ("vcvttpd2dq", "66", "E6"), ("vcvtpd2dq", "F2", "E6")):
        add((name, "x xm128", f"V.128.{pp}.0F.W0 {op} /r", "RM"))
        add((name, "x ym256", f"V.256.{pp}.0F.W0 {op} /r", "RM"))
    add(("vcvtph2ps", "x xm64", "V.128.66.0F38.W0 13 /r", "RM"))
    add(("vcvtph2ps", "y xm128", "V.256.66.0F38.W0 13 /r", "RM"))
    add(("vcvtps2ph", "xm64 x u8", "V.128.66.0F3A.W0 1D /r ib", "MRI"))
    add(("vcvtps2ph", "xm128 y u8", "V.256.66.0F3A.W0 1D /r ib", "MRI"))
    # integer vectors
    for name, mp, op in _triples(_INT_VECTOR_RVM):
        packed(name, "66", mp, op, "V V VM", "RVM")
    for name, op, d in _triples(_INT_VECTOR_SHIFTS):
        packed(name, "66", "0F", op, "V V u8", "VMI", tail=f"/{d} ib")  # register source only (memory needs EVEX)
    packed("vpshufd", "66", "0F", "70", "V VM u8", "RMI", tail="/r ib")
    packed("vmovdqu", "F3", "0F", "6F", "V VM", "RM"); packed("vmovdqu", "F3", "0F", "7F", "VM V", "MR")
    packed("vmovdqa", "66", "0F", "6F", "V VM", "RM"); packed("vmovdqa", "66", "0F", "7F", "VM V", "MR")
    for name, op, src in _triples(_INT_VECTOR_WIDEN):
        src_bits = int(src)
        add((name, f"x xm{src_bits}", f"V.128.66.0F38.W0 {op} /r", "RM"))
        add((name, f"y xm{src_bits * 2}", f"V.256.66.0F38.W0 {op} /r", "RM"))
    for name, op, bits in (("vbroadcastss", "18", 32), ("vpbroadcastd", "58", 32), ("vpbroadcastq", "59", 64)):
        add((name, f"x xm{bits}", f"V.128.66.0F38.W0 {op} /r", "RM"))
        add((name, f"y xm{bits}", f"V.256.66.0F38.W0 {op} /r", "RM"))
    add(("vbroadcastsd", "y xm64", "V.256.66.0F38.W0 19 /r", "RM"))
    add(("vbroadcastf128", "y m128", "V.256.66.0F38.W0 1A /r", "RM"))
    for name, op in (("vpermd", "36"), ("vpermps", "16")): add((name, "y y ym256", f"V.256.66.0F38.W0 {op} /r", "RVM"))
    add(("vpermpd", "y ym256 u8", "V.256.66.0F3A.W1 01 /r ib", "RMI"))
    add(("vpermq", "y ym256 u8", "V.256.66.0F3A.W1 00 /r ib", "RMI"))
    for name, op in (("vperm2f128", "06"), ("vperm2i128", "46")):
        add((name, "y y ym256 u8", f"V.256.66.0F3A.W0 {op} /r ib", "RVMI"))
    for name, op in (("vextractf128", "19"), ("vextracti128", "39")):
        add((name, "xm128 y u8", f"V.256.66.0F3A.W0 {op} /r ib", "MRI"))
    for name, op in (("vinsertf128", "18"), ("vinserti128", "38")):
        add((name, "y y xm128 u8", f"V.256.66.0F3A.W0 {op} /r ib", "RVMI"))
    add(("vmovhlps", "x x x", "V.128.NP.0F.W0 12 /r", "RVM")); add(("vmovlhps", "x x x", "V.128.NP.0F.W0 16 /r", "RVM"))
    add(("vmovd", "x rm32", "V.128.66.0F.W0 6E /r", "RM")); add(("vmovd", "rm32 x", "V.128.66.0F.W0 7E /r", "MR"))
    add(("vmovq", "x xm64", "V.128.F3.0F.W0 7E /r", "RM")); add(("vmovq", "m64 x", "V.128.66.0F.W0 D6 /r", "MR"))
    add(("vmovq", "x r64", "V.128.66.0F.W1 6E /r", "RM")); add(("vmovq", "r64 x", "V.128.66.0F.W1 7E /r", "MR"))
    add(("vpinsrd", "x x rm32 u8", "V.128.66.0F3A.W0 22 /r ib", "RVMI"))
    add(("vpextrd", "rm32 x u8", "V.128.66.0F3A.W0 16 /r ib", "MRI"))
    add(("vinsertps", "x x xm32 u8", "V.128.66.0F3A.W0 21 /r ib", "RVMI"))
    add(("vextractps", "rm32 x u8", "V.128.66.0F3A.W0 17 /r ib", "MRI"))
    for name, op, w, narrow, wide in _GATHERS:
        add((name, narrow, f"V.128.66.0F38.{w} {op} /r", "RMV"))
        add((name, wide, f"V.256.66.0F38.{w} {op} /r", "RMV"))
    add(("vzeroupper", "", "V.128.NP.0F.W0 77", "")); add(("vzeroall", "", "V.256.NP.0F.W0 77", ""))
    return rows


def _build() -> dict[str, list[Form]]:
    table: dict[str, list[Form]] = {}
    for row in _integer_rows() + _vex_rows() + evex_rows():
        form = parse_form(*row)
        table.setdefault(form.mnemonic, []).append(form)
    return table


FORMS: dict[str, list[Form]] = _build()
# branches, encoded apart from FORMS since their size depends on where the target lands: (rel8 opcode, rel32 opcode)
BRANCHES: dict[str, tuple[bytes | None, bytes]] = {"jmp": (b"\xeb", b"\xe9"), "call": (None, b"\xe8")} | {
    f"j{name}": (bytes([0x70 + cc]), bytes([0x0F, 0x80 + cc])) for cc, name in enumerate(CONDITIONS)}
