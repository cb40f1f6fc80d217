"""The mock GPU's paged memory: host copies, per-lane gather/scatter, broken contiguity, page faults."""
import numpy as np
import pytest

from tg_mockgpu.memory import PAGE_SIZE, VA_BASE, GPUMemory, PageFault


@pytest.fixture
def mem():
    m = GPUMemory(seed=1)
    yield m
    m.close()


def test_roundtrip_spanning_pages(mem):
    data = np.random.default_rng(0).integers(0, 256, 5 * PAGE_SIZE + 123, dtype=np.uint8).tobytes()
    va = mem.alloc(len(data))
    assert va >= VA_BASE and va % PAGE_SIZE == 0
    mem.write(va, data)
    assert mem.read(va, len(data)) == data
    assert mem.read(va + 4000, 300) == data[4000:4300]   # across a page boundary
    out = bytearray(1000)
    mem.readinto(va + PAGE_SIZE - 10, memoryview(out))
    assert bytes(out) == data[PAGE_SIZE - 10:PAGE_SIZE + 990]


def test_contiguity_is_broken(mem):
    va = mem.alloc(64 * PAGE_SIZE)
    first = (va - VA_BASE) // PAGE_SIZE
    phys = mem.ptab[first:first + 64]
    assert len(set(phys.tolist())) == 64
    assert not (np.diff(phys) == 1).any(), "consecutive virtual pages must not be consecutive physical pages"
    # what a copy that assumes contiguity would read is not the data
    data = np.arange(64 * PAGE_SIZE // 4, dtype=np.uint32).tobytes()
    mem.write(va, data)
    p0 = int(phys[0]) * PAGE_SIZE
    assert mem.mem8[p0:p0 + PAGE_SIZE].tobytes() == data[:PAGE_SIZE]
    assert mem.mem8[p0:p0 + 2 * PAGE_SIZE].tobytes() != data[:2 * PAGE_SIZE]


def test_fresh_memory_is_zero_and_reused_pages_are_cleared(mem):
    va = mem.alloc(3 * PAGE_SIZE)
    mem.write(va, b"\xff" * 3 * PAGE_SIZE)
    mem.free(va)
    vb = mem.alloc(3 * PAGE_SIZE)
    assert mem.read(vb, 3 * PAGE_SIZE) == bytes(3 * PAGE_SIZE)


@pytest.mark.parametrize("nbytes", [1, 2, 4, 8, 12, 16])
def test_gather_scatter_match_numpy(mem, nbytes):
    rng = np.random.default_rng(nbytes)
    size = 6 * PAGE_SIZE
    va = mem.alloc(size)
    host = rng.integers(0, 256, size, dtype=np.uint8)
    mem.write(va, host.tobytes())
    # aligned, unaligned and page-crossing addresses
    offs = np.concatenate([rng.integers(0, size - nbytes, 200) & ~(nbytes - 1 if nbytes in (1, 2, 4, 8, 16) else 3),
                           rng.integers(0, size - nbytes, 50), [PAGE_SIZE - 1, 2 * PAGE_SIZE - 2, 3 * PAGE_SIZE - 3]])
    offs = np.clip(offs, 0, size - nbytes).astype(np.uint64)
    got = mem.gather(np.uint64(va) + offs, nbytes)
    want = host[offs.astype(np.int64)[:, None] + np.arange(nbytes)]
    assert got.view(np.uint8).reshape(len(offs), nbytes).tolist() == want.tolist()
    # scatter distinct, non-overlapping rows and check through the host view
    offs = (rng.permutation(size // 32 - 1)[:100] * 32 + 24).astype(np.uint64)   # some rows cross a page
    rows = rng.integers(0, 256, (len(offs), nbytes), dtype=np.uint8)
    payload = rows.view(np.uint32) if nbytes % 4 == 0 else rows
    mem.scatter(np.uint64(va) + offs, payload)
    back = np.frombuffer(mem.read(va, size), np.uint8)
    assert back[offs.astype(np.int64)[:, None] + np.arange(nbytes)].tolist() == rows.tolist()


def test_page_crossing_dword_access(mem):
    va = mem.alloc(2 * PAGE_SIZE)
    mem.write(va + PAGE_SIZE - 2, b"\x11\x22\x33\x44")
    got = mem.gather(np.array([va + PAGE_SIZE - 2], np.uint64), 4)
    assert got.tolist() == [[0x44332211]]
    mem.scatter(np.array([va + PAGE_SIZE - 6], np.uint64), np.array([[0xAABBCCDD, 0x01020304]], np.uint32))
    assert mem.read(va + PAGE_SIZE - 6, 8) == bytes.fromhex("ddccbbaa04030201")


def test_page_faults(mem):
    va = mem.alloc(PAGE_SIZE)
    addrs = np.array([va, va + 8, va + PAGE_SIZE, va + 4], np.uint64)   # the third is the guard page
    with pytest.raises(PageFault) as e:
        mem.gather(addrs, 4)
    assert e.value.index == 2 and e.value.address == va + PAGE_SIZE and not e.value.write
    with pytest.raises(PageFault) as e:                                  # the last dword crosses into the guard
        mem.scatter(np.array([va + PAGE_SIZE - 4], np.uint64), np.zeros((1, 2), np.uint32))
    assert e.value.write and e.value.index == 0
    with pytest.raises(PageFault):
        mem.gather(np.array([16], np.uint64), 4)                         # below the address space
    with pytest.raises(PageFault):
        mem.read(va + PAGE_SIZE - 2, 4)
    mem.free(va)
    with pytest.raises(PageFault):
        mem.gather(np.array([va], np.uint64), 4)                         # freed memory is unmapped
    with pytest.raises(ValueError, match="not the start"):
        mem.free(va)


def test_alignment_and_reuse(mem):
    a = mem.alloc(100, align=1 << 16)
    assert a % (1 << 16) == 0
    b = mem.alloc(PAGE_SIZE)
    mem.free(b)
    c = mem.alloc(PAGE_SIZE)
    assert c == b                                                        # the freed range is reused
    with pytest.raises(ValueError, match="power of two"):
        mem.alloc(10, align=3)


def test_allocations_from_several_threads_never_share_pages(mem):
    """Threads mapping and unmapping at once (the AMD device may be used from several): every live allocation has
    pages of its own, so each thread reads back exactly what it wrote."""
    from tg_core.testing.devices import run_in_threads

    def work(k: int) -> None:
        for r in range(150):
            pattern = bytes([k * 16 + r % 16]) * (PAGE_SIZE + 8)
            va = mem.alloc(len(pattern))
            mem.write(va, pattern)
            if mem.read(va, len(pattern)) != pattern:
                raise AssertionError(f"thread {k} round {r}: its allocation at {va:#x} holds another's bytes")
            mem.free(va)

    run_in_threads(work)
    assert not mem.allocs and len(set(mem.pool.tolist())) == len(mem.pool)
