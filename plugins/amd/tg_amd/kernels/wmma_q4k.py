"""`quant_linear` for Q4_K weights and 16 or more tokens on AMD: WMMA 16x16x16 tiles (f16 inputs, f32 accumulation),
the weight dequantized to f16 in registers from the GGUF bytes.

One wave per (16 tokens, 16 outputs) tile, stepping K by 16: lane l loads token row l % 16 of x (a gated 16-half
vector load: rows past T read zeros) and dequantizes output row l % 16's 16 weights (d*sc*q - dmin*mn in float32, in
core's order, then rounded to f16: the reference's fp16 weights), so lanes 16..31 repeat 0..15 as WMMA needs; the
8 accumulators live in registers across the K loop. Partial tiles (T or N not a multiple of 16) gate their loads and
stores. Reference: x_f16 @ W_f16.T in float32."""
from __future__ import annotations

from tg_core.plugin_api import AddrSpace, AxisType, Ops, UOp, dtypes
from tg_amd.kernels.groups import f16_bits, u32
from tg_amd.kernels.wave import WAVE, intrinsic

WORDS, TILE = 36, 16


def wmma_q4k_kernel(T: int, N: int, K: int):
    blocks = K // 256
    f32, f16 = dtypes.float32, dtypes.float16

    def fxn(out: UOp, words: UOp, x: UOp) -> UOp:
        nt, tt = UOp.range((N + TILE - 1) // TILE, 0, AxisType.GLOBAL), UOp.range((T + TILE - 1) // TILE, 1, AxisType.GLOBAL)
        lane, kb = UOp.range(WAVE, 2, AxisType.LOCAL), UOp.range(K // TILE, 3, AxisType.REDUCE)
        m = lane % 16
        tok, n = tt * TILE + m, nt * TILE + m
        ok_a, ok_b = tok < T, n < N
        a = UOp(Ops.LOAD, f16.vec(16), (x.index(tok * K + kb * TILE, ok_a),))
        k = kb * TILE
        b, j, e16 = k // 256, (k % 256) // 32, (k % 32) // 16
        i, h = j // 2, j % 2
        base = (n * blocks + b) * WORDS

        def word(at: UOp) -> UOp:
            return UOp(Ops.LOAD, dtypes.uint32, (words.index(at, ok_b),), "nontemporal")

        def scale_byte(s: UOp) -> UOp:
            return (word(base + 1 + s // 4) >> (s % 4 * 8).cast(dtypes.uint32)) & u32(0xFF)
        hdr = word(base)
        sa, sb, sc4 = scale_byte(j), scale_byte(j + 4), scale_byte(j % 4)
        low = j < 4
        sc = low.where(sa & u32(63), (sb & u32(15)) | ((sc4 >> u32(6)) << u32(4)))
        mn = low.where(sb & u32(63), (sb >> u32(4)) | ((sa >> u32(6)) << u32(4)))
        d, dm = f16_bits(hdr & u32(0xFFFF)) * sc.cast(f32), f16_bits(hdr >> u32(16)) * mn.cast(f32)
        halves = []
        for w in range(4):
            qw = word(base + 4 + i * 8 + e16 * 4 + w)
            for c in range(4):
                q = (qw >> ((h * 4).cast(dtypes.uint32) + u32(8 * c))) & u32(15)
                halves.append((d * q.cast(f32) - dm).cast(f16))
        bvec = UOp(Ops.VECTORIZE, f16.vec(16), tuple(halves))
        zero = UOp.const(dtypes.weakint, 0)
        reg = UOp(Ops.DEFINE_REG, f32.ptr(8, AddrSpace.REG), (), 0)
        init = UOp(Ops.GROUP, dtypes.void, tuple(reg.index(zero + r).store(UOp.const(f32, 0.0)) for r in range(8)))
        acc = reg.after(init, kb)
        c_in = UOp(Ops.VECTORIZE, f32.vec(8), tuple(acc.index(zero + r).load() for r in range(8)))
        dres = intrinsic("wmma_f32_16x16x16_f16", f32.vec(8), a, bvec, c_in)
        upd = UOp(Ops.GROUP, dtypes.void, tuple(acc.index(zero + r).store(UOp(Ops.GEP, f32, (dres,), (r,)))
                                                for r in range(8))).end(kb)
        done = reg.after(upd)
        stores = []
        for r in range(8):
            row = tt * TILE + 2 * r + lane // 16
            stores.append(out.index(row * N + n, (row < T) & ok_b).store(done.index(zero + r).load()))
        return UOp(Ops.GROUP, dtypes.void, tuple(stores)).end(nt, tt, lane).sink()
    return fxn
