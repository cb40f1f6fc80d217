"""Running tg-amd's queue rules end to end without a device: queue ops are encoded (tg-amd's pm_encode + core's
pm_hcq_encode), lowered (tg-amd's pm_lower), linked onto a test memory (every placeholder a region of it), and the
host program runs; its doorbells run the mock's command processors.

Also an independent PM4 / SDMA decoder: the packet layouts and register offsets as amd.md's tables give them,
written here (not imported from the encoder or the processors)."""
from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tg_core.hcq import ops as q
from tg_core.hcq.encode import pm_hcq_encode
from tg_core.hcq.host import HostProgram
from tg_core.hcq.link import _LinkCtx, flatten, pm_link
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import graph_rewrite
from tg_core.uop.uop import UOp
from tg_amd.queues import rules
from tg_mockgpu.cp.aql import AQLQueue
from tg_mockgpu.cp.memory import PagedMemory
from tg_mockgpu.cp.pm4 import PM4Queue
from tg_mockgpu.cp.sdma import SDMAQueue

DEV = "AMD"
COMPUTE, COPY = q.Queue(DEV, "COMPUTE:0"), q.Queue(DEV, "COPY:0")

# ---- amd.md's tables, written for the tests --------------------------------------------------------------

PM4_OPS = {0x10: ("NOP", None), 0x15: ("DISPATCH_DIRECT", 4), 0x23: ("PRED_EXEC", 1), 0x3C: ("WAIT_REG_MEM", 6),
           0x3F: ("INDIRECT_BUFFER", 3), 0x40: ("COPY_DATA", 5), 0x46: ("EVENT_WRITE", 1),
           0x49: ("RELEASE_MEM", 7), 0x58: ("ACQUIRE_MEM", 7), 0x76: ("SET_SH_REG", None)}
# amd.md 10: register -> absolute dword address (GC segment 0 base 0x1260 + offset)
SH_REGS = {0x2E04: "COMPUTE_START_X", 0x2E0C: "COMPUTE_PGM_LO", 0x2E10: "COMPUTE_DISPATCH_SCRATCH_BASE_LO",
           0x2E12: "COMPUTE_PGM_RSRC1", 0x2E15: "COMPUTE_RESOURCE_LIMITS", 0x2E18: "COMPUTE_TMPRING_SIZE",
           0x2E1B: "COMPUTE_RESTART_X", 0x2E28: "COMPUTE_PGM_RSRC3", 0x2E40: "COMPUTE_USER_DATA_0"}
SDMA_OPS = {0: ("NOP", 1), 1: ("COPY", 7), 5: ("FENCE", 4), 6: ("TRAP", 2), 8: ("POLL_REGMEM", 6),
            13: ("TIMESTAMP", 3)}


@dataclass
class Packet:
    name: str
    payload: list[int]
    reg: str | None = None       # SET_SH_REG: the first register's name


def decode_pm4(words: list[int]) -> list[Packet]:
    out, i = [], 0
    while i < len(words):
        h = words[i]
        assert h >> 30 == 3, f"dword {i}: header {h:#x} is not type 3"
        assert h & 0xFF == 0, f"dword {i}: header {h:#x} has low bits set"
        n = ((h >> 16) & 0x3FFF) + 1
        name, fixed = PM4_OPS[(h >> 8) & 0xFF]
        assert fixed is None or n == fixed, f"{name} with {n} payload dwords, amd.md says {fixed}"
        payload = words[i + 1:i + 1 + n]
        assert len(payload) == n, f"{name} at dword {i} is cut short"
        reg = None
        if name == "SET_SH_REG":
            reg = SH_REGS[0x2C00 + payload[0]]
        out.append(Packet(name, payload, reg))
        i += 1 + n
    return out


def decode_sdma(words: list[int]) -> list[Packet]:
    out, i = [], 0
    while i < len(words):
        name, n = SDMA_OPS[words[i] & 0xFF]
        out.append(Packet(name, words[i:i + n]))
        i += n
    return out


# ---- the harness ------------------------------------------------------------------------------------------

@dataclass(eq=False)
class Region:
    va: int
    nbytes: int
    arr: np.ndarray | None       # None: scattered pages the host cannot view


class _Batch:
    def __init__(self) -> None:
        self.uid = next(_uids)


_uids = itertools.count(1)


@dataclass
class _Ctx:
    batch: Any


@dataclass
class Harness:
    """A test memory, the AMD queue rules, and a PM4 and an SDMA processor on the queues' rings."""
    xccs: int = 1
    compute: str = "pm4"              # the compute queue's kind: "pm4" or "aql"
    aql_ring_packets: int = 8
    pm4_ring_dwords: int = 64
    sdma_ring_bytes: int = 256
    max_copy: int = 1 << 30
    launch: Any = None
    mem: Any = None
    regions: dict[tuple, Region] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mem is None:
            self.mem = PagedMemory()
        if self.compute == "aql":
            ring, _, rptr, _, _ = rules.ring_buffers(COMPUTE, 64 * self.aql_ring_packets)
            self.pm4: Any = AQLQueue(str(COMPUTE), self.mem, self.region(ring).va, self.aql_ring_packets,
                                     self.region(rptr).va, launch=self.launch, xccs=self.xccs)
        else:
            ring, _, rptr, _, _ = rules.ring_buffers(COMPUTE, 4 * self.pm4_ring_dwords)
            self.pm4 = PM4Queue(str(COMPUTE), self.mem, self.region(ring).va, self.pm4_ring_dwords,
                                self.region(rptr).va, launch=self.launch, xccs=self.xccs)
        ring, _, rptr, _, _ = rules.ring_buffers(COPY, self.sdma_ring_bytes)
        self.sdma = SDMAQueue(str(COPY), self.mem, self.region(ring).va, self.sdma_ring_bytes, self.region(rptr).va)
        self.rang: list[q.Queue] = []

    def region(self, ph: UOp, scattered: bool = False) -> Region:
        key = (ph.tag, ph.arg)
        r = self.regions.get(key)
        if r is None:
            n = ph.arg[2]
            if scattered:
                r = Region(self.mem.alloc(n), n, None)
            else:
                va, arr = self.mem.alloc_host(n)
                arr[:] = 0
                r = Region(va, n, arr)
            self.regions[key] = r
        return r

    def scattered(self, tag: str, nbytes: int, offset: int = 0) -> UOp:
        """A buffer on scattered pages starting `offset` bytes into its first page."""
        ph = q.placeholder(tag, nbytes, DEV)
        self.regions[(ph.tag, ph.arg)] = Region(self.mem.alloc(nbytes + offset) + offset, nbytes, None)
        return ph

    def host(self, tag: str, nbytes: int) -> UOp:
        ph = q.placeholder(tag, nbytes, DEV)
        self.region(ph)
        return ph

    def lower(self, queue: q.Queue, ops: list[UOp]) -> UOp:
        ctx = _Ctx(_Batch())
        sink = UOp(Ops.SINK, q.linear().dtype, (q.submit(queue, ops),))
        enc = graph_rewrite(sink, rules.pm_encode(self.xccs, self.max_copy) + pm_hcq_encode, ctx)
        return graph_rewrite(enc, rules.pm_lower(self.compute, self.pm4_ring_dwords, self.sdma_ring_bytes, self.aql_ring_packets), ctx)

    def submit(self, queue: q.Queue, ops: list[UOp]) -> HostProgram:
        """Encode, lower, link and run one submission; returns its host program."""
        body = q.linear(*flatten(self.lower(queue, ops)))
        mapping = {}
        for u in body.toposort():
            if u.op is Ops.PARAM and isinstance(u.arg, tuple) and u.arg[0] == "hcq":
                mapping[u] = q.mem(self.region(u))  # type: ignore[arg-type]
        linked = graph_rewrite(body, pm_link, _LinkCtx(None, [], address=lambda r: r.va, mapping=mapping))
        prog = HostProgram(flatten(linked), lambda ref: ref.arg.buf.arr, self.rang.append)
        prog.run()
        return prog

    def doorbell(self, queue: q.Queue) -> int:
        _, _, _, bell, _ = rules.ring_buffers(queue, 0)
        return int(self.region(bell).arr.view(np.uint64)[0])  # type: ignore[union-attr]

    def run(self, queue: q.Queue) -> bool:
        """What the doorbell callback does: the queue's processor runs up to the doorbell value."""
        return (self.pm4 if queue.kind == "COMPUTE" else self.sdma).run(self.doorbell(queue))

    def ring_words(self, queue: q.Queue) -> list[int]:
        n = self.sdma_ring_bytes if queue.kind == "COPY" else \
            64 * self.aql_ring_packets if self.compute == "aql" else 4 * self.pm4_ring_dwords
        ring = rules.ring_buffers(queue, n)[0]
        return [int(w) for w in self.regions[(ring.tag, ring.arg)].arr.view(np.uint32)]

    def read(self, ph: UOp, offset: int, nbytes: int) -> bytes:
        from tg_mockgpu.cp.memory import read
        return read(self.mem, self.region(ph).va + offset, nbytes)

    def u64(self, ph: UOp, offset: int = 0) -> int:
        return struct.unpack("<Q", self.read(ph, offset, 8))[0]

    def ib_words(self, packet: Packet) -> list[int]:
        """The command buffer an INDIRECT_BUFFER packet points at."""
        from tg_mockgpu.cp.memory import read
        va, n = packet.payload[0] | (packet.payload[1] << 32), packet.payload[2] & 0xFFFFF
        return list(struct.unpack(f"<{n}I", read(self.mem, va, 4 * n)))
