"""Realizing tensor nodes: schedule them, give every BUFFER node its device Buffer, run the kernels.

Memory planning: a buffer the schedule creates and no target keeps (an intermediate) is dead after its
last use, so a later intermediate of the same device, size and dtype takes over its memory.
"""
from __future__ import annotations

import sys
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable

from tg_core.device import Buffer, Device
from tg_core.engine import checks
from tg_core.helpers import DEBUG
from tg_core.schedule.cache import schedule
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import gc_paused
from tg_core.uop.uop import UOp

# the device memory behind each BUFFER node; it lives as long as the node does
_buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()
stats = {"kernels": 0, "copies": 0}


class CaptureState(threading.local):
    """What a TinyJit records while it captures (engine/jit.py): every exec item run, as
    (runner, buffers, kernel AST or COPY node), the bound variables' values, and the RNG key buffers
    uploaded meanwhile. `active` is None outside a capture. Per thread: a capture records only its own
    thread's work, and another thread realizing meanwhile runs normally."""

    def __init__(self) -> None:
        self.active: str | None = None  # the name of the capturing function
        self.items: list[tuple[Callable[[list[Buffer], dict[str, int]], None], list[Buffer], UOp]] = []
        self.var_vals: dict[str, int] = {}
        self.rng_keys: list[Buffer] = []
        self.checks: list[tuple[checks.Check, Buffer]] = []  # device-side checks a replay re-arms


capture = CaptureState()


def copy_runner(bufs: list[Buffer], var_vals: dict[str, int]) -> None:
    """The runner of a COPY item: bufs[0] gets bufs[1]'s bytes."""
    bufs[0].copy_from(bufs[1])


def buffer_of(node: UOp) -> Buffer:
    """The device Buffer of a BUFFER node (made on first use, allocated when first written or read)."""
    if node.op is not Ops.BUFFER:
        raise TypeError(f"only a BUFFER node has device memory, not {node.op}")
    buf = _buffers.get(node)
    if buf is None:
        buf = _buffers[node] = Buffer(node.src[1].arg, node.arg, node.dtype)
    return buf


def attach(node: UOp, buf: Buffer) -> None:
    """Make `buf` the memory of the BUFFER node `node` (used for data the user hands in)."""
    _buffers[node] = buf


def _plan_memory(items: list[tuple[UOp, list[UOp]]], keep: set[UOp]) -> None:
    """Share memory between intermediates whose lifetimes do not overlap."""
    first: dict[UOp, int] = {}
    last: dict[UOp, int] = {}
    for i, (_, nodes) in enumerate(items):
        for n in nodes:
            if n in keep or n in _buffers:
                continue
            first.setdefault(n, i)
            last[n] = i
    free: dict[tuple, list[Buffer]] = defaultdict(list)
    dying: dict[int, list[UOp]] = defaultdict(list)
    for n, i in last.items():
        dying[i].append(n)
    for i, (_, nodes) in enumerate(items):
        for n in nodes:
            if first.get(n) == i:
                key = (n.src[1].arg, n.arg, n.dtype)
                attach(n, free[key].pop() if free[key] else Buffer(*key))
        for n in dying[i]:
            free[(n.src[1].arg, n.arg, n.dtype)].append(_buffers[n])


def realize(targets: list[UOp], devices: list[str] | None = None) -> dict[UOp, UOp]:
    """Compute `targets` (a target with no buffer in its graph goes on its entry of `devices`); returns
    each target's BUFFER node. The cyclic collector is paused throughout: scheduling and codegen allocate
    many acyclic nodes, and its collections walking them were ~30 ms of a first MLP forward."""
    with gc_paused():
        extra = checks.due(targets)
        if not extra:
            return _realize(targets, devices)
        # the guarded ops' checks are computed in the same schedule: their facts are more targets
        devs = (list(devices) if devices else [None] * len(targets)) + [c.device for c in extra]
        out = _realize(targets + [c.facts for c in extra], devs)
        bufs = [buffer_of(out[c.facts]) for c in extra]
        checks.ran(extra, bufs)
        if capture.active is not None:
            capture.checks.extend(zip(extra, bufs))
        return out


def _realize(targets: list[UOp], devices: list[str] | None) -> dict[UOp, UOp]:
    items, out, var_vals = schedule(targets, devices)
    if len(items) > 1:  # one item's buffers have nothing to share with
        _plan_memory(items, set(out.values()))
    if capture.active is not None:
        for name, val in var_vals.items():
            if capture.var_vals.setdefault(name, val) != val:
                from tg_core.engine.jit import JitError
                raise JitError(f"TinyJit({capture.active}): variable {name} is bound to {capture.var_vals[name]} "
                               f"and to {val} in one call; a replay gives each variable one value")
    for ast, nodes in items:
        bufs = [buffer_of(n) for n in nodes]
        if ast.op is Ops.COPY:
            copy_runner(bufs, var_vals)
            stats["copies"] += 1
            if capture.active is not None:
                capture.items.append((copy_runner, bufs, ast))
            continue
        for b in bufs:
            b.ensure_allocated()
        if DEBUG >= 1:
            print(f"tg: {bufs[0].device} kernel {ast.arg.name}: {', '.join(f'{b.size}x{b.dtype.name}' for b in bufs)}",
                  file=sys.stderr)
            if DEBUG >= 2:
                print(ast.render(), file=sys.stderr)
        runner = Device[bufs[0].device].get_runner(ast)
        runner(bufs, var_vals)
        stats["kernels"] += 1
        if capture.active is not None:
            capture.items.append((runner, bufs, ast))
    return out
