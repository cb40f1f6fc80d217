"""Which weights are exactly the dequantization of a GGUF tensor's raw bytes (what a quantized kernel may read instead).

gguf.py's `tensor()` records each lazy dequantization it builds (`remember`). `gguf_source(w)` is then the raw bytes
and ggml type w is computed from, or None: hash-consing makes the check exact, since the same expression over the
same bytes is the same node. Only reshapes, `contiguous` and float -> float casts of the recorded value are looked
through; anything else (a RoPE row permutation, a concatenation, arithmetic, an int cast) is a different value, and
its matmul must go through core's code.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from tg_core.dtype import dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

if TYPE_CHECKING:
    from tg_core.tensor import Tensor

# the dequantized value's node (reshapes stripped) -> (the raw bytes tensor, ggml type); weak: a dropped weight goes
_SOURCES: weakref.WeakKeyDictionary[UOp, tuple[Tensor, int]] = weakref.WeakKeyDictionary()


def _strip(u: UOp) -> UOp:
    while u.op in (Ops.RESHAPE, Ops.CONTIGUOUS) or (u.op is Ops.CAST and dtypes.is_float(u.dtype)
                                                     and dtypes.is_float(u.src[0].dtype)):
        u = u.src[0]
    return u


def remember(value: Tensor, raw: Tensor, ggml_type: int) -> None:
    """Record that `value` is the dequantization of `raw` as `ggml_type`."""
    _SOURCES[_strip(value.uop)] = (raw, ggml_type)


def gguf_source(w: Tensor) -> tuple[Tensor, int] | None:
    """(raw bytes, ggml type) when w is exactly their dequantization (up to reshapes and float casts), else None."""
    return _SOURCES.get(_strip(w.uop))


__all__ = ["gguf_source", "remember"]
