"""tg-amd's KFD driver on an OS layer: topology, the ioctl sequence and flags of memory and queues (amd.md 6), as
seen by a recording wrapper around tg-mockgpu's mock KFD; the choice of OS layer and its error without either."""
from __future__ import annotations

import ctypes

import pytest

from tg_amd.kfd import ioctl as K
from tg_amd.kfd import select
from tg_amd.kfd.driver import KFDDriver, alloc_flags
from tg_amd.kfd.queues import cwsr_sizes
from tg_amd.kfd.topology import gfx_target, parse_properties

mock_driver = pytest.importorskip("tg_mockgpu.kfd.driver")

F = K.AllocFlags
NAMES = {0x01: "GET_VERSION", 0x02: "CREATE_QUEUE", 0x08: "CREATE_EVENT", 0x0C: "WAIT_EVENTS", 0x15: "ACQUIRE_VM",
         0x16: "ALLOC_MEMORY_OF_GPU", 0x17: "FREE_MEMORY_OF_GPU", 0x18: "MAP_MEMORY_TO_GPU",
         0x19: "UNMAP_MEMORY_FROM_GPU", 0x25: "RUNTIME_ENABLE", 0x03: "DESTROY_QUEUE", 0x09: "DESTROY_EVENT",
         0x0A: "SET_EVENT"}


class Recording(mock_driver.MockKFD):
    """The mock, with every ioctl (name and a copy of its struct) and mmap recorded."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.calls: list[tuple[str, ctypes.Structure]] = []
        self.mmaps: list[tuple[int, int, int, int, int]] = []

    def ioctl(self, fd, request, args):
        super().ioctl(fd, request, args)
        self.calls.append((NAMES[request & 0xFF], type(args).from_buffer_copy(args)))

    def mmap(self, addr, size, prot, flags, fd, offset):
        self.mmaps.append((addr, size, prot, flags, fd))
        return super().mmap(addr, size, prot, flags, fd, offset)


@pytest.fixture
def rec():
    return Recording(gpus=2, xccs=1)


def test_gfx_target_names():
    assert gfx_target(110000) == "gfx1100" and gfx_target(110001) == "gfx1101" and gfx_target(90010) == "gfx90a"
    assert gfx_target(120000) == "gfx1200"
    with pytest.raises(ValueError, match="gfx_target_version 0 is not"):
        gfx_target(0)


def test_properties_parse_errors_name_the_line():
    assert parse_properties("a 1\n\nb -2\n", "p") == {"a": 1, "b": -2}
    with pytest.raises(ValueError, match=r"nodes/1/properties:2: expected 'key integer', got 'b x'"):
        parse_properties("a 1\nb x\n", "nodes/1/properties")


def test_driver_opens_the_mock_gpus(rec):
    d = KFDDriver(rec)
    assert d.version == (1, 14)
    assert [(n.node, n.gpu_id, n.arch, n.render_node, n.cus, n.xccs) for n in d.nodes] == [
        (1, 0x1000, "gfx1100", "/dev/dri/renderD128", 96, 1), (2, 0x1001, "gfx1100", "/dev/dri/renderD129", 96, 1)]
    g = d.gpu(1)
    names = [n for n, _ in rec.calls]
    # GET_VERSION, then the GPU: ACQUIRE_VM with the render fd, RUNTIME_ENABLE (KFD >= 1.14), the event page and events
    assert names[:3] == ["GET_VERSION", "ACQUIRE_VM", "RUNTIME_ENABLE"]
    acquire = rec.calls[1][1]
    assert acquire.gpu_id == 0x1001 and rec.fds[acquire.drm_fd] == "render:1" and acquire.drm_fd == g.drm_fd
    events = [a for n, a in rec.calls if n == "CREATE_EVENT"]
    assert events[0].event_page_offset == d.event_page.handle
    assert [e.event_type for e in events[1:]] == [0, 8, 3] and events[1].auto_reset == 1
    assert g.events.mailbox == d.event_page.va + events[1].event_slot_index * 8
    with pytest.raises(IndexError, match="no KFD GPU 2: this system has 2 GPU node"):
        d.gpu(2)
    d.close()


@pytest.mark.parametrize("kind,cpu,flags", [
    ("vram", False, F.WRITABLE | F.EXECUTABLE | F.NO_SUBSTITUTE | F.VRAM),
    ("vram", True, F.WRITABLE | F.EXECUTABLE | F.NO_SUBSTITUTE | F.VRAM | F.PUBLIC),
    ("gtt", False, F.WRITABLE | F.EXECUTABLE | F.NO_SUBSTITUTE | F.GTT | F.COHERENT | F.UNCACHED),
    ("userptr", False, F.WRITABLE | F.EXECUTABLE | F.NO_SUBSTITUTE | F.USERPTR | F.PUBLIC),
])
def test_alloc_flags(kind, cpu, flags):
    assert alloc_flags(kind, cpu) == flags


def test_alloc_flags_bad_kind():
    with pytest.raises(ValueError, match="memory kind 'host': allowed vram, gtt, userptr"):
        alloc_flags("host", False)  # type: ignore[arg-type]


def test_alloc_sequence(rec):
    g = KFDDriver(rec).gpu(0)
    rec.calls.clear(), rec.mmaps.clear()
    mem = g.alloc(5000, "gtt")
    assert mem.size == 8192 and mem.host_visible
    (n1, alloc), (n2, mapped) = rec.calls
    assert (n1, n2) == ("ALLOC_MEMORY_OF_GPU", "MAP_MEMORY_TO_GPU")
    assert alloc.va_addr == mem.va and alloc.size == 8192 and alloc.gpu_id == 0x1000 and alloc.flags == mem.flags
    assert mapped.handle == mem.handle and mapped.n_devices == 1 and mapped.n_success == 1
    # the VA reserved PROT_NONE first, then the render node mapped over it at the same VA
    (r_addr, r_size, r_prot, _, r_fd), (m_addr, m_size, m_prot, m_flags, m_fd) = rec.mmaps
    assert (r_addr, r_size, r_prot, r_fd) == (0, 8192, 0, -1)
    assert (m_addr, m_size, m_prot, m_fd) == (mem.va, 8192, 3, g.drm_fd) and m_flags & 0x10  # MAP_FIXED
    ctypes.memmove(mem.va + 4095, b"xyz", 3)  # the CPU writes it directly
    assert rec.gpu_view(0).read(mem.va + 4095, 3) == b"xyz"
    rec.calls.clear()
    g.free(mem)
    assert [n for n, _ in rec.calls] == ["UNMAP_MEMORY_FROM_GPU", "FREE_MEMORY_OF_GPU"]
    with pytest.raises(ValueError, match="not a live allocation of GPU 4096"):
        g.free(mem)


def test_userptr_passes_the_host_address(rec):
    g = KFDDriver(rec).gpu(0)
    rec.calls.clear()
    mem = g.alloc(4096, "userptr")
    alloc = rec.calls[0][1]
    assert alloc.mmap_offset == alloc.va_addr == mem.va and alloc.flags & F.USERPTR
    ctypes.memmove(mem.va, b"\x01\x02", 2)
    assert rec.gpu_view(0).read(mem.va, 2) == b"\x01\x02"


def test_cwsr_sizes_follow_amd_md():
    # 96 CUs, 16 waves per SIMD: waves = 96 * 16 * 2 = 3072
    s = cwsr_sizes(96, 16, 1)
    wg_data = 0x75000 * 96                        # (0x60000 + 0x4000 + 0x10000 + 0x1000) per CU, page-aligned
    ctl = (12 * 3072 + 48 + 4095) // 4096 * 4096
    assert (s.ctx_save_restore_size, s.ctl_stack_size) == (wg_data + ctl, ctl)
    assert s.buffer_size == (wg_data + ctl + 3072 * 32 + 4095) // 4096 * 4096
    assert cwsr_sizes(96, 16, 2).buffer_size == ((wg_data + ctl + 3072 * 32) * 2 + 4095) // 4096 * 4096


@pytest.mark.parametrize("kind,qtype", [("pm4", 0), ("aql", 2), ("sdma", 1)])
def test_create_queue_arguments(rec, kind, qtype):
    g = KFDDriver(rec).gpu(0)
    rec.calls.clear()
    q = g.create_queue(kind, 1 << 16)
    args = [a for n, a in rec.calls if n == "CREATE_QUEUE"][0]
    assert args.queue_type == qtype and args.ring_base_address == q.ring.va and args.ring_size == 1 << 16
    assert args.read_pointer_address == q.pointers.va + 128 and args.write_pointer_address == q.pointers.va + 56
    assert args.queue_percentage == 100 and args.queue_priority == 7 and args.gpu_id == 0x1000
    if kind == "sdma":
        assert args.eop_buffer_address == 0 and args.ctx_save_restore_address == 0 and q.cwsr is None
    else:
        assert (args.eop_buffer_address, args.eop_buffer_size) == (q.eop.va, 0x1000)
        s = cwsr_sizes(96, 16, 1)
        assert (args.ctx_save_restore_address, args.ctx_save_restore_size, args.ctl_stack_size) == (
            q.cwsr.va, s.ctx_save_restore_size, s.ctl_stack_size)
        assert q.cwsr.size == s.buffer_size
    # doorbell: two pages of /dev/kfd at the offset rounded down to 0x2000
    kfd_map = [m for m in rec.mmaps if m[4] == g.driver.fd]
    assert len(kfd_map) == 1 and kfd_map[0][1] == 0x2000
    assert q.doorbell == g.doorbell_map + (args.doorbell_offset & 0x1FFF)


def test_no_kfd_and_no_mock_says_what_to_install(monkeypatch):
    monkeypatch.setattr(select.os.path, "exists", lambda p: False)
    with pytest.raises(select.KFDUnavailable) as e:
        select.open_os("AMD", mocks={})
    msg = str(e.value)
    assert "/dev/kfd" in msg and "amdgpu kernel driver" in msg and "pip install tg-mockgpu" in msg


def test_open_os_uses_the_mock_without_kfd(monkeypatch):
    monkeypatch.setattr(select.os.path, "exists", lambda p: False)
    os_layer = select.open_os("AMD", mock_gpus=3, mock_xccs=2, mocks={"mock": mock_driver.MockKFD})
    nodes = KFDDriver(os_layer).nodes
    assert len(nodes) == 3 and all(n.xccs == 2 and n.cus == 96 for n in nodes)


def test_open_os_prefers_the_kernel(monkeypatch):
    monkeypatch.setattr(select.os.path, "exists", lambda p: p == "/dev/kfd")
    assert select.open_os("AMD", mocks={"mock": mock_driver.MockKFD}).name == "linux"


def _options(env):
    import tempfile
    from pathlib import Path

    from tg_core.plugins.config import load_config
    from tg_amd.plugin import tg_devices
    d = Path(tempfile.mkdtemp())
    return load_config(None, env, d, d).device_options("AMD", tg_devices()[0].options)


def test_mock_options_defaults_env_and_bounds():
    opts = _options({})
    assert (opts["mock_gpus"], opts["mock_xccs"]) == (2, 1)
    opts = _options({"TG_AMD_MOCK_GPUS": "3", "TG_AMD_MOCK_XCCS": "2"})
    assert (opts["mock_gpus"], opts["mock_xccs"]) == (3, 2)
    from tg_core.plugins import ConfigError
    with pytest.raises(ConfigError, match=r"too small for TG_AMD_MOCK_GPUS: 0; allowed: an int from 1 to 64"):
        _options({"TG_AMD_MOCK_GPUS": "0"})
    with pytest.raises(ConfigError, match=r"TG_AMD_MOCK_XCCS: 9; allowed: an int from 1 to 8"):
        _options({"TG_AMD_MOCK_XCCS": "9"})
