"""tg-mpi across processes on this machine (docs/architecture.md "Across processes: tg-mpi").

1. Allreduce (sum) of 2^24 float32 on 2 ranks: `tg_mpi.allreduce` of a tg Tensor on the CPU device (host staging,
   tg's rank-ordered reduce-scatter + all-gather, the result back in a Tensor) against mpi4py's own
   `comm.Allreduce` of the same numpy buffer, measured in the same job (goal: tg >= 0.8x of mpi4py's bandwidth).
   Also tg's exchange alone on the numpy buffer (no Tensor staging), to show where the difference is.
   The result is checked against the sum of both ranks' data first.
2. Time per training step of `tg demo` on 2 ranks (`mpiexec -n 2 tg demo --data-parallel`) against 1 process,
   from the demo's own epoch times (the fastest epoch after the first, which compiles). On 2 cores no speedup is
   expected: the figure is the overhead of gradient averaging and the per-step weight check.

Usage: python bench/mpi.py [--json] [--repeat N] [--ranks N] [--epochs N]
(it starts its own `mpiexec`; the allreduce part runs as `mpiexec -n N python bench/mpi.py --worker`).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time

import numpy as np

NUMEL = 1 << 24
EPOCH_LINE = re.compile(r"epoch\s+(\d+) .* (\d+\.\d+) s\s+\d+ kernels")


def _best(fn, repeat: int, comm) -> float:
    """Fastest of `repeat` runs, each started together on every rank (a barrier) and timed to the slowest rank."""
    best = float("inf")
    for _ in range(repeat):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        comm.Barrier()
        best = min(best, time.perf_counter() - t0)
    return best


def worker(repeat: int) -> None:
    """One rank of the allreduce comparison; rank 0 prints the JSON result."""
    import tg_mpi
    from mpi4py import MPI
    from tg_mpi.collectives import host_allreduce

    from tg_core import Tensor

    world, comm = tg_mpi.world, MPI.COMM_WORLD
    rng = np.random.default_rng(world.rank)
    data = rng.standard_normal(NUMEL).astype(np.float32)
    t = Tensor(data).realize()
    want = np.zeros(NUMEL, np.float32)
    for r in range(world.size):  # every rank's data, summed in rank order as tg does
        want += np.random.default_rng(r).standard_normal(NUMEL).astype(np.float32)
    got = tg_mpi.allreduce(t, op="sum").numpy()
    if not np.array_equal(got, want):
        raise SystemExit(f"rank {world.rank}: tg_mpi.allreduce differs from the rank-ordered sum")
    out = np.empty_like(data)
    results = {
        "mpi4py_Allreduce_s": _best(lambda: comm.Allreduce(data, out, op=MPI.SUM), repeat, comm),
        "tg_allreduce_s": _best(lambda: tg_mpi.allreduce(t, op="sum").realize(), repeat, comm),
        "tg_exchange_only_s": _best(lambda: host_allreduce(data, "sum", "allreduce", world), repeat, comm),
    }
    if world.rank == 0:
        nbytes = NUMEL * 4
        results.update(ranks=world.size, elements=NUMEL,
                       **{k.removesuffix("_s") + "_GBps": nbytes / v / 1e9 for k, v in list(results.items())},
                       tg_over_mpi4py_bandwidth=results["mpi4py_Allreduce_s"] / results["tg_allreduce_s"])
        print(json.dumps(results))


def _mpiexec(ranks: int, *cmd: str) -> list[str]:
    return ["mpiexec", "-n", str(ranks), *cmd]


def allreduce_bench(ranks: int, repeat: int) -> dict:
    run = subprocess.run(_mpiexec(ranks, sys.executable, __file__, "--worker", "--repeat", str(repeat)),
                         capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise SystemExit(f"bench/mpi.py: the allreduce job failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def _step_time(cmd: list[str], epochs: int) -> float:
    # the demo exits 1 when a short run stays below its accuracy goal: the epoch lines are what counts here
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    times = [float(m.group(2)) for m in EPOCH_LINE.finditer(run.stdout)]
    if len(times) != epochs:
        raise SystemExit(f"bench/mpi.py: expected {epochs} epoch lines from {' '.join(cmd)} (exit "
                         f"{run.returncode}), got:\n{run.stdout}{run.stderr[-2000:]}")
    steps = 1438 // 64  # the demo's training split and batch
    return min(times[1:] if epochs > 1 else times) / steps


def demo_bench(ranks: int, epochs: int) -> dict:
    tg = [sys.executable, "-m", "tg_core", "demo", "--epochs", str(epochs)]
    one = _step_time(tg, epochs)
    many = _step_time(_mpiexec(ranks, *tg, "--data-parallel"), epochs)
    return {"ranks": ranks, "step_1_process_ms": one * 1e3, "step_ranks_ms": many * 1e3,
            "ranks_over_1": many / one}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.repeat)
        return
    if args.ranks < 2 or args.epochs < 1:
        raise SystemExit("bench/mpi.py: --ranks is at least 2 and --epochs at least 1")
    ar, demo = allreduce_bench(args.ranks, args.repeat), demo_bench(args.ranks, args.epochs)
    if args.json:
        print(json.dumps({"allreduce": ar, "demo": demo}, indent=2))
        return
    print(f"allreduce (sum) of 2^24 float32 on {ar['ranks']} ranks, best of {args.repeat}:")
    for key, label in (("mpi4py_Allreduce", "mpi4py comm.Allreduce (numpy buffer)"),
                       ("tg_allreduce", "tg_mpi.allreduce (CPU Tensor)"),
                       ("tg_exchange_only", "tg's exchange alone (numpy buffer)")):
        print(f"  {label:38s} {ar[key + '_s'] * 1e3:8.1f} ms  {ar[key + '_GBps']:6.2f} GB/s")
    print(f"  tg / mpi4py bandwidth {ar['tg_over_mpi4py_bandwidth']:.2f}x (goal >= 0.8)")
    print(f"\ntg demo, time per training step (fastest epoch after the first): 1 process "
          f"{demo['step_1_process_ms']:.1f} ms, {demo['ranks']} ranks {demo['step_ranks_ms']:.1f} ms "
          f"({demo['ranks_over_1']:.2f}x)")


if __name__ == "__main__":
    main()
