"""Run under mpiexec by the tests: each scenario checks tg-mpi's results on this rank against numpy on data every
rank can compute for every other rank (seeded by rank), prints `rank R ok SCENARIO` and exits 0, or fails."""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import tg_mpi

from tg_core import Tensor

NP = {"sum": np.sum, "prod": np.prod, "max": np.max, "mean": np.mean}


def data(rank: int, shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    a = np.random.default_rng(100 + rank).uniform(0.5, 1.5, shape)
    return a.astype(dtype) if np.issubdtype(dtype, np.floating) else (a * 10).astype(dtype)


def collectives() -> None:
    w = tg_mpi.world
    n, r = w.size, w.rank
    for dtype in (np.float32, np.int32):
        for op in ("sum", "prod", "max", "mean"):
            if op == "mean" and dtype == np.int32:
                continue
            shape = (7, 5)
            got = tg_mpi.allreduce(Tensor(data(r, shape, dtype), device=w.device), op)
            assert got.device == w.device, got.device
            ref = NP[op](np.stack([data(q, shape, dtype) for q in range(n)]), axis=0).astype(dtype)
            np.testing.assert_allclose(got.numpy(), ref, rtol=1e-5)
            # the same bits on every rank: all_gather the result and compare the rows
            rows = tg_mpi.all_gather(got.reshape(1, *shape)).numpy()
            assert all(np.array_equal(rows[0], rows[q]) for q in range(n)), f"{op}: ranks differ"
    # reduce_scatter: rank r keeps piece r of axis 0
    x = [data(q, (10, 3)) for q in range(n)]
    rs = tg_mpi.reduce_scatter(Tensor(x[r], device=w.device), "sum").numpy()
    piece = np.array_split(np.arange(10), n)[r]
    np.testing.assert_allclose(rs, np.sum(x, axis=0)[piece], rtol=1e-5)
    # broadcast from the last rank; all_gather in rank order
    b = tg_mpi.broadcast(Tensor(data(r, (4, 4)), device=w.device), root=n - 1).numpy()
    np.testing.assert_array_equal(b, data(n - 1, (4, 4)))
    g = tg_mpi.all_gather(Tensor(data(r, (2, 3)), device=w.device)).numpy()
    np.testing.assert_array_equal(g, np.concatenate([data(q, (2, 3)) for q in range(n)]))
    # many small tensors, bucketed, issued without waiting, and a large one that splits into uneven chunks
    shapes = [(3,), (4, 2), (1,), (5, 5), (2, 2, 2)]
    work = tg_mpi.allreduce_many([Tensor(data(r + 7 * i, s), device=w.device) for i, s in enumerate(shapes)],
                                 "sum", async_op=True, bucket_bytes=64)
    big = tg_mpi.allreduce(Tensor(data(r, (100003,)), device=w.device), "max", async_op=True)
    for i, (s, t) in enumerate(zip(shapes, work.wait())):
        np.testing.assert_allclose(t.numpy(), np.sum([data(q + 7 * i, s) for q in range(n)], axis=0), rtol=1e-5)
    np.testing.assert_array_equal(big.wait().numpy(), np.max([data(q, (100003,)) for q in range(n)], axis=0))


def mismatch() -> None:
    w = tg_mpi.world
    shape = (3, 4) if w.rank == 0 else (4, 3)
    try:
        tg_mpi.allreduce(Tensor(np.ones(shape, np.float32)), "sum")
    except tg_mpi.CollectiveError as e:
        assert "rank 0: allreduce" in str(e) and "first shape (3, 4)" in str(e) and "(4, 3)" in str(e), str(e)
        print(f"rank {w.rank} error: {e}", flush=True)
        return
    raise AssertionError("mismatched shapes were not detected")


def missing() -> None:
    # rank 1 never calls the collective: rank 0 must fail within the timeout, naming rank 1 and the collective
    w = tg_mpi.world
    if w.rank == 1:
        time.sleep(30)
        return
    start = time.monotonic()
    try:
        tg_mpi.broadcast(Tensor(np.ones(4, np.float32)), root=1)
    except tg_mpi.CollectiveError as e:
        assert "broadcast" in str(e) and "rank 1" in str(e) and time.monotonic() - start < 10, str(e)
        print(f"rank {w.rank} error: {e}", flush=True)
        os._exit(3)  # ends the job: mpiexec stops the sleeping rank
    raise AssertionError("a missing rank was not detected")


def dies() -> None:
    # rank 1 dies between two collectives: the job must end (no hang), with a failure
    w = tg_mpi.world
    tg_mpi.allreduce(Tensor(np.ones(4, np.float32)))
    if w.rank == 1:
        os._exit(1)
    tg_mpi.allreduce(Tensor(np.ones(4, np.float32)))


def step() -> None:
    """One data-parallel Adam step on this rank's slice; prints the weights' digest and checks them against a
    single-process step on the whole batch, computed here too."""
    from tg_core.nn import Linear
    from tg_core.nn.optim import Adam
    from tg_core.nn.state import get_parameters
    w = tg_mpi.world
    x = np.random.default_rng(0).uniform(-1, 1, (12, 6)).astype(np.float32)
    y = np.random.default_rng(1).integers(0, 3, 12).astype(np.int32)

    def run(xs: np.ndarray, ys: np.ndarray, distributed: bool) -> list[np.ndarray]:
        Tensor.manual_seed(3)
        lin = Linear(6, 3)
        params = get_parameters([lin])
        opt = Adam(params, lr=0.1)
        if distributed:
            w.broadcast_parameters(params)
            opt = tg_mpi.DistributedOptimizer(opt)
        with Tensor.train():
            for _ in range(3):
                opt.zero_grad()
                lin(Tensor(xs)).sparse_categorical_crossentropy(Tensor(ys)).backward()
                opt.step()
        assert not distributed or w.all_equal(params), "weights differ between ranks"
        return [p.numpy() for p in params]
    part = np.array_split(np.arange(12), w.size)[w.rank]
    dist, single = run(x[part], y[part], True), run(x, y, False)
    for a, b in zip(dist, single):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    scenario = sys.argv[1]
    {"collectives": collectives, "mismatch": mismatch, "missing": missing, "dies": dies, "step": step}[scenario]()
    print(f"rank {tg_mpi.world.rank} ok {scenario}", flush=True)
