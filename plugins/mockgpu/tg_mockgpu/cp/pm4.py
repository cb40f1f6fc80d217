"""The PM4 command processor of a mock compute queue (amd.md 2, 5).

The ring holds type-3 packets (in practice INDIRECT_BUFFERs); the processor reads from its read pointer (in
dwords, modulo the ring size) up to the doorbell value and executes each packet. An INDIRECT_BUFFER runs a
command buffer as a nested frame. Where a WAIT_REG_MEM is not satisfied the processor stops and keeps its frames:
the next `run` resumes at that wait, and the read pointer passes a ring packet only once it has completed (as the
CP's does).

State: SH and UCONFIG registers per XCC (SET_SH_REG writes them; DISPATCH_DIRECT reads XCC 0's, since the mock
runs the whole grid at once). A PRED_EXEC block runs its packets only on the XCCs of its mask: register writes go
to those XCCs' files, memory writes happen once if any selected XCC exists.

The performance monitor's registers (perf.py: GRBM_GFX_INDEX, the PMC counters, SQ_THREAD_TRACE_*) belong to
each XCC's `PerfUnit`, shared by the GPU's queues through its launcher (`perf_of(xcc)`): writes to them
(SET_UCONFIG_REG, COPY_DATA to a register) go to the selected XCCs' units, reads (COPY_DATA SRC_SEL 0 or 4,
register WAIT_REG_MEM) come from the first selected XCC's; EVENT_WRITE hands the event type (the thread-trace
marker and finish) to the selected XCCs' units. Dispatches run on XCC 0, so the other XCCs' counters stay 0
and their traces hold only a header.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tg_mockgpu.cp.memory import Memory, PacketError, dwords, read32, read64, write32, write64
from tg_mockgpu.cp.perf import PerfUnit

# the processor's own view of the packets and registers (amd.md 2.2, 10): absolute dword register addresses
OPCODES = {0x10: "NOP", 0x15: "DISPATCH_DIRECT", 0x23: "PRED_EXEC", 0x3C: "WAIT_REG_MEM", 0x3F: "INDIRECT_BUFFER",
           0x40: "COPY_DATA", 0x46: "EVENT_WRITE", 0x49: "RELEASE_MEM", 0x58: "ACQUIRE_MEM", 0x76: "SET_SH_REG",
           0x79: "SET_UCONFIG_REG"}
PAYLOAD = {"DISPATCH_DIRECT": (4,), "PRED_EXEC": (1,), "WAIT_REG_MEM": (6,), "INDIRECT_BUFFER": (3,),
           "COPY_DATA": (5,), "EVENT_WRITE": (1, 3), "RELEASE_MEM": (7,), "ACQUIRE_MEM": (6, 7)}
SH_BASE, SH_END, UCONFIG_BASE = 0x2C00, 0x3000, 0xC000
HDP_FLUSH_REQ, HDP_FLUSH_DONE = 0xE26, 0xE27
SCRATCH_BASE_LO = 0x2E10      # COMPUTE_DISPATCH_SCRATCH_BASE_LO/HI: each XCC's scratch, >> 8
MAX_IB_DEPTH = 2              # the ring's IB, and one chained level inside it
CLOCKS_PER_NS = 0.1           # GPU clock ticks: 100 per microsecond (amd.md 5)


def gpu_clock() -> int:
    return int(time.perf_counter_ns() * CLOCKS_PER_NS)


@dataclass
class Frame:
    """A stream being executed: the ring (modulo its size, up to `end`) or a command buffer."""
    where: str
    base: int
    pos: int                  # dwords from the ring's start (monotonic) or the buffer's
    end: int
    ring_dwords: int = 0      # 0: not a ring
    pred: tuple[int, int] | None = None  # (XCC mask, dword where the PRED_EXEC block ends)

    def va(self, i: int) -> int:
        return self.base + 4 * (i % self.ring_dwords if self.ring_dwords else i)

    def read(self, mem: Memory, i: int, n: int) -> list[int]:
        if not self.ring_dwords:
            return list(dwords(mem, self.va(i), n))
        return [dwords(mem, self.va(i + k), 1)[0] for k in range(n)]  # may straddle the ring's end


@dataclass
class PM4Queue:
    """One PM4 queue: its ring (`ring_dwords` dwords at `ring`), the read pointer it publishes (a u64 at `rptr`),
    and what its DISPATCH_DIRECTs launch (`launch(state)`, launch.py) and its interrupts call."""
    name: str
    mem: Memory
    ring: int
    ring_dwords: int
    rptr: int | None            # None: no ring of its own (the PM4 engine of an AQL queue)
    launch: Callable[[DispatchState], None] | None = None
    xccs: int = 1
    interrupt: Callable[[int], None] | None = None
    regs: list[dict[int, int]] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    stalled: tuple[int, int] | None = None  # (address, reference) of the wait it stopped at
    mmio: dict[int, int] = field(default_factory=dict)
    perf: list[PerfUnit] = field(default_factory=list)  # per XCC: the launcher's (`perf_of`), else its own

    def __post_init__(self) -> None:
        if self.xccs < 1:
            raise ValueError(f"{self.name}: a part has at least one XCC, not {self.xccs}")
        if not self.perf:
            perf_of = getattr(self.launch, "perf_of", None)
            self.perf = [perf_of(x) if perf_of is not None else PerfUnit(self.mem) for x in range(self.xccs)]
        self.regs = [{} for _ in range(self.xccs)]
        if self.rptr is not None:
            write64(self.mem, self.rptr, 0)

    @property
    def read_pointer(self) -> int:
        if self.rptr is None:
            raise ValueError(f"{self.name} has no ring (it runs indirect buffers given by run_ib)")
        return read64(self.mem, self.rptr)

    def run(self, doorbell: int) -> bool:
        """Execute the ring up to the doorbell value (dwords); True when idle, False when stalled at a wait."""
        if not self.frames:
            r = self.read_pointer
            if r >= doorbell:
                return True
            self.frames = [Frame(f"the ring of {self.name}", self.ring, r, doorbell, self.ring_dwords)]
        self.frames[0].end = max(self.frames[0].end, doorbell)
        return self._drain()

    def run_ib(self, va: int, ndwords: int) -> bool:
        """An indirect buffer given from outside a ring (an AQL queue's vendor packet): True when done, False when
        stalled (call again with the same buffer to resume)."""
        if not self.frames:
            self.frames = [Frame(f"the indirect buffer at {va:#x}", va, 0, ndwords)]
        return self._drain()

    def _drain(self) -> bool:
        while self.frames:
            f = self.frames[-1]
            if f.pos >= f.end:
                self.frames.pop()
                if len(self.frames) == 1 and self.frames[0].ring_dwords:  # an IB finished: its ring packet is done
                    self._publish()
                continue
            depth = len(self.frames)
            if not self._step(f):
                return False
            if depth == 1 and len(self.frames) == 1 and f.ring_dwords:  # a ring packet that started no IB
                self._publish()
        return True

    def _publish(self) -> None:
        """The read pointer passes the ring packets that completed (the host's room check reads it)."""
        if self.rptr is not None:
            write64(self.mem, self.rptr, self.frames[0].pos)

    def _active(self, f: Frame) -> int:
        """The XCCs the current packet runs on."""
        every = (1 << self.xccs) - 1
        if f.pred is not None and f.pos >= f.pred[1]:
            f.pred = None
        return every if f.pred is None else f.pred[0] & every

    def _step(self, f: Frame) -> bool:
        at = f.pos
        h = f.read(self.mem, at, 1)[0]
        kind, op, n = h >> 30, (h >> 8) & 0xFF, ((h >> 16) & 0x3FFF) + 1
        name = OPCODES.get(op, "unknown")

        def bad(why: str) -> PacketError:
            return PacketError(self.name, f.where, at, h, op, name, why)
        if kind == 2:   # a type-2 filler: one dword, nothing to do
            f.pos += 1
            return True
        if kind != 3:
            raise bad(f"packet type {kind}; the compute queue runs type-3 packets")
        if name == "unknown":
            raise bad("unknown opcode")
        if name in PAYLOAD and n not in PAYLOAD[name]:
            raise bad(f"{n} payload dwords; {name} takes {' or '.join(map(str, PAYLOAD[name]))}")
        if at + 1 + n > f.end:
            raise bad(f"{n} payload dwords run past the end of the stream (dword {f.end})")
        p = f.read(self.mem, at + 1, n)
        active = self._active(f)
        if active or name == "PRED_EXEC":
            if not self._execute(f, name, p, active, bad):
                return False
        f.pos = at + 1 + n
        return True

    def _execute(self, f: Frame, name: str, p: list[int], active: int, bad: Callable[[str], PacketError]) -> bool:
        if name == "SET_SH_REG" or name == "SET_UCONFIG_REG":
            base = SH_BASE if name == "SET_SH_REG" else UCONFIG_BASE
            reg = base + p[0]
            if name == "SET_SH_REG" and not SH_BASE <= reg + len(p) - 2 < SH_END:
                raise bad(f"registers {reg:#x}.. are outside the SH window [{SH_BASE:#x}, {SH_END:#x})")
            for x in range(self.xccs):
                if active >> x & 1:
                    for i, v in enumerate(p[1:]):
                        self._set(x, reg + i, v, bad)
        elif name == "PRED_EXEC":
            mask, count = p[0] >> 24, p[0] & 0x3FFF
            end = f.pos + 2 + count
            if end > f.end:
                raise bad(f"the block of {count} dwords runs past the end of the stream (dword {f.end})")
            if f.ring_dwords:
                raise bad("PRED_EXEC works only inside an indirect buffer")
            f.pred = (mask, end)
        elif name == "INDIRECT_BUFFER":
            va, size = p[0] | (p[1] << 32), p[2] & 0xFFFFF
            if not p[2] >> 23 & 1 or va & 3 or size == 0:
                raise bad(f"IB at {va:#x} of {size} dwords: needs the VALID bit, dword alignment and a size")
            if len(self.frames) > MAX_IB_DEPTH:
                raise bad(f"indirect buffers nest at most {MAX_IB_DEPTH} deep")
            # the caller moves past this packet now; the ring's read pointer passes it when the IB is done
            self.frames.append(Frame(f"the indirect buffer at {va:#x}", va, 0, size))
        elif name == "WAIT_REG_MEM":
            return self._wait(p, active, bad)
        elif name == "RELEASE_MEM":
            self._release(p, bad)
        elif name == "COPY_DATA":
            self._copy_data(p, active, bad)
        elif name == "EVENT_WRITE":
            for x in range(self.xccs):
                if active >> x & 1:
                    self.perf[x].event(p[0] & 0x3F)
        elif name == "DISPATCH_DIRECT":
            if self.launch is None:
                raise bad("this queue has no launcher (no GPU to run kernels on)")
            scratch = tuple((r.get(SCRATCH_BASE_LO, 0) | r.get(SCRATCH_BASE_LO + 1, 0) << 32) << 8 for r in self.regs)
            self.launch(DispatchState(self.name, dict(self.regs[0]), (p[0], p[1], p[2]), p[3], scratch))
        # NOP, ACQUIRE_MEM and EVENT_WRITE's flushes: ordering and caches, which the mock's in-order, coherent
        # memory has already
        return True

    def _set(self, x: int, reg: int, value: int, bad: Callable[[str], PacketError]) -> None:
        """A register write on XCC x: the performance monitor's registers go to that XCC's PerfUnit."""
        if not PerfUnit.owns(reg):
            self.regs[x][reg] = value
            return
        try:
            self.perf[x].write(reg, value)
        except ValueError as e:
            raise bad(str(e)) from None

    def _get(self, reg: int, active: int, bad: Callable[[str], PacketError]) -> int:
        """A register read on the first XCC of `active`: its file, its PerfUnit's registers, or the MMIO the mock
        answers."""
        x = (active & -active).bit_length() - 1
        if PerfUnit.owns(reg):
            try:
                return self.perf[x].read(reg)
            except ValueError as e:
                raise bad(str(e)) from None
        return self.regs[x].get(reg, self.mmio.get(reg, 0))

    def _compare(self, fn: int, value: int, ref: int, bad: Callable[[str], PacketError]) -> bool:
        ops = {0: lambda: True, 1: lambda: value < ref, 2: lambda: value <= ref, 3: lambda: value == ref,
               4: lambda: value != ref, 5: lambda: value >= ref, 6: lambda: value > ref}
        if fn not in ops:
            raise bad(f"compare function {fn}; functions are 0..6")
        return ops[fn]()

    def _wait(self, p: list[int], active: int, bad: Callable[[str], PacketError]) -> bool:
        fn, mem_space, operation = p[0] & 7, p[0] >> 4 & 1, p[0] >> 6 & 3
        ref, mask = p[3], p[4]
        if mem_space:
            addr = p[1] | (p[2] << 32)
            if addr & 3:
                raise bad(f"wait address {addr:#x} is not dword aligned")
            value = read32(self.mem, addr)
        else:
            if operation == 1:   # write then wait: the HDP flush request completes at once in the mock
                self.mmio[p[1]] = ref
                if p[1] == HDP_FLUSH_REQ:
                    self.mmio[HDP_FLUSH_DONE] = ref
            # WAIT_REG_MEM polls the register of dword 2; write-then-wait writes dword 2's and polls dword 3's
            reg = p[2] if operation == 1 else p[1]
            addr, value = reg, self._get(reg, active, bad)
        if self._compare(fn, value & mask, ref, bad):
            self.stalled = None
            return True
        self.stalled = (addr, ref)
        return False

    def _release(self, p: list[int], bad: Callable[[str], PacketError]) -> None:
        data_sel, int_sel = p[1] >> 29, p[1] >> 24 & 7
        addr, data = p[2] | (p[3] << 32), p[4] | (p[5] << 32)
        if data_sel == 1:
            write32(self.mem, addr, data)
        elif data_sel == 2:
            write64(self.mem, addr, data)
        elif data_sel == 3:
            write64(self.mem, addr, gpu_clock())
        elif data_sel != 0:
            raise bad(f"DATA_SEL {data_sel}; the mock writes 0 none, 1 32-bit, 2 64-bit, 3 GPU clock")
        if data_sel and addr & (3 if data_sel == 1 else 7):
            raise bad(f"release address {addr:#x} is not aligned for its data")
        if int_sel and self.interrupt is not None:
            self.interrupt(p[6])

    def _copy_data(self, p: list[int], active: int, bad: Callable[[str], PacketError]) -> None:
        src_sel, dst_sel, wide = p[0] & 0xF, p[0] >> 8 & 0xF, p[0] >> 16 & 1
        src, dst = p[1] | (p[2] << 32), p[3] | (p[4] << 32)
        if src_sel in (0, 4):   # a register, or a performance counter register: both by dword address
            value = self._get(p[1], active, bad) | (self._get(p[1] + 1, active, bad) << 32 if wide else 0)
        elif src_sel == 2:
            lo_hi = dwords(self.mem, src, 2 if wide else 1)
            value = lo_hi[0] | (lo_hi[1] << 32 if wide else 0)
        elif src_sel == 5:
            value = src
        elif src_sel in (9, 10):
            value = gpu_clock()
        else:
            raise bad(f"SRC_SEL {src_sel}; the mock reads 0 register, 2 memory, 4 perf counter, 5 immediate, "
                      "9/10 clock")
        value &= (1 << 64) - 1 if wide else 0xFFFFFFFF
        if dst_sel in (0, 4):
            for x in range(self.xccs):
                if active >> x & 1:
                    self._set(x, p[3], value & 0xFFFFFFFF, bad)
                    if wide:
                        self._set(x, p[3] + 1, value >> 32, bad)
        elif dst_sel == 2:
            (write64 if wide else write32)(self.mem, dst, value)
        else:
            raise bad(f"DST_SEL {dst_sel}; the mock writes 0 register, 2 memory, 4 perf counter")


@dataclass(frozen=True)
class DispatchState:
    """What a DISPATCH_DIRECT launches: the queue, XCC 0's registers (absolute addresses), the grid in
    workgroups, the dispatch initiator, and the scratch base address of each XCC (what the queue programmed)."""
    queue: str
    regs: dict[int, int]
    grid: tuple[int, int, int]
    initiator: int
    scratch: tuple[int, ...] = ()
