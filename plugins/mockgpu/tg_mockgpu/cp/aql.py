"""The AQL packet processor of a mock compute queue (amd.md 3.4).

The ring holds 64-byte packets; the read pointer (`read_dispatch_id`, a u64 in packets) advances past each packet
once it has completed, and `run(doorbell)` processes packets up to and including index `doorbell` (the index of
the last packet written). Packets:

- KERNEL_DISPATCH (type 2): the wave state comes from the 64-byte kernel descriptor at `kernel_object` (RSRC
  words, entry offset, the user SGPR fields it enables: dispatch ptr = the packet's address, queue ptr = the
  queue descriptor, kernarg ptr = `kernarg_address`), LDS from `group_segment_size`; a kernel whose
  `private_segment_size` is non-zero runs with the scratch the queue descriptor (amd_queue_t at `queue_va`)
  programs, and one needing more per work-item than it gives is refused naming both sizes; the grid is
  `grid_size / workgroup_size` workgroups. It runs through the same launcher
  as PM4's DISPATCH_DIRECT (launch.py), as the register state that descriptor would have written;
- VENDOR_SPECIFIC (type 0) with format 1: the embedded INDIRECT_BUFFER runs on a PM4 engine (pm4.py), which may
  stall at a wait and resume;
- INVALID (type 1): the packet is not written yet: the processor stops there.

The barrier bit asks that a packet start after the previous ones completed: this processor runs one packet at a
time to completion, so every packet is ordered so. The completion signal is not decremented (tg never sets one).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tg_amd.interface import DESCRIPTOR_SIZE, USER_SGPR_FIELDS, KernelDescriptor
from tg_mockgpu.cp.memory import Memory, PacketError, dwords, read, read64, write64
from tg_mockgpu.cp.perf import PERFCOUNT_ENABLE, THREAD_TRACE_ENABLE
from tg_mockgpu.cp.pm4 import DispatchState, PM4Queue

PACKET = 64
TYPES = {0: "VENDOR_SPECIFIC", 1: "INVALID", 2: "KERNEL_DISPATCH", 3: "BARRIER_AND", 4: "AGENT_DISPATCH",
         5: "BARRIER_OR"}
FORMAT_PM4_IB = 1
# the registers a dispatch's descriptor stands for (absolute dword addresses, amd.md 10)
PGM_LO, PGM_HI, RSRC1, RSRC2, RSRC3, TMPRING = 0x2E0C, 0x2E0D, 0x2E12, 0x2E13, 0x2E28, 0x2E18
NUM_THREAD_X, USER_DATA_0 = 0x2E07, 0x2E40
CS_W32_EN, WAVEFRONT32_BIT = 1 << 15, 10
# the scratch fields of the queue descriptor (amd_queue_t, ROCR's amd_hsa_queue.h; amd.md 3.3): byte offset, size
QUEUE_SCRATCH = {"compute_tmpring_size": (140, 4), "scratch_backing_memory_location": (160, 8),
                 "scratch_backing_memory_byte_size": (168, 8), "scratch_wave64_lane_byte_size": (176, 4)}


@dataclass
class AQLQueue:
    """One AQL queue: `ring_packets` packets at `ring`, its read_dispatch_id at `rptr`, the queue descriptor at
    `queue_va` (what a dispatch's queue ptr points at), and the launcher of its kernels."""
    name: str
    mem: Memory
    ring: int
    ring_packets: int
    rptr: int
    queue_va: int = 0
    launch: Callable[[DispatchState], None] | None = None
    xccs: int = 1
    interrupt: Callable[[int], None] | None = None   # the vendor packets' RELEASE_MEM interrupts
    pm4: PM4Queue = field(init=False)
    dispatch_id: int = 0

    def __post_init__(self) -> None:
        self.pm4 = PM4Queue(f"{self.name} (PM4 in AQL)", self.mem, 0, 0, None, self.launch, self.xccs,
                            self.interrupt)
        write64(self.mem, self.rptr, 0)

    @property
    def stalled(self) -> tuple[int, int] | None:
        return self.pm4.stalled

    @property
    def read_pointer(self) -> int:
        return read64(self.mem, self.rptr)

    def run(self, doorbell: int) -> bool:
        """Packets up to index `doorbell`; True when idle, False when stalled (at a PM4 wait)."""
        r = self.read_pointer
        while r <= doorbell:
            va = self.ring + (r % self.ring_packets) * PACKET
            w = dwords(self.mem, va, 16)
            kind = w[0] & 0xFF
            name = TYPES.get(kind, "unknown")

            def bad(why: str, w0: int = w[0], kind: int = kind, name: str = name, at: int = r) -> PacketError:
                return PacketError(self.name, f"the ring of {self.name} (packet {at})",
                                   (at % self.ring_packets) * 16, w0, kind, name, why)
            if name == "INVALID":
                return True
            if name == "KERNEL_DISPATCH":
                self._dispatch(va, w, bad)
            elif name == "VENDOR_SPECIFIC":
                fmt = w[0] >> 16
                if fmt != FORMAT_PM4_IB or w[1] != 0xC0023F00:
                    raise bad(f"vendor format {fmt} with first dword {w[1]:#x}; the mock runs format 1 "
                              "(amd_aql_pm4_ib_packet_t: an INDIRECT_BUFFER 0xc0023f00)")
                if not w[4] >> 23 & 1:
                    raise bad("its INDIRECT_BUFFER lacks the VALID bit")
                if not self.pm4.run_ib(w[2] | (w[3] << 32), w[4] & 0xFFFFF):
                    return False
            else:
                raise bad(f"packet type {kind}; the mock runs KERNEL_DISPATCH (2) and VENDOR_SPECIFIC (0)")
            r += 1
            write64(self.mem, self.rptr, r)
        return True

    def _dispatch(self, va: int, w: tuple[int, ...], bad: Callable[[str], PacketError]) -> None:
        if self.launch is None:
            raise bad("this queue has no launcher (no GPU to run kernels on)")
        local = (w[1] & 0xFFFF, w[1] >> 16, w[2] & 0xFFFF)
        items = w[3:6]
        if any(x == 0 for x in local) or any(g % x for g, x in zip(items, local)):
            raise bad(f"grid {tuple(items)} work-items is not a whole number of {local} workgroups")
        private, group = w[6], w[7]
        kobj, kernarg = w[8] | (w[9] << 32), w[10] | (w[11] << 32)
        kd = KernelDescriptor.from_bytes(read(self.mem, kobj, DESCRIPTOR_SIZE))
        code = kobj + kd.kernel_code_entry_byte_offset
        if code & 0xFF:
            raise bad(f"kernel code at {code:#x} (descriptor {kobj:#x}) is not 256-byte aligned")
        self.dispatch_id += 1
        values = {"dispatch_ptr": va, "queue_ptr": self.queue_va, "kernarg_segment_ptr": kernarg,
                  "dispatch_id": self.dispatch_id}
        user = [0] * kd.user_sgpr_count
        for fname, at in kd.user_sgprs.items():
            n = USER_SGPR_FIELDS[fname][1]
            if fname in values:
                user[at:at + 2] = [values[fname] & 0xFFFFFFFF, values[fname] >> 32]
            elif fname == "private_segment_size":
                user[at] = private
            elif at + n > len(user):
                raise bad(f"descriptor at {kobj:#x} enables {fname} past USER_SGPR_COUNT {kd.user_sgpr_count}")
        tmpring, scratch = self._scratch(private, kobj, bad) if private else (1 | (1 << 12), ())
        regs = {PGM_LO: (code >> 8) & 0xFFFFFFFF, PGM_HI: code >> 40, RSRC1: kd.compute_pgm_rsrc1,
                RSRC2: kd.compute_pgm_rsrc2 | ((-(-max(group, kd.group_segment_fixed_size) // 512)) << 15),
                RSRC3: kd.compute_pgm_rsrc3, TMPRING: tmpring,
                **{NUM_THREAD_X + i: x for i, x in enumerate(local)},
                **{USER_DATA_0 + i: u for i, u in enumerate(user)},
                # what the vendor packets programmed stays in the SH registers the packet processor dispatches with
                **{r: self.pm4.regs[0][r] for r in (PERFCOUNT_ENABLE, THREAD_TRACE_ENABLE) if r in self.pm4.regs[0]}}
        grid = (items[0] // local[0], items[1] // local[1], items[2] // local[2])
        w32 = CS_W32_EN if kd.kernel_code_properties >> WAVEFRONT32_BIT & 1 else 0
        self.launch(DispatchState(self.name, regs, grid, 0x5 | w32, scratch))

    def _scratch(self, private: int, kobj: int, bad: Callable[[str], PacketError]) -> tuple[int, tuple[int, ...]]:
        """The TMPRING_SIZE and scratch base a dispatch needing `private` bytes per work-item runs with: what the
        queue descriptor programs (the hardware takes scratch from it, not from the packet)."""
        if not self.queue_va:
            raise bad(f"the kernel (descriptor {kobj:#x}) needs {private} bytes of scratch per work-item and this "
                      "queue has no queue descriptor (amd_queue_t) to hold scratch")
        f = {k: int.from_bytes(read(self.mem, self.queue_va + at, n), "little") for k, (at, n) in QUEUE_SCRATCH.items()}
        lane, base, size = (f["scratch_wave64_lane_byte_size"], f["scratch_backing_memory_location"],
                            f["scratch_backing_memory_byte_size"])
        if lane < private or not base or size < lane * 64:
            raise bad(f"the kernel (descriptor {kobj:#x}) needs {private} bytes of scratch per work-item; the queue "
                      f"descriptor at {self.queue_va:#x} programs {lane} (scratch_wave64_lane_byte_size) in "
                      f"{size} bytes at {base:#x} (scratch_backing_memory_byte_size/_location)")
        per_wave = -(-lane * 64 // 256)            # TMPRING WAVESIZE: 256-byte units per 64 lanes
        waves = max(1, min(size // (per_wave * 256), 0xFFF))
        return waves | (per_wave << 12), (base,)
