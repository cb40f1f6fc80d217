"""Collectives over CPU devices: allreduce (naive, ring, all-to-all), reduce-scatter and all-gather for sum, prod
and max against numpy, the bytes each device sends against the textbook figures, and a fuzz of random shapes
sharded over 2-4 devices and reduced."""
import numpy as np
import pytest

from tg_core import Tensor
from tg_core.device import Device
from tg_core.helpers import Context
from tg_core.tensor import multi
from tg_core.testing.devices import ALLREDUCE_ALGOS as ALGOS
from tg_core.testing.devices import REDUCE_NP as NP
from tg_core.testing.devices import configured_devices

CPUS = [f"CPU:{i}" for i in range(4)]


four_cpus = pytest.fixture(scope="module", autouse=True, name="four_cpus")(configured_devices(CPU={"count": 4}))


def _parts(n, *shape, seed=0):
    a = np.random.default_rng(seed).uniform(0.5, 1.5, (n, *shape)).astype(np.float32)
    return a, Tensor(a).shard(CPUS[:n], axis=0).realize()


@pytest.mark.parametrize("algo", list(ALGOS))
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("op", list(NP))
def test_allreduce(algo, n, op):
    a, p = _parts(n, 5, 7, seed=n)
    with Context(**ALGOS[algo]):
        r = multi.allreduce(p, op)
    assert r.device == tuple(Device.canonicalize(d) for d in CPUS[:n]) and r.shape == (5, 7)
    assert all(s.shape == (5, 7) for s in r.uop.src)  # every device holds the whole result
    np.testing.assert_allclose(r.numpy(), NP[op](a, axis=0), rtol=1e-5)


@pytest.mark.parametrize("ring", [0, 2])
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("op", list(NP))
def test_reduce_scatter(ring, n, op):
    a, p = _parts(n, 6, 5, seed=n)
    with Context(RING=ring):
        r = multi.reduce_scatter(p, op, axis=1)
    assert [s.shape for s in r.uop.src] == [(6, len(range(*b))) for b in multi.split(5, n)]
    np.testing.assert_allclose(r.numpy(), NP[op](a, axis=0), rtol=1e-5)


def test_all_gather():
    a = np.arange(24, dtype=np.float32).reshape(6, 4)
    g = multi.all_gather(Tensor(a).shard(CPUS[:3], axis=0))
    assert all(s.shape == (6, 4) for s in g.uop.src)
    np.testing.assert_array_equal(g.numpy(), a)


N = 12 * 512  # divisible by 2, 3 and 4: every chunk the same size


@pytest.mark.parametrize("n", [2, 3, 4])
def test_bytes_sent_match_the_textbook(n):
    _, p = _parts(n, N, seed=1)
    data = N * 4
    for algo, per_device in (("naive", (n - 1) * data), ("ring", 2 * (n - 1) * data // n),
                             ("all2all", 2 * (n - 1) * data // n)):
        with Context(**ALGOS[algo]):
            sent = multi.bytes_sent(multi.allreduce(p))
        assert sent == {Device.canonicalize(d): per_device for d in CPUS[:n]}, algo
    with Context(RING=2):
        assert set(multi.bytes_sent(multi.reduce_scatter(p)).values()) == {(n - 1) * data // n}
    g = multi.all_gather(Tensor(np.zeros(N, np.float32)).shard(CPUS[:n], axis=0).realize())
    assert set(multi.bytes_sent(g).values()) == {(n - 1) * data // n}


def test_ring_beats_naive_on_four_devices():
    _, p = _parts(4, N, seed=2)
    with Context(**ALGOS["naive"]):
        naive = sum(multi.bytes_sent(multi.allreduce(p)).values())
    with Context(**ALGOS["ring"]):
        ring = sum(multi.bytes_sent(multi.allreduce(p)).values())
    assert ring * 2 == naive  # 2(n-1)/n against n-1 of the data per device


def test_bad_collective_input():
    with pytest.raises(ValueError, match="one row per device: 2 devices need shape \\(2, ...\\)"):
        multi.allreduce(Tensor(np.ones((4, 3), np.float32)).shard(CPUS[:2], axis=0))
    with pytest.raises(ValueError, match="op is one of sum, prod, max"):
        multi.allreduce(_parts(2, 3)[1], "min")
    with pytest.raises(ValueError, match="single device"):
        multi.allreduce(Tensor(np.ones((2, 3), np.float32)))
    with pytest.raises(IndexError, match="axis"):
        multi.reduce_scatter(_parts(2, 3)[1], axis=1)


def test_fuzz_random_shapes_sharded_and_reduced():
    rng = np.random.default_rng(1234)
    for case in range(24):
        n = int(rng.integers(2, 5))
        ndim = int(rng.integers(1, 4))
        shape = tuple(int(s) for s in rng.integers(1, 7, ndim))
        axis = int(rng.integers(0, ndim))
        shape = tuple(max(s, n) if i == axis else s for i, s in enumerate(shape))
        reduce_axis = None if rng.random() < 0.3 else int(rng.integers(0, ndim))
        op = ["sum", "max", "prod"][case % 3]
        algo = list(ALGOS)[case % 3]
        a = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        with Context(**ALGOS[algo]):
            got = getattr(Tensor(a).shard(CPUS[:n], axis=axis), op)(reduce_axis).numpy()
        np.testing.assert_allclose(got, NP[op](a, axis=reduce_axis), rtol=1e-5,
                                   err_msg=f"{shape} sharded on {axis} over {n}, {op} over {reduce_axis}, {algo}")
