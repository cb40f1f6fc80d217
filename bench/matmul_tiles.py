"""Register-tile rows of the CPU renderers' matmul against numpy, on one core, configurations alternating.

For each tile height (rows of a tile of two vectors of columns, `CPUTarget.tile_rows`) the heuristic's target is
replaced, the device's compiled kernels forgotten, and the case realized; the kernels' CPU time (the calling
thread's: the device runs on one core, so other processes' load does not count) is kept, best over --rounds
rounds in which every height runs in turn on the same buffers. numpy (one BLAS thread) is timed in each round too;
the ratio is numpy time / kernel time (> 1: tg is faster).

Usage: python bench/matmul_tiles.py [--device CPU:X86|CPU:LLVM] [--case 512|1024|mlp] [--rows 4,6,8,12]
       [--rounds 4]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["TG_CPU_THREADS"] = "1"  # one core: thread CPU time is the kernels' time

from tg_core import Tensor  # noqa: E402
from tg_core.device import Device  # noqa: E402


def _patch_rows(device: str) -> tuple[Callable[[int], None], Callable[[], float]]:
    """A setter of the tile rows both CPU renderers use, and a reader of the kernel CPU time since last read."""
    import tg_cpu_x86.llvm as llvm
    import tg_cpu_x86.x86.renderer as x86
    from tg_cpu_x86 import device as cpu
    spent = [0.0]
    call = cpu.CPURunner.__call__

    def timed(self, bufs, var_vals):  # type: ignore[no-untyped-def]
        t = time.thread_time()
        call(self, bufs, var_vals)
        spent[0] += time.thread_time() - t
    cpu.CPURunner.__call__ = timed  # type: ignore[method-assign]
    base, heuristic = x86._VECTOR512, llvm.cpu_opts

    def set_rows(rows: int) -> None:
        tile = dataclasses.replace(base, tile_rows=rows)
        x86._TARGETS["avx512"] = ((16, tile, x86._NARROW512), (8, x86._VECTOR, x86._NARROW))
        llvm.cpu_opts = lambda ast, t: heuristic(ast, dataclasses.replace(t, tile_rows=rows))
        Device[device].forget_runners()

    def read() -> float:
        out, spent[0] = spent[0], 0.0
        return out
    return set_rows, read


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="CPU:X86")
    p.add_argument("--case", default="1024", help="512, 1024 (square matmuls) or mlp (batch 256, 784-1024-1024-10)")
    p.add_argument("--rows", default="4,6,8,12")
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args()
    import threadpoolctl
    threadpoolctl.threadpool_limits(1)
    rng = np.random.default_rng(0)

    def rn(*s: int) -> np.ndarray:
        return (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
    if args.case == "mlp":
        arrays = [rn(256, 784), rn(784, 1024), rn(1024), rn(1024, 1024), rn(1024), rn(1024, 10), rn(10)]
        x, w1, b1, w2, b2, w3, b3 = (Tensor(a, device=args.device).realize() for a in arrays)
        tg = lambda: ((x @ w1 + b1).relu() @ w2 + b2).relu().matmul(w3).add(b3).realize()  # noqa: E731

        def ref() -> np.ndarray:
            h = np.maximum(arrays[0] @ arrays[1] + arrays[2], 0)
            return np.maximum(h @ arrays[3] + arrays[4], 0) @ arrays[5] + arrays[6]
    else:
        n = int(args.case)
        a_np, b_np = rn(n, n), rn(n, n)
        a, b = Tensor(a_np, device=args.device).realize(), Tensor(b_np, device=args.device).realize()
        tg, ref = (lambda: (a @ b).realize()), (lambda: a_np @ b_np)
    set_rows, read = _patch_rows(args.device)
    rows = [int(r) for r in args.rows.split(",")]
    best = {r: float("inf") for r in rows}
    numpy_best = float("inf")
    want = ref()
    for _ in range(args.rounds):
        for r in rows:
            set_rows(r)
            np.testing.assert_allclose(tg().numpy(), want, rtol=1e-3, atol=1e-3)
            for _ in range(3):
                read()
                tg()
                best[r] = min(best[r], read())
        t = time.thread_time()
        ref()
        numpy_best = min(numpy_best, time.thread_time() - t)
    print(f"{args.device} case {args.case}, one core, best of {args.rounds} rounds; numpy {numpy_best * 1e3:.2f} ms")
    for r in rows:
        print(f"  {r:2d} rows: {best[r] * 1e3:7.2f} ms  numpy/tg {numpy_best / best[r]:.2f}x")


if __name__ == "__main__":
    main()
