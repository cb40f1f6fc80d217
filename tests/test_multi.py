"""Multi-device tensors on several CPU devices (CPU:0..CPU:3): sharding, ops per shard, the copies and collectives
ops across shards insert, and the errors for bad input. Values are checked against numpy."""
import numpy as np
import pytest

from tg_core import Tensor
from tg_core.device import Device
from tg_core.engine.realize import stats
from tg_core.helpers import Context
from tg_core.plugins.errors import DeviceNotFoundError
from tg_core.testing.devices import configured_devices
from tg_core.testing.models import assert_sharded_decode_matches

CPUS = tuple(f"CPU:{i}" for i in range(4))


four_cpus = pytest.fixture(scope="module", autouse=True, name="four_cpus")(configured_devices(CPU={"count": 4}))


def _data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


_REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max}


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("shard_axis", [None, 0, 1])
@pytest.mark.parametrize("reduce_axis", [None, 0, 1])
@pytest.mark.parametrize("op", ["sum", "prod", "max"])
def test_sharded_reduce_matches_numpy(n, shard_axis, reduce_axis, op):
    a = _data(5, 7, seed=n) * 0.5 + 1  # away from 0: the product stays in range
    t = Tensor(a).shard(CPUS[:n], axis=shard_axis)
    assert t.device == tuple(Device.canonicalize(d) for d in CPUS[:n])
    got = getattr(t, op)(reduce_axis)
    np.testing.assert_allclose(got.numpy(), _REDUCE[op](a, axis=reduce_axis), rtol=1e-5)


def test_device_is_the_tuple_and_numpy_reassembles():
    a = _data(6, 4)
    t = Tensor(a).shard(CPUS[:3], axis=0)
    assert t.device == ("CPU", "CPU:1", "CPU:2") and t.shape == (6, 4)
    np.testing.assert_array_equal(t.numpy(), a)
    assert [s.shape for s in t.uop.src] == [(2, 4)] * 3  # each device holds its third


def test_shard_in_place():
    a = _data(4, 4)
    t = Tensor(a)
    assert t.shard_(CPUS[:2], axis=1) is t and t.device == ("CPU", "CPU:1")
    np.testing.assert_array_equal(t.numpy(), a)


def test_elementwise_between_alike_sharded_tensors_copies_nothing():
    a, b = _data(8, 3), _data(8, 3, seed=1)
    x, y = Tensor(a).shard(CPUS, axis=0).realize(), Tensor(b).shard(CPUS, axis=0).realize()
    before = dict(stats)
    out = (x * y + 1).relu().realize()
    assert stats["copies"] == before["copies"]
    assert stats["kernels"] - before["kernels"] == 4  # one kernel per device
    np.testing.assert_allclose(out.numpy(), np.maximum(a * b + 1, 0), rtol=1e-6)


def test_replicated_operand_is_sliced_on_each_device_without_copies():
    a, b = _data(8, 3), _data(8, 3, seed=1)
    x, y = Tensor(a).shard(CPUS, axis=0).realize(), Tensor(b).shard(CPUS).realize()
    before = stats["copies"]
    out = (x - y).realize()
    assert stats["copies"] == before
    np.testing.assert_allclose(out.numpy(), a - b)


def test_python_and_host_operands():
    a = _data(4, 6)
    x = Tensor(a).shard(CPUS[:2], axis=1)
    np.testing.assert_allclose((x * 2 + 0.5).numpy(), a * 2 + 0.5, rtol=1e-6)
    row = np.arange(6, dtype=np.float32)
    np.testing.assert_allclose((x + row.tolist()).numpy(), a + row, rtol=1e-6)


@pytest.mark.parametrize("n", [2, 3])
def test_uneven_splits(n):
    a = _data(7, 5)
    t = Tensor(a).shard(CPUS[:n], axis=0)
    sizes = [s.shape[0] for s in t.uop.src]
    assert sum(sizes) == 7 and max(sizes) - min(sizes) <= 1
    np.testing.assert_allclose((t * t).sum(0).numpy(), (a * a).sum(0), rtol=1e-5)
    np.testing.assert_allclose(t.numpy(), a)


@pytest.mark.parametrize("x_axis,w_axis", [(0, None), (1, 0), (None, 1), (1, None)])
def test_matmul(x_axis, w_axis):
    a, b = _data(6, 8), _data(8, 5, seed=1)
    x, w = Tensor(a).shard(CPUS[:2], axis=x_axis), Tensor(b).shard(CPUS[:2], axis=w_axis)
    np.testing.assert_allclose((x @ w).numpy(), a @ b, rtol=1e-5, atol=1e-5)


def test_movement_of_the_sharded_axis():
    a = _data(6, 4)
    t = Tensor(a).shard(CPUS[:3], axis=0)
    np.testing.assert_array_equal(t.permute(1, 0).numpy(), a.T)
    np.testing.assert_array_equal(t.reshape(24).numpy(), a.reshape(24))          # stays sharded
    np.testing.assert_array_equal(t.reshape(3, 8).numpy(), a.reshape(3, 8))
    np.testing.assert_array_equal(t.permute(1, 0).reshape(2, 12).numpy(), a.T.reshape(2, 12))  # gathered
    np.testing.assert_array_equal(t.flip(0).numpy(), a[::-1])
    np.testing.assert_array_equal(t[1:5].numpy(), a[1:5])
    np.testing.assert_array_equal(t[5:].numpy(), a[5:])                         # one shard left: gathered
    np.testing.assert_array_equal(t.pad(((1, 2), (0, 1))).numpy(), np.pad(a, ((1, 2), (0, 1))))
    np.testing.assert_array_equal(t.reshape(6, 1, 4).expand(6, 3, 4).numpy(), np.broadcast_to(a[:, None], (6, 3, 4)))


def test_cat_and_stack():
    a, b = _data(4, 3), _data(4, 3, seed=1)
    x, y = Tensor(a).shard(CPUS[:2], axis=0), Tensor(b).shard(CPUS[:2], axis=0)
    np.testing.assert_array_equal(x.cat(y, dim=0).numpy(), np.concatenate([a, b], 0))
    np.testing.assert_array_equal(x.cat(y, dim=1).numpy(), np.concatenate([a, b], 1))
    np.testing.assert_array_equal(Tensor.stack(x, y).numpy(), np.stack([a, b]))
    np.testing.assert_array_equal(Tensor.stack(x, y, dim=2).numpy(), np.stack([a, b], 2))


def test_gather_across_shards():
    a = _data(6, 5)
    idx = np.array([[4, 0], [1, 1], [0, 3], [2, 2], [3, 4], [0, 0]])
    x = Tensor(a).shard(CPUS[:2], axis=1)
    i = Tensor(idx.astype(np.int32)).shard(CPUS[:2])
    np.testing.assert_array_equal(x.gather(1, i).numpy(), np.take_along_axis(a, idx, 1))


def test_to_one_device_and_to_other_devices():
    a = _data(6, 2)
    t = Tensor(a).shard(CPUS[:3], axis=0)
    one = t.to("CPU:3")
    assert one.device == "CPU:3"
    np.testing.assert_array_equal(one.numpy(), a)
    moved = t.to(CPUS[1:])
    assert moved.device == ("CPU:1", "CPU:2", "CPU:3")
    np.testing.assert_array_equal(moved.numpy(), a)
    rep = Tensor(a).to(CPUS[:2])  # a single-device tensor to several: a copy on each
    assert rep.device == ("CPU", "CPU:1")
    np.testing.assert_array_equal(rep.numpy(), a)


def test_reshard_to_another_axis():
    a = _data(4, 6)
    t = Tensor(a).shard(CPUS[:2], axis=0).shard(CPUS[:2], axis=1)
    assert [s.shape for s in t.uop.src] == [(4, 3), (4, 3)]
    np.testing.assert_array_equal(t.numpy(), a)


def test_sharded_constants_and_arange():
    t = Tensor.arange(12).reshape(3, 4).shard(CPUS[:3], axis=0)
    np.testing.assert_array_equal((t + 1).numpy(), np.arange(12).reshape(3, 4) + 1)
    z = Tensor.ones(4, 4).shard(CPUS[:2], axis=1)
    np.testing.assert_array_equal(z.sum(1).numpy(), np.full(4, 4.0))


@pytest.mark.parametrize("ctx", [{"RING": 0, "ALL2ALL": 0}, {"RING": 2, "ALL2ALL": 0}, {"ALL2ALL": 2}])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_allreduce_algorithms(ctx, n):
    a = _data(8, 9, seed=n)
    with Context(**ctx):
        t = Tensor(a).shard(CPUS[:n], axis=0)
        np.testing.assert_allclose(t.sum(0).numpy(), a.sum(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(t.max(0).numpy(), a.max(0))
        np.testing.assert_allclose((t * 0.1 + 1).prod(0).numpy(), (a * np.float32(0.1) + 1).prod(0), rtol=1e-5)


def test_mean_var_softmax_over_the_sharded_axis():
    a = _data(6, 5)
    t = Tensor(a).shard(CPUS[:3], axis=1)
    np.testing.assert_allclose(t.mean(1).numpy(), a.mean(1), rtol=1e-5, atol=1e-6)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(t.softmax(1).numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


# ---- bad input -----------------------------------------------------------------------------------------------

def test_mixing_device_sets_names_both():
    a = _data(4, 4)
    x, y = Tensor(a).shard(CPUS[:2], axis=0), Tensor(a).shard(CPUS[1:3], axis=0)
    with pytest.raises(ValueError, match=r"\('CPU', 'CPU:1'\).*\('CPU:1', 'CPU:2'\)"):
        x + y
    with pytest.raises(ValueError, match=r"CPU:3.*\('CPU', 'CPU:1'\)"):
        Tensor(a, device="CPU:3") * x


def test_shard_axis_that_does_not_exist():
    with pytest.raises(IndexError, match="axis 2 is out of range.*allowed: -2 to 1"):
        Tensor(_data(4, 4)).shard(CPUS[:2], axis=2)


def test_shard_axis_smaller_than_the_devices():
    with pytest.raises(ValueError, match="cannot shard axis 0 of shape \\(2, 5\\) over 3 devices"):
        Tensor(_data(2, 5)).shard(CPUS[:3], axis=0)


def test_shard_needs_distinct_devices_in_a_sequence():
    with pytest.raises(ValueError, match="distinct"):
        Tensor(_data(4)).shard(["CPU:1", "CPU:1"], axis=0)
    with pytest.raises(TypeError, match="sequence of devices"):
        Tensor(_data(4)).shard("CPU:1", axis=0)


def test_device_index_beyond_the_count_names_how_many():
    with pytest.raises(DeviceNotFoundError, match="no device CPU:4: 4 CPU devices exist .*TG_CPU_DEVICES"):
        Tensor(_data(4)).shard(["CPU:0", "CPU:4"]).numpy()


# ---- 2D sharding --------------------------------------------------------------------------------------------

GRID = [["CPU:0", "CPU:1"], ["CPU:2", "CPU:3"]]


def test_2d_shard_over_a_grid():
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    t = Tensor(a).shard(GRID, axis=(0, 1))
    assert t.device == ("CPU", "CPU:1", "CPU:2", "CPU:3")
    assert [box for _, box in t.uop.arg] == [((0, 2), (0, 4)), ((0, 2), (4, 8)), ((2, 4), (0, 4)), ((2, 4), (4, 8))]
    np.testing.assert_array_equal(t.numpy(), a)
    for axis in (None, 0, 1):
        np.testing.assert_allclose(t.sum(axis).numpy(), a.sum(axis))
    np.testing.assert_allclose(t.max(0).sum().numpy(), a.max(0).sum())  # replicas of a partial result count once
    b = _data(8, 3)
    np.testing.assert_allclose((t @ Tensor(b).shard(CPUS)).numpy(), a @ b, rtol=1e-5)


def test_2d_clone_then_assign_changes_the_clone_only():
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    t = Tensor(a).shard(GRID, axis=(0, 1)).realize()
    c = t.clone()
    c.assign(c * 10 + 1)
    np.testing.assert_array_equal(c.numpy(), a * 10 + 1)
    np.testing.assert_array_equal(t.numpy(), a)
    c.assign(Tensor(np.ones((4, 8), np.float32)))  # a single-device value, copied to the shards
    np.testing.assert_array_equal(c.numpy(), np.ones((4, 8)))
    c[1:3, 2:6] = 0
    want = np.ones((4, 8), np.float32)
    want[1:3, 2:6] = 0
    np.testing.assert_array_equal(c.numpy(), want)
    np.testing.assert_array_equal(t.numpy(), a)


def test_assign_into_sharded_storage_is_seen_by_lazy_readers_in_order():
    a = _data(4, 4)
    t = Tensor(a).shard(CPUS[:2], axis=0).realize()
    before = t * 1  # lazy: must keep the old contents
    t.assign(t + 1)
    np.testing.assert_allclose(t.numpy(), a + 1)
    np.testing.assert_allclose(before.numpy(), a)


def test_2d_grid_must_be_rectangular():
    with pytest.raises(ValueError, match="not rectangular"):
        Tensor(_data(4, 4)).shard([["CPU:0", "CPU:1"], ["CPU:2"]], axis=(0, 1))


def test_tg_devices_shows_the_indices():
    import json
    import os
    import subprocess
    import sys
    env = dict(os.environ, TG_CPU_DEVICES="3")
    out = subprocess.run([sys.executable, "-m", "tg_core", "devices"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert "indices:   CPU:0, CPU:1, CPU:2 (CPU is CPU:0" in out.stdout, out.stdout + out.stderr
    js = subprocess.run([sys.executable, "-m", "tg_core", "devices", "--json"], env=env, capture_output=True,
                        text=True, timeout=120)
    cpu = next(d for p in json.loads(js.stdout)["plugins"] for d in p["devices"] if d["name"] == "CPU")
    assert cpu["indices"] == ["CPU:0", "CPU:1", "CPU:2"] and cpu["options"]["count"]["value"] == 3


def test_sharded_two_layer_block_decodes_like_the_unsharded_one():
    """4 decode steps at a changing start position on 2 CPUs, against the same block unsharded."""
    assert_sharded_decode_matches(CPUS[:2])
