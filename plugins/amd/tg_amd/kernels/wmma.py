"""The WMMA tile driver every `quant_linear` kernel for 16 or more tokens shares (Q4_K, Q5_K, Q6_K, IQ4_XS): x in f16,
the weight dequantized to f16 in registers from the GGUF words, v_wmma_f32_16x16x16_f16 with float32 accumulators.
A type gives only the dequantization of one lane's 16 weights (`TileDequant`); the launch shape, the K loop, the
token and output tiles, the gating of partial tiles and the stores are written once here.

One wave per (16 * out_tiles outputs, 16 * tok_tiles tokens), stepping K by 16. At each step lane l loads token row
l % 16 of each token tile (a gated 16-half vector load: rows past T read zeros) and dequantizes output row l % 16 of
each output tile (rows past N read zero words, so weight 0), so lanes 16..31 repeat lanes 0..15 as WMMA wants.
Every output tile's weights meet every token tile's activations: a weight strip is dequantized once per
16 * tok_tiles tokens (the dequantization, not the WMMA, is most of the work), an activation strip loaded once per
16 * out_tiles outputs. The out_tiles * tok_tiles * 8 accumulators live in registers across the K loop.
Reference: x_f16 @ W_f16.T in float32, W_f16 the exact dequantization rounded to f16."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tg_core.plugin_api import AddrSpace, AxisType, Ops, UOp, dtypes
from tg_amd.kernels.wave import WAVE, intrinsic

TILE, BLOCK = 16, 256
MAX_ACC_TILES = 8  # out_tiles * tok_tiles: 64 accumulator VGPRs, a quarter of a wave32 lane's 256


@dataclass(frozen=True)
class Strip:
    """One lane's 16 weights at one K step: elements 16 * step .. 16 * step + 15 of 256-block b of output row n.
    `base` is the block's first word; `ok` is false for a row past N (its loads read zeros)."""
    words: UOp
    ok: UOp
    base: UOp
    step: UOp  # 0..15: which 16 of the block's 256 elements

    def word(self, at: UOp) -> UOp:
        """Weight word `at` of the packed tensor, streamed (nontemporal: read once per token tile)."""
        return UOp(Ops.LOAD, dtypes.uint32, (self.words.index(at, self.ok),), "nontemporal")


# a lane's strip -> its 16 weights in float32, the exact dequantization (the driver rounds them to f16)
TileDequant = Callable[[Strip], list[UOp]]


def token_tiles(T: int, out_tiles: int) -> int:
    """Token tiles per wave: as many as the accumulator budget allows, spread evenly over the waves T needs (a wave
    of 9 tiles' worth of tokens would otherwise leave its neighbour 7 empty tiles)."""
    tiles, most = -(-T // TILE), MAX_ACC_TILES // out_tiles
    waves = -(-tiles // most)
    return -(-tiles // waves)


def wmma_linear(T: int, N: int, K: int, words_per_block: int, dequant: TileDequant,
                out_tiles: int = 1) -> Callable[..., UOp]:
    """A custom-kernel fxn(out, words, x) for out (T*N float32) = x (T*K f16) @ W.T, W's row n the dequantization
    of the words of blocks n * K/256 .. (n+1) * K/256 - 1 (`words_per_block` each)."""
    if K % BLOCK or out_tiles not in (1, 2):
        raise ValueError(f"wmma_linear needs K a multiple of {BLOCK} (got {K}) and 1 or 2 output tiles (got {out_tiles})")
    tok_tiles = token_tiles(T, out_tiles)
    out_w, tok_w, blocks = TILE * out_tiles, TILE * tok_tiles, K // BLOCK
    f32, f16 = dtypes.float32, dtypes.float16
    zero = UOp.const(dtypes.weakint, 0)

    def fxn(out: UOp, words: UOp, x: UOp) -> UOp:
        nt, tt = UOp.range(-(-N // out_w), 0, AxisType.GLOBAL), UOp.range(-(-T // tok_w), 1, AxisType.GLOBAL)
        lane, kb = UOp.range(WAVE, 2, AxisType.LOCAL), UOp.range(K // TILE, 3, AxisType.REDUCE)
        m = lane % TILE
        rows = [nt * out_w + o * TILE + m for o in range(out_tiles)]
        toks = [tt * tok_w + p * TILE + m for p in range(tok_tiles)]
        b, step = kb // (BLOCK // TILE), kb % (BLOCK // TILE)
        bvecs = []
        for n in rows:
            strip = Strip(words, n < N, (n * blocks + b) * words_per_block, step)
            bvecs.append(UOp(Ops.VECTORIZE, f16.vec(16), tuple(v.cast(f16) for v in dequant(strip))))
        avecs = [UOp(Ops.LOAD, f16.vec(16), (x.index(t * K + kb * TILE, t < T),)) for t in toks]
        nacc = 8 * out_tiles * tok_tiles
        reg = UOp(Ops.DEFINE_REG, f32.ptr(nacc, AddrSpace.REG), (), 0)
        init = UOp(Ops.GROUP, dtypes.void, tuple(reg.index(zero + r).store(UOp.const(f32, 0.0)) for r in range(nacc)))
        acc = reg.after(init, kb)
        updates = []
        for o, bvec in enumerate(bvecs):
            for p, avec in enumerate(avecs):
                at = (o * tok_tiles + p) * 8
                c_in = UOp(Ops.VECTORIZE, f32.vec(8), tuple(acc.index(zero + at + r).load() for r in range(8)))
                d = intrinsic("wmma_f32_16x16x16_f16", f32.vec(8), avec, bvec, c_in)
                updates += [acc.index(zero + at + r).store(UOp(Ops.GEP, f32, (d,), (r,))) for r in range(8)]
        done = reg.after(UOp(Ops.GROUP, dtypes.void, tuple(updates)).end(kb))
        stores = []
        for o, n in enumerate(rows):
            for p in range(tok_tiles):
                for r in range(8):  # accumulator r of lane l: token 2r + l // 16 of the tile, output l % 16
                    t = tt * tok_w + p * TILE + 2 * r + lane // TILE
                    v = done.index(zero + (o * tok_tiles + p) * 8 + r).load()
                    stores.append(out.index(t * N + n, (t < T) & (n < N)).store(v))
        return UOp(Ops.GROUP, dtypes.void, tuple(stores)).end(nt, tt, lane).sink()
    return fxn
