"""EVEX (AVX-512) encodings beyond the table sweep of test_x86_encode.py: the compressed displacement, the
choice between VEX and EVEX, write masks and broadcasts, and the errors for what EVEX cannot encode.
Every instruction is also decoded by capstone (text and length)."""
from __future__ import annotations

import pytest

from tg_cpu_x86.x86 import Assembler, EncodeError, Mem, reg

capstone = pytest.importorskip("capstone")


def _one(*args) -> tuple[bytes, str]:
    asm = Assembler()
    asm.emit(*args)
    code = asm.assemble()
    (_, blob, text), = asm.listing()
    dec, = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64).disasm(code, 0)
    assert (f"{dec.mnemonic} {dec.op_str}", dec.size) == (text, len(blob))
    return blob, text


@pytest.mark.parametrize("size, disp, bcst, tail", [
    (64, 64, False, "4801"),            # disp8*64: one unit
    (64, -8192, False, "4880"),         # -128 units, the lowest disp8
    (64, 8128, False, "487f"),          # 127 units
    (64, 8192, False, "8800200000"),    # 128 units: disp32
    (64, 32, False, "8820000000"),      # not a multiple of 64: disp32 even though 32 fits a plain disp8
    (4, 4, True, "4801"),               # a broadcast element counts in its own size
    (4, 508, True, "487f"),
    (4, 2, True, "8802000000"),
    (64, 0, False, "08"),               # no displacement at all
])
def test_compressed_displacement(size, disp, bcst, tail):
    blob, _ = _one("vaddps", reg("zmm1"), reg("zmm2"), Mem("rax", disp=disp, size=size, bcst=bcst))
    assert blob[5:].hex() == tail  # after 62 P0 P1 P2 opcode: ModRM (+ disp)


def test_vex_for_low_registers_evex_otherwise():
    assert _one("vaddps", reg("ymm1"), reg("ymm2"), reg("ymm3"))[0][0] == 0xC5  # VEX where VEX can
    assert _one("vaddps", reg("ymm1"), reg("ymm2"), reg("ymm17"))[0][0] == 0x62  # register 17: EVEX
    assert _one("vaddps", reg("zmm1"), reg("zmm2"), reg("zmm3"))[0][0] == 0x62  # 512 bits: EVEX only
    assert _one("vmovups", reg("xmm31"), Mem("rsp", disp=16, size=16)) == \
        (bytes.fromhex("62617c08107c2401"), "vmovups xmm31, xmmword ptr [rsp + 0x10]")


def test_masks_and_broadcasts_print_as_capstone():
    assert _one("vmovups{z}", reg("zmm0"), reg("k1"), Mem("rax", size=64))[1] == \
        "vmovups zmm0 {k1} {z}, zmmword ptr [rax]"
    assert _one("vmovups", Mem("rdi", disp=64, size=64), reg("k7"), reg("zmm30"))[1] == \
        "vmovups zmmword ptr [rdi + 0x40] {k7}, zmm30"
    assert _one("vblendmps", reg("zmm1"), reg("k2"), reg("zmm2"), reg("zmm3"))[1] == "vblendmps zmm1 {k2}, zmm2, zmm3"
    assert _one("vcmpltps", reg("k1"), reg("zmm2"), reg("zmm3"))[1] == "vcmpltps k1, zmm2, zmm3"
    assert _one("vfmadd231ps", reg("zmm0"), reg("zmm1"), Mem("rsi", disp=-4, size=4, bcst=True))[1] == \
        "vfmadd231ps zmm0, zmm1, dword ptr [rsi - 4]{1to16}"
    assert _one("kmovw", reg("k3"), reg("eax"))[1] == "kmovw k3, eax"


@pytest.mark.parametrize("args, message", [
    (("vmovups", "zmm0", "k0", Mem("rax", size=64)), "does not take"),  # k0 as a write mask means no mask
    (("vcmpps", "k1", "zmm0", "zmm1", 32), "does not take"),  # an EVEX predicate has 5 bits
    (("vblendvps", "xmm16", "xmm1", "xmm2", "xmm3"), "registers 16-31 need an EVEX form"),
    (("vaddps", "zmm0", "zmm1", Mem("rax", size=8, bcst=True)), "does not take"),  # a float32 lane is 4 bytes
    (("vaddps", "ymm0", "ymm1", "zmm2"), "does not take"),
])
def test_what_evex_cannot_encode(args, message):
    with pytest.raises(EncodeError, match=message):
        Assembler().emit(*args)


def test_bad_broadcast_memory():
    with pytest.raises(ValueError, match="broadcast memory operand reads one 4- or 8-byte element"):
        Mem("rax", size=64, bcst=True)
