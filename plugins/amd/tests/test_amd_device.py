"""The AMD device on the KFD's command queues (the mock KFD where there is no /dev/kfd): its memory, SDMA copies,
what it writes into its rings (decoded with amd.md's tables as written in test_amd_queues.py, not the encoder's
constants), kernels with variables and empty launches, a wrapping ring, JIT replays, and bad configuration."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tg_core.device import Buffer, BufferSpec, Device
from tg_core.dtype import dtypes
from tg_core.plugins.errors import ConfigError, DeviceUnavailable
from tg_core.testing.devices import why_unavailable
from tg_amd.device import AMDDevice

from amd_kernels import rowmax, saxpy, scaled
from test_amd_queues import decode

_why = why_unavailable("AMD")
pytestmark = pytest.mark.skipif(_why is not None, reason=f"the AMD device does not open: {_why}")


def _amd(x: np.ndarray) -> Buffer:
    return Buffer.from_numpy(x, "AMD")


def _words(va: int, ndwords: int) -> list[int]:
    return [int(w) for w in np.ctypeslib.as_array((ctypes.c_uint32 * ndwords).from_address(int(va)))]


def _last_ib(dev: AMDDevice) -> list[int]:
    """The command buffer the compute ring's last INDIRECT_BUFFER points at (host-visible GTT)."""
    kq = dev.hw_queues["compute_0"]
    put = int(dev.host_view(dev._shadows["compute_0"][0]).view(np.uint64)[0])
    ring = _words(kq.ring.va, kq.ring.size // 4)
    pkt = ring[(put - 4) % len(ring):][:4]
    ((name, body),) = decode(pkt)
    assert name == "INDIRECT_BUFFER" and body[2] >> 23 & 1  # VALID
    return _words(body[0] | body[1] << 32, body[2] & 0xFFFFF)


def test_buffers_are_vram_and_host_buffers_gtt():
    dev = Device["AMD"]
    assert isinstance(dev, AMDDevice)
    a = Buffer("AMD", 1000, dtypes.float32).ensure_allocated()
    h = Buffer("AMD", 16, dtypes.uint8, BufferSpec(host=True)).ensure_allocated()
    assert a.opaque.mem.kind == "vram" and not a.opaque.host_visible
    assert h.opaque.mem.kind == "gtt" and h.opaque.host_visible
    with pytest.raises(ValueError, match="VRAM, which the host does not map"):
        dev.host_view(a)


@pytest.mark.parametrize("nbytes, offset", [(1, 0), (4095, 1), (4097, 4093), (3 * 4096 + 5, 7)])
def test_sdma_copies_across_scattered_pages(nbytes, offset):
    """VRAM pages are scattered in the mock's store: a copy in or out that crosses them is byte-exact."""
    rng = np.random.default_rng(nbytes)
    base = Buffer("AMD", nbytes + offset + 3, dtypes.uint8).ensure_allocated()
    base.copyin(np.zeros(base.nbytes, np.uint8))
    view = base.view(nbytes, dtypes.uint8, offset)
    data = rng.integers(0, 256, nbytes, dtype=np.uint8)
    view.copyin(data)
    np.testing.assert_array_equal(np.frombuffer(view.copyout(), np.uint8), data)
    whole = np.frombuffer(base.copyout(), np.uint8)
    np.testing.assert_array_equal(whole[offset:offset + nbytes], data)
    assert not whole[:offset].any() and not whole[offset + nbytes:].any()


def test_kernel_packets_in_the_ring():
    """saxpy through the PM4 queue: the ring's INDIRECT_BUFFER points at a command buffer holding the kernarg
    segment (a NOP payload) and the dispatch sequence that points at it, then the batch's signal."""
    dev = Device["AMD"]
    if dev.queue_kind != "pm4":
        pytest.skip("the PM4 queue's layout")
    a = np.arange(1000, dtype=np.float32)
    out, x, y = _amd(np.zeros(1000, np.float32)), _amd(a), _amd(a * 3)
    dev.get_runner(saxpy(1000))([out, x, y], {})
    ib = _last_ib(dev)
    packets = decode(ib)
    names = [n for n, _ in packets]
    i = names.index("DISPATCH_DIRECT")
    assert packets[i][1] == [4, 1, 1, 0x8005]                     # 1000 items in workgroups of 256, wave32
    assert names[i + 1] == "EVENT_WRITE" and packets[i + 1][1] == [0x407]  # CS_PARTIAL_FLUSH
    assert packets[names.index("PGM_LO") - 1] == ("ACQUIRE_MEM", [0, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0, 0, 0x3F0])
    kernel = dev.kernel_plan(saxpy(1000)).parts[0]
    program = dev.address(dev._programs[kernel.key])
    code = (program + kernel.kernel.code_offset) >> 8
    assert dict(packets)["PGM_LO"] == [code & 0xFFFFFFFF, code >> 32]
    user = dict(packets)["USER_DATA_0"]
    kernarg = user[0] | user[1] << 32                               # the only enabled user SGPR pair here
    seg = [p for n, p in packets if n == "NOP" and len(p) >= 6]
    assert any(p[:6] == [dev.address(out) & 0xFFFFFFFF, dev.address(out) >> 32, dev.address(x) & 0xFFFFFFFF,
                         dev.address(x) >> 32, dev.address(y) & 0xFFFFFFFF, dev.address(y) >> 32] for p in seg)
    assert kernarg % 64 == 0
    assert "RELEASE_MEM" in names[i:]                               # the timeline signal after the kernel
    np.testing.assert_array_equal(out.numpy().view(np.float32), a * 2 + a * 3)


def test_variables_and_an_empty_launch():
    dev = Device["AMD"]
    a = np.arange(4096, dtype=np.int32) - 2000
    out, x = _amd(np.full(4096, 99, np.int32)), _amd(a)
    run = dev.get_runner(scaled())
    run([x, out], {"n": 3000, "k": -7})
    got = out.numpy().view(np.int32)
    np.testing.assert_array_equal(got[:3000], a[:3000] * -7)
    assert (got[3000:] == 99).all()
    assert dev.kernel_plan(scaled()) is dev.kernel_plan(scaled())  # built once per kernel
    run([x, out], {"n": 0, "k": 5})                   # a launch of no workgroups writes nothing
    np.testing.assert_array_equal(out.numpy().view(np.int32), got)


def test_two_dimensional_launch():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((12, 40)).astype(np.float32)
    out = _amd(np.zeros((12, 40), np.float32))
    Device["AMD"].get_runner(rowmax())([_amd(a), out], {})
    want = np.sqrt(np.exp2(a).max(1, keepdims=True)) + np.arange(40, dtype=np.float32)
    np.testing.assert_allclose(out.numpy().view(np.float32).reshape(12, 40), want, rtol=2e-6)


def test_the_compute_ring_wraps():
    """More submissions than the ring holds packets: every push waits for room and lands modulo the ring."""
    dev = Device["AMD"]
    run = dev.get_runner(scaled())
    a = np.arange(256, dtype=np.int32)
    out, x = _amd(np.zeros(256, np.int32)), _amd(a)
    kq = dev.hw_queues["compute_0"]
    slots = kq.ring.size // (4 * 4) if dev.queue_kind == "pm4" else kq.ring.size // 64
    for k in range(slots + 20):
        run([x, out], {"n": 256, "k": k})
    dev.synchronize()
    np.testing.assert_array_equal(out.numpy().view(np.int32), a * (slots + 19))


def test_jit_replays_with_new_inputs():
    from tg_core.engine.jit import TinyJit
    from tg_core.tensor import Tensor

    @TinyJit
    def f(x: Tensor, y: Tensor) -> Tensor:
        return (x * 2 + y).sum(0).realize()

    rng = np.random.default_rng(0)
    for _ in range(4):
        a, b = rng.standard_normal((8, 33)).astype(np.float32), rng.standard_normal((8, 33)).astype(np.float32)
        np.testing.assert_allclose(f(Tensor(a, device="AMD"), Tensor(b, device="AMD")).numpy(),
                                   (a * 2 + b).sum(0), rtol=1e-5, atol=1e-5)


def test_an_eager_loop_frees_each_steps_buffers():
    """Every step links its kernel with the buffers it uses (hcq Mem args); once the step's graph is gone, those
    buffers, signals, kernargs and command buffers are freed, not kept by the UOp cache's keys until a sweep."""
    import gc

    from tg_core.tensor import Tensor

    def live() -> int:
        gc.collect()
        return sum(isinstance(o, Buffer) and o.device.startswith("AMD") for o in gc.get_objects())

    x = (Tensor(np.zeros(16, np.float32), device="AMD") + 1).realize()
    before = live()
    for _ in range(30):
        x = (x + 1).detach().realize()  # detached: the tensor remembers no graph (autograd keeps none alive)
    assert live() - before <= 2
    np.testing.assert_array_equal(x.numpy(), np.full(16, 31, np.float32))


def test_device_index_beyond_the_gpus():
    n = len(Device["AMD"].system.gpus)
    with pytest.raises(DeviceUnavailable, match=f"no AMD GPU {n}; this system has {n}"):
        Device[f"AMD:{n}"]


@pytest.mark.parametrize("key, value, allowed", [("queue", "bogus", "pm4"), ("mock_gpus", 0, "1"),
                                                 ("mock_xccs", 9, "8"), ("interface", "mock", "kfd")])
def test_bad_configuration_is_a_config_error(key, value, allowed):
    try:
        with pytest.raises((ConfigError, DeviceUnavailable), match=rf"(?s){key}.*{value}.*{allowed}"):
            Device.configure(devices={"AMD": {key: value}})
            Device["AMD"]
    finally:
        Device.reset()


def test_kfd_without_a_mock_says_what_to_install(monkeypatch):
    from tg_amd.kfd import select
    monkeypatch.setattr(select.os.path, "exists", lambda p: False)
    with pytest.raises(select.KFDUnavailable, match="tg-mockgpu"):
        select.open_os("AMD", mocks={})
