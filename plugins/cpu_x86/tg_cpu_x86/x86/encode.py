"""x86-64 machine code encoder: Assembler.emit/label/assemble, and capstone-compatible Intel syntax text.

Instruction forms are data (forms.py). emit() picks the first form whose operand kinds match and encodes
it at once (so a bad operand fails where it is emitted); branches and rip-relative references to labels
are resolved by assemble(), which starts every branch short (rel8) and lengthens the ones that do not
reach until nothing changes (lengthening only grows code, so this reaches a fixed point).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import cast

from .forms import BRANCHES, CMP_PREDICATES, CONDITION_ALIASES, FORMS, TUPLE_TYPES, Form
from .operands import REGS, Imm, Label, Mem, Operand, Reg


class EncodeError(ValueError):
    """An instruction that cannot be encoded (unknown mnemonic, operands no form takes, value out of range)."""


_OPERAND_TYPES = frozenset({Reg, Mem, Imm, Label})
_PTR = {1: "byte", 2: "word", 4: "dword", 8: "qword", 16: "xmmword", 32: "ymmword", 64: "zmmword"}
_UNSIGNED_IMM = frozenset({"mov", "movabs", "and", "or", "xor"})
_IMM_WIDTH = {"i8": 1, "u8": 1, "p5": 1, "i16": 2, "i32": 4, "i64": 8}  # p5: an EVEX compare's predicate
# recommended multi-byte NOPs (Intel SDM vol. 2B, NOP) by length, and how capstone prints them
_NOPS: dict[int, tuple[bytes, str]] = {
    1: (bytes.fromhex("90"), "nop"),
    2: (bytes.fromhex("6690"), "nop"),
    3: (bytes.fromhex("0f1f00"), "nop dword ptr [rax]"),
    4: (bytes.fromhex("0f1f4000"), "nop dword ptr [rax]"),
    5: (bytes.fromhex("0f1f440000"), "nop dword ptr [rax + rax]"),
    6: (bytes.fromhex("660f1f440000"), "nop word ptr [rax + rax]"),
    7: (bytes.fromhex("0f1f8000000000"), "nop dword ptr [rax]"),
    8: (bytes.fromhex("0f1f840000000000"), "nop dword ptr [rax + rax]"),
    9: (bytes.fromhex("660f1f840000000000"), "nop word ptr [rax + rax]"),
}
# spellings emit() accepts besides the table's: condition aliases (jz -> je, cmovnae -> cmovb, setnz -> setne)
# and vcmp pseudo-ops (vcmpltps a, b, c == vcmpps a, b, c, 1)
_ALIASES: dict[str, str] = {f"{p}{a}": f"{p}{c}" for p in ("j", "set", "cmov") for a, c in CONDITION_ALIASES.items()}
_CMP_PSEUDO: dict[str, tuple[str, int]] = {f"vcmp{pred}{t}": (f"vcmp{t}", i) for i, pred in enumerate(CMP_PREDICATES)
                                           for t in ("ps", "pd", "ss", "sd")}


def fmt_int(v: int) -> str:
    """Numbers as capstone prints them: decimal up to 9, hex above, sign in front."""
    if v < 0: return "-" + fmt_int(-v)
    return str(v) if v <= 9 else hex(v)


def _sext(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def canonical_mnemonic(mnemonic: str) -> str:
    """Condition aliases to the names capstone prints: jz -> je, cmovnae -> cmovb, setnz -> setne."""
    return _ALIASES.get(mnemonic, mnemonic)


# ---------------------------------------------------------------------------------------------- matching
@functools.cache
def _parse_kind(kind: str) -> tuple[str | None, int, int | None, int | None, str | None]:
    """An operand kind as (register class or None, gpr bits (0 for other classes), memory bits or None
    (0: any size), broadcast element bits or None, VSIB index class or None); see forms.py."""
    if kind == "cl": return "cl", 0, None, None, None
    if kind == "wk": return "wk", 0, None, None, None
    if kind[0] == "v" and kind[1] in "xyz": return None, 0, int(kind[2:]), None, f"{kind[1]}mm"
    if kind == "m": return None, 0, 0, None, None
    if kind[0] == "m": return None, 0, int(kind[1:]), None, None
    if kind[0] == "r" and kind.lstrip("rm").isdigit():
        bits = int(kind.lstrip("rm"))
        return "gpr", bits, bits if kind[1] == "m" else None, None, None
    cls = {"x": "xmm", "y": "ymm", "z": "zmm", "k": "k"}[kind[0]]
    if len(kind) == 1: return cls, 0, None, None, None
    mem, _, bcst = kind[2:].partition("b")  # xm128b32: xmm, 128 bits of memory, or a 32-bit element broadcast
    return cls, 0, int(mem), int(bcst) if bcst else None, None


def _kind_matches(kind: str, op: Operand) -> bool:
    if isinstance(op, Imm): return kind in _IMM_WIDTH
    if kind in _IMM_WIDTH: return False
    cls, gbits, mem, bcst, vsib = _parse_kind(kind)
    if isinstance(op, Reg):
        if cls == "cl": return op.name == "cl"
        if cls == "wk": return op.cls == "k" and op.num != 0  # k0 in EVEX.aaa means "no mask"
        if cls == "gpr": return op.cls == "gpr" and op.size * 8 == gbits
        return op.cls == cls
    if isinstance(op, Mem):
        is_vsib = op.index is not None and op.index.cls != "gpr"
        if vsib is not None:
            return is_vsib and op.index is not None and op.index.cls == vsib and op.size * 8 == mem and not op.bcst
        if is_vsib or mem is None: return False
        if op.bcst: return bcst is not None and op.size * 8 == bcst
        return mem == 0 or op.size * 8 == mem
    return False


def _imm_fits(kind: str, imm: Imm, opsize: int) -> bool:
    width = _IMM_WIDTH[kind]
    if imm.size and imm.size != width: return False
    if kind == "u8": return 0 <= imm.value < 256
    if kind == "p5": return 0 <= imm.value < 32
    bits = opsize * 8
    if not -(1 << (bits - 1)) <= imm.value < (1 << bits): return False
    v = imm.value & ((1 << bits) - 1)
    return _sext(v, width * 8) & ((1 << bits) - 1) == v


def _describe(op: Operand) -> str:
    if isinstance(op, Reg): return f"{op.cls}{op.size * 8 if op.cls == 'gpr' else ''} {op.name}"
    if isinstance(op, Mem): return f"m{op.size * 8 if op.size else '?'}" + (" broadcast" if op.bcst else "")
    if isinstance(op, Imm): return f"imm {op.value}"
    return f"label {op}"


def _shape(op: Operand) -> object:
    """What form matching sees of an operand apart from an immediate's value: one shape, one set of kinds."""
    if isinstance(op, Reg):
        if op.cls == "k": return "k", op.num == 0  # k0 is no write mask
        return op.name if op.name == "cl" else (op.cls, op.size, op.hi)
    if isinstance(op, Mem): return op.size, op.index.cls if op.index is not None else None, op.bcst
    return type(op)


_CANDIDATES: dict[tuple, list[Form]] = {}


def select_form(mnemonic: str, ops: tuple[Operand, ...]) -> Form:
    """The first form of mnemonic that takes ops, or an EncodeError listing what the mnemonic takes."""
    key = (mnemonic, *map(_shape, ops))
    if (cands := _CANDIDATES.get(key)) is None:
        forms = FORMS.get(mnemonic)
        if forms is None: raise EncodeError(f"unknown instruction {mnemonic!r}")
        evex_only = any(isinstance(o, Reg) and o.hi for o in ops)  # registers 16-31 exist in EVEX alone
        cands = [f for f in forms if len(f.kinds) == len(ops) and all(map(_kind_matches, f.kinds, ops))
                 and (f.evex is not None or not evex_only)]
        _CANDIDATES[key] = cands
    for f in cands:
        if all(_imm_fits(k, o, f.opsize) for k, o in zip(f.kinds, ops) if isinstance(o, Imm)): return f
    forms = FORMS[mnemonic]
    hint = ""
    if any(isinstance(o, Mem) and o.size == 0 for o in ops) and mnemonic != "lea":
        hint = " (memory operands need their size in bytes)"
    elif any(isinstance(o, Reg) and o.hi for o in ops):
        hint = " (registers 16-31 need an EVEX form)"
    allowed = "; ".join(", ".join(f.kinds) or "no operands" for f in forms)
    raise EncodeError(f"{mnemonic} does not take ({', '.join(map(_describe, ops))}){hint}; it takes: {allowed}")


# ---------------------------------------------------------------------------------------------- encoding
def _modrm(reg_field: int, rm: Reg | Mem, n: int = 1) -> tuple[bytes, int, int, int | None]:
    """ModRM [+SIB] [+disp] bytes, REX.X, REX.B, and the position of a rip-relative disp32 (else None).
    n > 1 (EVEX): an 8-bit displacement counts in units of n bytes (disp8*N), so only multiples of n take it."""
    r = (reg_field & 7) << 3
    if isinstance(rm, Reg): return bytes([0xC0 | r | rm.low]), 0, rm.ext, None
    b, i, disp = rm.base, rm.index, rm.disp
    if b is not None and b.cls == "rip":
        return bytes([r | 5]) + (0 if isinstance(disp, Label) else disp).to_bytes(4, "little", signed=True), 0, 0, 1
    assert isinstance(disp, int)
    ss = {1: 0, 2: 1, 4: 2, 8: 3}[rm.scale] << 6
    x = i.ext if i is not None else 0
    idx = (i.low if i is not None else 4) << 3
    if b is None:  # mod 00 with SIB base 101: disp32, no base (plain mod 00 rm 101 would be rip-relative)
        return bytes([r | 4, ss | idx | 5]) + disp.to_bytes(4, "little", signed=True), x, 0, None
    # base rbp/r13 (low bits 101) has no mod-00 form: it takes a zero disp8
    if disp == 0 and b.low != 5: mod, tail = 0x00, b""
    elif disp % n == 0 and -128 <= disp // n < 128: mod, tail = 0x40, (disp // n).to_bytes(1, "little", signed=True)
    else: mod, tail = 0x80, disp.to_bytes(4, "little", signed=True)
    if i is None and b.low != 4: return bytes([mod | r | b.low]) + tail, 0, b.ext, None
    # rsp/r12 as base (low bits 100) or an index need a SIB byte
    return bytes([mod | r | 4, ss | idx | b.low]) + tail, x, b.ext, None


def encode_form(form: Form, ops: tuple[Operand, ...]) -> tuple[bytes, int | None]:
    """Bytes of one instruction and the offset of a rip-relative disp32 inside them (None when there is none)."""
    if form.evex is not None: return _encode_evex(form, ops)
    reg_field, vvvv = form.digit or 0, 0
    reg_op: Reg | None = None
    rm: Reg | Mem | None = None
    opreg: Reg | None = None
    imm: Imm | None = None
    is4: Reg | None = None
    # select_form matched each operand to its kind: an R/V/O/L operand is a register, M a register or memory,
    # I an immediate (the casts say so to the checker; nothing is converted)
    for role, op in zip(form.roles, ops):
        if role == "R": reg_op = cast(Reg, op); reg_field = reg_op.num
        elif role == "M": rm = cast("Reg | Mem", op)
        elif role == "V": vvvv = cast(Reg, op).num
        elif role == "O": opreg = cast(Reg, op)
        elif role == "I": imm = cast(Imm, op)
        elif role == "L": is4 = cast(Reg, op)
    if any(isinstance(o, Reg) and o.hi for o in ops) or any(isinstance(o, Mem) and o.bcst for o in ops):
        raise EncodeError(f"{form}: registers 16-31 and broadcasts need an EVEX (AVX-512) form")
    regs = [o for o in ops if isinstance(o, Reg)]
    rex_r = reg_field >> 3 if reg_op is not None else 0
    body, rex_x, rex_b, disp_at = b"", 0, 0, None
    if rm is not None: body, rex_x, rex_b, disp_at = _modrm(reg_field, rm)
    opcode = form.opcode
    if opreg is not None: opcode, rex_b = opcode | opreg.low, opreg.ext
    if form.vex is None:
        rex = (form.rex_w << 3) | (rex_r << 2) | (rex_x << 1) | rex_b
        if rex or any(o.needs_rex for o in regs): head = form.prefixes + bytes([0x40 | rex]) + form.escape
        else: head = form.prefixes + form.escape
    else:
        vex_l, pp, mmmmm, w = form.vex
        tail = ((~vvvv & 15) << 3) | (vex_l << 2) | pp
        if mmmmm == 1 and w == 0 and not rex_x and not rex_b: head = bytes([0xC5, ((rex_r ^ 1) << 7) | tail])
        else:
            head = bytes([0xC4, ((rex_r ^ 1) << 7) | ((rex_x ^ 1) << 6) | ((rex_b ^ 1) << 5) | mmmmm, (w << 7) | tail])
    head += bytes([opcode])
    if imm is not None: body += (imm.value & ((1 << (8 * form.imm_size)) - 1)).to_bytes(form.imm_size, "little")
    if is4 is not None: body += bytes([is4.num << 4])
    return head + body, None if disp_at is None else len(head) + disp_at


def _encode_evex(form: Form, ops: tuple[Operand, ...]) -> tuple[bytes, int | None]:
    """The 4-byte EVEX prefix (62, P0 = R X B R' 0 mm, P1 = W vvvv 1 pp, P2 = z L'L b V' aaa; R/X/B/R'/V'/vvvv
    stored inverted), opcode, ModRM/SIB with the compressed displacement, immediate."""
    assert form.evex is not None
    ll, pp, mm, w = form.evex
    reg_field, vvvv, aaa, z = form.digit or 0, 0, 0, 0
    rm: Reg | Mem | None = None
    imm: Imm | None = None
    for role, op in zip(form.roles, ops):  # the operands match their kinds (see encode_form)
        if role == "R": reg_field = cast(Reg, op).num
        elif role == "M": rm = cast("Reg | Mem", op)
        elif role == "V": vvvv = cast(Reg, op).num
        elif role == "I": imm = cast(Imm, op)
        elif role in "KZ": aaa, z = cast(Reg, op).num, int(role == "Z")
    bcst = isinstance(rm, Mem) and rm.bcst
    n = 1
    if isinstance(rm, Mem):
        n = TUPLE_TYPES[form.tuple_type](16 << ll, 8 if w else 4, bcst)
        if bcst and rm.size != (8 if w else 4):
            raise EncodeError(f"{form}: a broadcast element here is {8 if w else 4} bytes, got {rm.size}")
    body, rex_x, rex_b, disp_at = _modrm(reg_field, rm, n) if rm is not None else (b"", 0, 0, None)
    x_hi = 0  # EVEX.X: bit 4 of a vector register in ModRM.rm, else the index's bit 3
    if isinstance(rm, Reg) and rm.cls != "gpr": x_hi = rm.hi
    elif isinstance(rm, Mem) and rm.index is not None and rm.index.cls != "gpr": vvvv |= rm.index.hi << 4  # VSIB: V'
    r_bit, r_hi = (reg_field >> 3) & 1, reg_field >> 4
    p0 = ((r_bit ^ 1) << 7) | (((rex_x | x_hi) ^ 1) << 6) | ((rex_b ^ 1) << 5) | ((r_hi ^ 1) << 4) | mm
    p1 = (w << 7) | ((~vvvv & 15) << 3) | 4 | pp
    p2 = (z << 7) | (ll << 5) | (int(bcst) << 4) | (((vvvv >> 4) ^ 1) << 3) | aaa
    head = bytes([0x62, p0, p1, p2, form.opcode])
    if imm is not None: body += (imm.value & ((1 << (8 * form.imm_size)) - 1)).to_bytes(form.imm_size, "little")
    return head + body, None if disp_at is None else len(head) + disp_at


@functools.lru_cache(maxsize=1 << 16)
def _encode(mnemonic: str, ops: tuple[Operand, ...]) -> tuple[Form, bytes, int | None]:
    """Form, bytes and the position of a label's disp32 (None without one) of an instruction: kernels repeat
    instructions, so encodings are cached."""
    if any(isinstance(o, Label) for o in ops):
        raise EncodeError(f"{mnemonic}: a label is only allowed as a branch target or as Mem('rip', disp=label)")
    form = select_form(mnemonic, ops)
    if "gather" in mnemonic:
        dst, mem, mask = ops[0], ops[1], ops[2]
        assert isinstance(dst, Reg) and isinstance(mem, Mem) and mem.index is not None and isinstance(mask, Reg)
        if len({dst.num, mem.index.num, mask.num}) != 3:
            raise EncodeError(f"{mnemonic}: destination, index and mask must be three different registers "
                              "(the same register twice faults)")
    code, disp_at = encode_form(form, ops)
    label_disp = any(isinstance(o, Mem) and isinstance(o.disp, Label) for o in ops)
    return form, code, disp_at if label_disp else None


# ---------------------------------------------------------------------------------------------- text
def _mem_text(m: Mem, disp: int, sized: bool) -> str:
    parts = [m.base.name] if m.base is not None else []
    if m.index is not None: parts.append(m.index.name if m.scale == 1 else f"{m.index.name}*{m.scale}")
    if not parts: inner = fmt_int(disp & (2**64 - 1))  # absolute: capstone shows the sign-extended 64-bit address
    else: inner = " + ".join(parts) + ("" if disp == 0 else f" {'-' if disp < 0 else '+'} {fmt_int(abs(disp))}")
    return (f"{_PTR[m.size]} ptr [{inner}]") if sized else f"[{inner}]"


def _imm_text(form: Form, kind: str, imm: Imm) -> str:
    """Capstone prints an immediate as the unsigned operand-size value when it fills the operand or belongs to
    mov or a bitwise op, and as a signed number when the encoding sign-extends it to a wider operand."""
    bits = form.opsize * 8
    if kind in ("u8", "p5"): return fmt_int(imm.value)
    if form.text in _UNSIGNED_IMM or _IMM_WIDTH[kind] * 8 >= bits: return fmt_int(imm.value & ((1 << bits) - 1))
    return fmt_int(_sext(imm.value, _IMM_WIDTH[kind] * 8))


# ---------------------------------------------------------------------------------------------- assembler
@dataclass(slots=True)
class Instruction:
    """One emitted instruction. Branches (target set) get their bytes in assemble(); others at emit time."""
    mnemonic: str
    ops: tuple[Operand, ...]
    form: Form | None = None
    code: bytes = b""
    disp_at: int | None = None     # rip-relative disp32 to patch with a label's distance
    target: Label | None = None    # branch target
    long: bool = False             # branch uses rel32
    offset: int = 0

    def size(self) -> int:
        if self.target is None: return len(self.code)
        short, near = BRANCHES[self.mnemonic]
        return len(near) + 4 if self.long or short is None else len(short) + 1


@dataclass
class _Align:
    boundary: int
    offset: int = 0
    pad: int = 0


@dataclass
class Assembler:
    """Collects instructions and labels; assemble() lays them out and returns the machine code.

    Constants added with data() follow the code (aligned), reachable by Mem("rip", disp=label).
    """
    items: list[Instruction | Label | _Align] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)
    consts: list[tuple[Label, bytes, int]] = field(default_factory=list)
    _defined: set[str] = field(default_factory=set)
    _code: bytes | None = None

    def emit(self, mnemonic: str, *operands: Operand | str | int) -> Instruction:
        ops: tuple[Operand, ...] = (cast("tuple[Operand, ...]", operands) if all(type(o) in _OPERAND_TYPES for o in operands)
                                    else tuple(map(self._operand, operands)))
        mnemonic = _ALIASES.get(mnemonic, mnemonic)
        if mnemonic in _CMP_PSEUDO:
            mnemonic, pred = _CMP_PSEUDO[mnemonic]
            ops += (Imm(pred),)
        if mnemonic in BRANCHES and len(ops) == 1 and isinstance(ops[0], Label):
            inst = Instruction(mnemonic, ops, target=ops[0], long=BRANCHES[mnemonic][0] is None)
        else:
            inst = Instruction(mnemonic, ops, *_encode(mnemonic, ops))
        self.items.append(inst)
        self._code = None
        return inst

    def label(self, name: str | Label) -> Label:
        """Define a label at the current position."""
        lab = name if isinstance(name, Label) else Label(name)
        if lab.name in self._defined: raise EncodeError(f"label {lab.name!r} is defined twice")
        self._defined.add(lab.name)
        self.items.append(lab)
        return lab

    def data(self, name: str | Label, blob: bytes, align: int = 16) -> Label:
        """Place constant bytes after the code, aligned to align bytes; returns the label that addresses them."""
        lab = name if isinstance(name, Label) else Label(name)
        if lab.name in self._defined: raise EncodeError(f"label {lab.name!r} is defined twice")
        if align <= 0 or align & (align - 1): raise EncodeError(f"data alignment must be a power of two, got {align}")
        self._defined.add(lab.name)
        self.consts.append((lab, bytes(blob), align))
        return lab

    def align(self, boundary: int) -> None:
        """Pad with NOPs so the next instruction starts at a multiple of boundary (loop heads)."""
        if boundary <= 0 or boundary & (boundary - 1):
            raise EncodeError(f"alignment must be a power of two, got {boundary}")
        self.items.append(_Align(boundary))

    @staticmethod
    def _operand(o: Operand | str | int) -> Operand:
        if isinstance(o, (Reg, Mem, Imm, Label)): return o
        if isinstance(o, bool): raise EncodeError(f"operand {o!r}: a bool is not an x86 operand")
        if isinstance(o, int): return Imm(o)
        if isinstance(o, str): return REGS[o] if o in REGS else Label(o)
        raise EncodeError(f"operand {o!r} ({type(o).__name__}) is not a Reg, Mem, Imm, Label, register name or int")

    # ------------------------------------------------------------------ layout
    def _layout(self) -> int:
        """Offsets of every item and label for the current branch sizes; returns the end of the data section."""
        off = 0
        for it in self.items:
            if isinstance(it, Label): self.labels[it.name] = off
            elif isinstance(it, _Align):
                it.offset, it.pad = off, -off % it.boundary
                off += it.pad
            else:
                it.offset = off
                off += it.size()
        for lab, blob, align in self.consts:
            off += -off % align
            self.labels[lab.name] = off
            off += len(blob)
        return off

    def _target(self, lab: Label) -> int:
        if lab.name not in self._defined: raise EncodeError(f"label {lab.name!r} is used but never defined")
        return self.labels[lab.name]

    def assemble(self) -> bytes:
        """Machine code (entry at offset 0) followed by the constants; branches take rel8 where they reach."""
        if self._code is not None: return self._code
        changed = True
        while changed:
            self._layout()
            changed = False
            for it in self.items:
                if isinstance(it, Instruction) and it.target is not None and not it.long:
                    rel = self._target(it.target) - (it.offset + it.size())
                    if not -128 <= rel < 128: it.long, changed = True, True
        end = self._layout()
        out = bytearray()
        for it in self.items:
            if isinstance(it, _Align): out += b"".join(_NOPS[n][0] for n in self._nop_sizes(it.pad))
            elif isinstance(it, Instruction):
                assert len(out) == it.offset
                out += self._final_bytes(it)
        for lab, blob, _align in self.consts:  # the label's position already includes the alignment
            out += bytes(self.labels[lab.name] - len(out)) + blob
        assert len(out) == end
        self._code = bytes(out)
        return self._code

    @staticmethod
    def _nop_sizes(pad: int) -> list[int]:
        return [9] * (pad // 9) + ([pad % 9] if pad % 9 else [])

    def _final_bytes(self, it: Instruction) -> bytes:
        if it.target is not None:
            short, near = BRANCHES[it.mnemonic]
            rel = self._target(it.target) - (it.offset + it.size())
            if it.long or short is None: return near + rel.to_bytes(4, "little", signed=True)
            return short + rel.to_bytes(1, "little", signed=True)
        if it.disp_at is None: return it.code
        mem = next(o for o in it.ops if isinstance(o, Mem) and isinstance(o.disp, Label))
        assert isinstance(mem.disp, Label)
        rel = self._target(mem.disp) - (it.offset + len(it.code))
        return it.code[:it.disp_at] + rel.to_bytes(4, "little", signed=True) + it.code[it.disp_at + 4:]

    # ------------------------------------------------------------------ text
    def text(self, it: Instruction) -> str:
        """Capstone's Intel syntax for one instruction (after assemble(): label distances are known)."""
        if it.target is not None: return f"{it.mnemonic} {fmt_int(self._target(it.target))}"
        form = it.form
        assert form is not None
        mnemonic, ops, kinds = form.text, it.ops, form.kinds
        if form.mnemonic.startswith("vcmp"):  # the predicate becomes part of the mnemonic
            pred = ops[-1]
            assert isinstance(pred, Imm)
            if pred.value < len(CMP_PREDICATES):
                mnemonic, ops, kinds = f"vcmp{CMP_PREDICATES[pred.value]}{form.mnemonic[4:]}", ops[:-1], kinds[:-1]
        parts: list[str] = []
        for kind, role, op in zip(kinds, form.roles, ops):
            if role in "KZ":  # a write mask is printed after the operand it masks: "zmm1 {k1} {z}"
                parts[-1] += f" {{{op}}}" + (" {z}" if role == "Z" else "")
            elif isinstance(op, Reg): parts.append(op.name)
            elif isinstance(op, Imm): parts.append(_imm_text(form, kind, op))
            elif isinstance(op, Mem):
                disp = op.disp
                if isinstance(disp, Label): disp = self._target(disp) - (it.offset + len(it.code))
                parts.append(_mem_text(op, disp, kind != "m"))
                if op.bcst and form.evex is not None: parts[-1] += f"{{1to{(16 << form.evex[0]) // op.size}}}"
        return f"{mnemonic} {', '.join(parts)}".rstrip()

    def listing(self) -> list[tuple[int, bytes, str]]:
        """(offset, bytes, text) of every instruction, alignment NOPs included."""
        code = self.assemble()
        rows: list[tuple[int, bytes, str]] = []
        for it in self.items:
            if isinstance(it, _Align):
                off = it.offset
                for n in self._nop_sizes(it.pad):
                    rows.append((off, _NOPS[n][0], _NOPS[n][1]))
                    off += n
            elif isinstance(it, Instruction):
                rows.append((it.offset, code[it.offset:it.offset + it.size()], self.text(it)))
        return rows

    def asm_str(self, labels: bool = False) -> str:
        """One line per instruction in capstone's Intel syntax; labels=True adds 'name:' lines and the offsets."""
        if not labels: return "\n".join(t for _, _, t in self.listing())
        self.assemble()
        at: dict[int, list[str]] = {}
        for name, off in self.labels.items(): at.setdefault(off, []).append(name)
        lines: list[str] = []
        for off, blob, text in self.listing():
            lines += [f"{name}:" for name in at.pop(off, [])]
            lines.append(f"  {off:6x}:  {blob.hex(' '):32s} {text}")
        for off in sorted(at): lines += [f"{name}:  ; data at {off:#x}" for name in at[off]]
        return "\n".join(lines)
