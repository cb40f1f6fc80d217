"""TinyJit on HCQ devices: the captured items' runs on HCQ devices are linked once; a replay runs the linked batches.

`link_captured(items, inputs)` (called once when a TinyJit captures, engine/jit.py) splits the captured items
into segments: a maximal run of consecutive items on HCQ devices becomes one `LinkedBatch` whose input buffers
are address-table slots (the JIT's input indices) and whose other buffers are linked in; any other item stays a
`JitItem` run by its runner. `replay(segments, inputs, var_vals)` then does, per linked batch, only this: write the
input addresses into the table, run the host program (fence, per-run patches: addresses and variables, ring
pushes, doorbells). No batch is built, encoded or linked again: `tg_core.hcq.encode.stats` counts those.
"""
from __future__ import annotations

from typing import Any

from tg_core.device import Buffer, Device
from tg_core.hcq import ops as q
from tg_core.hcq.batch import Item, build
from tg_core.hcq.device import copy_queues
from tg_core.hcq.encode import encode
from tg_core.hcq.engine import writes_of
from tg_core.hcq.link import LinkedBatch, link
from tg_core.profile import events as profile_events
from tg_core.profile import state as profiling
from tg_core.uop.ops import Ops


def _on_hcq(it: Any, inputs: list[Buffer]) -> bool:
    bufs = list(it.bufs)
    for p, i in it.inputs:
        bufs[p] = inputs[i]
    check = bufs if it.ast.op is Ops.COPY else bufs[:1]
    return bool(check) and all(b is not None and getattr(Device[b.device], "hcq", False) for b in check)


def _link_run(run: list[Any], inputs: list[Buffer]) -> LinkedBatch:
    items = []
    for it in run:
        slot = dict(it.inputs)
        refs = [q.input_ref(slot[p], inputs[slot[p]].device, inputs[slot[p]].nbytes) if b is None
                else q.mem(b.ensure_allocated()) for p, b in enumerate(it.bufs)]
        items.append(Item(it.ast, refs, writes_of(it.ast)))
    devs = sorted({q.device_of(r) for it in items for r in it.refs})
    batch = build(items, copy_queues(devs))
    return link(encode(batch), batch.devices, [(b.device, b.nbytes) for b in inputs], compiled=True)


def link_captured(items: list[Any], inputs: list[Buffer]) -> list[Any] | None:
    """The segments replacing `items` (JitItems), or None when no item runs on an HCQ device."""
    segments: list[Any] = []
    run: list[Any] = []
    found = False
    for it in items:
        if _on_hcq(it, inputs):
            run.append(it)
            found = True
            continue
        if run:
            segments.append(_link_run(run, inputs))
            run = []
        segments.append(it)
    if run:
        segments.append(_link_run(run, inputs))
    return segments if found else None


def replay(segments: list[Any], inputs: list[Buffer], var_vals: dict[str, int]) -> None:
    """Run the segments with this call's input buffers and variable values."""
    for seg in segments:
        if isinstance(seg, LinkedBatch):
            seg.run(inputs, var_vals)
            continue
        bufs = seg.bufs
        if seg.inputs:
            bufs = list(seg.bufs)
            for pos, i in seg.inputs:
                bufs[pos] = inputs[i]
        if profiling.on:
            profile_events.timed_item(seg.runner, bufs, var_vals, seg.ast)
        else:
            seg.runner(bufs, var_vals)
