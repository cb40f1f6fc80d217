"""What the command processors need of memory: bytes at GPU virtual addresses (`Memory`), and `PagedMemory`, a
plain memory for tests and tools.

GPU memory is translated page by page, so an engine may not assume two virtual pages are neighbours anywhere
else: `PagedMemory` refuses any access that crosses a 4 KiB page boundary (its pages are scattered over one
backing store in shuffled order), and the processors go through `read`/`write` here, which split at pages.
"""
from __future__ import annotations

import struct
from typing import Protocol

import numpy as np

PAGE = 4096


class Memory(Protocol):
    def read(self, va: int, nbytes: int) -> bytes: ...

    def write(self, va: int, data: bytes | memoryview) -> None: ...


class PacketError(RuntimeError):
    """A packet a command processor cannot execute."""

    def __init__(self, queue: str, where: str, offset: int, header: int, opcode: int, name: str, why: str):
        self.queue, self.offset, self.header, self.opcode = queue, offset, header, opcode
        super().__init__(f"{queue}: bad packet at dword {offset} of {where}: header {header:#010x} "
                         f"(opcode {opcode:#x} {name}): {why}")


def pages(va: int, nbytes: int) -> list[tuple[int, int]]:
    """(va, length) runs covering [va, va + nbytes), none crossing a page boundary."""
    out, end = [], va + nbytes
    while va < end:
        n = min(end, (va // PAGE + 1) * PAGE) - va
        out.append((va, n))
        va += n
    return out


def read(mem: Memory, va: int, nbytes: int) -> bytes:
    return b"".join(mem.read(a, n) for a, n in pages(va, nbytes))


def write(mem: Memory, va: int, data: bytes) -> None:
    at = 0
    for a, n in pages(va, len(data)):
        mem.write(a, data[at:at + n])
        at += n


def dwords(mem: Memory, va: int, n: int) -> tuple[int, ...]:
    return struct.unpack(f"<{n}I", read(mem, va, 4 * n))


def write32(mem: Memory, va: int, v: int) -> None:
    write(mem, va, struct.pack("<I", v & 0xFFFFFFFF))


def write64(mem: Memory, va: int, v: int) -> None:
    write(mem, va, struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF))


def read32(mem: Memory, va: int) -> int:
    return dwords(mem, va, 1)[0]


def read64(mem: Memory, va: int) -> int:
    return int(struct.unpack("<Q", read(mem, va, 8))[0])


class PagedMemory:
    """Virtual pages mapped onto shuffled pages of one backing store. `alloc` gives scattered pages; `alloc_host`
    gives pages contiguous in the store, with the numpy view of them (host-visible memory the CPU writes directly,
    as rings and signals are). Every access must stay in one page and in mapped memory."""

    def __init__(self, npages: int = 4096, seed: int = 13):
        self.store = np.zeros(npages * PAGE, np.uint8)
        order = np.random.default_rng(seed).permutation(npages)
        self.free = [int(p) for p in order]
        self.table: dict[int, int] = {}   # virtual page -> store page
        self.top = 0x10_0000_0000 // PAGE  # above 4 GiB: addresses need both dwords

    def _map(self, phys: list[int]) -> int:
        va_page = self.top
        for i, p in enumerate(phys):
            self.table[va_page + i] = p
        self.top += len(phys) + 1  # an unmapped guard page after each allocation
        return va_page * PAGE

    def alloc(self, nbytes: int) -> int:
        n = -(-nbytes // PAGE)
        if n > len(self.free):
            raise MemoryError(f"PagedMemory: {nbytes} bytes asked, {len(self.free) * PAGE} free")
        phys, self.free = self.free[:n], self.free[n:]
        return self._map(phys)

    def alloc_host(self, nbytes: int) -> tuple[int, np.ndarray]:
        n = -(-nbytes // PAGE)
        free = sorted(self.free)
        for i in range(len(free) - n + 1):
            if free[i + n - 1] - free[i] == n - 1:
                run = free[i:i + n]
                self.free = [p for p in self.free if p not in set(run)]
                return self._map(run), self.store[run[0] * PAGE:(run[0] + n) * PAGE][:nbytes]
        raise MemoryError(f"PagedMemory: no {n} contiguous pages free")

    def _at(self, va: int, nbytes: int, what: str) -> int:
        page, off = divmod(va, PAGE)
        if off + nbytes > PAGE:
            raise ValueError(f"PagedMemory: a {what} of {nbytes} bytes at {va:#x} crosses a page boundary")
        if page not in self.table:
            raise MemoryError(f"PagedMemory: {what} of unmapped address {va:#x}")
        return self.table[page] * PAGE + off

    def read(self, va: int, nbytes: int) -> bytes:
        p = self._at(va, nbytes, "read")
        return self.store[p:p + nbytes].tobytes()

    def write(self, va: int, data: bytes | memoryview) -> None:
        data = bytes(data)
        p = self._at(va, len(data), "write")
        self.store[p:p + len(data)] = np.frombuffer(data, np.uint8)
