"""The mock KFD as a GPU: queues created through tg-amd's KFD driver run on the mock's command processors when
their doorbells ring. Packets come from tg-amd's builders (pm4, sdma, aql, stream, kernel.dispatch_of) and are
written into the real rings, as the AMD device writes them; results are checked against numpy."""
from __future__ import annotations

import ctypes
import functools
import struct
import threading

import numpy as np
import pytest

from tg_amd.compiler import AMDCompiler
from tg_amd.elf import load_code_object
from tg_amd.kfd.driver import KFDDriver, KFDMemory
from tg_amd.kfd.events import GPUHardwareException, GPUMemoryFault
from tg_amd.kfd.queues import KFDQueue
from tg_amd.queues import aql, pm4, sdma
from tg_amd.queues.stream import AQLStream, PM4Stream
from tg_mockgpu.kfd.driver import MockKFD

from test_mockgpu_cp import _compile_saxpy

# amd_queue_t's scratch fields (ROCR amd_hsa_queue.h; amd.md 3.3), written here for the tests
AMD_QUEUE_TMPRING, AMD_QUEUE_SCRATCH_VA, AMD_QUEUE_SCRATCH_BYTES, AMD_QUEUE_LANE_BYTES = 140, 160, 168, 176


def put(va: int, data: bytes) -> None:
    ctypes.memmove(va, data, len(data))


def u64(va: int) -> int:
    return ctypes.c_uint64.from_address(va).value


def packed(words) -> bytes:
    return struct.pack(f"<{len(words)}I", *(int(w) for w in words))


class PM4Ring:
    """The host side of a PM4 ring: whole packets at put (dwords), wptr, then the doorbell."""

    def __init__(self, q: KFDQueue):
        self.q, self.put, self.n = q, 0, q.ring.size // 4

    def push(self, words) -> None:
        assert self.put + len(words) - self.q.read_rptr() <= self.n, "no room: the read pointer did not move"
        for w in words:
            put(self.q.ring.va + 4 * (self.put % self.n), struct.pack("<I", int(w)))
            self.put += 1
        self.q.write_wptr(self.put)
        self.q.ring_doorbell(self.put)


class AQLRing:
    """64-byte packets at put (packets); the doorbell is the last packet's index."""

    def __init__(self, q: KFDQueue):
        self.q, self.put, self.n = q, 0, q.ring.size // 64

    def push(self, packets) -> None:
        for p in packets:
            put(self.q.ring.va + 64 * (self.put % self.n), packed(p))
            self.put += 1
        self.q.write_wptr(self.put)
        self.q.ring_doorbell(self.put - 1)


class SDMARing:
    """Bytes, never wrapped; a submission that does not fit before the ring's end zero-fills the tail first."""

    def __init__(self, q: KFDQueue):
        self.q, self.put, self.n = q, 0, q.ring.size

    def push(self, words) -> None:
        data = packed(words)
        off = self.put % self.n
        if off + len(data) > self.n:
            put(self.q.ring.va + off, bytes(self.n - off))
            self.put += self.n - off
            off = 0
        put(self.q.ring.va + off, data)
        self.put += len(data)
        self.q.write_wptr(self.put)
        self.q.ring_doorbell(self.put)


class GPU:
    """One mock GPU through tg-amd's driver: a command-buffer area and signals (GTT), a staging buffer, and an SDMA
    queue for uploads and downloads (the host never touches VRAM)."""

    def __init__(self, drv: KFDDriver, index: int):
        self.g = drv.gpu(index)
        self.cmd, self.cmd_top = self.g.alloc(1 << 20, "gtt"), 0
        self.signals = self.g.alloc(4096, "gtt")
        self.stage = self.g.alloc(1 << 20, "gtt")
        self.sdma = SDMARing(self.g.create_queue("sdma", 0x1000))
        self.seq = 0

    def cmdbuf(self, nbytes: int) -> int:
        va = self.cmd.va + self.cmd_top
        self.cmd_top = -(-(self.cmd_top + nbytes) // 256) * 256
        assert self.cmd_top <= self.cmd.size
        return va

    def ib(self, words) -> list:
        """The words in a fresh command buffer, as the ring's INDIRECT_BUFFER packet."""
        va = self.cmdbuf(4 * len(words))
        put(va, packed(words))
        return pm4.indirect_buffer(va, len(words))

    def copy(self, dst: int, src: int, n: int) -> None:
        self.seq += 1
        self.sdma.push(sdma.copy_linear(dst, src, n) + sdma.signal(self.signals.va, self.seq))
        assert u64(self.signals.va) == self.seq

    def upload(self, dst: int, data: bytes) -> None:
        put(self.stage.va, data)
        self.copy(dst, self.stage.va, len(data))

    def download(self, src: int, n: int) -> bytes:
        self.copy(self.stage.va, src, n)
        return ctypes.string_at(self.stage.va, n)

    def vram(self, data: bytes | int) -> KFDMemory:
        mem = self.g.alloc(data if isinstance(data, int) else len(data), "vram")
        if not isinstance(data, int):
            self.upload(mem.va, data)
        return mem

    def load(self, code) -> int:
        """The code object in VRAM (uploaded by SDMA); its address."""
        va = self.g.alloc(len(code.image), "vram").va
        self.upload(va, code.image_at(va))
        return va


@pytest.fixture
def rig():
    mock = MockKFD(gpus=2, xccs=1)
    drv = KFDDriver(mock)
    gpus = [GPU(drv, 0), GPU(drv, 1)]
    yield mock, gpus
    drv.close()
    mock.release()


@functools.cache
def saxpy(n: int):
    code, name, (grid, local) = _compile_saxpy(n)
    return code, code.kernel(name), grid, local


def args(*vas: int) -> list[int]:
    return [w for v in vas for w in (v & 0xFFFFFFFF, v >> 32)]


def drain(g) -> None:
    """Consume a pending signal wake-up, so a later wait says only what happened after."""
    g.events.wait(0)


def test_pm4_kernel_with_kernargs_in_a_gtt_command_buffer_reads_userptr_gtt_and_vram(rig):
    mock, (gp, _) = rig
    n = 1000
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    code, ks, grid, local = saxpy(n)
    image = gp.load(code)
    a_mem = gp.g.alloc(4 * n, "userptr")               # host memory the kernel reads directly
    b_mem = gp.g.alloc(4 * n, "gtt")
    put(a_mem.va, a.tobytes())
    put(b_mem.va, b.tobytes())
    out = gp.vram(4 * n)
    st = PM4Stream(gp.cmdbuf(1 << 12))
    st.kernel(ks, image, args(out.va, a_mem.va, b_mem.va), grid, local)
    st.add(pm4.signal(gp.signals.va + 16, 7))
    put(st.base, packed(st.words))
    ring = PM4Ring(gp.g.create_queue("pm4", 0x1000))
    drain(gp.g)
    ring.push(pm4.indirect_buffer(st.base, len(st.words)))
    assert u64(gp.signals.va + 16) == 7 and ring.q.read_rptr() == ring.put == 4
    assert gp.g.events.wait(0) is True                  # the RELEASE_MEM's interrupt fired the signal event
    got = np.frombuffer(gp.download(out.va, 4 * n), np.float32)
    np.testing.assert_allclose(got, a * 2 + b, rtol=1e-6)
    assert mock.fault_detail(gp.g.gpu_id) is None


def test_aql_kernel_dispatch_with_inline_kernargs(rig):
    _, (gp, _) = rig
    n = 777
    a, b = np.linspace(-3, 3, n, dtype=np.float32), np.full(n, 7, np.float32)
    code, ks, grid, local = saxpy(n)
    image = gp.load(code)
    a_mem, b_mem, out = gp.vram(a.tobytes()), gp.vram(b.tobytes()), gp.vram(4 * n)
    st = AQLStream(gp.cmdbuf(1 << 12))
    st.kernel(ks, image, args(out.va, a_mem.va, b_mem.va), grid, local)
    st.add(pm4.signal(gp.signals.va + 32, 3))
    packets = st.finish()
    put(st.base, packed(st.words))
    ring = AQLRing(gp.g.create_queue("aql", 0x1000))
    ring.push(packets)
    assert [p[0] & 0xFF for p in packets] == [2, 0] and ring.q.read_rptr() == 2
    assert u64(gp.signals.va + 32) == 3
    np.testing.assert_allclose(np.frombuffer(gp.download(out.va, 4 * n), np.float32), a * 2 + b, rtol=1e-6)


def test_sdma_copies_vram_gtt_vram_across_scattered_pages_byte_exact(rig):
    mock, (gp, _) = rig
    rng = np.random.default_rng(9)
    size = 9 * 4096
    src, back = gp.g.alloc(size, "gtt"), gp.g.alloc(size + 4096, "gtt")
    v = gp.vram(size)
    phys = mock.space.find(v.va).phys
    assert not np.any(phys[1:] == phys[:-1] + 1)        # VRAM's pages are scattered in the store
    data = rng.integers(0, 256, size, np.uint8).tobytes()
    put(src.va, data)
    for off, n in [(1, 4095), (4095, 2), (123, 5 * 4096 + 77), (7 * 4096 - 5, 2 * 4096 + 5), (0, size)]:
        put(back.va, bytes(size))
        gp.copy(v.va + off, src.va + off, n)
        gp.copy(back.va + (off ^ 1), v.va + off, n)     # back at another offset: no page of either side aligns
        assert ctypes.string_at(back.va + (off ^ 1), n) == data[off:off + n], (off, n)


def test_sdma_copies_gpu0_vram_to_gpu1_vram(rig):
    mock, (g0, g1) = rig
    data = np.random.default_rng(2).integers(0, 256, 3 * 4096 + 321, np.uint8).tobytes()
    a = g0.vram(data)
    b = g1.vram(len(data))
    g0.g.map(b)                                          # GPU 1's VRAM mapped on GPU 0: its SDMA reaches it
    g0.copy(b.va + 3, a.va, len(data) - 3)
    assert g1.download(b.va + 3, len(data) - 3) == data[:-3]
    g0.g.unmap(b)
    # the traffic, by (source, destination) location: the upload staged through GPU 0's GTT, the peer copy, and
    # GPU 1's download into its own GTT; per queue and per GPU, and the peer bytes alone
    n = len(data)
    assert mock.gpus[0].sdma_traffic == {(("gtt", 0), ("vram", 0)): n, (("vram", 0), ("vram", 1)): n - 3}
    assert mock.gpus[1].sdma_traffic == {(("vram", 1), ("gtt", 1)): n - 3}
    assert mock.engines.by_id[g0.sdma.q.queue_id].proc.traffic == mock.gpus[0].sdma_traffic
    assert mock.peer_copies() == {(0, 1): n - 3}


@pytest.mark.parametrize("order", ["compute first", "copy first"])
def test_compute_waits_on_a_signal_from_another_gpus_sdma(rig, order):
    mock, (g0, g1) = rig
    g1.g.map(g0.signals)                                 # GPU 0's signal page, mapped on GPU 1
    sig, out = g0.signals.va + 64, g0.signals.va + 80
    data = bytes(range(256)) * 16
    src, dst = g1.vram(data), g1.vram(len(data))
    compute = PM4Ring(g0.g.create_queue("pm4", 0x1000))
    copy = SDMARing(g1.g.create_queue("sdma", 0x1000))
    wait_then_store = g0.ib(pm4.wait(sig, 1) + pm4.store(out, 0xC0FFEE))
    copy_then_signal = sdma.copy_linear(dst.va, src.va, len(data)) + sdma.signal(sig, 1)
    if order == "compute first":
        compute.push(wait_then_store)
        assert u64(out) == 0 and compute.q.read_rptr() == 0   # stalled at the wait, keeping its place
        copy.push(copy_then_signal)                      # the copy on GPU 1 releases the wait on GPU 0
    else:
        copy.push(copy_then_signal)
        compute.push(wait_then_store)
    assert u64(out) == 0xC0FFEE and compute.q.read_rptr() == 4 and copy.q.read_rptr() == copy.put
    assert g1.download(dst.va, len(data)) == data


def test_a_host_wait_runs_a_stalled_queue(rig):
    _, (gp, _) = rig
    sig, out = gp.signals.va + 96, gp.signals.va + 112
    ring = PM4Ring(gp.g.create_queue("pm4", 0x1000))
    ring.push(gp.ib(pm4.wait(sig, 5) + pm4.signal(out, 9)))
    drain(gp.g)
    put(sig, struct.pack("<Q", 5))                       # the host releases it; nothing rings
    assert u64(out) == 0
    assert gp.g.events.wait(0) is True and u64(out) == 9   # WAIT_EVENTS ran the stalled queue, which signalled


@pytest.mark.parametrize("kind", ["pm4", "aql", "sdma"])
def test_rings_wrap_over_many_submissions(rig, kind):
    _, (gp, _) = rig
    q = gp.g.create_queue(kind, 0x1000)
    sig = gp.signals.va + 128
    count = {"pm4": 300, "aql": 150, "sdma": 250}[kind]
    ring = {"pm4": PM4Ring, "aql": AQLRing, "sdma": SDMARing}[kind](q)
    for i in range(1, count + 1):
        if kind == "pm4":
            ring.push(gp.ib(pm4.signal(sig, i)))
        elif kind == "aql":
            va = gp.cmdbuf(64)
            words = pm4.signal(sig, i)
            put(va, packed(words))
            ring.push([aql.pm4_ib(va, len(words))])
        else:
            ring.push(sdma.signal(sig, i))
        assert u64(sig) == i and q.read_rptr() == ring.put
    assert ring.put * {"pm4": 4, "aql": 64, "sdma": 1}[kind] > q.ring.size   # it wrapped


PRIVATE_IR = """target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
define amdgpu_kernel void @priv(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in) #0 {
entry:
  %arr = alloca [32 x i32], align 4, addrspace(5)
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %g, 64
  %i = add i32 %base, %t
  %p = getelementptr i32, ptr addrspace(1) %in, i32 %i
  %v = load i32, ptr addrspace(1) %p
  br label %fill
fill:
  %k = phi i32 [0, %entry], [%k2, %fill]
  %x = mul i32 %v, %k
  %slot = getelementptr [32 x i32], ptr addrspace(5) %arr, i32 0, i32 %k
  store volatile i32 %x, ptr addrspace(5) %slot
  %k2 = add i32 %k, 1
  %more = icmp ult i32 %k2, 32
  br i1 %more, label %fill, label %pick
pick:
  %j = and i32 %v, 31
  %q = getelementptr [32 x i32], ptr addrspace(5) %arr, i32 0, i32 %j
  %r = load volatile i32, ptr addrspace(5) %q
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %r, ptr addrspace(1) %po
  ret void
}
attributes #0 = { "amdgpu-flat-work-group-size"="1,64" }
"""


@functools.cache
def private_kernel():
    """A kernel with a private segment: an array in scratch indexed by a loaded value (out[i] = in[i] * (in[i] & 31))."""
    code = load_code_object(AMDCompiler("gfx1100").compile(PRIVATE_IR))
    return code, code.kernel("priv")


def _private_run(gp, ring_kind: str, scratch_bytes: list[int], n: int = 256):
    """Runs the private-segment kernel on `gp`; returns (expected, the out buffer, the queue)."""
    code, ks = private_kernel()
    image = gp.load(code)
    x = (np.arange(n, dtype=np.uint32) * 7 + 3).astype(np.uint32)
    src, out = gp.vram(x.tobytes()), gp.vram(4 * n)
    q = gp.g.create_queue(ring_kind, 0x1000)
    scratch = [gp.vram(s).va for s in scratch_bytes]
    if ring_kind == "pm4":
        st = PM4Stream(gp.cmdbuf(1 << 12), len(scratch))
        st.kernel(ks, image, args(out.va, src.va), (n // 64, 1, 1), (64, 1, 1), scratch)
        put(st.base, packed(st.words))
        PM4Ring(q).push(pm4.indirect_buffer(st.base, len(st.words)))
    else:
        st2 = AQLStream(gp.cmdbuf(1 << 12))
        st2.kernel(ks, image, args(out.va, src.va), (n // 64, 1, 1), (64, 1, 1))
        packets = st2.finish()
        put(st2.base, packed(st2.words))
        AQLRing(q).push(packets)
    return x * (x & 31), out, q


def test_two_xcc_pred_exec_runs_a_private_segment_kernel_with_per_xcc_scratch():
    mock = MockKFD(gpus=1, xccs=2)
    drv = KFDDriver(mock)
    try:
        gp = GPU(drv, 0)
        ks = private_kernel()[1]
        assert ks.descriptor.private_segment_fixed_size > 0 and ks.descriptor.compute_pgm_rsrc2 & 1
        per_xcc = 32 * (((pm4.tmpring_size(ks.descriptor.private_segment_fixed_size, 32) >> 12) & 0x7FFF) * 256)
        want, out, q = _private_run(gp, "pm4", [per_xcc, per_xcc])
        np.testing.assert_array_equal(np.frombuffer(gp.download(out.va, 4 * len(want)), np.uint32), want)
        regs = mock.engines.by_id[q.queue_id].proc.regs
        bases = [(r[0x2E10] | r[0x2E11] << 32) << 8 for r in regs]   # COMPUTE_DISPATCH_SCRATCH_BASE of each XCC
        assert len(set(bases)) == 2 and all(mock.space.find(b).kind == "vram" for b in bases)
        assert mock.fault_detail(gp.g.gpu_id) is None
        # XCC 1's scratch smaller than TMPRING_SIZE programs: the dispatch faults, naming both sizes
        drain(gp.g)
        _private_run(gp, "pm4", [per_xcc, 16 * 4096])
        with pytest.raises(GPUHardwareException, match="GPU 4096: hardware exception"):
            gp.g.events.wait(0)
        detail = mock.fault_detail(gp.g.gpu_id)
        assert detail is not None and f"({per_xcc} bytes of scratch per XCC)" in detail
        assert "XCC 1's COMPUTE_DISPATCH_SCRATCH_BASE" in detail and "has 65536 bytes mapped" in detail
    finally:
        drv.close()
        mock.release()


def test_aql_private_segment_runs_with_the_queue_descriptors_scratch(rig):
    mock, (gp, _) = rig
    ks = private_kernel()[1]
    need = ks.descriptor.private_segment_fixed_size
    scratch = gp.vram(1 << 20)
    # the host programs the queue's amd_queue_t (the start of its pointer page) before the first dispatch; the
    # queue is created inside _private_run, so prepare the next queue's page through a hook on create_queue
    real = gp.g.create_queue

    def with_scratch(lane: int):
        def create(kind, ring_size=0x1000):
            q = real(kind, ring_size)
            base = q.pointers.va
            put(base + AMD_QUEUE_SCRATCH_VA, struct.pack("<QQ", scratch.va, scratch.size))
            put(base + AMD_QUEUE_LANE_BYTES, struct.pack("<I", lane))
            return q
        return create
    gp.g.create_queue = with_scratch(need + 4)  # type: ignore[method-assign]
    want, out, _ = _private_run(gp, "aql", [])
    np.testing.assert_array_equal(np.frombuffer(gp.download(out.va, 4 * len(want)), np.uint32), want)
    drain(gp.g)
    gp.g.create_queue = with_scratch(64)  # type: ignore[method-assign]
    _private_run(gp, "aql", [])
    with pytest.raises(GPUHardwareException):
        gp.g.events.wait(0)
    detail = mock.fault_detail(gp.g.gpu_id)
    assert detail is not None and f"needs {need} bytes of scratch per work-item" in detail
    assert "programs 64 (scratch_wave64_lane_byte_size)" in detail and "header 0x" in detail


def test_bad_packet_is_a_hardware_exception_and_the_queue_stays_faulted(rig):
    mock, (gp, _) = rig
    drain(gp.g)
    sig = gp.signals.va + 160
    ring = PM4Ring(gp.g.create_queue("pm4", 0x1000))
    ring.push(gp.ib(pm4.signal(sig, 1)))
    ib = gp.ib(pm4.packet("NOP", 0) + [0xC0001200, 0] + pm4.signal(sig, 2))   # opcode 0x12 is no PM4 packet
    ring.push(ib)
    assert u64(sig) == 1 and ring.q.read_rptr() == ring.put == 8   # dropped up to the doorbell
    with pytest.raises(GPUHardwareException, match=r"GPU 4096: hardware exception \(reset type 1, cause 0"):
        gp.g.events.wait(0)
    detail = mock.fault_detail(gp.g.gpu_id)
    qid = ring.q.queue_id
    assert detail == (f"GPU 0x1000 pm4 queue {qid}: bad packet at dword 2 of the indirect buffer at "
                      f"{ib[1] | ib[2] << 32:#x}: header 0xc0001200 (opcode 0x12 unknown): unknown opcode")
    assert mock.fault_detail(gp.g.gpu_id) is None          # returned once
    ring.push(gp.ib(pm4.signal(sig, 3)))                    # a faulted queue runs nothing more
    assert u64(sig) == 1 and ring.q.read_rptr() == ring.put == 12
    assert gp.g.events.wait(0) is False and mock.fault_detail(gp.g.gpu_id) is None
    assert mock.engines.by_id[qid].state == "faulted"
    other = PM4Ring(gp.g.create_queue("pm4", 0x1000))       # the GPU's other queues still run
    other.push(gp.ib(pm4.signal(sig, 4)))
    assert u64(sig) == 4


def test_kernel_page_fault_is_a_memory_event_with_the_address(rig):
    mock, (g0, g1) = rig
    n = 256
    code, ks, grid, local = saxpy(n)
    image = g0.load(code)
    a = g1.vram(4 * n)                  # GPU 1's VRAM, not mapped on GPU 0
    b, out = g0.vram(4 * n), g0.vram(4 * n)
    st = PM4Stream(g0.cmdbuf(1 << 12))
    st.kernel(ks, image, args(out.va, a.va, b.va), grid, local)
    put(st.base, packed(st.words))
    drain(g0.g)
    ring = PM4Ring(g0.g.create_queue("pm4", 0x1000))
    ring.push(pm4.indirect_buffer(st.base, len(st.words)))
    with pytest.raises(GPUMemoryFault) as e:
        g0.g.events.wait(0)
    assert e.value.gpu_id == g0.g.gpu_id and a.va <= e.value.va < a.va + 4 * n
    detail = mock.fault_detail(g0.g.gpu_id)
    assert detail is not None and f"GPU page fault: read of unmapped memory at address {e.value.va:#x}" in detail
    assert "kernel at 0x" in detail and "lane" in detail and f"pm4 queue {ring.q.queue_id}" in detail
    assert ring.q.read_rptr() == ring.put
    with pytest.raises(GPUMemoryFault) as e1:          # every memory event of the process gets it (as KFD's)
        g1.g.events.wait(0)
    assert e1.value.gpu_id == g0.g.gpu_id and e1.value.va == e.value.va


def test_two_host_threads_ring_at_once(rig):
    _, (g0, g1) = rig
    rings = [PM4Ring(g0.g.create_queue("pm4", 0x1000)), SDMARing(g1.g.create_queue("sdma", 0x1000))]
    sigs = [g0.signals.va + 192, g1.signals.va + 192]
    ibs = [[g0.ib(pm4.signal(sigs[0], i)) for i in range(1, 101)], [sdma.signal(sigs[1], i) for i in range(1, 101)]]
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i, words in enumerate(ibs[k], 1):
                rings[k].push(words)
                assert u64(sigs[k]) == i
        except BaseException as e:  # noqa: BLE001 -- handed to the main thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and [u64(s) for s in sigs] == [100, 100]


def test_a_doorbell_rung_during_another_queues_run_is_picked_up(rig):
    mock, (gp, _) = rig
    sig, out = gp.signals.va + 224, gp.signals.va + 240
    first, second = PM4Ring(gp.g.create_queue("pm4", 0x1000)), PM4Ring(gp.g.create_queue("pm4", 0x1000))
    later = gp.ib(pm4.store(out, 11))
    real = mock.signal_interrupt
    rang: list[int] = []

    def interrupt(gpu: int, ctxid: int) -> None:     # a host reacting to the interrupt in the same thread
        real(gpu, ctxid)
        if not rang:
            rang.append(1)
            second.push(later)                      # rung while `first`'s run is on the stack
            assert u64(out) == 0                     # not run inside it
    mock.signal_interrupt = interrupt  # type: ignore[method-assign]
    first.push(gp.ib(pm4.signal(sig, 1) + pm4.store(sig + 8, 2)))
    assert rang and u64(sig) == 1 and u64(sig + 8) == 2 and u64(out) == 11


def test_an_engines_own_page_fault_is_a_memory_event(rig):
    mock, (gp, g1) = rig
    drain(gp.g)
    peer = g1.vram(4096)                               # GPU 1's VRAM, not mapped on GPU 0
    ring = SDMARing(gp.g.create_queue("sdma", 0x1000))
    ring.push(sdma.copy_linear(peer.va + 8, gp.stage.va, 16) + sdma.signal(gp.signals.va + 256, 1))
    with pytest.raises(GPUMemoryFault) as e:
        gp.g.events.wait(0)
    assert e.value.gpu_id == gp.g.gpu_id and e.value.va == peer.va + 8
    assert u64(gp.signals.va + 256) == 0 and ring.q.read_rptr() == ring.put   # the signal after it was dropped
    detail = mock.fault_detail(gp.g.gpu_id)
    assert detail is not None and f"sdma queue {ring.q.queue_id}" in detail and f"{peer.va + 8:#x}" in detail
