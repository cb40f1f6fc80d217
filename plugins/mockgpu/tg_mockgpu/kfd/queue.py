"""A queue of the mock KFD driver: what CREATE_QUEUE was given, and the doorbell hook the command processors use.

`MockQueue.on_doorbell` is the seam: the driver calls it with the value the host stored to the queue's doorbell
(after the store landed in the doorbell page). CREATE_QUEUE attaches the queue's command processor there
(kfd/engines.py); with None (detached) a doorbell write only records `last_doorbell`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from tg_mockgpu.kfd.vm import GPUView

QueueKind = Literal["pm4", "aql", "sdma"]
KIND_OF_TYPE: dict[int, QueueKind] = {0: "pm4", 1: "sdma", 2: "aql"}  # CREATE_QUEUE queue_type (amd.md 6)


@dataclass
class MockQueue:
    """`ring`/`ring_size`: the ring's GPU VA and bytes; `rptr`/`wptr`: GPU VAs of the 64-bit read and write
    pointers (host memory: `read_rptr`/`write_rptr`/`read_wptr` access them); `gpu`: the mock GPU index;
    `xcc_id`: the XCC of `queue_percentage`'s bits 8+; `eop`/`cwsr`: compute queues' buffers (VA, size);
    `mem`: the GPU's view of memory, through which every access of the queue's engine goes."""
    mem: GPUView
    queue_id: int
    kind: QueueKind
    gpu: int
    ring: int
    ring_size: int
    rptr: int
    wptr: int
    doorbell_offset: int
    xcc_id: int = 0
    priority: int = 7
    eop: tuple[int, int] = (0, 0)
    cwsr: tuple[int, int] = (0, 0)
    on_doorbell: Callable[[MockQueue, int], None] | None = None
    last_doorbell: int | None = None
    doorbells: int = field(default=0)

    def read_wptr(self) -> int:
        return self.mem.read64(self.wptr)

    def read_rptr(self) -> int:
        return self.mem.read64(self.rptr)

    def write_rptr(self, value: int) -> None:
        self.mem.write64(self.rptr, value)

    def ring_bytes(self, offset: int, size: int) -> bytes:
        """`size` bytes of the ring from byte `offset` (wrapping at the ring's end)."""
        offset %= self.ring_size
        first = min(size, self.ring_size - offset)
        return self.mem.read(self.ring + offset, first) + (self.mem.read(self.ring, size - first)
                                                            if size > first else b"")

    def doorbell(self, value: int) -> None:
        self.last_doorbell, self.doorbells = value, self.doorbells + 1
        if self.on_doorbell is not None:
            self.on_doorbell(self, value)
