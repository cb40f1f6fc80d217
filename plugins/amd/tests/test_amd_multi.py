"""Multi-device tensors on several AMD GPUs (AMD:0..AMD:3 of the mock KFD, `mock_gpus` 4): sharded reductions,
the three allreduce algorithms in a TinyJit, cat/stack, 2D clone + assign and a sharded transformer block, checked
against numpy; and what moves between the GPUs: every chunk of a collective is an SDMA copy from one GPU's VRAM
into another's (the mock's per-GPU SDMA traffic), never staged through host memory, in the textbook amounts
(ring and all-to-all 2(n-1)/n of the data per device, naive n-1). The same cases on CPU devices are
tests/test_multi*.py; here a representative subset, since every kernel runs on the RDNA3 emulator."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core import Tensor, TinyJit
from tg_core.device import Device
from tg_core.helpers import Context
from tg_core.tensor import multi
from tg_core.testing.devices import ALLREDUCE_ALGOS as ALGOS
from tg_core.testing.devices import REDUCE_NP as NP
from tg_core.testing.devices import why_unavailable
from tg_core.testing.models import assert_sharded_decode_matches

_why = why_unavailable("AMD")
pytestmark = pytest.mark.skipif(_why is not None, reason=f"the AMD device does not open: {_why}")

GPUS = tuple(f"AMD:{i}" for i in range(4))


@pytest.fixture(scope="module", autouse=True)
def four_gpus():
    Device.configure(devices={"AMD": {"mock_gpus": 4}})
    if not Device["AMD"].system.is_mock:
        Device.reset()
        pytest.skip("counts SDMA traffic through the mock KFD; this machine has a real /dev/kfd")
    yield
    Device.reset()


def _mock():
    return Device["AMD"].system.os


def _sync(devs) -> None:
    for d in devs:
        Device[d].synchronize()


def _data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _canon(devs) -> tuple[str, ...]:
    return tuple(Device.canonicalize(d) for d in devs)


# ---- values ----------------------------------------------------------------------------------------------------

# every (shard axis, reduce axis) pair on 2 GPUs for sum; prod and max on the pairs that need an allreduce or none
_PAIRS = [(n, s, r, "sum") for n in (2,) for s in (None, 0, 1) for r in (None, 0, 1)] + \
         [(2, 0, 0, "prod"), (2, 1, None, "max"), (2, None, 1, "prod"), (2, 1, 0, "max")] + \
         [(3, 0, 0, "sum"), (3, 1, 1, "max"), (3, 1, None, "prod"), (3, None, 0, "max"), (3, 0, 1, "sum")]


@pytest.mark.parametrize("n, shard_axis, reduce_axis, op", _PAIRS)
def test_sharded_reduce_matches_numpy(n, shard_axis, reduce_axis, op):
    a = _data(5, 7, seed=n) * 0.5 + 1  # away from 0: the product stays in range
    t = Tensor(a).shard(GPUS[:n], axis=shard_axis)
    assert t.device == _canon(GPUS[:n])
    got = getattr(t, op)(reduce_axis)
    np.testing.assert_allclose(got.numpy(), NP[op](a, axis=reduce_axis), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("op", list(NP))
def test_sharded_reduce_every_pair(n, op):
    """The full matrix of (shard axis, reduce axis) pairs, as tests/test_multi.py runs it on CPU devices."""
    a = _data(5, 7, seed=n) * 0.5 + 1
    for shard_axis in (None, 0, 1):
        t = Tensor(a).shard(GPUS[:n], axis=shard_axis)
        for reduce_axis in (None, 0, 1):
            np.testing.assert_allclose(getattr(t, op)(reduce_axis).numpy(), NP[op](a, axis=reduce_axis), rtol=1e-5,
                                       err_msg=f"shard axis {shard_axis}, reduce axis {reduce_axis}")


@pytest.mark.parametrize("algo", list(ALGOS))
def test_allreduce_in_a_jit_replays_right(algo):
    """Eager, capture, then three replays on 3 GPUs, new inputs each time; the replays move the chunks between
    GPUs by SDMA and nothing through host memory."""
    devs = GPUS[:3]
    mock = _mock()
    with Context(**ALGOS[algo]):
        @TinyJit
        def f(p: Tensor) -> Tensor:
            return multi.allreduce(p * 2, "sum") + 1

        for i in range(5):
            a = np.random.default_rng(i).standard_normal((3, 4, 5)).astype(np.float32)
            x = Tensor(a).shard(devs, axis=0).realize()
            _sync(devs)
            before = {g.index: dict(g.sdma_traffic) for g in mock.gpus}
            out = f(x)
            _sync(devs)
            if i >= 2:  # a replay: only peer copies, each GPU's from its own VRAM
                for g in mock.gpus[:3]:
                    moved = {k: v - before[g.index].get(k, 0) for k, v in g.sdma_traffic.items()
                             if v != before[g.index].get(k, 0)}
                    assert moved and all(s == ("vram", g.index) and d[0] == "vram" and d[1] != g.index
                                         for s, d in moved), (algo, g.index, moved)
            assert out.device == _canon(devs)
            np.testing.assert_allclose(out.numpy(), (a * 2).sum(0) + 1, rtol=1e-5, atol=1e-5)
        assert f.cnt == 2 and f.jit_cache


@pytest.mark.parametrize("op", ["prod", "max"])
def test_allreduce_prod_and_max(op):
    a = np.random.default_rng(3).uniform(0.5, 1.5, (4, 6, 5)).astype(np.float32)
    with Context(RING=2):
        r = multi.allreduce(Tensor(a).shard(GPUS, axis=0), op)
    assert all(s.shape == (6, 5) for s in r.uop.src)
    np.testing.assert_allclose(r.numpy(), NP[op](a, axis=0), rtol=1e-5)


def test_reduce_scatter_and_all_gather():
    a = np.random.default_rng(4).uniform(0.5, 1.5, (3, 6, 5)).astype(np.float32)
    with Context(RING=2):
        r = multi.reduce_scatter(Tensor(a).shard(GPUS[:3], axis=0), "sum", axis=1)
    assert [s.shape for s in r.uop.src] == [(6, 2), (6, 2), (6, 1)]
    np.testing.assert_allclose(r.numpy(), a.sum(0), rtol=1e-5)
    g = multi.all_gather(r)
    assert all(s.shape == (6, 5) for s in g.uop.src)
    np.testing.assert_allclose(g.numpy(), a.sum(0), rtol=1e-5)


def test_cat_and_stack():
    a, b = _data(4, 3), _data(4, 3, seed=1)
    x, y = Tensor(a).shard(GPUS[:2], axis=0), Tensor(b).shard(GPUS[:2], axis=0)
    np.testing.assert_array_equal(x.cat(y, dim=0).numpy(), np.concatenate([a, b], 0))
    np.testing.assert_array_equal(x.cat(y, dim=1).numpy(), np.concatenate([a, b], 1))
    np.testing.assert_array_equal(Tensor.stack(x, y).numpy(), np.stack([a, b]))
    np.testing.assert_array_equal(Tensor.stack(x, y, dim=2).numpy(), np.stack([a, b], 2))


def test_2d_clone_then_assign_changes_the_clone_only():
    grid = [["AMD:0", "AMD:1"], ["AMD:2", "AMD:3"]]
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    t = Tensor(a).shard(grid, axis=(0, 1)).realize()
    assert [box for _, box in t.uop.arg] == [((0, 2), (0, 4)), ((0, 2), (4, 8)), ((2, 4), (0, 4)), ((2, 4), (4, 8))]
    c = t.clone()
    c.assign(c * 10 + 1)
    np.testing.assert_array_equal(c.numpy(), a * 10 + 1)
    np.testing.assert_array_equal(t.numpy(), a)
    c[1:3, 2:6] = 0
    want = a * 10 + 1
    want[1:3, 2:6] = 0
    np.testing.assert_array_equal(c.numpy(), want)
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_allclose(t.sum(1).numpy(), a.sum(1))


@pytest.mark.slow
def test_sharded_two_layer_block_decodes_like_the_unsharded_one():
    """4 decode steps at a changing start position on 2 GPUs, against the same block unsharded on AMD:0."""
    assert_sharded_decode_matches(GPUS[:2], device="AMD:0")


# ---- what moves between the GPUs -------------------------------------------------------------------------------

NUMEL = 1 << 20


def _peer_sent(before: dict[tuple[int, int], int], after: dict[tuple[int, int], int], n: int) -> list[int]:
    """Bytes each GPU's VRAM sent into other GPUs' VRAM between two counts of the mock."""
    sent = [0] * n
    for (s, _), v in after.items():
        if s < n:
            sent[s] += v
    for (s, _), v in before.items():
        if s < n:
            sent[s] -= v
    return sent


_SLOW = pytest.mark.slow
_MOVES = [pytest.param(algo, n, marks=_SLOW) if n == 4 and algo != "all2all" else (algo, n)
          for algo in ALGOS for n in (2, 3, 4)]


@pytest.mark.parametrize("algo, n", _MOVES)
def test_allreduce_moves_the_textbook_bytes_gpu_to_gpu(algo, n):
    """An allreduce of 2^20 float32 per GPU: the SDMA engines copy VRAM to VRAM, per device 2(n-1)/n of the data
    for the ring and the all-to-all (within a chunk's rounding: n need not divide 2^20) and n-1 for the naive one;
    nothing goes through host memory; the schedule's own count (multi.bytes_sent) says the same bytes."""
    devs = GPUS[:n]
    a = np.random.default_rng(n).uniform(0.5, 1.5, (n, NUMEL)).astype(np.float32)
    p = Tensor(a).shard(devs, axis=0).realize()
    mock = _mock()
    with Context(**ALGOS[algo]):
        r = multi.allreduce(p, "sum")
        planned = multi.bytes_sent(r)  # builds the schedule: its kernels are compiled and uploaded now
        _sync(devs)
        before, traffic_before = mock.peer_copies(), [dict(g.sdma_traffic) for g in mock.gpus]
        r.realize()
        _sync(devs)
    sent = _peer_sent(before, mock.peer_copies(), n)
    data = NUMEL * 4
    want = (n - 1) * data if algo == "naive" else 2 * (n - 1) * data / n
    assert all(abs(s - want) <= 4 * n for s in sent), (sent, want)   # a chunk is whole elements
    assert sent == [planned[Device.canonicalize(d)] for d in devs]
    for g, old in zip(mock.gpus, traffic_before):  # no copy to or from host memory
        staged = {k: v - old.get(k, 0) for k, v in g.sdma_traffic.items() if k[0][0] != "vram" or k[1][0] != "vram"}
        assert not any(staged.values()), (g.index, staged)
    np.testing.assert_allclose(r.numpy(), a.sum(0), rtol=1e-5)
