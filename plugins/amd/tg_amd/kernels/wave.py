"""Building blocks of tg-amd's custom kernels: a wave's lane exchanges and reductions (ds_swizzle XOR butterflies)."""
from __future__ import annotations

from tg_core.plugin_api import Ops, UOp, dtypes

WAVE = 32  # gfx11 kernels here run wave32


def intrinsic(name: str, dtype, *srcs: UOp) -> UOp:
    """A device intrinsic the AMD renderer knows (tg_amd/renderer.py INTRINSICS)."""
    return UOp(Ops.CUSTOM, dtype, srcs, name)


def xor_lane(v: UOp, mask: int) -> UOp:
    """The value of lane `l ^ mask` (ds_swizzle in bitmask mode: and 0x1F, or 0, xor mask) for a 32-bit value."""
    pattern = UOp.const(dtypes.int32, 0x1F | (mask << 10))
    if v.dtype is dtypes.int32:
        return intrinsic("ds_swizzle", dtypes.int32, v, pattern)
    if v.dtype is not dtypes.float32:
        raise TypeError(f"xor_lane exchanges 32-bit values (int32, float32), not {v.dtype!r}")
    return intrinsic("ds_swizzle", dtypes.int32, v.bitcast(dtypes.int32), pattern).bitcast(dtypes.float32)


def wave_reduce(v: UOp, op: Ops, width: int = WAVE) -> UOp:
    """`op` (ADD or MAX) of v over each aligned group of `width` lanes (a power of two up to 32), in every lane."""
    mask = width // 2
    while mask >= 1:
        other = xor_lane(v, mask)
        v = UOp(op, v.dtype, (v, other))
        mask //= 2
    return v
