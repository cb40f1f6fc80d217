"""The mock GPU's memory: a paged virtual address space over shuffled physical pages.

GPU virtual addresses are translated page by page through a page table into one backing store of physical pages,
the way a GPU's VM translates through its page tables into VRAM. Physical pages are handed out in a random order
and never two consecutive virtual pages of an allocation in consecutive physical pages, so any code that copies
or computes across a page boundary as if GPU memory were one contiguous host block reads the wrong bytes here, as
it would on hardware.

The emulator reads and writes per-lane addresses with `gather`/`scatter`: one page-table lookup per lane (numpy),
then one fancy-indexed read or write of the backing store. Host copies (`read`/`write`) go a page at a time.
Every access is checked: an address that is not mapped raises `PageFault` with the address and the index of the
element that faulted (the emulator adds the instruction, wave and lane).

The mock KFD driver (kfd/) builds each GPU's VM from the same parts at addresses the host chose: `take_pages`
(scattered VRAM pages), `alias_pages` (store pages replaced by a shared mapping of host memory, a memfd, so kernels
reach GTT and USERPTR memory through the same page table and the same gather/scatter as VRAM), `map_pages` /
`unmap_pages` and `release_pages`.

Mapping changes (`alloc`, `free` and the page calls) hold a lock: the device may be used from several threads, and two allocations
interleaving would hand out the same physical pages. Reads and writes need none: they touch only mapped pages.
"""
from __future__ import annotations

import mmap
import sys
import threading

import numpy as np

from tg_amd.kfd.oslayer import MAP_FIXED, MAP_SHARED, PROT_READ, PROT_WRITE, host_mmap

PAGE_SHIFT = 12
PAGE_SIZE = 1 << PAGE_SHIFT          # 4 KiB, the GPU VM's base page
PAGE_MASK = PAGE_SIZE - 1
VA_BASE = 0x7F10_0000_0000          # above 4 GiB, so kernels must really use 64-bit addresses
BACKING_LIMIT = 8 << 30              # reserved (not committed) bytes of backing store: the most memory the mock has
# Linux's MAP_NORESERVE (Python 3.11's mmap lacks the name): reserve address space, commit pages on first touch
MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform == "linux" else 0)
POOL_GROWTH_PAGES = 4096             # physical pages added to the pool at a time (16 MiB)


class PageFault(MemoryError):
    """An access to an unmapped GPU virtual address. `index` is the position of the faulting element in the
    address array the access was given (-1 for host copies)."""

    def __init__(self, address: int, write: bool, index: int = -1, what: str = ""):
        self.address, self.write, self.index = address, write, index
        kind = "write" if write else "read"
        super().__init__(f"GPU page fault: {kind} of unmapped address {address:#x}" + (f" ({what})" if what else ""))


class GPUMemory:
    """A GPU virtual address space. `alloc` maps fresh zeroed pages at a new virtual range (followed by an unmapped
    guard page), `free` unmaps them."""

    def __init__(self, seed: int = 0x7A11, limit: int = BACKING_LIMIT, va_base: int = VA_BASE):
        if va_base % PAGE_SIZE or va_base <= 0:
            raise ValueError(f"va_base {va_base:#x}: a positive multiple of {PAGE_SIZE}")
        self.va_base = va_base                         # virtual page 0 of the page table
        self._store = mmap.mmap(-1, limit, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE)
        self.mem8 = np.frombuffer(self._store, np.uint8)
        self.mem32 = self.mem8.view(np.uint32)
        self.pages = self.mem8.reshape(-1, PAGE_SIZE)
        self.limit_pages = limit >> PAGE_SHIFT
        self.ptab = np.full(1024, -1, np.int64)      # virtual page (from va_base) -> physical page, -1 unmapped
        self.va_top = 0                                # first virtual page never handed out
        self.va_free: list[tuple[int, int]] = []       # (first virtual page, count) ranges freed for reuse
        self.pool = np.empty(0, np.int64)              # free physical pages
        self.pool_top = 0                              # first physical page never added to the pool
        self.rng = np.random.default_rng(seed)
        self.allocs: dict[int, int] = {}               # va -> pages mapped
        self.aliased: dict[int, int] = {}              # first physical page -> pages showing host memory (alias)
        self._mapping = threading.Lock()               # serializes alloc/free (page table, pools, free ranges)

    # ---- mapping ----

    def alloc(self, nbytes: int, align: int = PAGE_SIZE) -> int:
        """Map `nbytes` (rounded up to pages) of zeroed memory; returns the virtual address."""
        if nbytes <= 0:
            raise ValueError(f"allocation size must be positive, got {nbytes}")
        if align <= 0 or align & (align - 1):
            raise ValueError(f"alignment must be a power of two, got {align}")
        npages = -(-nbytes // PAGE_SIZE)
        align_pages = max(1, align >> PAGE_SHIFT)
        with self._mapping:
            free = len(self.pool) + self.limit_pages - self.pool_top
            if npages > free:  # before the page table grows for it: 4 TiB asked would be 8 GiB of page table
                raise MemoryError(f"mock GPU out of memory: {npages * PAGE_SIZE} bytes asked, {free * PAGE_SIZE} free")
            first = self._virtual_range(npages, align_pages)
            phys = self._physical_pages(npages)
            self.pages[phys] = 0
            self.ptab[first:first + npages] = phys
            va = self.va_base + (first << PAGE_SHIFT)
            self.allocs[va] = npages
        return va

    def free(self, va: int) -> None:
        with self._mapping:
            npages = self.allocs.pop(va, None)
            if npages is None:
                raise ValueError(f"free of {va:#x}, which is not the start of a live allocation")
            first = (va - self.va_base) >> PAGE_SHIFT
            self.pool = np.concatenate([self.pool, self.ptab[first:first + npages]])
            self.ptab[first:first + npages] = -1
            self.va_free.append((first, npages + 1))   # with its guard page

    def _virtual_range(self, npages: int, align_pages: int) -> int:
        for i, (start, count) in enumerate(self.va_free):
            first = -(-start // align_pages) * align_pages
            if first + npages + 1 <= start + count:    # +1: keep the guard page unmapped
                del self.va_free[i]
                if first > start:
                    self.va_free.append((start, first - start))
                if start + count > first + npages + 1:
                    self.va_free.append((first + npages + 1, start + count - first - npages - 1))
                return first
        first = -(-self.va_top // align_pages) * align_pages
        self.va_top = first + npages + 1
        self._grow(self.va_top)
        return first

    def _grow(self, vpages: int) -> None:
        """Make the page table cover virtual pages [0, vpages)."""
        if vpages > len(self.ptab):
            grown = np.full(max(vpages, 2 * len(self.ptab)), -1, np.int64)
            grown[:len(self.ptab)] = self.ptab
            self.ptab = grown

    def _physical_pages(self, npages: int) -> np.ndarray:
        if len(self.pool) < npages:
            grow = max(POOL_GROWTH_PAGES, npages - len(self.pool))
            if self.pool_top + grow > self.limit_pages:
                raise MemoryError(f"mock GPU out of memory: {npages * PAGE_SIZE} bytes asked, "
                                  f"{(len(self.pool) + self.limit_pages - self.pool_top) * PAGE_SIZE} free")
            self.pool = np.concatenate([self.pool, np.arange(self.pool_top, self.pool_top + grow)])
            self.pool_top += grow
        pick = self.rng.choice(len(self.pool), npages, replace=False)
        phys = self.pool[pick]
        self.pool = np.delete(self.pool, pick)
        # a random order can still put two neighbours side by side: break every such pair on purpose
        for _ in range(16):
            adjacent = np.flatnonzero(phys[1:] == phys[:-1] + 1) + 1
            if len(adjacent) == 0:
                break
            for i in adjacent:
                j = (i + npages // 2) % npages
                phys[i], phys[j] = phys[j], phys[i]
        return phys

    # ---- physical pages mapped at given addresses (the mock KFD's GPU VMs, kfd/vm.py) ----

    def take_pages(self, npages: int) -> np.ndarray:
        """`npages` fresh zeroed physical pages, scattered (VRAM); not mapped anywhere yet."""
        with self._mapping:
            free = len(self.pool) + self.limit_pages - self.pool_top
            if npages > free:
                raise MemoryError(f"mock GPU out of memory: {npages * PAGE_SIZE} bytes asked, {free * PAGE_SIZE} free")
            phys = self._physical_pages(npages)
            self.pages[phys] = 0
            return phys

    def alias_pages(self, fd: int, offset: int, npages: int) -> np.ndarray:
        """`npages` physical pages of the store that show the pages of file `fd` from `offset` (host memory, a
        memfd): the store's pages are replaced by a shared mapping of the file, so the emulator's gather/scatter
        reach host memory with no extra step. One contiguous run, given back by `release_pages`."""
        with self._mapping:
            if self.pool_top + npages > self.limit_pages:
                raise MemoryError(f"mock GPU: no room in its store for {npages} pages of host memory")
            first = self.pool_top
            self.pool_top += npages
            host_mmap(self.mem8.ctypes.data + (first << PAGE_SHIFT), npages << PAGE_SHIFT, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_FIXED, fd, offset)
            self.aliased[first] = npages
            return np.arange(first, first + npages, dtype=np.int64)

    def release_pages(self, phys: np.ndarray) -> None:
        """Give physical pages back to the pool (an alias run gets anonymous memory back first)."""
        with self._mapping:
            first = int(phys[0]) if len(phys) else -1
            if first in self.aliased:
                n = self.aliased.pop(first)
                host_mmap(self.mem8.ctypes.data + (first << PAGE_SHIFT), n << PAGE_SHIFT, PROT_READ | PROT_WRITE,
                          mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0)
            self.pool = np.concatenate([self.pool, np.asarray(phys, np.int64)])

    def map_pages(self, va: int, phys: np.ndarray) -> None:
        """Map physical pages at virtual address `va` (page aligned, at or above va_base, not mapped yet)."""
        first = (va - self.va_base) >> PAGE_SHIFT
        if va % PAGE_SIZE or first < 0:
            raise ValueError(f"map of {va:#x}: page-aligned addresses from {self.va_base:#x}")
        with self._mapping:
            self._grow(first + len(phys) + 1)
            if (self.ptab[first:first + len(phys)] >= 0).any():
                raise ValueError(f"map of {len(phys)} pages at {va:#x}: some are mapped already")
            self.ptab[first:first + len(phys)] = phys
            self.va_top = max(self.va_top, first + len(phys) + 1)   # `alloc` never hands these out

    def unmap_pages(self, va: int, npages: int) -> None:
        first = (va - self.va_base) >> PAGE_SHIFT
        with self._mapping:
            self.ptab[first:first + npages] = -1

    def read_pages(self, phys: np.ndarray, offset: int, nbytes: int) -> bytes:
        """Bytes [offset, offset + nbytes) of the allocation made of physical pages `phys` (host access to memory
        whether or not this GPU maps it)."""
        return b"".join(self.mem8[p:p + n].tobytes() for p, n in self._phys_runs(phys, offset, nbytes))

    def write_pages(self, phys: np.ndarray, offset: int, data: bytes | memoryview) -> None:
        src = memoryview(data).cast("B")
        at = 0
        for p, n in self._phys_runs(phys, offset, len(src)):
            self._store[p:p + n] = src[at:at + n]
            at += n

    @staticmethod
    def _phys_runs(phys: np.ndarray, offset: int, nbytes: int) -> list[tuple[int, int]]:
        out, end = [], offset + nbytes
        if offset < 0 or end > len(phys) << PAGE_SHIFT:
            raise PageFault(offset if offset < 0 else len(phys) << PAGE_SHIFT, False, what="past the allocation")
        while offset < end:
            n = min(end - offset, PAGE_SIZE - (offset & PAGE_MASK))
            out.append(((int(phys[offset >> PAGE_SHIFT]) << PAGE_SHIFT) | (offset & PAGE_MASK), n))
            offset += n
        return out

    def mapped(self, va: int, nbytes: int = 1) -> bool:
        try:
            self._span(va, nbytes, False)
        except PageFault:
            return False
        return True

    # ---- host copies ----

    def _span(self, va: int, nbytes: int, write: bool) -> list[tuple[int, int]]:
        """(physical byte offset, length) runs covering [va, va + nbytes), one per page."""
        out, end = [], va + nbytes
        while va < end:
            vpn = (va - self.va_base) >> PAGE_SHIFT
            if va < self.va_base or vpn >= len(self.ptab) or self.ptab[vpn] < 0:
                raise PageFault(va, write, what="host copy")
            n = min(end - va, PAGE_SIZE - (va & PAGE_MASK))
            out.append(((int(self.ptab[vpn]) << PAGE_SHIFT) | (va & PAGE_MASK), n))
            va += n
        return out

    def read(self, va: int, nbytes: int) -> bytes:
        runs = self._span(va, nbytes, False)
        return b"".join(self.mem8[p:p + n].tobytes() for p, n in runs)

    def readinto(self, va: int, dest: memoryview) -> None:
        dest = memoryview(dest).cast("B")
        at = 0
        for p, n in self._span(va, len(dest), False):
            dest[at:at + n] = self._store[p:p + n]
            at += n

    def write(self, va: int, data: bytes | memoryview) -> None:
        src = memoryview(data).cast("B")
        at = 0
        for p, n in self._span(va, len(src), True):
            self._store[p:p + n] = src[at:at + n]
            at += n

    # ---- per-lane access for the emulator ----

    def translate(self, addrs: np.ndarray, nbytes: int, write: bool) -> np.ndarray:
        """Physical byte offsets (int64) of `addrs` (uint64) for accesses of `nbytes` each. Raises PageFault for the
        first address whose access touches an unmapped byte."""
        off = addrs.astype(np.uint64, copy=False).view(np.int64) - self.va_base
        vpn = off >> PAGE_SHIFT                        # negative below the address space
        ppn = self.ptab.take(vpn, mode="clip")
        ok = (vpn.view(np.uint64) < len(self.ptab)) & (ppn >= 0)
        low = off & PAGE_MASK
        if nbytes > 1:
            cross = low > PAGE_SIZE - nbytes
            if cross.any():
                # the last byte sits in the next virtual page, which must be mapped too
                vpn2 = vpn + 1
                ok &= ~cross | ((vpn2.view(np.uint64) < len(self.ptab)) & (self.ptab.take(vpn2, mode="clip") >= 0))
        if not ok.all():
            i = int(np.argmin(ok))
            raise PageFault(int(addrs[i]), write, i)
        return (ppn << PAGE_SHIFT) | low

    def _byte_offsets(self, addrs: np.ndarray, phys: np.ndarray, nbytes: int) -> np.ndarray:
        """(n, nbytes) physical offsets of every byte, each translated on its own (accesses crossing a page)."""
        ks = np.arange(nbytes, dtype=np.uint64)
        flat = (addrs.astype(np.uint64)[:, None] + ks).ravel()
        vpn = ((flat - np.uint64(self.va_base)) >> np.uint64(PAGE_SHIFT)).astype(np.intp)
        return ((self.ptab[vpn] << PAGE_SHIFT) | (flat & np.uint64(PAGE_MASK)).astype(np.int64)).reshape(-1, nbytes)

    def gather(self, addrs: np.ndarray, nbytes: int) -> np.ndarray:
        """Read `nbytes` at each address: uint32 array (n, nbytes // 4) for whole dwords, uint8 (n, nbytes) else."""
        phys = self.translate(addrs, nbytes, False)
        if nbytes % 4 == 0:
            if not (phys & 3).any() and not ((phys & PAGE_MASK) + nbytes > PAGE_SIZE).any():
                if nbytes == 4:
                    return self.mem32[phys >> 2][:, None]
                return self.mem32[(phys >> 2)[:, None] + np.arange(nbytes // 4)]
            return self.mem8[self._byte_offsets(addrs, phys, nbytes)].view(np.uint32)
        if nbytes == 1:
            return self.mem8[phys][:, None]
        if ((phys & PAGE_MASK) + nbytes > PAGE_SIZE).any():
            return self.mem8[self._byte_offsets(addrs, phys, nbytes)]
        return self.mem8[phys[:, None] + np.arange(nbytes)]

    def scatter(self, addrs: np.ndarray, data: np.ndarray) -> None:
        """Write row i of `data` (uint32 (n, k) or uint8 (n, k)) at addrs[i]. Lanes later in the array win when two
        write the same bytes (as numpy's fancy assignment does)."""
        nbytes = data.shape[1] * data.itemsize
        phys = self.translate(addrs, nbytes, True)
        if data.dtype == np.uint32 and not (phys & 3).any() and not ((phys & PAGE_MASK) + nbytes > PAGE_SIZE).any():
            if nbytes == 4:
                self.mem32[phys >> 2] = data[:, 0]
            else:
                self.mem32[(phys >> 2)[:, None] + np.arange(data.shape[1])] = data
            return
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(len(addrs), nbytes)
        if ((phys & PAGE_MASK) + nbytes > PAGE_SIZE).any():
            self.mem8[self._byte_offsets(addrs, phys, nbytes)] = raw
        else:
            self.mem8[phys[:, None] + np.arange(nbytes)] = raw

    def close(self) -> None:
        self.mem8 = self.mem32 = self.pages = None  # type: ignore[assignment]
        try:
            self._store.close()
        except BufferError:  # a numpy view of the store is still alive somewhere: the GC unmaps it later
            pass
