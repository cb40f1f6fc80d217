"""The engine's entry into hcq: exec items (runner, buffers, kernel AST or COPY) become one batch, submitted now.

engine/realize.py collects consecutive items whose buffers are on HCQ devices (`hcq = True`, device.py) and
calls `submit_items` with them; TinyJit links such runs once and replays them (jit.py).
"""
from __future__ import annotations

import weakref
from collections.abc import Callable

from tg_core.device import Buffer
from tg_core.hcq import ops as q
from tg_core.hcq.batch import Item
from tg_core.hcq.device import run_items, written_params
from tg_core.hcq.link import LinkedBatch
from tg_core.uop.uop import UOp

_writes: weakref.WeakKeyDictionary[UOp, tuple[int, ...]] = weakref.WeakKeyDictionary()


def writes_of(ast: UOp) -> tuple[int, ...]:
    """The buffer positions an exec item writes (once per kernel)."""
    got = _writes.get(ast)
    if got is None:
        got = _writes[ast] = written_params(ast)
    return got


def submit_items(items: list[tuple[Callable, list[Buffer], UOp]], var_vals: dict[str, int]) -> LinkedBatch:
    """Run `items` (in order) as one batch on their devices' queues."""
    return run_items([Item(ast, [q.mem(b.ensure_allocated()) for b in bufs], writes_of(ast))
                      for _, bufs, ast in items], var_vals)
