"""The Q6_K form of `quant_linear`'s sudot4 kernel (q4k.py has the Q4_K/Q5_K one and the `quant_linear` object).

Q6_K blocks are 210 bytes (ql[128], qh[64], int8 scales[16], d at the end), copied once padded to 212 so every
word load is aligned (53 words: ql 0..31, qh 32..47, scales 48..51, d in word 52). Element e = 128n + 32k + l of a
block is u - 32 with u = (ql[64n + 32(k%2) + l] >> 4(k//2)) & 15 | ((qh[32n + l] >> 2k) & 3) << 4, scaled by
scales[e // 16]. A group of 32 (j = 4n + k) is two 16-element sub-blocks with their own scales: for each half,
dot(u, q8) - 32 * sum(q8) (the per-16 sums q8_quantize gives) times its scale, then times d and the x scale.
A WMMA strip (q6k_tile) is one such 16-element sub-block."""
from __future__ import annotations

from tg_core.plugin_api import UOp, dtypes
from tg_amd.kernels.groups import Group, f16_bits, group_matvec, u32
from tg_amd.kernels.wave import intrinsic
from tg_amd.kernels.wmma import Strip

Q6_K, BLOCK, RAW_BYTES, PADDED_WORDS = 14, 256, 210, 53


def q6k_kernel(T: int, N: int, K: int):
    def body(grp: Group, q: UOp, xs: UOp, xsum: UOp) -> UOp:
        j, base = grp.j, grp.base
        half, k = j // 4, j % 4
        f32 = dtypes.float32
        d = f16_bits(grp.word(base + 52) & u32(0xFFFF))
        lo_shift, hi_shift = (k // 2 * 4).cast(dtypes.uint32), (k * 2).cast(dtypes.uint32)
        total = UOp.const(f32, 0.0)
        for h in range(2):  # the two 16-element sub-blocks of the group
            dot = UOp.const(dtypes.int32, 0)
            for w in range(4 * h, 4 * h + 4):
                low = (grp.word(base + half * 16 + k % 2 * 8 + w) >> lo_shift) & u32(0x0F0F0F0F)
                high = ((grp.word(base + 32 + half * 8 + w) >> hi_shift) & u32(0x03030303)) << u32(4)
                dot = intrinsic("sudot4", dtypes.int32, (low | high).bitcast(dtypes.int32), grp.q8_word(q, w), dot)
            s = j * 2 + h  # scale byte
            sc = ((grp.word(base + 48 + s // 4) >> (s % 4 * 8).cast(dtypes.uint32)) & u32(0xFF))
            scale = sc.cast(dtypes.uint8).bitcast(dtypes.int8).cast(f32)
            qsum = grp.load(xsum, grp.index * 2 + h)
            total = total + scale * (dot.cast(f32) - 32.0 * qsum)
        return grp.load(xs, grp.index) * d * total
    return group_matvec(T, N, K, PADDED_WORDS, body)


def q6k_tile(s: Strip) -> list[UOp]:
    """Q6_K's 16 weights of a WMMA strip (elements 16 * step.. of the block, sub-block `step` with int8 scale byte
    `step`): (d * scale) * (u - 32) in float32, core's order."""
    f32 = dtypes.float32
    half, k, h16 = s.step // 8, (s.step // 2) % 4, s.step % 2
    d = f16_bits(s.word(s.base + 52) & u32(0xFFFF))
    sc = (s.word(s.base + 48 + s.step // 4) >> (s.step % 4 * 8).cast(dtypes.uint32)) & u32(0xFF)
    dl = d * sc.cast(dtypes.uint8).bitcast(dtypes.int8).cast(f32)
    lo_shift, hi_shift = (k // 2 * 4).cast(dtypes.uint32), (k * 2).cast(dtypes.uint32)
    out = []
    for w in range(4):  # elements 16 * h16 + 4w .. + 3 of the 32 with this (half, k): one ql and one qh word
        low = s.word(s.base + half * 16 + k % 2 * 8 + h16 * 4 + w) >> lo_shift
        high = s.word(s.base + 32 + half * 8 + h16 * 4 + w) >> hi_shift
        for c in range(4):
            u = ((low >> u32(8 * c)) & u32(15)) | (((high >> u32(8 * c)) & u32(3)) << u32(4))
            out.append(dl * (u.cast(dtypes.int32) - 32).cast(f32))
    return out
