"""hcq on the reference device HCQREF: batches on two queues and two devices agree with the PYTHON device, timeline
and signal values, the zeroed timeline, JIT replay without encoding, the four hooks of two test plugins in plugin
order, pm_lower after pm_encode, and the errors (unencoded op, a wait nobody satisfies)."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core.device import Buffer, BufferSpec, Device
from tg_core.dtype import dtypes
from tg_core.engine.jit import JitError, TinyJit
from tg_core.hcq import batch as hbatch
from tg_core.hcq import ops as q
from tg_core.hcq.batch import Batch, Item
from tg_core.hcq.device import run_items
from tg_core.hcq.encode import HCQError, encode, stats
from tg_core.hcq.host import TG_HCQ_TIMEOUT_MS, HCQTimeout
from tg_core.tensor import Tensor
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

A = ("a", "tests.hcq.plugin_a")
B = ("b", "tests.hcq.plugin_b")
NEVER = ("never", "tests.hcq.plugin_never")


def _program(dev: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A kernel chain with a copy to a second device and a write-after-read across queues: `a` is read by the copy
    (COPY:0 of dev) and then overwritten by a kernel (COMPUTE:0)."""
    other = dev + ":1" if dev == "HCQREF" else dev
    a = Tensor(np.arange(16, dtype=np.float32), device=dev).realize()
    b = a.to(other)                    # a copy, read of a
    c = b * 3 + 1
    a.assign(a * 10 - 2)               # the write after the copy's read
    d = (a + 1).sum()
    Tensor.realize_all(c, a, d)
    return c.numpy(), a.numpy(), d.numpy()


def test_batch_on_two_queues_and_devices_agrees_with_python(hcq, monkeypatch):
    built: list[Batch] = []
    orig = hbatch.build

    def spy(items, copy_queue=None):
        built.append(orig(items, copy_queue))
        return built[-1]
    monkeypatch.setattr("tg_core.hcq.device.build", spy)
    got = _program("HCQREF")
    want = _program("PYTHON")
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(got[0], np.arange(16, dtype=np.float32) * 3 + 1)
    np.testing.assert_array_equal(got[1], np.arange(16, dtype=np.float32) * 10 - 2)
    # the batch that copies and overwrites: the kernel writing `a` waits for the copy queue's signal
    big = max(built, key=lambda b: sum(len(s.src[0].src) for s in b.sink.src[1:]))
    submits = {s.arg.queue: [u.arg[0] for u in s.src[0].src] for s in big.sink.src[1:]}
    assert q.Queue("HCQREF", "COPY:0") in submits and q.Queue("HCQREF", "COMPUTE:0") in submits
    compute = [u for s in big.sink.src[1:] if s.arg.queue == q.Queue("HCQREF", "COMPUTE:0") for u in s.src[0].src]
    slots = next(u for op in compute for u in op.toposort() if u.op is Ops.PARAM and u.tag == "slots")
    copy_slot = hbatch.SLOT * big.queues["HCQREF"].index(q.Queue("HCQREF", "COPY:0"))
    kinds = [u.arg[0] if u.arg[0] != "wait" or u.src[0].src[0] is not slots or u.src[0].arg[1] != copy_slot
             else "wait-copy" for u in compute]
    # the kernel reading `a` needs no wait (read after read); the one overwriting it waits for the copy's signal
    assert kinds == ["barrier", "wait", "exec", "wait-copy", "exec", "wait-copy", "signal"]
    assert set(big.devices) == {"HCQREF", "HCQREF:1"}


def test_timeline_and_signal_values_after_n_batches(hcq):
    dev = Device["HCQREF"]
    x = Buffer("HCQREF", 8, dtypes.float32).copyin(np.arange(8, dtype=np.float32))
    y = Buffer("HCQREF", 8, dtypes.float32).ensure_allocated()
    copy = UOp(Ops.COPY, dtypes.void)
    start = int(dev.timeline_view[1])
    linked = []
    for _ in range(5):
        linked.append(run_items([Item(copy, [q.mem(y), q.mem(x)], (0,)), Item(copy, [q.mem(x), q.mem(y)], (0,))]))
    dev.synchronize()
    assert int(dev.timeline_view[0]) == int(dev.timeline_view[1]) == start + 5
    for k, lb in enumerate(linked):
        slots = lb.buffers[("slots", "HCQREF")]
        vals = dev.host_view(slots).view(np.uint64)
        # one queue (COPY:0): its slot was re-armed to 0 and nobody signals the epilogue queue; sched slot = tv + 1
        assert vals.tolist() == [0, 0, start + k + 1, 0]
    np.testing.assert_array_equal(x.numpy(), np.arange(8, dtype=np.float32))


def test_signal_values_on_two_queues(hcq):
    dev = Device["HCQREF"]
    a = Tensor(np.arange(4, dtype=np.float32), device="HCQREF").realize()
    # a kernel (COMPUTE:0) then a copy of its output (COPY:0): the copy waits for the kernel's signal
    from tg_core.engine.realize import build as build_schedule
    items, _, _, _ = build_schedule([(a + 5).uop])
    kernel = items[-1][0]
    src = Buffer("HCQREF", 4, dtypes.float32).copyin(np.arange(4, dtype=np.float32))
    mid = Buffer("HCQREF", 4, dtypes.float32).ensure_allocated()
    dst = Buffer("HCQREF", 4, dtypes.float32).ensure_allocated()
    ast_items = [Item(kernel, [q.mem(mid), q.mem(src)], (0,)), Item(UOp(Ops.COPY, dtypes.void), [q.mem(dst), q.mem(mid)], (0,))]
    lb = run_items(ast_items)
    dev.synchronize()
    vals = dev.host_view(lb.buffers[("slots", "HCQREF")]).view(np.uint64).tolist()
    tv = int(dev.timeline_view[1])
    # slot 0 (COMPUTE:0) = tag 0 + 1, slot 1 (COPY:0) = tag 1 + 1 (it is not the epilogue queue), sched = tv
    assert vals[0] == 1 and vals[2] == 2 and vals[4] == tv
    np.testing.assert_array_equal(dst.numpy(), np.arange(4, dtype=np.float32) + 5)


def test_reused_timeline_is_zeroed(hcq):
    dev = Device["HCQREF"]
    old = Buffer("HCQREF", 16, dtypes.uint8, BufferSpec(host=True)).ensure_allocated()
    dev.host_view(old)[:] = 0xFF
    address = dev.address(old)
    del old  # back into the allocator's cache
    tl = dev.new_timeline()
    assert dev.address(tl) == address  # the same memory again
    assert bytes(dev.host_view(tl)) == bytes(16)


def test_jit_replay_gives_new_results_and_encodes_nothing(hcq):
    v = UOp.variable("hcq_k", 0, 100, dtypes.int32)
    w = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3), device="HCQREF").realize()

    @TinyJit
    def f(x: Tensor, k) -> Tensor:
        return ((x * 2 + Tensor(k, device="HCQREF")) @ w).relu()

    for i in range(6):
        x = np.linspace(-1, 1, 4, dtype=np.float32) * (i + 1)
        before = dict(stats)
        got = f(Tensor(x, device="HCQREF"), v.bind(i)).numpy()
        np.testing.assert_allclose(got, np.maximum((x * 2 + i) @ np.arange(12, dtype=np.float32).reshape(4, 3), 0),
                                   rtol=1e-6)
        if i >= 2:  # replays
            assert stats == before, "a replay builds, encodes and links nothing"
    assert f.captured.hcq is not None and len(f.captured.hcq) == 1
    with pytest.raises(JitError, match="cannot replay"):
        f(Tensor(np.zeros(5, np.float32), device="HCQREF"), v.bind(1))


def test_a_replay_re_arms_the_queue_signals(hcq):
    """The fence's re-arm of the queue signals is a store of a constant at a constant offset, and still runs at
    every replay: left to link time, the second replay's cross-queue waits would be satisfied by the first
    replay's signals (on the mock AMD GPUs a ring allreduce then read chunks before they arrived)."""
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x.to("HCQREF:1") * 3).to("HCQREF") + 1  # copies on both devices' COPY:0, kernels waiting on them

    for i in range(5):
        x = np.arange(8, dtype=np.float32) * (i + 1)
        np.testing.assert_array_equal(f(Tensor(x, device="HCQREF")).numpy(), x * 3 + 1)
    for lb in f.captured.hcq:
        rearmed = {(tag_dev, int(s.src[0].src[1].arg)) for s in lb.program.stmts if s.op is Ops.STORE
                   and s.src[1].op is Ops.CONST and s.src[1].arg == 0
                   for tag_dev, b in lb.buffers.items() if tag_dev[0] == "slots" and b is s.src[0].src[0].arg.buf}
        want = {(("slots", d), hbatch.SLOT * k) for (tag, d), b in lb.buffers.items() if tag == "slots"
                for k in range((b.nbytes - hbatch.SLOT) // hbatch.SLOT)}
        assert want and rearmed == want, (rearmed, want)


def test_hooks_of_two_plugins_compose_in_plugin_order(hcq):
    from tests.hcq import plugin_a
    x = np.arange(6, dtype=np.float32)
    for order, want in ((["a", "b"], 1234), (["b", "a"], 1235)):
        hcq(extensions=[A, B], order=order)
        plugin_a.MARKERS.clear()
        np.testing.assert_array_equal((Tensor(x, device="HCQREF") * 2).numpy(), x * 2)
        Device["HCQREF"].synchronize()
        # a's pm_batch added the store, the first plugin's pm_encode encoded it, a's pm_lower gave it its value
        assert int(Device["HCQREF"].host_view(plugin_a.MARKERS["HCQREF"]).view(np.uint64)[0]) == want


def test_pm_lower_applies_after_pm_encode(hcq):
    from tests.hcq import plugin_a
    hcq(extensions=[A], order=["a"])
    plugin_a.MARKERS.clear()
    (Tensor(np.ones(3, np.float32), device="HCQREF") + 1).numpy()
    assert int(Device["HCQREF"].host_view(plugin_a.MARKERS["HCQREF"]).view(np.uint64)[0]) == 1234


def test_unencoded_op_names_op_queue_and_plugins(hcq):
    queue = q.Queue("PYTHON", "COMPUTE:0")
    sink = UOp(Ops.SINK, dtypes.void, (q.submit(queue, [q.ins("timestamp", queue, q.addr(q.placeholder("t", 8, "PYTHON")))]),))
    with pytest.raises(HCQError, match=r"queue op 'timestamp' on PYTHON COMPUTE:0 was left unencoded.*core \(PYTHON\)"):
        encode(Batch(sink, ["PYTHON"], 0))


def test_unsatisfiable_wait_times_out_and_device_stays_usable(hcq, monkeypatch):
    from tests.hcq import plugin_never
    hcq(extensions=[NEVER])
    monkeypatch.setattr(TG_HCQ_TIMEOUT_MS, "value", 300)
    x = Tensor(np.arange(4, dtype=np.float32), device="HCQREF").realize()
    plugin_never.ARMED[0] = True
    try:
        y = (x + 1).realize()
    finally:
        plugin_never.ARMED[0] = False
    with pytest.raises(HCQTimeout, match=r"HCQREF timeline.*queue HCQREF COMPUTE:0 waits for signal at 0x[0-9a-f]+ "
                                         r"\(a signal no queue of this batch writes\) >= 1 \(it is 0\)"):
        y.numpy()
    np.testing.assert_array_equal((x * 3).numpy(), np.arange(4, dtype=np.float32) * 3)


def test_queue_descriptor_is_a_nested_patched_struct(hcq):
    from tg_core.hcq.refdev import QUEUE_DESC, QUEUE_INFO, at
    dev = Device["HCQREF"]
    eng = dev.engines["copy_0"]
    d = dev.host_view(eng.desc)
    field = lambda name: int(d[QUEUE_DESC.offset(name):QUEUE_DESC.offset(name) + 8].view(np.uint64)[0])  # noqa: E731
    assert [field(n) for n in ("ring", "write_ptr", "doorbell", "read_ptr")] == \
        [dev.address(getattr(eng, n)) for n in ("ring", "write_ptr", "doorbell", "read_ptr")]
    info = at(field("info"), QUEUE_INFO.size).view(np.uint32)  # the pointed-to struct, written with the one pointing
    assert info.tolist() == [1, 0, 1024]  # COPY, index 0, ring dwords
    # the queue's thread found its ring through the descriptor: it is the ring the pushes write
    assert eng.ring_words.ctypes.data == dev.address(eng.ring)


def test_threads_submit_to_one_device_at_once(hcq):
    from tg_core.testing.devices import run_in_threads
    results: dict[int, np.ndarray] = {}

    def work(k: int) -> None:
        x = Tensor(np.arange(8, dtype=np.float32) + k, device="HCQREF")
        for _ in range(5):
            x = (x * 2 + 1).contiguous()
        results[k] = x.numpy()
    run_in_threads(work, threads=4)
    for k, got in results.items():
        want = np.arange(8, dtype=np.float32) + k
        for _ in range(5):
            want = want * 2 + 1
        np.testing.assert_array_equal(got, want)


def test_a_failing_command_is_raised_on_the_next_wait_and_the_device_recovers(hcq):
    from tg_core.engine.realize import build as build_schedule
    dev = Device["HCQREF"]
    a = Tensor(np.arange(4, dtype=np.float32), device="HCQREF").realize()
    kernel = build_schedule([(a + 5).uop])[0][-1][0]
    small = Buffer("HCQREF", 2, dtypes.float32).ensure_allocated()  # the kernel writes 4 elements
    src = Buffer("HCQREF", 4, dtypes.float32).copyin(np.arange(4, dtype=np.float32))
    run_items([Item(kernel, [q.mem(small), q.mem(src)], (0,))])
    with pytest.raises(RuntimeError, match=r"HCQREF COMPUTE:0: a command failed: IndexError: .*out of bounds"):
        dev.synchronize()
    np.testing.assert_array_equal((a * 2).numpy(), np.arange(4, dtype=np.float32) * 2)


def test_per_run_words_are_inputs_variables_and_queue_state_only(hcq):
    v = UOp.variable("hcq_n", 0, 100, dtypes.int32)
    f = TinyJit(lambda x, n: (x + Tensor(n, device="HCQREF")).contiguous() * 2)
    for i in range(3):
        f(Tensor(np.arange(4, dtype=np.float32), device="HCQREF"), v.bind(i)).numpy()
    (lb,) = f.captured.hcq
    bufs = {id(b): tag for (tag, _), b in lb.buffers.items()}
    table = lb.refs[[id(b) for b in lb.refs].index(next(id(b) for b in lb.refs
                                                         if b.nbytes == 8 * len(lb.inputs) and id(b) not in bufs))]
    bufs[id(table)] = "inputs"
    loads, values = set(), []
    for s in lb.program.stmts:
        for u in s.toposort():
            assert not (u.op is Ops.INS and u.arg[0] == "addr"), "an address left in a per-run word"
            if u.op is Ops.LOAD:
                loads.add(bufs.get(id(u.src[0].src[0].arg.buf), "?").rsplit("_", 2)[0])
        if s.op is Ops.STORE and bufs.get(id(s.src[0].src[0].arg.buf), "").startswith("cmdbuf"):
            values.append(s.src[1])
    assert loads <= {"timeline", "slots", "inputs", "put_value", "read_ptr"}, loads
    # the command buffer's per-run words: the timeline value (queue start, epilogue), input addresses, the variable
    assert all(u.op is not Ops.CONST for u in values)
    assert any(u.op is Ops.CAST and u.src[0].op is Ops.DEFINE_VAR for u in values)
