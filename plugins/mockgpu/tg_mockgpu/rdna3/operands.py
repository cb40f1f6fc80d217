"""RDNA3 operand codes: the 9-bit source code (and the 7/8-bit scalar codes, which are its first 128 values).

Numbers checked against llvm-mc-19 (tests/test_mockgpu_decode.py disassembles every code): gfx11 puts NULL at 124
and M0 at 125.
"""
from __future__ import annotations

# Inline float constants: code -> (f32 bits, f16 bits, f64 bits); 248 is 1/(2*pi).
INLINE_FLOATS: dict[int, tuple[int, int, int]] = {
    240: (0x3F000000, 0x3800, 0x3FE0000000000000), 241: (0xBF000000, 0xB800, 0xBFE0000000000000),
    242: (0x3F800000, 0x3C00, 0x3FF0000000000000), 243: (0xBF800000, 0xBC00, 0xBFF0000000000000),
    244: (0x40000000, 0x4000, 0x4000000000000000), 245: (0xC0000000, 0xC000, 0xC000000000000000),
    246: (0x40800000, 0x4400, 0x4010000000000000), 247: (0xC0800000, 0xC400, 0xC010000000000000),
    248: (0x3E22F983, 0x3118, 0x3FC45F306DC9C882),
}
INLINE_FLOAT_TEXT = {240: "0.5", 241: "-0.5", 242: "1.0", 243: "-1.0", 244: "2.0", 245: "-2.0", 246: "4.0", 247: "-4.0"}
SPECIAL = {106: "vcc_lo", 107: "vcc_hi", 124: "null", 125: "m0", 126: "exec_lo", 127: "exec_hi",
           235: "src_shared_base", 236: "src_shared_limit", 237: "src_private_base", 238: "src_private_limit",
           239: "src_pops_exiting_wave_id", 251: "vccz", 252: "execz", 253: "scc", 254: "lds_direct", 255: "literal",
           233: "dpp8", 234: "dpp8_fi", 250: "dpp16"}


def src_operand(code: int) -> tuple[str, int]:
    """Decode a source code into (kind, value).

    kind: "sgpr" (value = SGPR number), "ttmp" (trap temp number), "vgpr" (VGPR number), "inline_int" (the
    integer), "inline_float" (value = the code, 240..248; its bits depend on the operand width, see INLINE_FLOATS),
    "literal" (value 0: the instruction's literal), or a special register name from SPECIAL with value 0 (vcc_lo,
    vcc_hi, null, m0, exec_lo, exec_hi, vccz, execz, scc, src_shared_base, ..., lds_direct, dpp8, dpp16).
    """
    if not 0 <= code < 512:
        raise ValueError(f"operand code {code} out of range: source codes are 9-bit (0..511)")
    if code <= 105:
        return "sgpr", code
    if 108 <= code <= 123:
        return "ttmp", code - 108
    if code >= 256:
        return "vgpr", code - 256
    if 128 <= code <= 192:
        return "inline_int", code - 128
    if 193 <= code <= 208:
        return "inline_int", 192 - code
    if code in INLINE_FLOATS:
        return "inline_float", code
    if code in SPECIAL:
        return SPECIAL[code], 0
    raise ValueError(f"operand code {code} is reserved on gfx11 (allowed: 0-208, 233-248, 250-511)")


def inline_value(code: int, bits: int) -> int:
    """The bit pattern an inline constant stands for in an operand `bits` (16, 32 or 64) wide; integers sign-extend."""
    kind, value = src_operand(code)
    if kind == "inline_int":
        return value & ((1 << bits) - 1)
    if kind == "inline_float":
        return INLINE_FLOATS[code][{32: 0, 16: 1, 64: 2}[bits]]
    raise ValueError(f"operand code {code} ({kind}) is not an inline constant")

