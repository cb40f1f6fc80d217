"""The SDMA engine of a mock copy queue (amd.md 4).

The ring holds SDMA packets; the read pointer, write pointer and doorbell count bytes and never wrap (the engine
reads at `pointer mod ring size`). A packet's length comes from its opcode; zero dwords are NOPs (the host fills
a ring's tail with them). A packet never straddles the ring's end (the host guarantees it; one that would is an
error). COPY_LINEAR moves bytes a page-bounded run at a time: a run never crosses a 4 KiB page of the source or
of the destination, since neither side's physical pages are contiguous.

Traffic: each queue counts the bytes it copied by (source, destination) `Location`, the memory kind and owning GPU
of each side (given by `locate`, the GPU view's `location`), so a test can tell a peer copy (VRAM of one GPU into
VRAM of another) from one staged through host memory; `gpu_traffic` is the same count kept for the whole GPU
(shared by its SDMA queues, and kept after a queue is destroyed).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tg_mockgpu.cp.memory import PAGE, Memory, PacketError, dwords, read, read32, read64, write, write32, write64
from tg_mockgpu.cp.pm4 import gpu_clock

OPCODES = {0: "NOP", 1: "COPY", 5: "FENCE", 6: "TRAP", 8: "POLL_REGMEM", 13: "TIMESTAMP", 17: "GCR_REQ",
           32: "DUMMY_TRAP"}
LENGTHS = {"NOP": 1, "COPY": 7, "FENCE": 4, "TRAP": 2, "POLL_REGMEM": 6, "TIMESTAMP": 3, "GCR_REQ": 5,
           "DUMMY_TRAP": 1}
SUB_OPS = {"COPY": (0,), "TIMESTAMP": (2,)}   # linear copy; get global timestamp

Location = tuple[str, int]                  # (memory kind: "vram" | "gtt" | "userptr", owning GPU index)
Traffic = dict[tuple[Location, Location], int]  # bytes copied, by (source, destination)


def count(traffic: Traffic, src: Location, dst: Location, n: int) -> None:
    traffic[(src, dst)] = traffic.get((src, dst), 0) + n


@dataclass
class SDMAQueue:
    name: str
    mem: Memory
    ring: int
    ring_bytes: int
    rptr: int
    interrupt: Callable[[int], None] | None = None
    stalled: tuple[int, int] | None = None
    copied: int = 0                 # bytes copied, and the page-bounded runs they took (for tests and stats)
    runs: int = 0
    locate: Callable[[int], Location] | None = None   # where an address is (None: traffic is not counted)
    traffic: Traffic = field(default_factory=dict)    # this queue's bytes by (source, destination) location
    gpu_traffic: Traffic | None = None                # the GPU's count, updated too

    def __post_init__(self) -> None:
        if self.ring_bytes % 4 or self.ring_bytes <= 0:
            raise ValueError(f"{self.name}: an SDMA ring is a positive multiple of 4 bytes, not {self.ring_bytes}")
        write64(self.mem, self.rptr, 0)

    @property
    def read_pointer(self) -> int:
        return read64(self.mem, self.rptr)

    def run(self, doorbell: int) -> bool:
        """Execute up to the doorbell value (bytes); True when idle, False when stalled at a poll."""
        r = self.read_pointer
        while r < doorbell:
            off = r % self.ring_bytes
            h = read32(self.mem, self.ring + off)
            op = h & 0xFF
            name = OPCODES.get(op, "unknown")
            at = off // 4

            def bad(why: str, h: int = h, op: int = op, name: str = name, at: int = at) -> PacketError:
                return PacketError(self.name, f"the ring of {self.name}", at, h, op, name, why)
            if name == "unknown":
                raise bad("unknown opcode")
            n = LENGTHS[name]
            if off + 4 * n > self.ring_bytes:
                raise bad(f"a {n}-dword packet straddles the ring's end ({self.ring_bytes} bytes)")
            if r + 4 * n > doorbell:
                raise bad(f"a {n}-dword packet runs past the doorbell ({doorbell})")
            if name in SUB_OPS and (h >> 8) & 0xFF not in SUB_OPS[name]:
                raise bad(f"sub-op {(h >> 8) & 0xFF}; the mock runs {name} sub-ops {SUB_OPS[name]}")
            p = dwords(self.mem, self.ring + off + 4, n - 1) if n > 1 else ()
            if not self._execute(name, h, p, bad):
                return False
            r += 4 * n
            write64(self.mem, self.rptr, r)
        return True

    def _execute(self, name: str, h: int, p: tuple[int, ...], bad: Callable[[str], PacketError]) -> bool:
        if name == "COPY":
            self.copy(p[4] | (p[5] << 32), p[2] | (p[3] << 32), (p[0] & 0x3FFFFFFF) + 1)
        elif name == "FENCE":
            write32(self.mem, p[0] | (p[1] << 32), p[2])
        elif name == "POLL_REGMEM":
            if not h >> 31:
                raise bad("a register poll; the mock polls memory (MEM_POLL, bit 31)")
            fn, addr = (h >> 28) & 7, p[0] | (p[1] << 32)
            value, ref = read32(self.mem, addr) & p[3], p[2]
            ok = {0: True, 1: value < ref, 2: value <= ref, 3: value == ref, 4: value != ref, 5: value >= ref,
                  6: value > ref}.get(fn)
            if ok is None:
                raise bad(f"compare function {fn}; functions are 0..6")
            if not ok:
                self.stalled = (addr, ref)
                return False
            self.stalled = None
        elif name == "TIMESTAMP":
            write64(self.mem, (p[0] & ~7) | (p[1] << 32), gpu_clock())
        elif name == "TRAP" and self.interrupt is not None:
            self.interrupt(p[0] & 0x0FFFFFFF)
        return True  # NOP, GCR_REQ, DUMMY_TRAP: nothing for an in-order, coherent mock

    def copy(self, dst: int, src: int, n: int) -> None:
        """`n` bytes, in runs that cross no page of either side."""
        done = 0
        while done < n:
            s, d = src + done, dst + done
            k = min(n - done, PAGE - s % PAGE, PAGE - d % PAGE)
            write(self.mem, d, read(self.mem, s, k))
            done += k
            self.runs += 1
        self.copied += n
        if self.locate is not None and n:
            # a copy stays in one allocation on each side (a guard page follows each one): its first byte says where
            where = self.locate(src), self.locate(dst)
            count(self.traffic, *where, n)
            if self.gpu_traffic is not None:
                count(self.gpu_traffic, *where, n)
