"""Realizing tensor nodes: schedule them, give every BUFFER node its device Buffer, run the kernels."""
from __future__ import annotations

import weakref

from tg_core.device import Buffer, Device
from tg_core.schedule import create_schedule
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

# the device memory behind each BUFFER node; it lives as long as the node does
_buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()


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


def realize(targets: list[UOp], var_vals: dict[str, int] | None = None, devices: list[str] | None = None) -> dict[UOp, UOp]:
    """Compute `targets` (a target with no buffer in its graph goes on its entry of `devices`); returns
    each target's BUFFER node."""
    items, out = create_schedule(targets, devices)
    for ast, nodes in items:
        bufs = [buffer_of(n) for n in nodes]
        if ast.op is Ops.COPY:
            bufs[0].copy_from(bufs[1])
            continue
        for b in bufs:
            b.ensure_allocated()
        Device[bufs[0].device].get_runner(ast)(bufs, var_vals or {})
    return out
