"""`quant_linear` for Q4_K and Q5_K weights on AMD, and the `quant_linear` object for every type. Fewer than 16 tokens:
int8 dot products (sudot4) of the weight's nibbles with Q8 activations (q8.py), read from the GGUF bytes themselves,
never a float copy of the weight; 16 and more: WMMA tiles (wmma.py) with the weight dequantized to f16 in registers.

One wave per (token, output row); each lane takes every 32nd group of 32 inputs, which is one Q4_K sub-block j of
block b (8 sub-blocks of 32 per 256-block: d, dmin, the 12 bytes of 6-bit scales and mins, 128 bytes of nibbles,
sub-block 2i / 2i+1 the low / high nibbles of bytes 32i..32i+31). Per group: dot = sum over 8 words of
sudot4(nibbles, q8 words), y += x_scale * (d*sc*dot - dmin*mn*sum(q8)); a ds_swizzle butterfly adds the lanes.
Q5_K is the same with 32 bytes qh before the nibbles: bit j of qh[l] is the fifth bit of element l of sub-block j.
Reference: Q8(x) @ W.T, W the exact dequantization (x_f16 @ W_f16.T for WMMA)."""
from __future__ import annotations

from typing import Any

from tg_core.plugin_api import Tensor, UOp, dtypes
from tg_amd.kernels.groups import Group, f16_bits, group_matvec, u32
from tg_amd.kernels.iq4xs import IQ4_XS, iq4xs_kernel, iq4xs_tile
from tg_amd.kernels.iq4xs import WORDS as IQ4_WORDS
from tg_amd.kernels.q6k import PADDED_WORDS, Q6_K, RAW_BYTES, q6k_kernel, q6k_tile
from tg_amd.kernels.q8 import Q8Quantize
from tg_amd.kernels.wave import intrinsic
from tg_amd.kernels.wmma import Strip, TileDequant, wmma_linear

Q4_K, Q5_K, BLOCK = 12, 13, 256
# type -> (words per block, word of the first nibble byte, word of qh or None): header word 0, scales 1..3, then
# Q4_K nibbles 4..35; Q5_K qh 4..11 and nibbles 12..43
LAYOUT = {Q4_K: (36, 4, None), Q5_K: (44, 12, 4)}
MAX_TOKENS = 15  # 16 tokens and more: WMMA tiles (wmma.py)


def q4k_kernel(T: int, N: int, K: int, ggml_type: int = Q4_K):
    WORDS, QS, QH = LAYOUT[ggml_type]

    def body(grp: Group, q: UOp, xs: UOp, xsum: UOp) -> UOp:
        j, base = grp.j, grp.base
        i, h = j // 2, j % 2

        def scale_byte(k: UOp) -> UOp:  # byte k of the 12 scale bytes
            return (grp.word(base + 1 + k // 4) >> (k % 4 * 8).cast(dtypes.uint32)) & u32(0xFF)
        hdr = grp.word(base)
        d, dmin = f16_bits(hdr & u32(0xFFFF)), f16_bits(hdr >> u32(16))
        a, b4, c = scale_byte(j), scale_byte(j + 4), scale_byte(j % 4)
        low = j < 4
        sc = low.where(a & u32(63), (b4 & u32(15)) | ((c >> u32(6)) << u32(4)))
        mn = low.where(b4 & u32(63), (b4 >> u32(4)) | ((a >> u32(6)) << u32(4)))
        shift = (h * 4).cast(dtypes.uint32)
        dot = UOp.const(dtypes.int32, 0)
        for w in range(8):
            nib = (grp.word(base + QS + i * 8 + w) >> shift) & u32(0x0F0F0F0F)
            if QH is not None:  # the fifth bits of elements 4w..4w+3: bit j of each qh byte
                nib = nib | (((grp.word(base + QH + w) >> j.cast(dtypes.uint32)) & u32(0x01010101)) << u32(4))
            dot = intrinsic("sudot4", dtypes.int32, nib.bitcast(dtypes.int32), grp.q8_word(q, w), dot)
        qsum = grp.load(xsum, grp.index * 2) + grp.load(xsum, grp.index * 2 + 1)
        f32 = dtypes.float32
        return grp.load(xs, grp.index) * (d * sc.cast(f32) * dot.cast(f32) - dmin * mn.cast(f32) * qsum)
    return group_matvec(T, N, K, WORDS, body)


def k_quant_tile(ggml_type: int = Q4_K) -> TileDequant:
    """Q4_K's (Q5_K's) 16 weights of a WMMA strip: half h16 of sub-block j, d*sc*q - dmin*mn in float32 in core's
    order (tg_core/llm/dequant.py), q the nibble (with Q5_K's fifth bit from qh)."""
    _, QS, QH = LAYOUT[ggml_type]

    def tile(s: Strip) -> list[UOp]:
        j, h16 = s.step // 2, s.step % 2
        i, h = j // 2, j % 2
        f32 = dtypes.float32

        def scale_byte(k: UOp) -> UOp:
            return (s.word(s.base + 1 + k // 4) >> (k % 4 * 8).cast(dtypes.uint32)) & u32(0xFF)
        hdr = s.word(s.base)
        sa, sb, s4 = scale_byte(j), scale_byte(j + 4), scale_byte(j % 4)
        low = j < 4
        sc = low.where(sa & u32(63), (sb & u32(15)) | ((s4 >> u32(6)) << u32(4)))
        mn = low.where(sb & u32(63), (sb >> u32(4)) | ((sa >> u32(6)) << u32(4)))
        d, dm = f16_bits(hdr & u32(0xFFFF)) * sc.cast(f32), f16_bits(hdr >> u32(16)) * mn.cast(f32)
        shift, ju = (h * 4).cast(dtypes.uint32), j.cast(dtypes.uint32)
        out = []
        for w in range(4):  # elements 16*h16 + 4w .. + 3 of the sub-block: one word of nibble bytes
            qw = s.word(s.base + QS + i * 8 + h16 * 4 + w) >> shift
            hw = None if QH is None else s.word(s.base + QH + h16 * 4 + w) >> ju
            for c in range(4):
                q = (qw >> u32(8 * c)) & u32(15)
                if hw is not None:  # bit j of qh byte l is the fifth bit of element l of sub-block j
                    q = q | (((hw >> u32(8 * c)) & u32(1)) << u32(4))
                out.append(d * q.cast(f32) - dm)
        return out
    return tile


class Q4KLinear:
    """tg_core/kernels.py's `quant_linear(x, w, source)` for a Q4_K, Q5_K, Q6_K or IQ4_XS source and K a multiple of
    256: sudot4 kernels below 16 tokens, WMMA from 16."""
    name = "quant_linear"

    def __init__(self) -> None:
        self._words: dict[Any, Any] = {}  # raw bytes node -> their uint32 words (made once per weight)

    def supports(self, x: Any, w: Any, source: Any = None) -> bool:
        if source is None or source[1] not in (*LAYOUT, Q6_K, IQ4_XS) or w.ndim != 2 or \
                not all(isinstance(s, int) for s in x.shape):
            return False
        N, K = w.shape
        block_bytes = {Q6_K: RAW_BYTES, IQ4_XS: 136}.get(source[1]) or LAYOUT[source[1]][0] * 4
        return (isinstance(K, int) and K % BLOCK == 0 and x.shape[-1] == K
                and x.dtype in (dtypes.float32, dtypes.float16) and source[0].numel() == N * K // BLOCK * block_bytes)

    def words(self, raw: Any, ggml_type: int) -> Any:
        got = self._words.get(raw.uop)
        if got is None:
            if ggml_type == Q6_K:  # 210-byte blocks padded to 212: every word load aligned
                raw = raw.reshape(-1, RAW_BYTES).pad(((0, 0), (0, 2)))
            b = raw.reshape(-1, 4).cast(dtypes.uint32)
            got = (b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)).contiguous().realize()
            self._words[raw.uop] = got
        return got

    def build(self, x: Any, w: Any, source: Any) -> Any:
        N, K = w.shape
        T = x.numel() // K
        out = Tensor.zeros(T, N, device=x.device).contiguous()
        kind = source[1]
        if T > MAX_TOKENS:  # WMMA: x in f16, the weight dequantized to f16 in registers
            Tensor.custom_kernel(out, self.words(*source), x.reshape(T * K).cast(dtypes.float16).contiguous(),
                                 fxn=wmma_kernel(T, N, K, kind))
            return out.reshape(*x.shape[:-1], N)
        q, xs, xsum = Q8Quantize().build(x.reshape(T, K))
        kernel = q6k_kernel(T, N, K) if kind == Q6_K else iq4xs_kernel(T, N, K) if kind == IQ4_XS else \
            q4k_kernel(T, N, K, kind)
        Tensor.custom_kernel(out, self.words(*source), _words_of_int8(q), xs.reshape(-1), xsum.reshape(-1), fxn=kernel)
        return out.reshape(*x.shape[:-1], N)


def wmma_kernel(T: int, N: int, K: int, ggml_type: int):
    """The WMMA kernel of a type. IQ4_XS takes two output tiles per wave (the seed's larger output tile: a loaded
    activation strip serves 32 outputs) when N is a multiple of 32, else one, as the others always do."""
    if ggml_type == Q6_K:
        return wmma_linear(T, N, K, PADDED_WORDS, q6k_tile)
    if ggml_type == IQ4_XS:
        return wmma_linear(T, N, K, IQ4_WORDS, iq4xs_tile, 2 if N % 32 == 0 else 1)
    return wmma_linear(T, N, K, LAYOUT[ggml_type][0], k_quant_tile(ggml_type))


def _words_of_int8(q: Any) -> Any:
    """The int8 activations as int32 words of four (little-endian), as sudot4 takes them."""
    b = q.reshape(-1, 4).cast(dtypes.uint8).cast(dtypes.uint32)
    return (b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)).bitcast(dtypes.int32).contiguous()
