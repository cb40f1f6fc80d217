"""Range checks of index tensors (tensor indexing, gather, scatter, one_hot, Embedding, losses).

Every index-consuming op is a one-hot mask and a sum, so an index outside its axis would select nothing and
give zeros. `check_range` stops that: when the indices are known on the host (a constant, or the contents of
a realized buffer) it raises IndexError at once; when they are computed lazily it guards the op's result with
a device-side check (engine/checks.py) whose kernel computes the smallest and largest index with the result,
and the next host read raises the IndexError.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from tg_core.engine.checks import Check, guard
from tg_core.engine.realize import capture
from tg_core.uop.ops import Ops

if TYPE_CHECKING:
    from tg_core.tensor.tensor import Tensor

_VIEWS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP, Ops.DETACH})


def check_range(out: Tensor, idx: Tensor, lo: int, hi: int, describe: Callable[[int], str],
                ignore: int | None = None) -> Tensor:
    """`out`, once every index in `idx` (other than `ignore`) is known to be in [lo, hi); `describe(v)` says
    what is wrong with the index v and what is allowed."""
    if idx.numel() == 0:
        return out
    known = _host_values(idx)
    if known is not None:
        if ignore is not None:
            known = known[known != ignore]
        bad = _outside(int(known.min()), int(known.max()), lo, hi) if known.size else None
        if bad is not None:
            raise IndexError(describe(bad))
        return out
    x = idx if ignore is None else idx.eq(ignore).where(min(max(lo, 0), hi - 1) if hi > lo else lo, idx)
    facts = x.min().reshape(1).cat(x.max().reshape(1))

    def report(values: np.ndarray) -> Exception | None:
        bad = _outside(int(values[0]), int(values[1]), lo, hi)
        if bad is None:
            return None
        return IndexError(f"{describe(bad)} (found by a device-side check when the indices were computed; "
                          "reported at the next host read)")
    guard(out.uop, Check(facts.uop, idx.device, report))
    return out


def _outside(mn: int, mx: int, lo: int, hi: int) -> int | None:
    return mx if mx >= hi else mn if mn < lo else None


def _host_values(idx: Tensor) -> np.ndarray | None:
    """The indices, when the host can know them without running a kernel of the op: a constant, or a view of
    a realized buffer (read back now; not inside a TinyJit capture, which must not read the host)."""
    u = idx.uop
    while u.op in _VIEWS:
        u = u.src[0]
    if u.op is Ops.CONST:
        return np.array([u.arg])
    if u.op is Ops.BUFFER and capture.active is None:
        return idx.numpy().reshape(-1)
    return None


def check_values(out: Tensor, source: Tensor, facts: Callable[[Tensor], Tensor],
                 problem: Callable[[np.ndarray], str | None]) -> Tensor:
    """`out`, once `problem(facts(source))` (a small tensor of facts about the source's data, read as numpy)
    finds nothing wrong: at once when the source's data is on the host (a realized buffer; reading its
    facts runs one small kernel), else as a device-side check reported at the next host read."""
    if _host_values(source) is not None:
        msg = problem(facts(source).numpy().reshape(-1))
        if msg is not None:
            raise ValueError(msg)
        return out

    def report(values: np.ndarray) -> Exception | None:
        msg = problem(values.reshape(-1))
        return None if msg is None else ValueError(f"{msg} (found by a device-side check; reported at the next "
                                                   "host read)")
    guard(out.uop, Check(facts(source).uop, source.device, report))
    return out
