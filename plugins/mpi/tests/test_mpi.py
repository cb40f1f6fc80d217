"""tg-mpi under `mpiexec -n 2` and `-n 3` on loopback, each job bounded by a timeout: every collective against
numpy on every rank (CPU, and the mock AMD GPU per rank), the same bits on every rank, bucketing and async work,
mismatched shapes reported on every rank, a missing rank named within the timeout, a dying rank ending the job,
the data-parallel step equal to one process's step on the whole batch; and a world of one without mpiexec."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

WORKER = Path(__file__).with_name("mpi_worker.py")
MPIEXEC = shutil.which("mpiexec")
needs_mpi = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install mpich)")


def mpiexec(n: int, scenario: str, timeout: float = 240, **env: str) -> subprocess.CompletedProcess:
    e = {**os.environ, "TG_MPI_TIMEOUT": "20", **env}
    e.pop("PMI_RANK", None)
    # -launcher fork: every rank on this host, no ssh (the only network is loopback)
    return subprocess.run([MPIEXEC, "-launcher", "fork", "-n", str(n), sys.executable, str(WORKER), scenario],
                          capture_output=True, text=True, timeout=timeout, env=e)


def ok(res: subprocess.CompletedProcess, n: int, scenario: str) -> None:
    assert res.returncode == 0, res.stdout + res.stderr
    for r in range(n):
        assert f"rank {r} ok {scenario}" in res.stdout, res.stdout + res.stderr


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_collectives_against_numpy(n):
    ok(mpiexec(n, "collectives"), n, "collectives")


@needs_mpi
@pytest.mark.slow
def test_collectives_on_a_mock_gpu_per_rank():
    pytest.importorskip("tg_amd")
    ok(mpiexec(2, "collectives", DEV="AMD", TG_MPI_DEVICE="AMD"), 2, "collectives")


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_data_parallel_step_equals_one_process(n):
    ok(mpiexec(n, "step"), n, "step")


@needs_mpi
def test_mismatched_shapes_fail_on_every_rank():
    res = mpiexec(2, "mismatch")
    ok(res, 2, "mismatch")
    assert res.stdout.count("the ranks disagree") == 2


@needs_mpi
def test_a_missing_rank_is_named_within_the_timeout():
    res = mpiexec(2, "missing", timeout=60, TG_MPI_TIMEOUT="2")
    assert res.returncode != 0
    assert "rank 0 error: tg_mpi broadcast on rank 0: no data from rank 1 within 2 s" in res.stdout, res.stdout


@needs_mpi
def test_a_dying_rank_ends_the_job():
    res = mpiexec(2, "dies", timeout=60, TG_MPI_TIMEOUT="5")
    assert res.returncode != 0 and "ok dies" not in res.stdout.replace("rank 1 ok", "")


def test_without_mpiexec_the_world_has_one_rank():
    code = ("import numpy as np, tg_mpi; from tg_core import Tensor; w = tg_mpi.world; "
            "assert (w.rank, w.size) == (0, 1), w; t = Tensor(np.arange(6, dtype=np.float32)); "
            "assert (tg_mpi.allreduce(t, 'mean').numpy() == np.arange(6)).all(); "
            "assert tg_mpi.all_gather(t).shape == (6,); print('ok')")
    env = {k: v for k, v in os.environ.items() if k not in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK")}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert res.stdout.strip() == "ok", res.stderr


def test_bad_input_errors():
    import tg_mpi
    from tg_mpi.group import pick_device

    from tg_core import Tensor
    t = Tensor(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="op is one of sum, prod, max, mean, got 'min'"):
        tg_mpi.allreduce(t, "min")
    with pytest.raises(TypeError, match="'mean' needs a float tensor, got dtype int32"):
        tg_mpi.allreduce(Tensor(np.ones(3, np.int32)), "mean")
    with pytest.raises(TypeError, match="takes a tg Tensor, got ndarray"):
        tg_mpi.allreduce(np.ones(3))
    with pytest.raises(ValueError, match="root is a rank from 0 to 0, got 1"):
        tg_mpi.broadcast(t, root=1)
    with pytest.raises(ValueError, match="at least 1 dimension"):
        tg_mpi.all_gather(Tensor(np.float32(1.0)))
    with pytest.raises(ValueError, match=r"placeholders \{rank\} and \{local_rank\}"):
        pick_device("AMD:{gpu}", 0, 0)
    assert pick_device("CPU:{local_rank}", 3, 1) == "CPU:1"


def test_split_matches_numpy():
    from tg_mpi.collectives import split
    for n in (0, 1, 7, 12, 100003):
        for parts in (1, 2, 3, 4):
            assert [b - a for a, b in split(n, parts)] == [len(c) for c in np.array_split(np.arange(n), parts)]


@needs_mpi
@pytest.mark.slow
def test_the_demo_trains_the_same_on_two_ranks_as_on_one():
    """`mpiexec -n 2 tg demo --data-parallel` (the command the README gives): the weights are checked equal on both
    ranks after every step by the demo itself, and since both ranks' slices make up the one-process batch, the
    loss and accuracy are those of one process (the mean of two half-batch gradients equals the whole batch's up
    to float rounding)."""
    import re
    demo = [sys.executable, "-m", "tg_core", "demo", "--epochs", "2"]
    line = re.compile(r"epoch\s+(\d+) .*loss (\d+\.\d+)\s+test accuracy\s+(\d+\.\d+)%")
    env = {**os.environ, "TG_MPI_TIMEOUT": "60"}
    env.pop("PMI_RANK", None)
    one = subprocess.run(demo, capture_output=True, text=True, timeout=300, env=env)
    two = subprocess.run([MPIEXEC, "-launcher", "fork", "-n", "2", *demo, "--data-parallel"], capture_output=True,
                         text=True, timeout=300, env=env)
    assert "on 2 processes (this is rank 0" in two.stdout, two.stdout + two.stderr
    assert "weights differ" not in two.stdout + two.stderr
    got, want = line.findall(two.stdout), line.findall(one.stdout)
    assert len(got) == len(want) == 2, one.stdout + two.stdout + two.stderr
    for (_, loss2, acc2), (_, loss1, acc1) in zip(got, want):
        assert abs(float(loss2) - float(loss1)) < 2e-3 and abs(float(acc2) - float(acc1)) <= 0.6
