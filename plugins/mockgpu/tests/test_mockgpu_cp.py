"""The mock's command processors executing what tg-amd's queue rules encode (cp_harness.py runs the pipeline on a
test memory); an independent decoder checks the ring and command-buffer contents against amd.md's tables."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from cp_harness import COMPUTE, COPY, Harness, decode_pm4, decode_sdma

from tg_core.dtype import dtypes
from tg_core.hcq import ops as q
from tg_core.uop.uop import UOp
from tg_mockgpu.cp import PacketError
from tg_mockgpu.cp.memory import PAGE, PagedMemory, read, write
from tg_mockgpu.cp.pm4 import PM4Queue
from tg_mockgpu.cp.sdma import SDMAQueue


def u64(v: int) -> UOp:
    return UOp.const(dtypes.uint64, v)


def test_pm4_signal_is_one_indirect_buffer_with_a_release_mem():
    h = Harness()
    sig = h.host("sig", 16)
    h.submit(COMPUTE, [q.ins("signal", COMPUTE, q.addr(sig), u64(0x1_0000_0007))])
    assert h.rang == [COMPUTE] and h.doorbell(COMPUTE) == 4
    ring = decode_pm4(h.ring_words(COMPUTE)[:4])
    assert [p.name for p in ring] == ["INDIRECT_BUFFER"]
    assert ring[0].payload[2] >> 23 & 1 and ring[0].payload[2] & 0xFFFFF == 8  # VALID, 8 dwords
    (rel,) = decode_pm4(h.ib_words(ring[0]))
    assert rel.name == "RELEASE_MEM"
    assert rel.payload[0] & 0x3F == 0x14 and rel.payload[0] >> 8 & 0xF == 5  # CACHE_FLUSH_AND_INV_TS, EOP
    assert rel.payload[1] >> 29 == 2                                         # 64-bit data
    assert rel.payload[2] | rel.payload[3] << 32 == h.region(sig).va
    assert h.u64(sig) == 0
    assert h.run(COMPUTE)
    assert h.u64(sig) == 0x1_0000_0007 and h.pm4.read_pointer == 4


def test_pm4_wait_stalls_until_the_signal_then_passes():
    h = Harness()
    sig, out = h.host("sig", 16), h.host("out", 16)
    h.submit(COMPUTE, [q.ins("wait", COMPUTE, q.addr(sig), u64(3)),
                       q.ins("store", COMPUTE, q.addr(out), u64(99)),
                       q.ins("timestamp", COMPUTE, q.addr(out, 8))])
    (ib,) = decode_pm4(h.ring_words(COMPUTE)[:4])
    packets = decode_pm4(h.ib_words(ib))
    assert [p.name for p in packets] == ["WAIT_REG_MEM", "RELEASE_MEM", "RELEASE_MEM"]
    assert packets[0].payload[0] == 0x15 and packets[0].payload[3] == 3  # memory, GEQ; reference 3
    assert packets[2].payload[1] >> 29 == 3                              # the GPU clock
    assert not h.run(COMPUTE) and h.pm4.stalled == (h.region(sig).va, 3)
    assert h.u64(out) == 0 and h.pm4.read_pointer == 0   # the ring packet is not done
    write(h.mem, h.region(sig).va, struct.pack("<Q", 2))
    assert not h.run(COMPUTE)
    write(h.mem, h.region(sig).va, struct.pack("<Q", 3))
    assert h.run(COMPUTE)
    assert h.u64(out) == 99 and h.u64(out, 8) > 0 and h.pm4.read_pointer == 4


def test_pm4_ring_wraps_over_many_submissions():
    h = Harness(pm4_ring_dwords=16)          # 4 INDIRECT_BUFFERs fit
    sig = h.host("sig", 16)
    for i in range(1, 23):
        h.submit(COMPUTE, [q.ins("signal", COMPUTE, q.addr(sig), u64(i))])
        assert h.run(COMPUTE) and h.u64(sig) == i
    assert h.doorbell(COMPUTE) == h.pm4.read_pointer == 4 * 22
    assert [p.name for p in decode_pm4(h.ring_words(COMPUTE))] == ["INDIRECT_BUFFER"] * 4


def test_pm4_barrier_flushes_hdp_and_acquires():
    h = Harness()
    h.submit(COMPUTE, [q.ins("barrier", COMPUTE)])
    (ib,) = decode_pm4(h.ring_words(COMPUTE)[:4])
    wait, acq = decode_pm4(h.ib_words(ib))
    assert (wait.name, wait.payload[1], wait.payload[2]) == ("WAIT_REG_MEM", 0xE26, 0xE27)  # HDP flush req/done
    assert acq.name == "ACQUIRE_MEM" and acq.payload[6] == 0xC3F1
    assert h.run(COMPUTE)


def test_pm4_multi_xcc_signal_is_predicated_on_one_xcc():
    h = Harness(xccs=2)
    sig = h.host("sig", 16)
    h.submit(COMPUTE, [q.ins("signal", COMPUTE, q.addr(sig), u64(5))])
    (ib,) = decode_pm4(h.ring_words(COMPUTE)[:4])
    pred, rel = decode_pm4(h.ib_words(ib))
    assert pred.name == "PRED_EXEC" and pred.payload[0] == (1 << 24) | 8  # XCC 0, the 8-dword RELEASE_MEM
    assert rel.name == "RELEASE_MEM"
    assert h.run(COMPUTE) and h.u64(sig) == 5


def test_pm4_pred_exec_selects_register_files():
    mem = PagedMemory()
    from tg_amd.queues import pm4
    ring_va, ring = mem.alloc_host(64)
    rptr, _ = mem.alloc_host(8)
    words = pm4.pred_exec(2, pm4.set_sh_reg("COMPUTE_PGM_RSRC3", 7), 2) + pm4.set_sh_reg("COMPUTE_RESOURCE_LIMITS", 1)
    ib = mem.alloc(4 * len(words))
    write(mem, ib, struct.pack(f"<{len(words)}I", *words))
    ring.view(np.uint32)[:4] = pm4.indirect_buffer(ib, len(words))
    cp = PM4Queue("AMD COMPUTE:0", mem, ring_va, 16, rptr, xccs=2)
    assert cp.run(4)
    assert 0x2E28 not in cp.regs[0] and cp.regs[1][0x2E28] == 7     # RSRC3 only on XCC 1
    assert cp.regs[0][0x2E15] == cp.regs[1][0x2E15] == 1            # after the block: both


def test_sdma_copy_across_scattered_pages_byte_exact():
    h = Harness(sdma_ring_bytes=1024, max_copy=3 * PAGE + 5)  # a copy of several COPY_LINEAR packets
    n = 5 * PAGE + 123
    src, dst = h.scattered("src", n, offset=37), h.scattered("dst", n + 8, offset=4093)
    data = np.random.default_rng(0).integers(0, 256, n, np.uint8).tobytes()
    write(h.mem, h.region(src).va, data)
    h.submit(COPY, [q.ins("copy", COPY, dst, src, extra=(n,))])
    packets = decode_sdma(h.ring_words(COPY)[:h.doorbell(COPY) // 4])
    assert [p.name for p in packets] == ["COPY", "COPY"]
    assert [p.payload[1] + 1 for p in packets] == [3 * PAGE + 5, n - 3 * PAGE - 5]
    assert packets[1].payload[3] | packets[1].payload[4] << 32 == h.region(src).va + 3 * PAGE + 5
    assert h.run(COPY)
    assert read(h.mem, h.region(dst).va, n + 8) == data + bytes(8)
    assert h.sdma.runs > 2 * (n // PAGE)  # page-bounded runs on both sides (PagedMemory refuses any other access)


def test_sdma_ring_wraps_with_a_zero_filled_tail():
    h = Harness(sdma_ring_bytes=256)
    src, dst, sig = h.scattered("src", 64), h.scattered("dst", 64), h.host("sig", 16)
    write(h.mem, h.region(src).va, bytes(range(64)))
    seen_fill = False
    for i in range(1, 31):
        before = h.doorbell(COPY)
        # a copy and a signal: 7 + 4 + 4 + 2 dwords = 68 bytes, which does not divide the 256-byte ring
        h.submit(COPY, [q.ins("copy", COPY, dst, src, extra=(64,)), q.ins("signal", COPY, q.addr(sig), u64(i))])
        after = h.doorbell(COPY)
        pos = before % 256
        if pos + 68 > 256:                     # restarted at 0: the tail was zero-filled (NOPs), put skipped it
            seen_fill = True
            assert after == before + (256 - pos) + 68
            assert h.ring_words(COPY)[pos // 4:] == [0] * ((256 - pos) // 4)
            assert [p.name for p in decode_sdma(h.ring_words(COPY)[:17])] == ["COPY", "FENCE", "FENCE", "TRAP"]
        else:
            assert after == before + 68
        assert h.run(COPY) and h.u64(sig) == i and h.sdma.read_pointer == after
    assert seen_fill and read(h.mem, h.region(dst).va, 64) == bytes(range(64))


def test_sdma_poll_stalls_then_fence_and_timestamp():
    h = Harness()
    sig, out = h.host("sig", 16), h.host("out", 16)
    h.submit(COPY, [q.ins("wait", COPY, q.addr(sig), u64(1)), q.ins("store", COPY, q.addr(out), u64(0x5_0000_0001)),
                    q.ins("timestamp", COPY, q.addr(out, 8))])
    names = [p.name for p in decode_sdma(h.ring_words(COPY)[:h.doorbell(COPY) // 4])]
    assert names == ["POLL_REGMEM", "FENCE", "FENCE", "TIMESTAMP"]
    assert h.ring_words(COPY)[0] == 0xD0000008      # memory poll, GEQ (amd.md 4)
    assert not h.run(COPY) and h.u64(out) == 0
    write(h.mem, h.region(sig).va, struct.pack("<Q", 1))
    assert h.run(COPY) and h.u64(out) == 0x5_0000_0001 and h.u64(out, 8) > 0


def _ring_with(mem: PagedMemory, words: list[int], ib: bool = True) -> tuple[PM4Queue, int]:
    """A PM4 queue whose ring holds `words` (or one IB of them)."""
    ring_va, ring = mem.alloc_host(256)
    rptr, _ = mem.alloc_host(8)
    if ib:
        va = mem.alloc(4 * len(words))
        write(mem, va, struct.pack(f"<{len(words)}I", *words))
        words = [0xC0023F00, va & 0xFFFFFFFF, va >> 32, len(words) | 1 << 23]
    ring.view(np.uint32)[:len(words)] = words
    return PM4Queue("AMD COMPUTE:0", mem, ring_va, 64, rptr), len(words)


@pytest.mark.parametrize("words, dword, header, opcode, why", [
    ([0xC000_9900, 0], 0, 0xC0009900, 0x99, "unknown opcode"),
    ([0xC000_1000, 0, 0xC0043C00, 0x15, 0, 0, 0, 0], 2, 0xC0043C00, 0x3C, "WAIT_REG_MEM takes 6"),
    ([0x4000_0000], 0, 0x40000000, 0, "packet type 1"),
    ([0xC0064900, 0, 0xA0000000, 0x1000, 0, 0, 0, 0], 0, 0xC0064900, 0x49, "DATA_SEL 5"),
    ([0xC0061500, 1, 1, 1, 0x8005], 0, 0xC0061500, 0x15, "DISPATCH_DIRECT takes 4"),
])
def test_malformed_pm4_packets_are_named(words, dword, header, opcode, why):
    cp, n = _ring_with(PagedMemory(), words)
    with pytest.raises(PacketError, match=why) as e:
        cp.run(n)
    assert e.value.queue == "AMD COMPUTE:0" and e.value.offset == dword
    assert (e.value.header, e.value.opcode) == (header, opcode)
    assert f"dword {dword} of the indirect buffer at" in str(e.value) and f"{header:#010x}" in str(e.value)


def test_pred_exec_in_the_ring_and_unknown_sdma_opcode_are_named():
    cp, n = _ring_with(PagedMemory(), [0xC0002300, (1 << 24) | 2, 0xC0001000, 0], ib=False)
    with pytest.raises(PacketError, match="dword 0 of the ring of AMD COMPUTE:0.*PRED_EXEC works only inside"):
        cp.run(n)
    mem = PagedMemory()
    ring_va, ring = mem.alloc_host(64)
    rptr, _ = mem.alloc_host(8)
    ring.view(np.uint32)[:3] = [0, 0, 0x0000_0B0C]
    sd = SDMAQueue("AMD COPY:0", mem, ring_va, 64, rptr)
    with pytest.raises(PacketError, match=r"AMD COPY:0: bad packet at dword 2 .*header 0x00000b0c \(opcode 0xc "
                                          r"unknown\)"):
        sd.run(12)
    assert sd.read_pointer == 8   # the two NOPs before it ran


def _compile_saxpy(n: int):
    from tg_amd.compiler import AMDCompiler
    from tg_amd.device import prepare_kernel
    from tg_amd.elf import load_code_object
    from tg_amd.renderer import AMDRenderer
    out, a, b = (UOp.param(i, dtypes.float32.ptr(n)) for i in range(3))
    i = UOp.range(n, 0)
    from tg_core.uop.ops import KernelInfo, Ops
    ast = UOp(Ops.SINK, dtypes.void, (out.index(i).store(a.index(i).load() * 2.0 + b.index(i).load()).end(i),),
              KernelInfo("saxpy"))
    r = AMDRenderer()
    pk = prepare_kernel(ast)
    prog = r.program(pk.ast)
    code = load_code_object(AMDCompiler("gfx1100").compile(r.render(prog)))
    return code, r.function_name(prog), pk.launch.evaluate({})


def _saxpy_on(mem, n: int, a: np.ndarray, b: np.ndarray):
    """The compiled saxpy loaded into `mem` with its three buffers (a and b written): (kernel, image address,
    buffer addresses by name, grid, local)."""
    code, name, (grid, local) = _compile_saxpy(n)
    image_va = mem.alloc(len(code.image), 256)
    mem.write(image_va, code.image_at(image_va))
    va = {k: mem.alloc(4 * n) for k in ("out", "a", "b")}
    mem.write(va["a"], a.tobytes())
    mem.write(va["b"], b.tobytes())
    return code.kernel(name), image_va, va, grid, local


@pytest.mark.parametrize("xccs", [1, 2])
def test_dispatch_direct_runs_a_compiled_kernel(xccs):
    from tg_amd.queues import pm4
    from tg_amd.queues.kernel import dispatch_of
    from tg_mockgpu.cp.launch import EmulatorLauncher
    from tg_mockgpu.memory import GPUMemory
    n = 1000
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    mem = GPUMemory()
    try:
        ks, image_va, va, grid, local = _saxpy_on(mem, n, a, b)
        kernargs = mem.alloc(ks.descriptor.kernarg_size)
        mem.write(kernargs, struct.pack("<QQQ", va["out"], va["a"], va["b"]).ljust(ks.descriptor.kernarg_size, b"\0"))
        scratch = [mem.alloc(1 << 16) for _ in range(xccs)]
        sig = mem.alloc(16)
        d = dispatch_of(ks, image_va, {"kernarg_segment_ptr": kernargs}, grid, local, scratch)
        words = pm4.dispatch(d, xccs) + pm4.signal(sig, 1, xccs)
        # the independent decoder: the dispatch sequence of amd.md 2.3, in order, with its register values
        packets = decode_pm4(words)
        seq = [p.reg or p.name for p in packets if p.name != "PRED_EXEC"]
        assert seq == ["ACQUIRE_MEM", "COMPUTE_PGM_LO", "COMPUTE_PGM_RSRC1", "COMPUTE_PGM_RSRC3",
                       "COMPUTE_TMPRING_SIZE", *["COMPUTE_DISPATCH_SCRATCH_BASE_LO"] * xccs, "COMPUTE_RESTART_X",
                       "COMPUTE_USER_DATA_0", "COMPUTE_RESOURCE_LIMITS", "COMPUTE_START_X", "DISPATCH_DIRECT",
                       "EVENT_WRITE", "RELEASE_MEM"]
        by = {p.reg or p.name: p.payload for p in packets}
        assert (by["COMPUTE_PGM_LO"][1] | by["COMPUTE_PGM_LO"][2] << 32) << 8 == image_va + ks.code_offset
        assert by["COMPUTE_PGM_RSRC1"][1:] == [ks.descriptor.compute_pgm_rsrc1, ks.descriptor.compute_pgm_rsrc2]
        assert by["COMPUTE_USER_DATA_0"][1] | by["COMPUTE_USER_DATA_0"][2] << 32 == kernargs
        assert by["COMPUTE_START_X"][1:] == [0, 0, 0, *local, 0, 0]
        assert by["DISPATCH_DIRECT"] == [*grid, 0x8005] and by["EVENT_WRITE"] == [0x407]
        assert by["ACQUIRE_MEM"] == [0, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0, 0, 0x3F0]
        preds = [p.payload[0] for p in packets if p.name == "PRED_EXEC"]
        assert preds == ([] if xccs == 1 else [(1 << 24) | 4, (2 << 24) | 4, (1 << 24) | 8])
        ib = mem.alloc(4 * len(words))
        mem.write(ib, struct.pack(f"<{len(words)}I", *words))
        ring, rptr = mem.alloc(256), mem.alloc(8)
        mem.write(ring, struct.pack("<4I", *pm4.indirect_buffer(ib, len(words))))
        launcher = EmulatorLauncher(mem)
        cp = PM4Queue("AMD COMPUTE:0", mem, ring, 64, rptr, launch=launcher, xccs=xccs)
        assert cp.run(4)
        got = np.frombuffer(mem.read(va["out"], 4 * n), np.float32)
        np.testing.assert_allclose(got, a * 2 + b, rtol=1e-6)
        assert struct.unpack("<Q", mem.read(sig, 8))[0] == 1 and launcher.last.waves == grid[0] * 8
        for x in range(xccs):   # each XCC its own scratch base
            assert (cp.regs[x][0x2E10] | cp.regs[x][0x2E11] << 32) << 8 == scratch[x]
    finally:
        mem.close()


# amd.md 3.1 / 3.2, written for the tests: the dispatch packet's fields and the vendor PM4-IB packet
DISPATCH_FIELDS = struct.Struct("<HHHHHHIIIIIQQQQ")


def test_aql_vendor_packets_wrap_the_ring_with_doorbell_lag_one():
    h = Harness(compute="aql", aql_ring_packets=4)
    sig = h.host("sig", 16)
    for i in range(1, 12):
        h.submit(COMPUTE, [q.ins("signal", COMPUTE, q.addr(sig), u64(i))])
        assert h.doorbell(COMPUTE) == i - 1                       # the index of the packet just written
        slot = h.ring_words(COMPUTE)[16 * ((i - 1) % 4):16 * ((i - 1) % 4 + 1)]
        assert slot[0] == 0x1500 | (1 << 16)                      # vendor specific, barrier, system scopes, format 1
        assert slot[1] == 0xC0023F00 and slot[4] >> 23 & 1 and slot[5] == 10 and slot[6:] == [0] * 10
        (rel,) = decode_pm4(h.ib_words(decode_pm4(slot[1:5])[0]))
        assert rel.name == "RELEASE_MEM"
        assert h.run(COMPUTE) and h.u64(sig) == i and h.pm4.read_pointer == i


def test_aql_wait_stalls_inside_its_vendor_packet():
    h = Harness(compute="aql")
    sig, out = h.host("sig", 16), h.host("out", 16)
    h.submit(COMPUTE, [q.ins("wait", COMPUTE, q.addr(sig), u64(1)), q.ins("store", COMPUTE, q.addr(out), u64(8))])
    assert not h.run(COMPUTE) and h.pm4.read_pointer == 0 and h.pm4.stalled == (h.region(sig).va, 1)
    write(h.mem, h.region(sig).va, struct.pack("<Q", 1))
    assert h.run(COMPUTE) and h.u64(out) == 8 and h.pm4.read_pointer == 1


def test_aql_kernel_dispatch_runs_a_compiled_kernel():
    from tg_amd.queues import aql, pm4
    from tg_mockgpu.cp.aql import AQLQueue
    from tg_mockgpu.cp.launch import EmulatorLauncher
    from tg_mockgpu.memory import GPUMemory
    n = 1000
    a, b = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
    mem = GPUMemory()
    try:
        ks, image_va, va, grid, local = _saxpy_on(mem, n, a, b)
        kernargs = mem.alloc(64)
        mem.write(kernargs, struct.pack("<QQQ", va["out"], va["a"], va["b"]))
        sig = mem.alloc(16)
        signal = pm4.signal(sig, 1)
        ib = mem.alloc(4 * len(signal))
        mem.write(ib, struct.pack(f"<{len(signal)}I", *signal))
        packets = [aql.kernel_dispatch(ks, image_va, kernargs, grid, local), aql.pm4_ib(ib, len(signal))]
        f = DISPATCH_FIELDS.unpack(struct.pack("<16I", *packets[0]))
        assert f[0] == 0x1502 and f[1] == 3 and f[2:5] == local and f[6:9] == tuple(g * x for g, x in zip(grid, local))
        assert f[11] == image_va + ks.descriptor_offset and f[12] == kernargs
        ring, rptr = mem.alloc(4 * 64), mem.alloc(256)
        for i, p in enumerate(packets):
            mem.write(ring + 64 * i, struct.pack("<16I", *p))
        launcher = EmulatorLauncher(mem)
        cp = AQLQueue("AMD COMPUTE:0", mem, ring, 4, rptr + 128, queue_va=rptr, launch=launcher)
        assert cp.run(1) and cp.read_pointer == 2
        np.testing.assert_allclose(np.frombuffer(mem.read(va["out"], 4 * n), np.float32), a * 2 + b)
        assert struct.unpack("<Q", mem.read(sig, 8))[0] == 1
    finally:
        mem.close()


def test_aql_bad_packet_is_named():
    from tg_mockgpu.cp.aql import AQLQueue
    mem = PagedMemory()
    ring_va, ring = mem.alloc_host(256)
    rptr, _ = mem.alloc_host(8)
    ring.view(np.uint32)[16] = 0x1504           # packet 1: an AGENT_DISPATCH
    ring.view(np.uint32)[0] = 0x1500 | (1 << 16)
    ring.view(np.uint32)[1:5] = [0xC0023F00, 0, 0, 0]   # packet 0: a vendor packet whose IB is not VALID
    cp = AQLQueue("AMD COMPUTE:0", mem, ring_va, 4, rptr)
    with pytest.raises(PacketError, match=r"AMD COMPUTE:0: bad packet at dword 0 of the ring of AMD COMPUTE:0 "
                                          r"\(packet 0\): header 0x00011500 \(opcode 0x0 VENDOR_SPECIFIC\): .*VALID"):
        cp.run(1)
    nop = mem.alloc(8)
    write(mem, nop, struct.pack("<2I", 0xC0001000, 0))      # a PM4 NOP with one payload dword
    ring.view(np.uint32)[2:5] = [nop & 0xFFFFFFFF, nop >> 32, 1 << 23 | 2]
    with pytest.raises(PacketError, match=r"dword 16 .*\(packet 1\): header 0x00001504 \(opcode 0x4 AGENT_DISPATCH\)"):
        cp.run(1)
    assert cp.read_pointer == 1                              # packet 0 ran


def test_copy_data_release_32_bit_and_interrupts():
    from tg_amd.queues import pm4
    mem = PagedMemory()
    src, out = mem.alloc(16), mem.alloc(32)
    write(mem, src, struct.pack("<Q", 0x1122_3344_5566_7788))
    words = [*pm4.packet("COPY_DATA", 2 | (2 << 8) | (1 << 16), src & 0xFFFFFFFF, src >> 32,
                         out & 0xFFFFFFFF, out >> 32),                                # 64-bit memory -> memory
             *pm4.packet("COPY_DATA", 5 | (2 << 8), 0xABCD, 0, (out + 8) & 0xFFFFFFFF, (out + 8) >> 32),  # immediate
             *pm4.packet("COPY_DATA", 9 | (2 << 8) | (1 << 16), 0, 0, (out + 16) & 0xFFFFFFFF, (out + 16) >> 32),
             *pm4.release_mem(out + 24, 0x9_0000_0005, pm4.DATA_SEL_32, pm4.INT_SEL_AFTER_CONFIRM)]
    cp, n = _ring_with(mem, words)
    got: list[int] = []
    cp.interrupt = got.append
    assert cp.run(n)
    lo64, imm, clock, low32 = struct.unpack("<QIxxxxQQ", read(mem, out, 32))
    assert lo64 == 0x1122_3344_5566_7788 and imm == 0xABCD and clock > 0
    assert low32 == 5 and got == [0]                  # DATA_SEL 1 writes only the low dword; INT_SEL 2 interrupts
    sd_ring, ring = mem.alloc_host(64)
    rptr, _ = mem.alloc_host(8)
    ring.view(np.uint32)[:2] = [6, 0x123]              # TRAP with context 0x123
    sd = SDMAQueue("AMD COPY:0", mem, sd_ring, 64, rptr, interrupt=got.append)
    assert sd.run(8) and got == [0, 0x123]


@pytest.mark.parametrize("kind", ["pm4", "aql"])
def test_a_submission_waits_runs_a_kernel_with_inline_kernargs_and_signals(kind):
    """One command buffer: wait for a signal, saxpy (its kernargs inside the buffer), signal."""
    from tg_amd.queues import pm4
    from tg_amd.queues.stream import AQLStream, PM4Stream
    from tg_mockgpu.cp.aql import AQLQueue
    from tg_mockgpu.cp.launch import EmulatorLauncher
    from tg_mockgpu.memory import GPUMemory
    n = 777
    a, b = np.linspace(-3, 3, n, dtype=np.float32), np.full(n, 7, np.float32)
    mem = GPUMemory()
    try:
        ks, image_va, va, grid, local = _saxpy_on(mem, n, a, b)
        go, done, cmd = mem.alloc(16), mem.alloc(16), mem.alloc(1 << 14)
        args = [w for v in (va["out"], va["a"], va["b"]) for w in (v & 0xFFFFFFFF, v >> 32)]
        st = PM4Stream(cmd) if kind == "pm4" else AQLStream(cmd)
        st.add(pm4.wait(go, 1))
        st.kernel(ks, image_va, args, grid, local)
        st.add(pm4.signal(done, 2))
        mem.write(cmd, struct.pack(f"<{len(st.words)}I", *st.words))
        launcher = EmulatorLauncher(mem)
        ring, rptr = mem.alloc(1024), mem.alloc(256)
        if isinstance(st, PM4Stream):
            packets = decode_pm4(st.words)
            nop = [p for p in packets if p.name == "NOP"][-1]       # the last NOP holds the segment (one may pad)
            assert nop.payload[:6] == args and len(nop.payload) == ks.descriptor.kernarg_size // 4
            user = next(p for p in packets if p.reg == "COMPUTE_USER_DATA_0").payload
            assert (user[1] | user[2] << 32) % 64 == 0
            mem.write(ring, struct.pack("<4I", *pm4.indirect_buffer(cmd, len(st.words))))
            cp: PM4Queue | AQLQueue = PM4Queue("AMD COMPUTE:0", mem, ring, 256, rptr, launch=launcher)
            bell = 4
        else:
            ring_packets = st.finish()
            assert [p[0] & 0xFF for p in ring_packets] == [0, 2, 0]   # vendor (wait), dispatch, vendor (signal)
            kernarg = ring_packets[1][10] | ring_packets[1][11] << 32
            assert kernarg % 64 == 0 and struct.unpack("<6I", mem.read(kernarg, 24)) == tuple(args)
            for i, p in enumerate(ring_packets):
                mem.write(ring + 64 * i, struct.pack("<16I", *p))
            cp = AQLQueue("AMD COMPUTE:0", mem, ring, 16, rptr + 128, queue_va=rptr, launch=launcher)
            bell = len(ring_packets) - 1
        assert not cp.run(bell) and launcher.last.waves == 0      # stalled at the wait: the kernel has not run
        mem.write(go, struct.pack("<Q", 1))
        assert cp.run(bell)
        np.testing.assert_allclose(np.frombuffer(mem.read(va["out"], 4 * n), np.float32), a * 2 + b)
        assert struct.unpack("<Q", mem.read(done, 8))[0] == 2
    finally:
        mem.close()
