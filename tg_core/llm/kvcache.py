"""The KV cache of one attention layer, and every use of a position in the model: the slices that depend
on `start_pos` are made here only (`pos_slice`), so that a bound symbolic variable can take the place of the
int without touching the model."""
from __future__ import annotations

from tg_core.dtype import DType, dtypes
from tg_core.tensor import Tensor
from tg_core.uop import UOp

Position = int | UOp  # a concrete position, or a bound variable


def position_value(p: Position) -> int:
    """The value of a position (a bound variable's bound value)."""
    if isinstance(p, int):
        return p
    _, val = p.unbind()
    return int(val)


def pos_slice(t: Tensor, start: Position, length: int, axis: int = 0) -> Tensor:
    """t[start:start+length] along `axis`."""
    bounds: list[tuple[int, int] | None] = [None] * t.ndim
    bounds[axis] = (start, start + length)  # type: ignore[assignment]  # a symbolic bound once variables are in shapes
    return t.shrink(bounds)


def pos_prefix(t: Tensor, end: Position, axis: int = 0) -> Tensor:
    """t[:end] along `axis`."""
    bounds: list[tuple[int, int] | None] = [None] * t.ndim
    bounds[axis] = (0, end)  # type: ignore[assignment]
    return t.shrink(bounds)


class KVCache:
    """Keys and values of one layer, (2, B, Hk, max_context, d) in device memory; `update` writes T new
    positions at start_pos (rounded to the cache's dtype) and returns the keys and values of positions
    0..start_pos+T-1 as views of the cache, in its dtype: the attention that reads them widens each element as it
    loads it, so no float32 copy of the cache is ever made.

    float16 by default: half the memory and half the bytes attention reads of float32, and a key or value rounds
    by at most 2^-11 of itself (SmolLM2's goldens hold; the tests compare it with a float32 cache)."""

    def __init__(self, batch: int, kv_heads: int, max_context: int, head_dim: int, device: str | None = None,
                 dtype: DType = dtypes.float16):
        if not dtypes.is_float(dtype):
            raise ValueError(f"a KV cache holds floats: dtype {dtype.name} is not a float dtype (half, float, ...)")
        self.max_context = max_context
        self.kv = Tensor.zeros(2, batch, kv_heads, max_context, head_dim, dtype=dtype, device=device).contiguous().realize()

    def update(self, k: Tensor, v: Tensor, start_pos: Position) -> tuple[Tensor, Tensor]:
        T = k.shape[2]
        if position_value(start_pos) + T > self.max_context:
            raise ValueError(f"positions {start_pos}..{position_value(start_pos) + T - 1} do not fit the cache of "
                             f"{self.max_context}")
        pos_slice(self.kv, start_pos, T, axis=3).assign(k.unsqueeze(0).cat(v.unsqueeze(0), dim=0).cast(self.kv.dtype))
        seen = pos_prefix(self.kv, start_pos + T, axis=3)
        return seen[0], seen[1]
