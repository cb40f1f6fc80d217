"""Hardware queues through CREATE_QUEUE (amd.md 6): PM4 compute, AQL compute and SDMA.

Each queue has a ring (uncached GTT), a pointer page (GTT; rptr at +128, wptr at +56, 64-bit each), and, for
compute queues, an EOP buffer (0x1000) and a CWSR (context save/restore) area sized from the GPU's CUs and waves:
wg_data = round_page((0x60000 VGPR + 0x4000 SGPR + 0x10000 LDS + 0x1000 HWREG) * CUs), ctl_stack =
round_page(12 * waves + 48), debug = round64(waves * 32), waves = CUs * max_waves_per_simd * 2; the ioctl is told
ctx_save_restore_size = wg_data + ctl_stack, the buffer is round_page((that + debug) * XCCs).
The host writes the wptr first, then the doorbell (a 64-bit store through the OS layer's `write64`).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from tg_amd.kfd import ioctl as K
from tg_amd.kfd.driver import KFDMemory, round_page

if TYPE_CHECKING:
    from tg_amd.kfd.driver import KFDGPU

QueueKind = Literal["pm4", "aql", "sdma"]
QUEUE_TYPES: dict[str, int] = {"pm4": K.QueueType.COMPUTE, "aql": K.QueueType.COMPUTE_AQL, "sdma": K.QueueType.SDMA}
POINTER_PAGE = 0x1000
RPTR_OFFSET, WPTR_OFFSET = 128, 56
EOP_SIZE = 0x1000
DEFAULT_RING = 16 << 20
DEFAULT_PRIORITY = 7
# per-CU context-save bytes on gfx11: VGPRs, SGPRs, LDS, hardware registers
CWSR_PER_CU = 0x60000 + 0x4000 + 0x10000 + 0x1000


def round64(n: int) -> int:
    return (n + 63) & ~63


@dataclass(frozen=True)
class CWSRSizes:
    ctx_save_restore_size: int   # told to the ioctl
    ctl_stack_size: int
    buffer_size: int             # allocated


def cwsr_sizes(cus: int, max_waves_per_simd: int, xccs: int) -> CWSRSizes:
    waves = cus * max_waves_per_simd * 2
    wg_data, ctl_stack = round_page(CWSR_PER_CU * cus), round_page(12 * waves + 48)
    ctx = wg_data + ctl_stack
    return CWSRSizes(ctx, ctl_stack, round_page((ctx + round64(waves * 32)) * xccs))


@dataclass
class KFDQueue:
    """A created queue: `ring` is host-visible (the CPU writes packets there), `rptr`/`wptr` the CPU addresses
    of the 64-bit read and write pointers, `doorbell` the CPU address of its doorbell."""
    gpu: KFDGPU
    kind: QueueKind
    queue_id: int
    ring: KFDMemory
    pointers: KFDMemory
    rptr: int
    wptr: int
    doorbell: int
    eop: KFDMemory | None
    cwsr: KFDMemory | None

    def read_rptr(self) -> int:
        return ctypes.c_uint64.from_address(self.rptr).value

    def write_wptr(self, value: int) -> None:
        ctypes.c_uint64.from_address(self.wptr).value = value

    def ring_doorbell(self, value: int) -> None:
        self.gpu.os.write64(self.doorbell, value)

    def destroy(self) -> None:
        self.gpu.ioctl("DESTROY_QUEUE", queue_id=self.queue_id)
        self.gpu.queues.remove(self)
        for mem in (self.ring, self.pointers, self.eop, self.cwsr):
            if mem is not None:
                self.gpu.free(mem)


def create_queue(gpu: KFDGPU, kind: QueueKind, ring_size: int = DEFAULT_RING, xcc_id: int = 0,
                 priority: int = DEFAULT_PRIORITY) -> KFDQueue:
    """Allocate a queue's memory and create it on `gpu`."""
    if kind not in QUEUE_TYPES:
        raise ValueError(f"queue kind {kind!r}: allowed {', '.join(QUEUE_TYPES)}")
    if ring_size < 0x1000 or ring_size & (ring_size - 1):
        raise ValueError(f"a ring is a power of two of at least 4096 bytes, got {ring_size}")
    if not 0 <= priority <= K.MAX_QUEUE_PRIORITY:
        raise ValueError(f"queue priority {priority}: allowed 0..{K.MAX_QUEUE_PRIORITY}")
    ring = gpu.alloc(ring_size, "gtt")
    pointers = gpu.alloc(POINTER_PAGE, "gtt")
    eop = cwsr = None
    sizes = CWSRSizes(0, 0, 0)
    if kind != "sdma":
        eop = gpu.alloc(EOP_SIZE, "vram")
        p = gpu.node.properties
        sizes = cwsr_sizes(gpu.node.cus, p["max_waves_per_simd"], gpu.node.xccs)
        cwsr = gpu.alloc(sizes.buffer_size, "vram")
    rptr, wptr = pointers.va + RPTR_OFFSET + 8 * xcc_id, pointers.va + WPTR_OFFSET
    q = gpu.ioctl("CREATE_QUEUE", ring_base_address=ring.va, ring_size=ring.size, gpu_id=gpu.gpu_id,
                  queue_type=QUEUE_TYPES[kind], queue_percentage=K.MAX_QUEUE_PERCENTAGE | xcc_id << 8,
                  queue_priority=priority, eop_buffer_address=eop.va if eop else 0,
                  eop_buffer_size=eop.size if eop else 0, ctx_save_restore_address=cwsr.va if cwsr else 0,
                  ctx_save_restore_size=sizes.ctx_save_restore_size, ctl_stack_size=sizes.ctl_stack_size,
                  write_pointer_address=wptr, read_pointer_address=rptr)
    out = KFDQueue(gpu, kind, q.queue_id, ring, pointers, rptr, wptr,
                   gpu.doorbell_address(q.doorbell_offset), eop, cwsr)
    gpu.queues.append(out)
    return out
