"""The Q6_K form of `quant_linear`'s sudot4 kernel (q4k.py has the Q4_K/Q5_K one and the `quant_linear` object).

Q6_K blocks are 210 bytes (ql[128], qh[64], int8 scales[16], d at the end), copied once padded to 212 so every
word load is aligned (53 words: ql 0..31, qh 32..47, scales 48..51, d in word 52). Element e = 128n + 32k + l of a
block is u - 32 with u = (ql[64n + 32(k%2) + l] >> 4(k//2)) & 15 | ((qh[32n + l] >> 2k) & 3) << 4, scaled by
scales[e // 16]. A group of 32 (j = 4n + k) is two 16-element sub-blocks with their own scales: for each half,
dot(u, q8) - 32 * sum(q8) (the per-16 sums q8_quantize gives) times its scale, then times d and the x scale."""
from __future__ import annotations

from tg_core.plugin_api import AxisType, Ops, UOp, dtypes
from tg_amd.kernels.wave import WAVE, intrinsic, wave_reduce

Q6_K, BLOCK, RAW_BYTES, PADDED_WORDS = 14, 256, 210, 53


def _u32(v: int) -> UOp:
    return UOp.const(dtypes.uint32, v)


def q6k_kernel(T: int, N: int, K: int):
    G, blocks = K // 32, K // BLOCK

    def fxn(out: UOp, words: UOp, q: UOp, xs: UOp, xsum: UOp) -> UOp:
        n, t = UOp.range(N, 0, AxisType.GLOBAL), UOp.range(T, 1, AxisType.GLOBAL)
        lane, it = UOp.range(WAVE, 2, AxisType.LOCAL), UOp.range((G + WAVE - 1) // WAVE, 3, AxisType.REDUCE)
        g = it * WAVE + lane
        ok = g < G
        b, j = g // 8, g % 8
        half, k = j // 4, j % 4
        base = (n * blocks + b) * PADDED_WORDS

        def word(at: UOp) -> UOp:
            return UOp(Ops.LOAD, dtypes.uint32, (words.index(at, ok),), "nontemporal")
        f32 = dtypes.float32
        d = (word(base + 52) & _u32(0xFFFF)).cast(dtypes.uint16).bitcast(dtypes.float16).cast(f32)
        lo_shift, hi_shift = (k // 2 * 4).cast(dtypes.uint32), (k * 2).cast(dtypes.uint32)
        row = (t * G + g) * 8
        total = UOp.const(f32, 0.0)
        for h in range(2):  # the two 16-element sub-blocks of the group
            dot = UOp.const(dtypes.int32, 0)
            for w in range(4 * h, 4 * h + 4):
                low = (word(base + half * 16 + k % 2 * 8 + w) >> lo_shift) & _u32(0x0F0F0F0F)
                high = ((word(base + 32 + half * 8 + w) >> hi_shift) & _u32(0x03030303)) << _u32(4)
                dot = intrinsic("sudot4", dtypes.int32, (low | high).bitcast(dtypes.int32), q.index(row + w, ok).load(), dot)
            s = j * 2 + h  # scale byte
            sc = ((word(base + 48 + s // 4) >> (s % 4 * 8).cast(dtypes.uint32)) & _u32(0xFF))
            scale = sc.cast(dtypes.uint8).bitcast(dtypes.int8).cast(f32)
            qsum = xsum.index((t * G + g) * 2 + h, ok).load()
            total = total + scale * (dot.cast(f32) - 32.0 * qsum)
        y = xs.index(t * G + g, ok).load() * d * total
        part = UOp(Ops.REDUCE, f32, (ok.where(y, UOp.const(f32, 0.0)), it), Ops.ADD)
        return out.index(t * N + n, lane < 1).store(wave_reduce(part, Ops.ADD)).end(n, t, lane).sink()
    return fxn
