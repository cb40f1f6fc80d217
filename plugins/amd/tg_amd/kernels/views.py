"""Where a view's elements sit in its storage: a tensor that is a chain of view ops over a BUFFER (a KV cache's
`[:, :, :start_pos + T]`, a reshape of a contiguous buffer) read by a custom kernel straight from that buffer,
without copying the view out first. Only the views a plain (offset, strides) layout describes are resolved;
anything else (a flip, a reshape that mixes strided axes) is None, and the caller copies or declines."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tg_core.plugin_api import Ops, UOp


@dataclass(frozen=True)
class Strided:
    """Element (i0, i1, ...) of the view is element `offset + sum(i_k * strides[k])` of the storage buffer."""
    shape: tuple[Any, ...]
    strides: tuple[int, ...]
    offset: int

    def at(self, *idx: Any) -> Any:
        """The storage index of element idx (ints or UOps)."""
        out: Any = self.offset
        for i, s in zip(idx, self.strides, strict=True):
            if s:
                out = out + i * s
        return out


def _contiguous(shape: tuple[Any, ...]) -> tuple[int, ...] | None:
    """Row-major strides; the first axis may be symbolic (no stride depends on it)."""
    strides, acc = [], 1
    for k in range(len(shape) - 1, -1, -1):
        strides.append(acc)
        if k and not isinstance(shape[k], int):
            return None
        acc = acc * shape[k] if k else acc
    return tuple(reversed(strides))


def _reshape(v: Strided, shape: tuple[Any, ...]) -> Strided | None:
    if _contiguous(v.shape) == v.strides and (c := _contiguous(shape)) is not None:
        return Strided(shape, c, v.offset)
    # adding or dropping size-1 axes keeps the strides of the others
    if tuple(n for n in v.shape if n != 1) != tuple(n for n in shape if n != 1):
        return None
    kept = iter(s for n, s in zip(v.shape, v.strides) if n != 1)
    return Strided(shape, tuple(0 if n == 1 else next(kept) for n in shape), v.offset)


def strided(u: UOp) -> tuple[UOp, Strided] | None:
    """(the BUFFER, the layout) of a view node, or None when it is not a view this layout describes."""
    chain = []
    while u.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.DETACH):
        chain.append(u)
        u = u.src[0]
    if u.op is not Ops.BUFFER:
        return None
    v = Strided((u.arg,), (1,), 0)
    for n in reversed(chain):
        if n.op is Ops.RESHAPE:
            if (r := _reshape(v, tuple(n.arg))) is None:
                return None
            v = r
        elif n.op is Ops.PERMUTE:
            v = Strided(tuple(v.shape[i] for i in n.arg), tuple(v.strides[i] for i in n.arg), v.offset)
        elif n.op is Ops.EXPAND:
            v = Strided(tuple(n.arg), tuple(s if old == new else 0 for old, new, s in zip(v.shape, n.arg, v.strides)),
                        v.offset)
        elif n.op is Ops.SHRINK:
            if not all(isinstance(lo, int) for lo, _ in n.arg):
                return None  # a symbolic start would make the offset a run-time value
            v = Strided(tuple(n.shape or ()), v.strides,
                        v.offset + sum(lo * s for (lo, _), s in zip(n.arg, v.strides)))
    return u, v
