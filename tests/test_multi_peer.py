"""CPU devices as host-shared peers: kernels read each other's buffers in place instead of copying them, and the
allreduce between them writes each device's result chunk by chunk into one buffer. Values against numpy (in
TinyJits, three replays on new data), the schedule's structure (no COPY items where a kernel reads a peer's buffer,
a `.to()` target still a copy), writes after a lazy in-place reader, and the error for devices that share no
memory."""
import numpy as np
import pytest

from tg_core import Tensor, TinyJit
from tg_core.device import Device, shares_memory
from tg_core.dtype import dtypes
from tg_core.engine.realize import build, realize
from tg_core.helpers import Context
from tg_core.tensor import multi
from tg_core.testing.devices import ALLREDUCE_ALGOS as ALGOS
from tg_core.testing.devices import REDUCE_NP as NP
from tg_core.testing.devices import configured_devices
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

CPUS = [f"CPU:{i}" for i in range(4)]


four_cpus = pytest.fixture(scope="module", autouse=True, name="four_cpus")(configured_devices(CPU={"count": 4}))


def _copies(t: Tensor) -> int:
    return sum(ast.op is Ops.COPY for ast, _ in build([t.uop], [t.device])[0])


def test_cpu_devices_are_peers_and_python_is_not():
    assert shares_memory("CPU:0", "CPU:3") and shares_memory("CPU", "CPU:0")
    assert not shares_memory("CPU", "PYTHON") and shares_memory("PYTHON", "PYTHON")


@pytest.mark.parametrize("algo", list(ALGOS))
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("op", list(NP))
def test_allreduce_in_a_jit_on_peers(algo, n, op):
    # 1000 elements: chunks of 500, 334/333/333 and 250 (uneven on 3 devices)
    with Context(**ALGOS[algo]):
        @TinyJit
        def f(p: Tensor) -> Tensor:
            return multi.allreduce(p, op)

        for i in range(5):  # eager, capture, then three replays, each on new data
            a = np.random.default_rng(10 * n + i).uniform(0.5, 1.5, (n, 10, 100)).astype(np.float32)
            out = f(Tensor(a).shard(CPUS[:n], axis=0))
            assert all(s.shape == (10, 100) for s in out.uop.src)
            np.testing.assert_allclose(out.numpy(), NP[op](a, axis=0), rtol=1e-5)
            for shard in out.uop.src:  # every device holds the whole result, the same bits
                np.testing.assert_array_equal(multi.shard_tensors(out)[0].numpy(), Tensor(shard).numpy())
        assert f.cnt == 2
        # a device's kernels read the others' buffers: nothing is copied
        assert not any(it.ast.op is Ops.COPY for it in f.jit_cache)
        if algo != "naive":  # one kernel per chunk, storing it into every device's result
            owners = [it for it in f.jit_cache if sum(u.op is Ops.STORE for u in it.ast.toposort()) == n]
            assert len(owners) == n


def test_ring_on_two_peers_is_two_kernels():
    a = np.random.default_rng(3).standard_normal((2, 4096)).astype(np.float32)
    with Context(RING=2, ALL2ALL=0):
        r = multi.allreduce(Tensor(a).shard(CPUS[:2], axis=0).realize(), "sum")
        items = build([r.uop], [r.device])[0]
    assert len(items) == 2 and all(ast.op is Ops.SINK for ast, _ in items)
    for _, nodes in items:  # each half reduced on its device, reading the other part in place, stored on both
        assert {Device.canonicalize(n.src[1].arg) for n in nodes} == {"CPU", "CPU:1"}
    assert multi.bytes_sent(r) == {"CPU": 4096 * 4, "CPU:1": 4096 * 4}
    np.testing.assert_allclose(r.numpy(), a.sum(0), rtol=1e-6)


@pytest.mark.parametrize("algo", list(ALGOS))
def test_allreduce_of_fewer_elements_than_devices(algo):
    a = np.arange(12, dtype=np.int32).reshape(4, 3) - 5
    with Context(**ALGOS[algo]):
        r = multi.allreduce(Tensor(a).shard(CPUS, axis=0).realize(), "sum")
        assert _copies(r) == 0
    np.testing.assert_array_equal(r.numpy(), a.sum(0))


@pytest.mark.parametrize("ring", [0, 2])
def test_reduce_scatter_on_peers_reads_in_place(ring):
    a = np.random.default_rng(1).standard_normal((3, 6, 5)).astype(np.float32)
    with Context(RING=ring):
        r = multi.reduce_scatter(Tensor(a).shard(CPUS[:3], axis=0).realize(), "max", axis=0)
        assert _copies(r) == 0
    np.testing.assert_array_equal(r.numpy(), a.max(0))


def test_sharded_reduction_reads_partials_in_place():
    # each device's partial sum is computed once on its device and read where it is by the others
    a = np.random.default_rng(2).standard_normal((8, 6)).astype(np.float32)
    t = Tensor(a).shard(CPUS[:2], axis=0).realize()
    s = t.sum(0) * 2
    assert _copies(s) == 0
    np.testing.assert_allclose(s.numpy(), a.sum(0) * 2, rtol=1e-5, atol=1e-6)


def test_a_kernel_reads_a_peers_buffer_in_place_and_a_to_target_is_a_copy():
    x = Tensor(np.arange(6, dtype=np.float32), device="CPU:1").realize()
    y = x.to("CPU:2") * 3 + 1
    assert _copies(y) == 0
    items = build([y.uop], [y.device])[0]
    (ast, nodes), = items
    assert [Device.canonicalize(n.src[1].arg) for n in nodes] == ["CPU:2", "CPU:1"]
    np.testing.assert_array_equal(y.numpy(), np.arange(6) * 3 + 1)
    moved = x.to("CPU:2")
    assert _copies(moved) == 1  # realized as such it is the destination's own buffer
    np.testing.assert_array_equal(moved.numpy(), np.arange(6))


def test_a_lazy_peer_reader_keeps_the_old_contents_after_a_write():
    x = Tensor(np.ones(4, dtype=np.float32), device="CPU:1").realize()
    y = x.to("CPU:0") + 1  # lazy: reads x's buffer in place when realized
    x.assign(Tensor(np.full(4, 7.0, dtype=np.float32), device="CPU:1"))
    np.testing.assert_array_equal(y.numpy(), np.full(4, 2.0))
    np.testing.assert_array_equal((x.to("CPU:0") + 1).numpy(), np.full(4, 8.0))


def test_a_kernel_given_a_buffer_of_a_device_that_shares_no_memory_is_an_error():
    cpu = UOp.new_buffer("CPU:1", 4, dtypes.float)
    py = UOp.new_buffer("PYTHON", 4, dtypes.float)
    with pytest.raises(ValueError, match=r"runs on CPU:1 but would read a buffer of 4 x dtypes.float on PYTHON"):
        build([cpu + py], ["CPU:1"])
    # a copy from there is a copy, and the kernel reads that
    moved = UOp(Ops.COPY, dtypes.float, (py, UOp(Ops.DEVICE, dtypes.void, (), "CPU:1")))
    items = build([cpu + moved], ["CPU:1"])[0]
    assert [ast.op for ast, _ in items].count(Ops.COPY) == 1


def test_graph_mixing_peer_buffers_computes_on_the_kernels_device():
    a, b = np.arange(5, dtype=np.float32), np.arange(5, dtype=np.float32) * 10
    ta, tb = Tensor(a, device="CPU:0").realize(), Tensor(b, device="CPU:3").realize()
    moved = UOp(Ops.COPY, dtypes.float, (tb.uop, UOp(Ops.DEVICE, dtypes.void, (), "CPU:0")))
    out = realize([ta.uop * moved], ["CPU:0"])
    buf = next(iter(out.values()))
    assert Device.canonicalize(buf.src[1].arg) == "CPU"
    np.testing.assert_array_equal(Tensor(buf, device="CPU:0").numpy(), a * b)
