"""The x86-64 encoder checked against an independent disassembler (capstone, Intel syntax).

Cases are generated from the form tables: every form with every register class and size (r8-r15,
spl..dil, xmm8-15, ymm), every addressing mode, and immediates at the edges of each width. Each
instruction's bytes are decoded by capstone and must give asm_str's text and the same length.
"""
from __future__ import annotations

import itertools
import struct

import pytest

from tg_cpu_x86.x86 import FORMS, REGS, Assembler, EncodeError, Imm, Label, Mem, reg
from tg_cpu_x86.x86.encode import _imm_fits, canonical_mnemonic
from tg_cpu_x86.x86.forms import Form

capstone = pytest.importorskip("capstone")

GPRS = {1: ["al", "cl", "dl", "bl", "spl", "bpl", "sil", "dil", "r8b", "r11b", "r12b", "r13b", "r15b"],
        2: ["ax", "cx", "sp", "bp", "si", "di", "r8w", "r12w", "r13w", "r15w"],
        4: ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi", "r8d", "r9d", "r12d", "r13d", "r15d"],
        8: ["rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r12", "r13", "r14", "r15"]}
VECS = [0, 1, 5, 7, 8, 9, 12, 13, 15]
# every addressing form: plain base, rsp/r12 (need SIB), rbp/r13 (need disp8 0), disp8/disp32 edges,
# index*scale with and without base, absolute, rip-relative (number or label)
ADDRESSES: list[dict] = [
    dict(base="rax"), dict(base="rsp"), dict(base="r12"), dict(base="rbp"), dict(base="r13"), dict(base="r15", disp=8),
    dict(base="rbp", disp=-8), dict(base="rsp", disp=127), dict(base="r12", disp=-128), dict(base="rbx", disp=128),
    dict(base="r13", disp=-129), dict(base="r11", disp=-0x12345), dict(base="rdi", disp=2**31 - 1),
    dict(base="rax", index="rbx"), dict(base="r8", index="r9", scale=2, disp=4),
    dict(base="rsp", index="r12", scale=8, disp=-1000), dict(base="rbp", index="r13", scale=4),
    dict(base="r13", index="rbp"), dict(base="r12", index="rax", scale=8, disp=0x40),
    dict(base=None, index="rcx", scale=4, disp=16), dict(base=None, index="r14", scale=8, disp=-16),
    dict(base=None, disp=0x1234), dict(base=None, disp=-16),
    dict(base="rip", disp=0x100), dict(base="rip", disp=-4), dict(base="rip", disp=Label("pool")),
]


# EVEX rows also reach registers 16-31 (bit 4 in EVEX.R'/X/V')
EVEX_VECS = [0, 1, 7, 8, 15, 16, 17, 23, 24, 31]


def _regs(kind: str, form: Form | None = None) -> list[str]:
    if kind[0] == "r" and kind.lstrip("rm").isdigit(): return GPRS[int(kind.lstrip("rm")) // 8]
    if kind == "cl": return ["cl"]
    if kind == "wk": return [f"k{n}" for n in range(1, 8)]
    if kind[0] == "k": return [f"k{n}" for n in range(8)]
    if kind[0] in "xyz": return [f"{kind[0]}mm{n}" for n in (EVEX_VECS if form is not None and form.evex else VECS)]
    return []


# gather addresses: base (none, rsp, rbp/r13 needing disp8) plus vector index lanes, xmm8-15 included
VSIB: list[dict] = [
    dict(base="rax", index=1, scale=4), dict(base="rsp", index=9, scale=8, disp=-8), dict(base="r13", index=15),
    dict(base=None, index=3, scale=2, disp=0x40), dict(base="rbp", index=12, scale=4, disp=0x1000),
    dict(base="r12", index=6, scale=1, disp=127),
]


# EVEX compressed displacements (disp8*N) at their edges for N up to 64: multiples inside and outside the
# scaled range, and displacements that are no multiple of N (those take disp32)
EVEX_ADDRESSES: list[dict] = [dict(base="rax", disp=d) for d in (4, 8, 16, 32, 64, 6, 60, 127 * 64, 128 * 64,
                                                                 -128 * 64, -129 * 64, -64, -4, 508, 512, -512)]


def _mems(kind: str, form: Form | None = None) -> list[Mem]:
    if kind[0] == "v":
        cls = "xmm" if kind[1] == "x" else "ymm"
        return [Mem(**{**a, "index": f"{cls}{a['index']}"}, size=int(kind[2:]) // 8) for a in VSIB]
    if kind == "m": return [Mem(**a) for a in ADDRESSES]
    body = kind.lstrip("rxyzk")
    if not body.startswith("m") or kind in ("m",) or not body[1:2].isdigit(): return []
    bits, _, bcst = body[1:].partition("b")
    addrs = ADDRESSES + (EVEX_ADDRESSES if form is not None and form.evex else [])
    out = [Mem(**a, size=int(bits) // 8) for a in addrs]
    if bcst: out += [Mem(**a, size=int(bcst) // 8, bcst=True) for a in addrs]  # {1toN}: one element per lane
    return out


def _imms(kind: str, form: Form) -> list[Imm]:
    width = {"i8": 1, "u8": 1, "p5": 1, "i16": 2, "i32": 4, "i64": 8}[kind]
    bits, w = form.opsize * 8, width * 8
    cands = [0, 1, 9, 10, -1, -9, -10, 0x7f, -0x80, 2**(w - 1) - 1, -2**(w - 1), 2**w - 1, 2**(w - 1),
             0x123456789abcdef0, 2**bits - 1, 2**(bits - 1), 0x12345678, 0x80, 0xff, 255, 31, 32]
    if kind == "u8": cands = [0, 1, 2, 9, 10, 31, 32, 0x7f, 0x80, 0xfe, 0xff]
    if kind == "p5": cands = list(range(32))
    out = []
    for v in dict.fromkeys(cands):
        imm = Imm(v, width)  # the width is forced so that the wider forms are exercised too
        if _imm_fits(kind, imm, form.opsize): out.append(imm)
    return out


def _samples(form: Form) -> list[list]:
    return [[reg(r) for r in _regs(k, form)] + _mems(k, form) if k[0] not in "iup" else _imms(k, form)
            for k in form.kinds]


def _cases(form: Form) -> list[tuple]:
    """Operand tuples for a form: every sample of every operand appears, rotated against the other operands."""
    samples = _samples(form)
    if not samples: return [()]
    n = max(len(s) for s in samples)
    cases = [tuple(s[(j + 5 * pos) % len(s)] for pos, s in enumerate(samples)) for j in range(n)]
    if "gather" in form.mnemonic:  # a gather's destination, index and mask must differ
        cases = [c for c in cases if len({c[0].num, c[1].index.num, c[2].num}) == 3]
    return cases


def _disasm_check(asm: Assembler) -> list[str]:
    """Decode each listed instruction on its own; return the disagreements."""
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    code, bad = asm.assemble(), []
    for off, blob, text in asm.listing():
        assert code[off:off + len(blob)] == blob
        dec = list(md.disasm(code[off:off + 16], off, count=1))
        got = f"{dec[0].mnemonic} {dec[0].op_str}".strip() if dec else "<undecodable>"
        if " ".join(got.split()) != " ".join(text.split()) or not dec or dec[0].size != len(blob):
            size = dec[0].size if dec else 0
            bad.append(f"{off:#x} {blob.hex()}: ours {text!r} ({len(blob)} bytes), capstone {got!r} ({size} bytes)")
    return bad


def test_every_form_matches_capstone():
    asm, used, n = Assembler(), set(), 0
    for mnemonic, forms in FORMS.items():
        for form in forms:
            for ops in _cases(form):
                inst = asm.emit(mnemonic, *ops)
                used.add(id(inst.form))
                n += 1
    asm.data("pool", bytes(range(64)), 32)
    bad = _disasm_check(asm)
    assert not bad, f"{len(bad)} of {n} instructions disagree with capstone:\n" + "\n".join(bad[:40])
    # every row is reached by some operands (wider immediates are forced with Imm.size, reversed-direction
    # opcodes through memory operands): a row nothing selects would be dead and untested
    unused = [str(f) for fs in FORMS.values() for f in fs if id(f) not in used]
    assert not unused, f"forms never selected: {unused}"
    assert n > 3000


def test_pseudo_ops_and_aliases():
    asm = Assembler()
    asm.emit("vcmpltps", "ymm1", "ymm2", "ymm3")
    asm.emit("vcmpps", "xmm1", "xmm2", Mem("rax", size=16), Imm(14))
    asm.emit("vcmpneq_oqss", "xmm9", "xmm10", "xmm11")
    asm.emit("cmovz", "eax", "ecx"); asm.emit("setnz", "r10b"); asm.emit("cmovnae", "r9", Mem("rsp", size=8))
    asm.emit("mov", "rax", -2**63)  # needs movabs
    asm.emit("mov", "rax", 0xffffffff)  # does not fit a sign-extended imm32: movabs
    asm.emit("mov", "rax", -5)  # sign-extended imm32 (C7)
    asm.emit("add", "rax", 0x7fffffff); asm.emit("and", "ecx", 0xfffffff0); asm.emit("imul", "r11", "r12", 1000)
    assert not _disasm_check(asm)
    texts = [t for _, _, t in asm.listing()]
    assert texts[0] == "vcmpltps ymm1, ymm2, ymm3" and texts[1] == "vcmpgtps xmm1, xmm2, xmmword ptr [rax]"
    assert texts[3:6] == ["cmove eax, ecx", "setne r10b", "cmovb r9, qword ptr [rsp]"]
    assert texts[6].startswith("movabs") and texts[7].startswith("movabs") and texts[8] == "mov rax, 0xfffffffffffffffb"
    assert canonical_mnemonic("jnle") == "jg"


def test_shortest_forms_chosen():
    asm = Assembler()
    cases = [(("add", "eax", 5), 3), (("add", "rax", 200), 7), (("mov", "ecx", 7), 5), (("mov", "r9", 7), 7),
             (("mov", Mem("rsp", size=8), "rax"), 4), (("mov", "eax", Mem("rbp", size=4)), 3),
             (("mov", "eax", Mem("r13", size=4)), 4), (("vaddps", "ymm0", "ymm1", "ymm2"), 4),
             (("vaddps", "ymm0", "ymm1", "ymm8"), 5), (("vaddps", "ymm8", "ymm9", "ymm2"), 4)]
    for args, size in cases:
        inst = asm.emit(*args)
        assert len(inst.code) == size, (args, inst.code.hex())
    assert not _disasm_check(asm)


def _branch_program(gap: int, forward: bool, mnemonic: str = "jmp") -> Assembler:
    """A branch over (or back across) `gap` bytes of 1-byte NOPs."""
    asm = Assembler()
    if forward:
        asm.emit(mnemonic, Label("t"))
        for _ in range(gap): asm.emit("nop")
        asm.label("t")
    else:
        asm.label("t")
        for _ in range(gap): asm.emit("nop")
        asm.emit(mnemonic, Label("t"))
    asm.emit("ret")
    return asm


@pytest.mark.parametrize("mnemonic", ["jmp", "jne", "jl"])
def test_branches_cross_rel8_boundary(mnemonic):
    for gap in range(120, 136):
        for forward in (True, False):
            asm = _branch_program(gap, forward, mnemonic)
            code = asm.assemble()
            assert not _disasm_check(asm)
            off = 0 if forward else gap
            rel = (gap if forward else -gap - 2)  # distance if the branch were 2 bytes long
            short = -128 <= rel < 128
            branch = asm.listing()[0 if forward else gap]
            assert len(branch[1]) == (2 if short else (5 if mnemonic == "jmp" else 6)), (gap, forward)
            assert code[off] == branch[1][0]
            target = gap + len(branch[1]) if forward else 0
            assert branch[2] == f"{mnemonic} {target:#x}" if target > 9 else f"{mnemonic} {target}"


def test_branch_relaxation_reaches_fixed_point():
    # each jump spans the next one's body: lengthening one pushes its neighbour's target out of rel8 range
    asm = Assembler()
    for k in range(6): asm.emit("jmp", Label(f"l{k}"))
    for k in range(6):
        for _ in range(121): asm.emit("nop")
        asm.label(f"l{k}")
    asm.emit("call", Label("l0")); asm.emit("ret")
    assert not _disasm_check(asm)
    code = asm.assemble()
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    # 121 nops plus the other jumps put every label out of rel8 reach
    assert [len(i[1]) for i in asm.listing()[:6]] == [5] * 6
    targets = [asm.labels[f"l{k}"] for k in range(6)]
    decoded = [int(i.op_str, 0) for i in itertools.islice(md.disasm(code, 0), 6)]
    assert decoded == targets


def test_alignment_and_data():
    asm = Assembler()
    asm.emit("vbroadcastss", "ymm0", Mem("rip", disp=Label("one"), size=4))
    for boundary in (16, 32, 64):
        asm.align(boundary)
        asm.label(f"a{boundary}")
        asm.emit("nop")
    asm.emit("ret")
    one = asm.data("one", struct.pack("<f", 1.0), 64)
    code = asm.assemble()
    assert not _disasm_check(asm)
    for boundary in (16, 32, 64): assert asm.labels[f"a{boundary}"] % boundary == 0
    assert asm.labels[one.name] % 64 == 0 and code[asm.labels[one.name]:][:4] == struct.pack("<f", 1.0)


@pytest.mark.parametrize("args, message", [
    (("mov", Mem("rax", size=8), Mem("rbx", size=8)), "does not take"),
    (("add", "eax", 2**32), "does not take"),
    (("add", "al", 256), "does not take"),
    (("shl", "eax", 256), "does not take"),
    (("mov", "eax", "xmm0"), "does not take"),
    (("vaddps", "ymm0", "xmm1", "ymm2"), "does not take"),
    (("add", "eax", Mem("rax")), "need their size"),
    (("frobnicate", "eax"), "unknown instruction"),
    (("add", "eax", Label("x")), "label is only allowed"),
    (("add", "eax", 1.5), "is not a Reg"),
    (("vgatherdps", "xmm1", Mem("rax", index="xmm1", scale=4, size=16), "xmm2"), "three different registers"),
    (("vmovups", "xmm1", Mem("rax", index="xmm3", size=16)), "does not take"),
    (("vgatherdps", "xmm1", Mem("rax", index="rcx", size=16), "xmm2"), "does not take"),
])
def test_bad_operands(args, message):
    with pytest.raises(EncodeError, match=message): Assembler().emit(*args)


@pytest.mark.parametrize("kwargs, message", [
    (dict(base="eax"), "64-bit register"), (dict(base="rax", index="rsp"), "rsp cannot"),
    (dict(base="rax", scale=3), "scale"), (dict(base="rax", disp=2**31), "signed 32-bit"),
    (dict(base="rip", index="rax"), "rip-relative"), (dict(base="rax", disp=Label("x")), "base rip"),
    (dict(base="rax", size=3), "access size"),
])
def test_bad_memory(kwargs, message):
    with pytest.raises(ValueError, match=message): Mem(**kwargs)


def test_bad_labels():
    asm = Assembler()
    asm.emit("jmp", Label("nowhere"))
    with pytest.raises(EncodeError, match="never defined"): asm.assemble()
    asm.label("x")
    with pytest.raises(EncodeError, match="defined twice"): asm.label("x")
    with pytest.raises(ValueError, match="unknown x86-64 register"): reg("ah")
    assert "ah" not in REGS


def test_asm_str_with_labels():
    asm = Assembler()
    asm.label("loop")
    asm.emit("add", "rax", 1)
    asm.emit("cmp", "rax", "rcx")
    asm.emit("jl", Label("loop"))
    asm.emit("vmovss", "xmm0", Mem("rip", disp=Label("one"), size=4))
    asm.emit("ret")
    asm.data("one", struct.pack("<f", 1.0), 4)
    plain = asm.asm_str().splitlines()
    assert plain == ["add rax, 1", "cmp rax, rcx", "jl 0", "vmovss xmm0, dword ptr [rip + 3]", "ret"]
    lines = asm.asm_str(labels=True).splitlines()
    assert lines[0] == "loop:" and lines[1].split()[0] == "0:" and lines[1].endswith("add rax, 1")
    assert lines[-1].startswith("one:") and f"{asm.labels['one']:#x}" in lines[-1]
    assert [ln.split("  ")[-1].strip() for ln in lines[1:-1]] == plain
