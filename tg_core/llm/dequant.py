"""ggml's tensor types as lazy Tensor expressions over their raw bytes.

Each block type is a function from its blocks, a (n_blocks, block_bytes) uint8 tensor, to a (n_blocks,
block_elems) float32 tensor. The expressions follow gguf-py's `dequantize_blocks` operation for operation
(the same products in the same order, in float32), so the values are bit-exact with `gguf.quants.dequantize`.
They are plain elementwise math and views over the bytes, so the scheduler fuses them into the kernel that
reads the weight (a matmul reads the packed bytes; no float copy of the weight exists). Small value tables
(IQ4_NL, MXFP4) are constants packed into 64-bit words and selected by shifts.
"""
from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import TYPE_CHECKING

import numpy as np

from tg_core.dtype import dtypes

if TYPE_CHECKING:
    from tg_core.tensor import Tensor


class GGMLType(IntEnum):
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39


KVALUES_IQ4NL = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
KVALUES_MXFP4 = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)  # E2M1 doubled (ggml's convention)


# ---- building blocks ------------------------------------------------------------------------------------

def _f16(b: Tensor, off: int) -> Tensor:
    """The little-endian float16 at byte `off` of each block, as float32 of shape (n, 1)."""
    u = b[:, off:off + 1].cast(dtypes.uint16) | (b[:, off + 1:off + 2].cast(dtypes.uint16) << 8)
    return u.bitcast(dtypes.float16).float()


def _shifts(b: Tensor, amounts: tuple[int, ...], shape: tuple[int, ...]) -> Tensor:
    """The shift amounts as a tensor of `shape` (one axis of len(amounts)): index math, not a buffer."""
    from tg_core.tensor import Tensor
    step = amounts[1] - amounts[0] if len(amounts) > 1 else 0
    assert all(a == amounts[0] + i * step for i, a in enumerate(amounts)), "shift amounts are an arithmetic series"
    return (Tensor.arange(len(amounts), dtype=b.dtype, device=b.device) * step + amounts[0]).reshape(shape)


def _split(b: Tensor, view: tuple[int, ...], amounts: tuple[int, ...], axis_shape: tuple[int, ...], mask: int) -> Tensor:
    """`(b.reshape(view) >> amounts) & mask`, the amounts broadcast along the axis of `axis_shape` of size
    len(amounts): gguf-py's unpacking of several fields from each byte."""
    return (b.reshape(view) >> _shifts(b, amounts, axis_shape)) & mask


def _lookup(q: Tensor, table: tuple[int, ...]) -> Tensor:
    """table[q] for q in [0, 16) as float32, the 16 int8 entries packed into two 64-bit words: elementwise
    shifts, so the lookup stays inside whatever kernel reads it (a one-hot sum inside a matmul would be
    realized, see rangeify's `_lower_reduce`)."""
    assert len(table) == 16 and all(-128 <= v < 128 for v in table)
    lo, hi = (sum((v & 0xFF) << (8 * i) for i, v in enumerate(table[h:h + 8])) for h in (0, 8))
    q64 = q.cast(dtypes.uint64)
    word = (q64 < 8).where(q64.full_like(lo), q64.full_like(hi))
    return ((word >> ((q64 & 7) << 3)) & 0xFF).cast(dtypes.uint8).bitcast(dtypes.int8).float()


def _k_scale_min(s: Tensor) -> tuple[Tensor, Tensor]:
    """Q4_K/Q5_K's eight 6-bit scales and mins packed in 12 bytes (gguf-py's Q4_K.get_scale_min)."""
    n = s.shape[0]
    s = s.reshape(n, 3, 4)
    d, m, md = s[:, 0], s[:, 1], s[:, 2]
    sc = (d & 0x3F).cat((md & 0x0F) | ((d >> 2) & 0x30), dim=-1)
    mn = (m & 0x3F).cat((md >> 4) | ((m >> 2) & 0x30), dim=-1)
    return sc.reshape(n, 8), mn.reshape(n, 8)


# ---- the block types (gguf-py's dequantize_blocks, step for step) --------------------------------------------

def _q4_0(b: Tensor) -> Tensor:
    n = b.shape[0]
    q = _split(b[:, 2:], (n, 1, 16), (0, 4), (1, 2, 1), 0x0F).reshape(n, 32).cast(dtypes.int32) - 8
    return _f16(b, 0) * q.float()


def _q4_1(b: Tensor) -> Tensor:
    n = b.shape[0]
    q = _split(b[:, 4:], (n, 1, 16), (0, 4), (1, 2, 1), 0x0F).reshape(n, 32).float()
    return _f16(b, 0) * q + _f16(b, 2)


def _q5_bits(b: Tensor, qh_at: int, qs_at: int) -> Tensor:
    """Q5_0/Q5_1's 5-bit values: nibbles of qs, the fifth bit j of the u32 qh (bit j%8 of its byte j//8)."""
    n = b.shape[0]
    qh = _split(b[:, qh_at:qh_at + 4], (n, 4, 1), tuple(range(8)), (1, 1, 8), 0x01).reshape(n, 32)
    ql = _split(b[:, qs_at:qs_at + 16], (n, 1, 16), (0, 4), (1, 2, 1), 0x0F).reshape(n, 32)
    return ql | (qh << 4)


def _q5_0(b: Tensor) -> Tensor:
    return _f16(b, 0) * (_q5_bits(b, 2, 6).cast(dtypes.int32) - 16).float()


def _q5_1(b: Tensor) -> Tensor:
    return _f16(b, 0) * _q5_bits(b, 4, 8).float() + _f16(b, 2)


def _q8_0(b: Tensor) -> Tensor:
    return b[:, 2:].bitcast(dtypes.int8).float() * _f16(b, 0)


def _q2_k(b: Tensor) -> Tensor:
    n = b.shape[0]
    scales = b[:, 0:16]
    dl = (_f16(b, 80) * (scales & 0xF).float()).reshape(n, 16, 1)
    ml = (_f16(b, 82) * (scales >> 4).float()).reshape(n, 16, 1)
    q = _split(b[:, 16:80], (n, 2, 1, 32), (0, 2, 4, 6), (1, 1, 4, 1), 3).reshape(n, 16, 16).float()
    return (dl * q - ml).reshape(n, 256)


def _q3_k(b: Tensor) -> Tensor:
    n = b.shape[0]
    s = b[:, 96:108]
    ls = _split(s[:, 0:8], (n, 1, 8), (0, 4), (1, 2, 1), 0x0F).reshape(n, 16)
    hs = _split(s[:, 8:12], (n, 1, 4), (0, 2, 4, 6), (1, 4, 1), 0x03).reshape(n, 16)
    sc = (ls | (hs << 4)).cast(dtypes.int32) - 32
    dl = (_f16(b, 108) * sc.float()).reshape(n, 16, 1)
    ql = _split(b[:, 32:96], (n, 2, 1, 32), (0, 2, 4, 6), (1, 1, 4, 1), 3).reshape(n, 16, 16)
    qh = _split(b[:, 0:32], (n, 1, 1, 32), tuple(range(8)), (1, 1, 8, 1), 1).reshape(n, 16, 16) ^ 1
    q = ql.cast(dtypes.int32) - (qh << 2).cast(dtypes.int32)  # the offset is 4 when the mask bit is 0
    return (dl * q.float()).reshape(n, 256)


def _q4_k(b: Tensor) -> Tensor:
    n = b.shape[0]
    sc, mn = _k_scale_min(b[:, 4:16])
    d = (_f16(b, 0) * sc.float()).reshape(n, 8, 1)
    dm = (_f16(b, 2) * mn.float()).reshape(n, 8, 1)
    q = _split(b[:, 16:144], (n, 4, 1, 32), (0, 4), (1, 1, 2, 1), 0x0F).reshape(n, 8, 32).float()
    return (d * q - dm).reshape(n, 256)


def _q5_k(b: Tensor) -> Tensor:
    n = b.shape[0]
    sc, mn = _k_scale_min(b[:, 4:16])
    d = (_f16(b, 0) * sc.float()).reshape(n, 8, 1)
    dm = (_f16(b, 2) * mn.float()).reshape(n, 8, 1)
    ql = _split(b[:, 48:176], (n, 4, 1, 32), (0, 4), (1, 1, 2, 1), 0x0F).reshape(n, 8, 32)
    qh = _split(b[:, 16:48], (n, 1, 1, 32), tuple(range(8)), (1, 1, 8, 1), 0x01).reshape(n, 8, 32)
    return (d * (ql | (qh << 4)).float() - dm).reshape(n, 256)


def _q6_k(b: Tensor) -> Tensor:
    n = b.shape[0]
    d = (_f16(b, 208) * b[:, 192:208].bitcast(dtypes.int8).float()).reshape(n, 16, 1)
    ql = _split(b[:, 0:128], (n, 2, 1, 64), (0, 4), (1, 1, 2, 1), 0x0F).reshape(n, 8, 32)
    qh = _split(b[:, 128:192], (n, 2, 1, 32), (0, 2, 4, 6), (1, 1, 4, 1), 0x03).reshape(n, 8, 32)
    q = ((ql | (qh << 4)).cast(dtypes.int32) - 32).reshape(n, 16, 16).float()
    return (d * q).reshape(n, 256)


def _iq4_nl(b: Tensor) -> Tensor:
    n = b.shape[0]
    q = _split(b[:, 2:], (n, 1, 16), (0, 4), (1, 2, 1), 0x0F).reshape(n, 32)
    return _f16(b, 0) * _lookup(q, KVALUES_IQ4NL)


def _iq4_xs(b: Tensor) -> Tensor:
    n = b.shape[0]
    sh = b[:, 2:3].cast(dtypes.uint16) | (b[:, 3:4].cast(dtypes.uint16) << 8)
    sl = _split(b[:, 4:8], (n, 4, 1), (0, 4), (1, 1, 2), 0x0F).reshape(n, 8)
    hi = ((sh >> _shifts(sh, tuple(range(0, 16, 2)), (1, 8))) & 0x03).cast(dtypes.uint8)
    sc = (sl | (hi << 4)).cast(dtypes.int32) - 32
    dl = (_f16(b, 0) * sc.float()).reshape(n, 8, 1)
    q = _split(b[:, 8:136], (n, 8, 1, 16), (0, 4), (1, 1, 2, 1), 0x0F).reshape(n, 8, 32)
    return (dl * _lookup(q, KVALUES_IQ4NL)).reshape(n, 256)


def _mxfp4(b: Tensor) -> Tensor:
    n = b.shape[0]
    e = b[:, 0:1].cast(dtypes.uint32)
    # ggml_e8m0_to_fp32_half: 2^(e-128) as float32 bits; e < 2 are the denormals 0x00200000 << e
    d = (e < 2).where(e.full_like(0x00200000) << e, (e - 1) << 23).bitcast(dtypes.float32)
    q = _split(b[:, 1:17], (n, 1, 16), (0, 4), (1, 2, 1), 0x0F).reshape(n, 32)
    return d * _lookup(q, KVALUES_MXFP4)


# ---- the table ------------------------------------------------------------------------------------------------

# type -> (elements per block, bytes per block, dequantization of (n_blocks, bytes) uint8 blocks)
BLOCK_TYPES: dict[GGMLType, tuple[int, int, Callable[[Tensor], Tensor]]] = {
    GGMLType.Q4_0: (32, 18, _q4_0), GGMLType.Q4_1: (32, 20, _q4_1), GGMLType.Q5_0: (32, 22, _q5_0),
    GGMLType.Q5_1: (32, 24, _q5_1), GGMLType.Q8_0: (32, 34, _q8_0), GGMLType.Q2_K: (256, 84, _q2_k),
    GGMLType.Q3_K: (256, 110, _q3_k), GGMLType.Q4_K: (256, 144, _q4_k), GGMLType.Q5_K: (256, 176, _q5_k),
    GGMLType.Q6_K: (256, 210, _q6_k), GGMLType.IQ4_NL: (32, 18, _iq4_nl), GGMLType.IQ4_XS: (256, 136, _iq4_xs),
    GGMLType.MXFP4: (32, 17, _mxfp4),
}

# float types: the numpy dtype their bytes are uploaded as, and the expression that widens it to float32
FLOAT_TYPES: dict[GGMLType, tuple[np.dtype, Callable[[Tensor], Tensor]]] = {
    GGMLType.F32: (np.dtype("<f4"), lambda t: t),
    GGMLType.F16: (np.dtype("<f2"), lambda t: t.float()),
    GGMLType.BF16: (np.dtype("<u2"), lambda t: (t.cast(dtypes.uint32) << 16).bitcast(dtypes.float32)),
}

SUPPORTED: tuple[GGMLType, ...] = (*FLOAT_TYPES, *BLOCK_TYPES)


def block_layout(ggml_type: int) -> tuple[int, int] | None:
    """(elements, bytes) of one block of the type, or None when tg cannot dequantize it."""
    if ggml_type in BLOCK_TYPES:
        blk, nbytes, _ = BLOCK_TYPES[GGMLType(ggml_type)]
        return blk, nbytes
    if ggml_type in FLOAT_TYPES:
        return 1, FLOAT_TYPES[GGMLType(ggml_type)][0].itemsize
    return None


def storage_dtype(ggml_type: int) -> np.dtype:
    """The numpy dtype a type's raw data is uploaded as: uint8 blocks, or the float type's storage."""
    return FLOAT_TYPES[GGMLType(ggml_type)][0] if ggml_type in FLOAT_TYPES else np.dtype(np.uint8)


def dequantize(raw: Tensor, ggml_type: int) -> Tensor:
    """The float32 values of `raw` (the type's storage: (n_blocks, bytes) uint8 blocks, or a float type's
    elements), flat, as a lazy expression."""
    if ggml_type in FLOAT_TYPES:
        return FLOAT_TYPES[GGMLType(ggml_type)][1](raw.reshape(-1))
    if ggml_type not in BLOCK_TYPES:
        name = GGMLType(ggml_type).name if ggml_type in GGMLType._value2member_map_ else f"ggml type {ggml_type}"
        raise NotImplementedError(f"tg cannot dequantize {name} (supported: {', '.join(t.name for t in SUPPORTED)})")
    blk, nbytes, fn = BLOCK_TYPES[GGMLType(ggml_type)]
    if raw.dtype is not dtypes.uint8 or raw.numel() % nbytes:
        raise ValueError(f"{GGMLType(ggml_type).name} data must be uint8 in whole blocks of {nbytes} bytes, got "
                         f"{raw.dtype!r} of {raw.numel()} elements")
    return fn(raw.reshape(-1, nbytes)).reshape(-1)
