"""tg-mockgpu's mock KFD driver under tg-amd's KFD driver: topology, memory (VRAM pages scattered, host-visible
memory the CPU writes directly), queues and their doorbells, events and faults, and bad requests named."""
from __future__ import annotations

import ctypes
import errno

import numpy as np
import pytest

from tg_amd.kfd import ioctl as K
from tg_amd.kfd.driver import KFDDriver
from tg_amd.kfd.events import GPUMemoryFault
from tg_mockgpu.kfd.driver import MockKFD
from tg_mockgpu.kfd.topology import TOPOLOGY
from tg_mockgpu.memory import PageFault


@pytest.fixture
def kfd():
    mock = MockKFD(gpus=2, xccs=1)
    drv = KFDDriver(mock)
    yield mock, drv
    drv.close()
    mock.release()


def test_topology_files():
    mock = MockKFD(gpus=3, xccs=2)
    assert mock.listdir(TOPOLOGY) == ["0", "1", "2", "3"]
    assert mock.read(f"{TOPOLOGY}/0/gpu_id").strip() == "0"
    props = dict(line.split() for line in mock.read(f"{TOPOLOGY}/2/properties").splitlines())
    assert props["gfx_target_version"] == "110000" and props["num_xcc"] == "2" and props["simd_count"] == "384"
    assert props["drm_render_minor"] == "129" and props["max_waves_per_simd"] == "16"
    nodes = KFDDriver(mock).nodes
    assert [n.gpu_id for n in nodes] == [0x1000, 0x1001, 0x1002] and {n.arch for n in nodes} == {"gfx1100"}
    assert {(n.cus, n.xccs) for n in nodes} == {(96, 2)}
    mock.release()


@pytest.mark.parametrize("kw,msg", [({"gpus": 0}, "mock GPUs: 0; allowed: an integer >= 1"),
                                    ({"xccs": 9}, "mock XCCs: 9; allowed: 1..8")])
def test_bad_mock_sizes(kw, msg):
    with pytest.raises(ValueError, match=msg):
        MockKFD(**kw)


def test_vram_is_scattered_and_byte_exact(kfd):
    mock, drv = kfd
    g = drv.gpu(0)
    mem = g.alloc(9 * 4096 + 123, "vram")
    assert mem.size == 10 * 4096 and not mem.host_visible
    view = mock.gpu_view(0)
    region = mock.space.find(mem.va)
    vram = mock.gpus[0].vram
    first = (mem.va - vram.va_base) >> 12
    phys = vram.ptab[first:first + 10]
    assert len(phys) == 10 and (phys == region.phys).all()   # the GPU's page table maps the VA to its pages
    assert not np.any(phys[1:] == phys[:-1] + 1)   # no two neighbouring pages are neighbours in the store
    rng = np.random.default_rng(3)
    ref = bytearray(mem.size)
    for offset, size in [(1, 4095), (4095, 2), (4097, 3 * 4096 + 11), (7 * 4096 - 5, 2 * 4096 + 9), (0, 1)]:
        data = rng.integers(0, 256, size, np.uint8).tobytes()
        view.write(mem.va + offset, data)
        ref[offset:offset + size] = data
    assert view.read(mem.va, mem.size) == bytes(ref)
    assert view.read(mem.va + 4093, 7) == bytes(ref[4093:4100])


def test_host_visible_memory_is_the_cpus(kfd):
    mock, drv = kfd
    g = drv.gpu(1)
    mem = g.alloc(3 * 4096, "gtt")
    ctypes.memmove(mem.va + 4094, b"abcdef", 6)          # the CPU writes at the VA
    view = mock.gpu_view(1)
    assert view.read(mem.va + 4094, 6) == b"abcdef"       # the GPU side sees it
    view.write(mem.va + 8190, b"\x11\x22\x33\x44")
    assert ctypes.string_at(mem.va + 8190, 4) == b"\x11\x22\x33\x44"


def test_memory_is_only_reachable_from_the_gpus_it_is_mapped_on(kfd):
    mock, drv = kfd
    g0, g1 = drv.gpu(0), drv.gpu(1)
    mem = g0.alloc(4096, "vram")
    mock.gpu_view(0).write(mem.va + 10, b"peer")
    with pytest.raises(PageFault, match=f"read of unmapped address {mem.va + 10:#x}.*GPU 1: not mapped"):
        mock.gpu_view(1).read(mem.va + 10, 4)
    g1.map(mem)
    assert mock.gpu_view(1).read(mem.va + 10, 4) == b"peer"
    g1.unmap(mem)
    with pytest.raises(PageFault):
        mock.gpu_view(0).read(mem.va + 4096, 1)            # past the allocation's end


@pytest.mark.parametrize("kind", ["pm4", "aql", "sdma"])
def test_queue_ring_pointers_and_doorbell(kfd, kind):
    mock, drv = kfd
    g = drv.gpu(0)
    q = g.create_queue(kind, 0x1000)
    mq = mock.queues[q.queue_id]
    assert (mq.kind, mq.ring, mq.ring_size, mq.rptr, mq.wptr) == (kind, q.ring.va, 0x1000, q.rptr, q.wptr)
    assert (mq.eop[0] != 0) == (kind != "sdma") and (mq.cwsr[0] != 0) == (kind != "sdma")
    # the host writes packets into the ring, wrapping at its end, then the wptr, then rings the doorbell
    ctypes.memmove(q.ring.va + 0x1000 - 8, b"ABCDEFGH", 8)
    ctypes.memmove(q.ring.va, b"IJKL", 4)
    seen = []

    def cp(queue, value):
        seen.append((value, queue.read_wptr(), queue.ring_bytes(0x1000 - 8, 12)))
        queue.write_rptr(value)        # the engine consumed everything

    mq.on_doorbell = cp
    q.write_wptr(0x1004)
    q.ring_doorbell(0x1004)
    assert seen == [(0x1004, 0x1004, b"ABCDEFGHIJKL")]
    assert q.read_rptr() == 0x1004 and mq.last_doorbell == 0x1004 and mq.doorbells == 1
    q.destroy()
    assert q.queue_id not in mock.queues


def test_two_queues_have_their_own_doorbells(kfd):
    mock, drv = kfd
    g = drv.gpu(0)
    a, b = g.create_queue("sdma", 0x1000), g.create_queue("sdma", 0x1000)
    assert a.doorbell != b.doorbell
    b.ring_doorbell(5)
    assert mock.queues[b.queue_id].last_doorbell == 5 and mock.queues[a.queue_id].last_doorbell is None


def test_events_signal_and_memory_fault(kfd):
    mock, drv = kfd
    g = drv.gpu(1)
    ran = []
    mock.add_wait_hook(lambda: ran.append(1))
    assert g.events.wait(10) is False and ran == [1]     # nothing fired: timeout, after the hook ran
    mock.interrupt(g.events.signal_id)
    assert g.events.wait(10) is True
    assert g.events.wait(10) is False                     # auto-reset
    mock.report_fault(1, 0x1234_5000, write=True)
    with pytest.raises(GPUMemoryFault, match="GPU 4097: memory fault at 0x12345000 \\(NotPresent\\)") as e:
        g.events.wait(10)
    assert e.value.va == 0x1234_5000
    g.events.set()
    assert g.events.wait(0) is True


def _kfd_fd(mock):
    return next(fd for fd, what in mock.fds.items() if what == "kfd")


def test_bad_ioctl_requests_are_named(kfd):
    mock, drv = kfd
    drv.gpu(0)
    fd = _kfd_fd(mock)
    with pytest.raises(OSError, match=r"GET_VERSION: request 0x80104b01 \(size 16, direction 2\) is not 0x80084b01 "
                                      r"\(size 8, direction 2\)"):
        mock.ioctl(fd, 0x80104B01, K.GetVersionArgs())
    with pytest.raises(OSError, match=r"unknown ioctl request 0xc0084b7f \(nr 0x7f\); known: GET_VERSION 0x80084b01"):
        mock.ioctl(fd, 0xC0084B7F, K.GetVersionArgs())
    with pytest.raises(OSError, match="ACQUIRE_VM: argument struct of 16 bytes, expected 8"):
        mock.ioctl(fd, K.request_of("ACQUIRE_VM"), K.RuntimeEnableArgs())
    render = next(f for f, what in mock.fds.items() if what.startswith("render"))
    with pytest.raises(OSError, match=f"on fd {render}, which is not /dev/kfd") as e:
        mock.ioctl(render, K.request_of("GET_VERSION"), K.GetVersionArgs())
    assert e.value.errno == errno.ENOTTY
    with pytest.raises(FileNotFoundError, match="no device file '/dev/dri/renderD200'; it provides /dev/kfd"):
        mock.open("/dev/dri/renderD200", 0)


def _alloc(mock, **kw):
    return mock.ioctl(_kfd_fd(mock), K.request_of("ALLOC_MEMORY_OF_GPU"), K.AllocMemoryArgs(**kw))


@pytest.mark.parametrize("kw,msg", [
    ({"gpu_id": 7}, "gpu_id 0x7 is not a GPU; GPUs: 0x1000, 0x1001"),
    ({"flags": K.AllocFlags.VRAM | K.AllocFlags.GTT}, "must hold exactly one of VRAM"),
    ({"flags": K.AllocFlags.VRAM | K.AllocFlags.PUBLIC}, "mock's VRAM is not CPU-visible"),
    ({"size": 100}, "must be non-zero multiples of 4096"),
    ({"flags": K.AllocFlags.USERPTR}, "USERPTR needs the host address in mmap_offset"),
])
def test_bad_allocations_are_named(kfd, kw, msg):
    mock, drv = kfd
    drv.gpu(0)
    args = {"va_addr": 0x5000_0000_0000, "size": 4096, "gpu_id": 0x1000, "flags": K.AllocFlags.VRAM, **kw}
    with pytest.raises(OSError, match=msg) as e:
        _alloc(mock, **args)
    assert e.value.errno == errno.EINVAL


def test_alloc_before_acquire_vm(kfd):
    mock, drv = kfd
    with pytest.raises(OSError, match=r"GPU 0x1001 has no VM \(ACQUIRE_VM first\)"):
        _alloc(mock, va_addr=0x5000_0000_0000, size=4096, gpu_id=0x1001, flags=K.AllocFlags.VRAM)


def test_bad_queues_are_named(kfd):
    mock, drv = kfd
    g = drv.gpu(0)
    ring = g.alloc(0x1000, "vram")
    ptrs = g.alloc(0x1000, "gtt")
    base = {"ring_base_address": ring.va, "ring_size": 0x1000, "gpu_id": g.gpu_id, "queue_type": 1,
            "read_pointer_address": ptrs.va, "write_pointer_address": ptrs.va + 8, "queue_percentage": 100}
    fd = _kfd_fd(mock)
    for kw, msg in [({}, f"ring \\[{ring.va:#x}, \\+0x1000\\) is not host-visible memory mapped on GPU 0x1000"),
                    ({"queue_type": 3}, "queue_type 3; the mock has 0 \\(COMPUTE, PM4\\), 1 \\(SDMA\\), 2"),
                    ({"queue_percentage": 100 | 1 << 8}, "xcc 1 \\(allowed 0..0\\)"),
                    ({"ring_size": 0x1800}, "ring_size 0x1800 is not a power of two")]:
        with pytest.raises(OSError, match=msg):
            mock.ioctl(fd, K.request_of("CREATE_QUEUE"), K.CreateQueueArgs(**{**base, **kw}))
    gtt_ring = g.alloc(0x1000, "gtt")
    with pytest.raises(OSError, match="EOP buffer \\[0x0, \\+0x0\\) is not mapped"):
        mock.ioctl(fd, K.request_of("CREATE_QUEUE"),
                   K.CreateQueueArgs(**{**base, "ring_base_address": gtt_ring.va, "queue_type": 0}))


def test_doorbell_without_a_queue_and_bad_mmaps(kfd):
    mock, drv = kfd
    g = drv.gpu(0)
    q = g.create_queue("sdma", 0x1000)
    with pytest.raises(OSError, match="doorbell write at slot 5 of GPU 0x1000: no queue has it"):
        mock.write64(q.doorbell + 40, 1)
    with pytest.raises(OSError, match="mmap of the render node at offset 0x123000: no allocation of this GPU"):
        mock.mmap(0, 4096, 3, 1, g.drm_fd, 0x123000)
    with pytest.raises(OSError, match="mmap of /dev/kfd at offset 0x0: not a doorbell offset"):
        mock.mmap(0, 0x2000, 3, 1, drv.fd, 0)


def test_close_frees_everything():
    mock = MockKFD(gpus=2)
    drv = KFDDriver(mock)
    g = drv.gpu(1)                      # allocates the event page; GPU 0 maps it
    g.create_queue("pm4", 0x1000)
    g.alloc(4096, "gtt")
    drv.gpu(0).create_queue("sdma", 0x1000)
    drv.close()
    assert mock.queues == {} and mock.handles == {} and mock.events == {} and mock.fds == {}
    assert mock.space.find(g.events.page.va) is None
    mock.release()


def test_the_plugin_offers_the_mock_driver():
    from tg_core.plugins.manager import get_registry
    from tg_amd.kfd.select import mock_kfd_classes
    get_registry().participants("AMD")   # loads tg-amd (which adds the hook) and tg-mockgpu
    assert mock_kfd_classes()["mock"] is MockKFD
