"""Every opcode of every encoding, with random operands and modifiers, decoded and disassembled by us and by llvm-mc-19.

Instruction words are built from random raw fields; llvm-mc-19 disassembles them (one call per encoding) and every
word it accepts as exactly one valid instruction must decode to an Inst of the same size whose text equals
llvm-mc's. A coverage check makes sure every opcode in our tables was compared at least once.
"""
from __future__ import annotations

import random
import shutil
import struct

import pytest

from tg_mockgpu.rdna3.decode import FORMATS, VOP3SD_OPCODES, decode
from tg_mockgpu.rdna3.disasm import disasm
from tg_mockgpu.rdna3.gen_tables import llvm_mc
from tg_mockgpu.rdna3.tables import CONSTS, OPS

pytestmark = pytest.mark.skipif(shutil.which("llvm-mc-19") is None,
                                reason="llvm-mc-19 (Debian package llvm-19) is not installed")

PREFIX = {"SOP2": (0b10, 30), "SOP1": (0x17D, 23), "SOPK": (0xB, 28), "SOPC": (0x17E, 23), "SOPP": (0x17F, 23),
          "SMEM": (0x3D, 26), "VOP1": (0x3F, 25), "VOP2": (0, 31), "VOPC": (0x3E, 25), "VOP3": (0x35, 26),
          "VOP3SD": (0x35, 26),
          "VOP3P": (0xCC, 24), "VOPD": (0x32, 26), "DS": (0x36, 26), "FLAT": (0x37, 26), "MUBUF": (0x38, 26)}
SHORT = {"SOP2", "SOP1", "SOPK", "SOPC", "SOPP", "VOP1", "VOP2", "VOPC"}
SEG = {"FLAT": 0, "SCRATCH": 1, "GLOBAL": 2}
SRC9 = ("src0", "src1", "src2", "srcx0", "srcy0")


def encode(fmt: str, fields: dict[str, int], literal: int | None = None) -> bytes:
    """Pack raw fields into an instruction word by the decoder's bit ranges (llvm-mc is the independent check)."""
    value, shift = PREFIX[fmt]
    bits = value << shift
    for name, v in fields.items():
        hi, lo = FORMATS[fmt][name]
        assert 0 <= v < 1 << (hi - lo + 1), (fmt, name, v)
        bits |= v << lo
    out = struct.pack("<I" if fmt in SHORT else "<Q", bits)
    return out + (struct.pack("<I", literal) if literal is not None else b"")


def scalar_code(rng: random.Random, n: int) -> int:
    if n == 1:
        return rng.choice([rng.randrange(0, 104), 106, 107, 124, 125, 126, 127, rng.randrange(108, 124)])
    return rng.choice([rng.randrange(0, 100, 4), rng.randrange(0, 100, 4), 106, 126])


def src_code(rng: random.Random, n: int, wide: bool = True) -> int:
    pool = [rng.randrange(0, 100, 4), rng.randrange(128, 209), rng.randrange(240, 249), 255, 106, 124, 126]
    if wide:
        pool += [256 + rng.randrange(0, 240)] * 3
    if n == 1:
        pool += [125, 253, 107]
    return rng.choice(pool)


def random_case(enc: str, opcode: int, rng: random.Random, plain: bool, sgpr_srcs: bool = False) -> bytes:
    """One random instruction; `plain` keeps to registers and no modifiers (the form every opcode should accept),
    with SGPRs in src1/src2 if `sgpr_srcs` (carry-in, lane select and cndmask masks must be scalar)."""
    tmpl = OPS[enc][opcode][1]
    used = {t[0]: t for t in tmpl if isinstance(t, tuple)}
    fmt = "VOP3SD" if enc == "VOP3" and opcode in VOP3SD_OPCODES else "FLAT" if enc in SEG else enc
    f: dict[str, int] = {"op": opcode} if "op" in FORMATS[fmt] else {}
    # true16 LLVM accepts only v0-v127 in 16-bit VOP1/VOP2 forms, so plain cases stay low
    def vreg(n: int) -> int:
        return rng.randrange(0, 120) if plain else rng.randrange(0, 256 - 8)
    for name, t in used.items():
        n, kind = t[1], t[2]
        if name == "literal" or kind in ("hex", "u16", "dec", "fmt"):
            continue
        if kind == "v":
            f[name] = vreg(n)
        elif kind == "s":
            f[name] = scalar_code(rng, n) if not plain else rng.randrange(0, 104 - n, 4)
        elif plain:
            sgpr = fmt in ("SOP1", "SOP2", "SOPC") or (sgpr_srcs and name in ("src1", "src2"))
            f[name] = rng.randrange(0, 96, 4) if sgpr else 256 + vreg(n)
        else:
            f[name] = src_code(rng, n, fmt not in ("SOP1", "SOP2", "SOPC"))
    if fmt in ("SOPP", "SOPK"):
        f["simm16"] = 0 if plain else rng.choice([rng.randrange(0, 65), rng.randrange(0, 1 << 16)])
    if fmt == "SMEM":
        f["sbase"] = rng.randrange(0, 48, 2)
        f["soffset"] = 124 if plain else rng.choice([124, rng.randrange(0, 100), 125])
        f["offset"] = rng.choice([0, rng.randrange(0, 1 << 21), rng.randrange(0, 256)])
        f["glc"], f["dlc"] = (0, 0) if plain else (rng.randrange(2), rng.randrange(2))
    if fmt in ("VOP3", "VOP3SD") and not plain:
        f["neg"] = rng.randrange(8) if rng.random() < 0.5 else 0
        f["clamp"] = rng.randrange(2)
        f["omod"] = rng.randrange(4) if rng.random() < 0.3 else 0
        if fmt == "VOP3":
            f["abs"] = rng.randrange(8) if rng.random() < 0.5 else 0
            if any(v in ("f16", "i16") for v in CONSTS["VOP3"].get(opcode, {}).values()):
                f["opsel"] = rng.randrange(16)
        else:
            f["sdst"] = scalar_code(rng, 1)
    if fmt == "VOP3SD" and plain:
        f["sdst"] = rng.randrange(0, 100)
    if fmt == "VOP3P" and not plain:
        f["opsel"], f["opsel_hi"] = rng.randrange(8), rng.randrange(4)
        f["neg"], f["neg_hi"] = rng.randrange(8), rng.randrange(8)
        f["opsel_hi2"], f["clamp"] = rng.randrange(2), rng.randrange(2)
    if fmt == "VOP3P" and plain and not OPS[enc][opcode][0].startswith("v_fma_mix"):
        f["opsel_hi"], f["opsel_hi2"] = 3, 1          # the default LLVM leaves unprinted
    if fmt == "DS":
        f["offset0"], f["offset1"] = (0, 0) if plain else (rng.randrange(256), rng.randrange(256))
    if fmt == "FLAT":
        f["seg"] = SEG[enc]
        f["offset"] = 0 if plain else rng.randrange(1 << 13) if enc != "FLAT" else rng.randrange(1 << 12)
        f["glc"], f["slc"], f["dlc"] = (0, 0, 0) if plain else (rng.randrange(2), rng.randrange(2), rng.randrange(2))
        f["saddr"] = 124
        if enc == "GLOBAL" and not plain and rng.random() < 0.5:
            f["saddr"] = rng.randrange(0, 100, 2)
        if enc == "SCRATCH":
            f["sve"] = 1 if plain else rng.randrange(2)
            if not plain and rng.random() < 0.5:
                f["saddr"] = rng.randrange(0, 104)
    if fmt == "MUBUF":
        f["srsrc"] = rng.randrange(0, 24)
        f["soffset"] = rng.choice([128, rng.randrange(0, 100)])
        f["offen"], f["idxen"] = (0, 0) if plain else (rng.randrange(2), rng.randrange(2))
        f["vaddr"] = vreg(2)
        f["offset"] = 0 if plain else rng.randrange(1 << 12)
        f["glc"], f["slc"], f["dlc"] = (0, 0, 0) if plain else (rng.randrange(2), rng.randrange(2), rng.randrange(2))
    if fmt == "MUBUF" or fmt == "SMEM":
        f = {k: v for k, v in f.items() if k in FORMATS[fmt]}
    needs_literal = any(f.get(k) == 255 for k in SRC9 + ("ssrc0", "ssrc1")) or "literal" in used
    literal = rng.choice([rng.randrange(1 << 32), 0x3F000000 + rng.randrange(1 << 20)]) if needs_literal else None
    if fmt == "SMEM":
        f["sbase"] //= 2
    return encode(fmt, f, literal)


def vopd_case(opx: int, opy: int, rng: random.Random, plain: bool) -> bytes:
    # VOPD needs its halves' sources in different VGPR banks (number mod 4) and destinations of opposite parity
    f = {"opx": opx, "opy": opy, "srcx0": 256 + 4 * rng.randrange(60), "vsrcx1": 4 * rng.randrange(60) + 1,
         "srcy0": 256 + 4 * rng.randrange(60) + 2, "vsrcy1": 4 * rng.randrange(60) + 3, "vdstx": 2 * rng.randrange(120),
         "vdsty": rng.randrange(120)}
    if not plain:
        f["srcx0"] = rng.choice([f["srcx0"], rng.randrange(0, 100), rng.randrange(128, 209), 242, 255])
    for half, op in (("x", opx), ("y", opy)):
        if OPS["VOPDX" if half == "x" else "VOPDY"][op][0] == "v_dual_mov_b32":
            f[f"vsrc{half}1"] = 0                     # a one-source half leaves its second source field zero
    needs_literal = f["srcx0"] == 255 or opx in (1, 2) or opy in (1, 2)
    return encode("VOPD", f, rng.randrange(1 << 32) if needs_literal else None)


ENCODINGS = ["SOP2", "SOP1", "SOPK", "SOPC", "SOPP", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "DS", "FLAT",
             "GLOBAL", "SCRATCH", "MUBUF"]


def check(cases: list[tuple[tuple, bytes]], sentinel: str = "s_code_end") -> set:
    """Compare every case llvm-mc accepts; returns the keys compared."""
    texts = llvm_mc([c for _, c in cases], sentinel)
    seen, bad = set(), []
    for (key, code), text in zip(cases, texts):
        if text is None or "nvalid" in text:
            continue
        inst = decode(code)
        mine = disasm(inst, true16=False)   # llvm-mc-19's default syntax
        if inst.size != len(code) or mine != " ".join(text.split()):
            bad.append(f"{code.hex()}: llvm-mc {text!r}, ours {mine!r} (size {inst.size} of {len(code)})")
        seen.add(key)
    assert not bad, f"{len(bad)} mismatches:\n" + "\n".join(bad[:30])
    return seen


@pytest.mark.parametrize("enc", ENCODINGS)
def test_every_opcode_matches_llvm_mc(enc: str) -> None:
    rng = random.Random(f"rdna3-{enc}")
    cases = []
    for opcode in OPS[enc]:
        for k in range(6):
            cases.append(((enc, opcode), random_case(enc, opcode, rng, plain=k < 2, sgpr_srcs=k == 1)))
    seen = check(cases, "v_nop" if enc == "SOPP" else "s_code_end")
    missing = {(enc, op) for op in OPS[enc]} - seen
    assert not missing, f"llvm-mc accepted none of the cases of {sorted(missing)}"


def test_every_vopd_pair_matches_llvm_mc() -> None:
    rng = random.Random("rdna3-vopd")
    cases = [(("VOPD", x, y), vopd_case(x, y, rng, plain=k == 0))
             for x in OPS["VOPDX"] for y in OPS["VOPDY"] for k in range(2)]
    seen = check(cases)
    assert {k[1] for k in seen} == set(OPS["VOPDX"]) and {k[2] for k in seen} == set(OPS["VOPDY"])


def test_true16_halves_match_llvm_mc_real_true16(monkeypatch) -> None:
    """VOP1/VOP2/VOPC 16-bit operands name VGPR halves (bit 7 = high half): against llvm-mc-19 -mattr=+real-true16
    for the opcodes LLVM 19 already prints that way (its VOP3 true16 syntax differs from LLVM 22's, which the kernel
    tests cover)."""
    import tg_mockgpu.rdna3.gen_tables as gen
    from tg_mockgpu.rdna3.decode import t16_fields
    monkeypatch.setattr(gen, "LLVM_MC", gen.LLVM_MC + ["-mattr=+real-true16"])
    rng = random.Random("rdna3-true16")
    cases = []
    for enc in ("VOP1", "VOP2", "VOPC"):
        for opcode in OPS[enc]:
            if t16_fields(enc, opcode):
                cases += [(enc, random_case(enc, opcode, rng, plain=k < 2)) for k in range(4)]
    compared, bad = 0, []
    for (_enc, code), text in zip(cases, gen.llvm_mc([c for _, c in cases])):
        if text is None or "nvalid" in text or not any(h in text for h in (".l", ".h")):
            continue
        compared += 1
        if disasm(decode(code)) != " ".join(text.split()):
            bad.append(f"{code.hex()}: llvm-mc {text!r}, ours {disasm(decode(code))!r}")
    assert compared >= 40 and not bad, f"{compared} compared:\n" + "\n".join(bad[:20])


@pytest.mark.slow
def test_committed_tables_are_what_gen_tables_makes() -> None:
    """tables.py is data generated from llvm-mc-19; regenerating it must give the committed file."""
    import subprocess
    import sys
    from pathlib import Path

    import tg_mockgpu.rdna3 as pkg
    out = subprocess.run([sys.executable, "-m", "tg_mockgpu.rdna3.gen_tables"], capture_output=True, text=True,
                         check=True)
    assert out.stdout == (Path(pkg.__file__).parent / "tables.py").read_text()
