"""The IQ4_XS form of `quant_linear`'s sudot4 kernel (q4k.py holds the `quant_linear` object).

IQ4_XS blocks are 136 bytes (34 words): d and scales_h in word 0, scales_l in word 1, qs in words 2..33; sub-block j
(32 elements) has the 6-bit scale (nibble j of scales_l | bits 2j..2j+1 of scales_h << 4) - 32 and its 16 bytes at
words 2 + 4j..: low nibbles elements 0..15, high nibbles 16..31. A nibble indexes the 16 int8 kvalues; v_perm_b32
looks four of them up at once (two perms, for entries 0..7 and 8..15, and a byte mask by bit 3), then sudot4; a WMMA
strip (iq4xs_tile) looks its 16 kvalues up the same way, in registers (the seed stages a LUT in LDS instead)."""
from __future__ import annotations

import numpy as np

from tg_core.plugin_api import UOp, dtypes
from tg_amd.kernels.groups import Group, f16_bits, group_matvec, u32
from tg_amd.kernels.wave import intrinsic
from tg_amd.kernels.wmma import Strip

IQ4_XS, BLOCK, WORDS = 23, 256, 34
KVALUES = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
# the table as four int32 words of four int8 entries, lowest entry in the lowest byte
TABLE = [int(v) for v in np.array(KVALUES, np.int8).view(np.int32)]


def _i32(v: int) -> UOp:
    return UOp.const(dtypes.int32, v)


def lookup4(nibbles: UOp) -> UOp:
    """The kvalues of four nibbles (one per byte of a uint32) as four int8 in an int32."""
    sel = (nibbles & u32(0x07070707)).bitcast(dtypes.int32)
    lo = intrinsic("perm", dtypes.int32, _i32(TABLE[1]), _i32(TABLE[0]), sel)  # entries 0..7
    hi = intrinsic("perm", dtypes.int32, _i32(TABLE[3]), _i32(TABLE[2]), sel)  # entries 8..15
    mask = (((nibbles >> u32(3)) & u32(0x01010101)) * u32(0xFF)).bitcast(dtypes.int32)
    return (hi & mask) | (lo & (mask ^ _i32(-1)))


def _scale(hdr: UOp, scales_l: UOp, j: UOp) -> UOp:
    """d * (sub-block j's 6-bit scale - 32) in float32, core's order."""
    ju = j.cast(dtypes.uint32)
    low = (scales_l >> (ju * u32(4))) & u32(15)
    high = (hdr >> (u32(16) + ju * u32(2))) & u32(3)
    return f16_bits(hdr & u32(0xFFFF)) * ((low | (high << u32(4))).cast(dtypes.int32) - 32).cast(dtypes.float32)


def iq4xs_tile(s: Strip) -> list[UOp]:
    """IQ4_XS's 16 weights of a WMMA strip: the low (step even) or high (odd) nibbles of sub-block step // 2's 16
    bytes, each kvalue times d * scale."""
    j, h16 = s.step // 2, s.step % 2
    dl = _scale(s.word(s.base), s.word(s.base + 1), j)
    out = []
    for w in range(4):
        kv = lookup4((s.word(s.base + 2 + j * 4 + w) >> (h16 * 4).cast(dtypes.uint32)) & u32(0x0F0F0F0F))
        for c in range(4):  # byte c of the four int8 kvalues, sign-extended
            out.append(dl * (kv >> _i32(8 * c)).cast(dtypes.int8).cast(dtypes.float32))
    return out


def iq4xs_kernel(T: int, N: int, K: int):
    def body(grp: Group, q: UOp, xs: UOp, xsum: UOp) -> UOp:
        j, base = grp.j, grp.base
        f32 = dtypes.float32
        dl = _scale(grp.word(base), grp.word(base + 1), j)
        dot = _i32(0)
        for w in range(4):
            qs = grp.word(base + 2 + j * 4 + w)
            dot = intrinsic("sudot4", dtypes.int32, lookup4(qs & u32(0x0F0F0F0F)), grp.q8_word(q, w), dot)
            dot = intrinsic("sudot4", dtypes.int32, lookup4((qs >> u32(4)) & u32(0x0F0F0F0F)), grp.q8_word(q, 4 + w), dot)
        return grp.load(xs, grp.index) * dl * dot.cast(f32)
    return group_matvec(T, N, K, WORDS, body)
