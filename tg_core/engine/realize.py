"""Realizing tensor nodes: schedule them, give every BUFFER node its device Buffer, run the kernels.

Memory planning: a buffer the schedule creates and no target keeps (an intermediate) is dead after its
last use, so a later intermediate of the same device, size and dtype takes over its memory.
"""
from __future__ import annotations

import sys
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tg_core.device import Buffer, Compiled, Device
from tg_core.engine import checks
from tg_core.helpers import DEBUG
from tg_core.profile import events as profile_events
from tg_core.profile import state as profiling
from tg_core.schedule.cache import schedule
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import gc_paused
from tg_core.uop.uop import UOp

if TYPE_CHECKING:
    from tg_core.engine.jit_memory import CaptureRecycler

# the device memory behind each BUFFER node; it lives as long as the node does
_buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()
# its underlying dict (weak references -> Buffers; never replaced): the engine looks nodes up here directly
_buffer_refs: dict[weakref.ref[UOp], Buffer] = _buffers.data  # type: ignore[attr-defined]
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
        # gives a buffer about to be allocated the memory of a dead recorded one (engine/jit_memory.py)
        self.recycle: CaptureRecycler | None = None


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
        size = node.arg
        buf = Buffer.unchecked(Device.canonicalize(node.src[1].arg), size, node.dtype) \
            if type(size) is int and size >= 0 else Buffer(node.src[1].arg, size, node.dtype)  # (its error)
        _buffers[node] = buf
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


def realize(targets: list[UOp], devices: Sequence[str | None] | None = None) -> dict[UOp, UOp]:
    """Compute `targets` (a target with no buffer in its graph goes on its entry of `devices`); returns
    each target's BUFFER node. The cyclic collector is paused throughout: scheduling and codegen allocate
    many acyclic nodes, and its collections walking them were ~30 ms of a first MLP forward."""
    if (devices is not None and _sharded(devices)) or checks.waiting():
        return prepare(targets, devices)()
    # the common case, `prepare(...)()` without its two closures and second pause (a tiny eager realize's
    # whole engine time is a few tens of microseconds)
    with gc_paused():
        items, out, var_vals, plan = _build(targets, devices)
        _settle(items, out, var_vals)
        return _run(plan, out, var_vals)


def _sharded(devices: Sequence[str | None]) -> bool:
    """Whether a target's device is a tuple of devices (sharded: one target per shard, schedule/multi.py)."""
    return tuple in map(type, devices)


def prepare(targets: list[UOp], devices: Sequence[str | None] | None = None) -> Callable[[], dict[UOp, UOp]]:
    """Schedule `targets` and build every kernel, running none of them; returns the function that runs them
    (what `realize` returns). An error raised here (a kernel the device cannot compile) has run nothing:
    every buffer holds what it held, and the targets' device-side checks wait for the next realize."""
    if devices is not None and _sharded(devices):
        from tg_core.schedule.multi import lower_targets
        flat, flat_devs, rebuild = lower_targets(targets, devices)
        run_flat = prepare(flat, flat_devs)
        return lambda: rebuild(run_flat())
    with gc_paused():
        taken = checks.take(targets)
        if not taken:  # the common case: no device-side check waits on these graphs
            return _prepare(targets, devices)
        extra = [c for _, c in taken]
        # the guarded ops' checks are computed in the same schedule: their facts are more targets
        devs = (list(devices) if devices else [None] * len(targets)) + [c.device for c in extra]
        try:
            job = _prepare(targets + [c.facts for c in extra], devs)
        except BaseException:
            checks.rearm(taken)
            raise

    def run() -> dict[UOp, UOp]:
        with gc_paused():
            out = job()
            bufs = [buffer_of(out[c.facts]) for c in extra]
            checks.ran(extra, bufs)
            if capture.active is not None:
                capture.checks.extend(zip(extra, bufs))
            return out
    return run


Plan = list[tuple[UOp, list[UOp], Callable | None, int]]  # per item: AST, buffers, runner (None: a COPY), kind


def build(targets: list[UOp], devices: Sequence[str | None] | None = None
          ) -> tuple[list[tuple[UOp, list[UOp]]], dict[UOp, UOp], dict[str, int], list[Callable | None]]:
    """Schedule `targets` and compile every kernel (the device keeps what it compiled), running nothing and
    planning no memory: raises what building them raises. Returns the schedule's items, the targets' BUFFERs,
    the bound variables and each item's runner (None for a COPY)."""
    if devices is not None and _sharded(devices):
        from tg_core.schedule.multi import lower_targets
        targets, devices = lower_targets(targets, devices)[:2]
    with gc_paused():
        items, out, var_vals, plan = _build(targets, devices)
    return items, out, var_vals, [runner for _, _, runner, _ in plan]


# how `_run` runs an item, decided once when it is built (the devices of its buffers do not change)
_KERNEL, _COPY, _QUEUED = 0, 1, 2


def _build(targets: list[UOp], devices: Sequence[str | None] | None
           ) -> tuple[list[tuple[UOp, list[UOp]]], dict[UOp, UOp], dict[str, int], Plan]:
    """build() for one device per target, with the collector paused by the caller; each item's runner and kind."""
    t0 = profile_events.now() if profiling.on else 0
    items, out, var_vals = schedule(targets, devices)
    if t0:
        profile_events.host_event("schedule", f"schedule ({len(items)} items)", t0)
    # every kernel is compiled before any runs: one the device cannot build fails the realize before it
    # has written anything (a half-done optimizer step, a write without the values that read the old contents)
    # (the device from the node, not buffer_of: a Buffer made now would keep memory planning off it)
    plan: Plan = []
    # a device may compile in the background meanwhile (start_runner): finish_builds waits before anything runs
    built: list[Compiled] = []
    for ast, nodes in items:
        dev = Device[nodes[0].src[1].arg]
        if ast.op is Ops.COPY:
            # hcq: an exec item whose buffers are all on command-queue devices (tg_core/hcq) joins a batch
            queued = all(getattr(Device[n.src[1].arg], "hcq", False) for n in nodes)
            plan.append((ast, nodes, None, _QUEUED if queued else _COPY))
        else:
            plan.append((ast, nodes, dev.start_runner(ast), _QUEUED if getattr(dev, "hcq", False) else _KERNEL))
            if dev not in built:
                built.append(dev)
    for dev in built:
        dev.finish_builds()
    return items, out, var_vals, plan


def _prepare(targets: list[UOp], devices: Sequence[str | None] | None) -> Callable[[], dict[UOp, UOp]]:
    items, out, var_vals, plan = _build(targets, devices)
    _settle(items, out, var_vals)

    def run() -> dict[UOp, UOp]:
        with gc_paused():
            return _run(plan, out, var_vals)
    return run


def _settle(items: list[tuple[UOp, list[UOp]]], out: dict[UOp, UOp], var_vals: dict[str, int]) -> None:
    """What follows building, before running: memory planning, and a capture's check of the bound variables."""
    if len(items) > 1:  # one item's buffers have nothing to share with
        _plan_memory(items, set(out.values()))
    if capture.active is not None:
        for name, val in var_vals.items():
            if capture.var_vals.setdefault(name, val) != val:
                from tg_core.engine.jit import JitError
                raise JitError(f"TinyJit({capture.active}): variable {name} is bound to {capture.var_vals[name]} "
                               f"and to {val} in one call; a replay gives each variable one value")


def _flush(pending: list[tuple[Callable, list[Buffer], UOp]], var_vals: dict[str, int]) -> None:
    """hcq: submit the consecutive HCQ items collected so far as one batch (tg_core/hcq/engine.py)."""
    if not pending:
        return
    from tg_core.hcq.engine import submit_items
    submit_items(pending, var_vals)
    for runner, bufs, ast in pending:
        stats["copies" if ast.op is Ops.COPY else "kernels"] += 1
        if DEBUG >= 1 and ast.op is not Ops.COPY:
            print(f"tg: {bufs[0].device} kernel {ast.arg.name} (queued): "
                  f"{', '.join(f'{b.size}x{b.dtype.name}' for b in bufs)}", file=sys.stderr)
        if capture.active is not None:
            capture.items.append((runner, bufs, ast))
    pending.clear()


def _run(plan: Plan, out: dict[UOp, UOp],
         var_vals: dict[str, int]) -> dict[UOp, UOp]:
    pending: list[tuple[Callable, list[Buffer], UOp]] = []  # hcq: the batch being collected
    recording = capture.active is not None
    lookup, ref = _buffer_refs.get, weakref.ref
    recycle = capture.recycle if recording else None
    if recycle is not None:
        recycle.sweep()
    for ast, nodes, runner, kind in plan:
        if recycle is not None and kind == _KERNEL:
            recycle.take(nodes)
        bufs = []
        for n in nodes:  # buffer_of, its lookup inlined (it is a WeakKeyDictionary's; ref(n) is n's shared weakref)
            b = lookup(ref(n))
            bufs.append(b if b is not None else buffer_of(n))
        if kind == _QUEUED:
            pending.append((copy_runner if runner is None else runner, bufs, ast))
            continue
        if pending:
            _flush(pending, var_vals)
        if kind == _COPY:
            if profiling.on:
                profile_events.timed_copy(copy_runner, bufs, var_vals)
            else:
                copy_runner(bufs, var_vals)
            stats["copies"] += 1
            if recording:
                capture.items.append((copy_runner, bufs, ast))
            continue
        for b in bufs:
            if b._opaque is None:  # not allocated yet (is_allocated(), inlined)
                b.allocate()
        if DEBUG.value >= 1:
            print(f"tg: {bufs[0].device} kernel {ast.arg.name}: {', '.join(f'{b.size}x{b.dtype.name}' for b in bufs)}",
                  file=sys.stderr)
            if DEBUG >= 2:
                print(ast.render(), file=sys.stderr)
        assert runner is not None  # build() compiled a runner for every item but a COPY
        if profiling.on:
            profile_events.timed_kernel(runner, bufs, var_vals, ast)
        else:
            runner(bufs, var_vals)
        stats["kernels"] += 1
        if recording:
            capture.items.append((runner, bufs, ast))
    if pending:
        _flush(pending, var_vals)
    return out
