"""The RDNA3 (SQTT layout 3) packet types: one table row per type, and the tables the scan is driven by.

A packet is a run of 4-bit nibbles (low nibble of each byte first); its type is fixed by a bit pattern in its
low bits (`PATTERN` bits wide), its length in nibbles by its type. Names, ids and lengths follow
../shared/reference/amd.md section 9 (rocprof's type ids); the field positions are tinygrad's reverse-engineered
ones (renderer/amd/sqtt.py). One departure from amd.md: TS_DELTA_S8_W3 is 16 nibbles (64 bits) in layout 3;
amd.md's 18 is its layout-4 (RDNA4) length, where the same pattern is a 72-bit packet.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PacketType:
    id: int                               # rocprof's type id (amd.md section 9)
    name: str
    pattern: int                          # the low `width` bits of the packet
    width: int
    nibbles: int                          # length
    fields: dict[str, tuple[int, int]]    # name -> (lowest bit, bit count), in bit order
    special: int = 0                      # how the delta becomes time: see SPECIAL_*


# how a packet's delta field adds to time
SPECIAL_NONE, SPECIAL_SHORT, SPECIAL_MARK = 0, 1, 2
# TS_DELTA_SHORT's 4-bit delta counts from 4; a TS_DELTA_OR_MARK with rt=1, pl=0 is a marker, not a delta


def _f(**spec: tuple[int, int]) -> dict[str, tuple[int, int]]:
    """Fields given as name=(hi, lo) bit ranges, inclusive, as the hardware documentation writes them."""
    return {name: (lo, hi - lo + 1) for name, (hi, lo) in spec.items()}


TYPES: tuple[PacketType, ...] = (
    PacketType(1, "VALUINST", 0b011, 3, 3, _f(delta=(5, 3), flag=(6, 6), wave=(11, 7))),
    PacketType(2, "VMEMEXEC", 0b1111, 4, 2, _f(delta=(5, 4), src=(7, 6))),
    PacketType(3, "ALUEXEC", 0b1110, 4, 2, _f(delta=(5, 4), src=(7, 6))),
    PacketType(4, "IMMEDIATE", 0b1101, 4, 3, _f(delta=(6, 4), wave=(11, 7))),
    PacketType(5, "IMMEDIATE_MASK", 0b00100, 5, 6, _f(delta=(7, 5), mask=(23, 8))),
    PacketType(6, "WAVERDY", 0b10100, 5, 6, _f(delta=(7, 5), mask=(23, 8))),
    PacketType(7, "TS_DELTA_S8_W3", 0b0100001, 7, 16, _f(delta=(10, 8))),
    PacketType(8, "WAVEEND", 0b10101, 5, 5, _f(delta=(7, 5), sa=(8, 8), simd=(10, 9), wgp=(13, 11), wave=(19, 15))),
    PacketType(9, "WAVESTART", 0b01100, 5, 8,
               _f(delta=(6, 5), sa=(7, 7), simd=(9, 8), wgp=(12, 10), wave=(17, 13), id=(31, 18))),
    PacketType(10, "TS_DELTA_S5_W2", 0b11100, 5, 12, _f(delta=(6, 5))),
    PacketType(11, "WAVEALLOC", 0b00101, 5, 5, _f(delta=(7, 5))),
    PacketType(12, "TS_DELTA_S5_W3", 0b00110, 5, 13, _f(delta=(7, 5))),
    PacketType(13, "PERF", 0b10110, 5, 7, _f(delta=(7, 5), arg=(27, 8))),
    PacketType(14, "UTILCTR", 0b0110001, 7, 12, _f(delta=(8, 7), ctr=(47, 9))),
    PacketType(15, "TS_DELTA_SHORT", 0b1000, 4, 2, _f(delta=(7, 4)), SPECIAL_SHORT),
    PacketType(16, "NOP", 0b0000, 4, 1, {}),
    PacketType(17, "TS_WAVE_STATE", 0b1010001, 7, 6, _f(delta=(15, 7), coarse=(23, 16))),
    PacketType(18, "EVENT", 0b01100001, 8, 6, _f(delta=(10, 8), event=(23, 11))),
    PacketType(19, "EVENT_BIG", 0b11100001, 8, 8, _f(delta=(10, 8), event=(31, 11))),
    PacketType(20, "REG", 0b1001, 4, 16, _f(delta=(6, 4), slot=(9, 7), hi_byte=(15, 8), subop=(31, 16),
                                            value=(63, 32))),
    PacketType(21, "SNAPSHOT", 0b1110001, 7, 16, _f(delta=(9, 7), snap=(63, 10))),
    PacketType(22, "TS_DELTA_OR_MARK", 0b0000001, 7, 12, _f(pl=(8, 8), rt=(9, 9), delta=(47, 12)), SPECIAL_MARK),
    PacketType(23, "LAYOUT_HEADER", 0b0010001, 7, 16,
               _f(layout=(12, 7), simd=(14, 13), group=(17, 15), sel_a=(31, 28), sel_b=(36, 33), flag4=(59, 59))),
    PacketType(24, "INST", 0b010, 3, 5, _f(flag1=(3, 3), delta=(6, 4), flag2=(7, 7), wave=(12, 8), op=(19, 13))),
)

BY_NAME: dict[str, PacketType] = {t.name: t for t in TYPES}
BY_ID: dict[int, PacketType] = {t.id: t for t in TYPES}
NOP = BY_NAME["NOP"]
# type id -> name ("" for the unused id 0)
KIND_NAMES: tuple[str, ...] = tuple(BY_ID[i].name if i in BY_ID else "" for i in range(max(BY_ID) + 1))
LAYOUT_RDNA3 = 3

# INST's op field (amd.md section 9); ops 0x50-0x66 are the memory classes issued on a SIMD that is not traced
INST_OPS: dict[int, str] = {
    0x0: "SALU", 0x1: "SMEM_RD", 0x3: "JUMP", 0x4: "JUMP_NO", 0x9: "MESSAGE", 0xB: "VALUT_4", 0xD: "VALUB_2",
    0xE: "VALUB_4", 0xF: "VALUB_16", 0x13: "BARRIER", 0x1C: "FLAT_RD_2", 0x1D: "FLAT_WR_3", 0x1E: "FLAT_WR_4",
    0x1F: "FLAT_WR_5", 0x20: "FLAT_WR_6", 0x21: "SGMEM_RD_1", 0x22: "SGMEM_RD_2", 0x24: "SGMEM_WR_2",
    0x25: "SGMEM_WR_3", 0x26: "SGMEM_WR_4", 0x27: "SGMEM_WR_5", 0x28: "SGMEM_WR_6", 0x29: "LDS_RD",
    0x2A: "LDS_WR_1", 0x2B: "LDS_WR_2", 0x2C: "LDS_WR_3", 0x2D: "LDS_WR_4", 0x2E: "LDS_WR_5",
    0x72: "SALU_WR_EXEC", 0x73: "VALU1_WR_EXEC",
}
OTHER_SIMD_OPS = range(0x50, 0x67)


def inst_op_name(op: int) -> str:
    if op in INST_OPS:
        return INST_OPS[op]
    return f"OTHER_SIMD_{op:#04x}" if op in OTHER_SIMD_OPS else f"UNKNOWN_{op:#04x}"


def _kind_of_key() -> np.ndarray:
    """The type of a packet from its low 8 bits: the most specific pattern that matches (NOP when none does)."""
    by_width = sorted(TYPES, key=lambda t: -t.width)
    out = np.empty(256, np.uint8)
    for key in range(256):
        match = [t for t in by_width if key & ((1 << t.width) - 1) == t.pattern]
        out[key] = (match[0] if match else NOP).id
    return out


def _per_kind(value: Callable[[PacketType], int], dtype: type) -> np.ndarray:
    """A table indexed by type id (id 0 is unused: a one-nibble NOP-like row, never produced by KIND_OF_KEY)."""
    return np.array([value(BY_ID[i]) if i in BY_ID else value(NOP) for i in range(len(KIND_NAMES))], dtype)


# the scan's tables (scan.py): indexed by the low byte of a packet, then by its type id
KIND_OF_KEY = _kind_of_key()
NIBBLES = _per_kind(lambda t: t.nibbles, np.uint8)
NIBBLES_OF_KEY = NIBBLES[KIND_OF_KEY]
DELTA_LO = _per_kind(lambda t: t.fields.get("delta", (0, 0))[0], np.uint8)
DELTA_MASK = _per_kind(lambda t: (1 << t.fields.get("delta", (0, 0))[1]) - 1, np.uint64)
SPECIAL = _per_kind(lambda t: t.special, np.uint8)
assert NIBBLES.min() >= 1 and NIBBLES.max() <= 16, "the scan keeps a packet in one 64-bit window"
