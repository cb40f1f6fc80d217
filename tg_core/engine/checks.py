"""Device-side checks: conditions on lazy values, computed on the device with them and reported at the
next host read, like CUDA's device-side asserts.

An op whose input may be invalid in a way only its data shows (an index out of range), and whose data is
not on the host, registers a `Check` on the node it builds (`guard`): a small tensor graph of the facts the
condition needs (the smallest and largest index) and a function turning those facts into an error or None.
A realize whose graph contains a guarded node computes the check's facts in the same schedule (one more
small output buffer, written by a kernel) and keeps the buffer as ran-but-unread. The next host read
(`Tensor.numpy()`, `.item()`, `.tolist()`) or `Tensor.synchronize()` reads every such buffer and raises the
first error. A check whose node is dropped before it is realized never runs: that op never ran either.
Under TinyJit the check's kernel is captured with the others and each replay re-arms it.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tg_core.device import Buffer
from tg_core.dtype import dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp


@dataclass(frozen=True, eq=False)
class Check:
    """`facts`: a tensor graph the device computes; `report(values)`: the error its values mean, or None."""
    facts: UOp
    device: str
    report: Callable[[np.ndarray], Exception | None]


# guarded node -> the checks that run when a realize computes it (weak: a dropped node never runs)
_waiting: weakref.WeakKeyDictionary[UOp, list[Check]] = weakref.WeakKeyDictionary()
_waiting_refs: dict = _waiting.data  # type: ignore[attr-defined]  # its underlying dict (never replaced)
# checks whose facts a kernel has written and no host read has looked at yet
_ran: list[tuple[Check, Buffer]] = []


def guard(node: UOp, check: Check) -> None:
    """Run `check` whenever a realize computes `node`."""
    checks = _waiting.setdefault(node, [])
    if not any(c.facts is check.facts for c in checks):  # hash-consing: the same op built twice, checked once
        checks.append(check)


def waiting() -> bool:
    """Whether any check waits (when none does, a realize need not look for guarded nodes in its graphs)."""
    # (its data: WeakKeyDictionary's __len__ is Python code; a dead node's entry left there costs one needless walk)
    return bool(_waiting_refs)


def take(targets: list[UOp]) -> list[tuple[UOp, Check]]:
    """The waiting checks of the nodes in these graphs (and in the graphs of those checks' facts), with their
    nodes; they stop waiting: the caller realizes their facts with the targets (or `rearm`s them)."""
    out: list[tuple[UOp, Check]] = []
    roots = list(targets)
    while _waiting and roots:
        seen = UOp(Ops.SINK, dtypes.void, tuple(roots)).toposort() if len(roots) > 1 else roots[0].toposort()
        found = [(n, c) for n in seen if (cs := _waiting.pop(n, None)) for c in cs]
        out += found
        roots = [c.facts for _, c in found]
    return out


def rearm(taken: list[tuple[UOp, Check]]) -> None:
    """Make taken checks wait again (the realize that took them failed before running anything)."""
    for node, check in taken:
        guard(node, check)


def ran(checks: list[Check], bufs: list[Buffer]) -> None:
    """Record that the kernels wrote these checks' facts into `bufs` (called by the engine, and by TinyJit
    after each replay)."""
    _ran.extend(zip(checks, bufs))


def report() -> None:
    """Read the facts of every check that ran and raise the first error they show (each is reported once)."""
    if not _ran:
        return
    pending = list(_ran)
    _ran.clear()
    for check, buf in pending:
        err = check.report(buf.numpy())
        if err is not None:
            raise err
