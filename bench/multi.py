"""Multi-device collectives on CPU devices (CPU:0..CPU:3, docs/architecture.md "Multi-device").

1. Bytes each device sends in an allreduce of 2^20 float32 on 2, 3 and 4 devices, per algorithm (RING=0 naive,
   RING=2 ring, ALL2ALL=2 all-to-all), from the schedule's copies, against the textbook figures: naive (n-1) of
   the data per device, ring and all-to-all 2(n-1)/n.
2. Time of a ring allreduce (sum) of 2^24 float32 on 2 CPU devices, replayed by a TinyJit, against numpy's `a + b`
   of the same arrays measured in the same run (goal: within 2x). The result is checked against numpy first.

Usage: python bench/multi.py [--json] [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import best_of  # noqa: E402  (bench/timing.py)

from tg_core import Tensor, TinyJit  # noqa: E402
from tg_core.device import Device  # noqa: E402
from tg_core.helpers import Context  # noqa: E402
from tg_core.tensor import multi  # noqa: E402

ALGOS = {"naive": {"RING": 0, "ALL2ALL": 0}, "ring": {"RING": 2, "ALL2ALL": 0}, "all2all": {"ALL2ALL": 2}}


def textbook(algo: str, n: int, nbytes: int) -> float:
    return (n - 1) * nbytes if algo == "naive" else 2 * (n - 1) / n * nbytes


def bytes_table(numel: int) -> list[dict]:
    rows = []
    for n in (2, 3, 4):
        devs = [f"CPU:{i}" for i in range(n)]
        parts = Tensor(np.ones((n, numel), np.float32)).shard(devs, axis=0).realize()
        for algo, ctx in ALGOS.items():
            with Context(**ctx):
                sent = multi.bytes_sent(multi.allreduce(parts))
            want = textbook(algo, n, numel * 4)
            rows.append({"devices": n, "algorithm": algo, "bytes_per_device": max(sent.values()),
                         "textbook": want, "ratio": max(sent.values()) / want})
    return rows


def ring_timing(numel: int, repeat: int) -> dict:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(numel).astype(np.float32), rng.standard_normal(numel).astype(np.float32)
    parts = Tensor(np.stack([a, b])).shard(["CPU:0", "CPU:1"], axis=0).realize()
    with Context(RING=2, ALL2ALL=0):
        @TinyJit
        def reduce(p: Tensor) -> Tensor:
            return multi.allreduce(p, "sum")

        out = None
        for _ in range(3):  # eager, capture, replay
            out = reduce(parts)
            Device["CPU"].synchronize()
            Device["CPU:1"].synchronize()
        assert out is not None
        got = out.numpy()
        if not np.allclose(got, a + b, rtol=1e-6, atol=1e-6):
            raise SystemExit("ring allreduce gave a wrong result")

        def run() -> None:
            reduce(parts)
            Device["CPU"].synchronize()
            Device["CPU:1"].synchronize()
        tg = best_of(run, repeat)
    ref = best_of(lambda: np.add(a, b), repeat)
    return {"elements": numel, "tg_s": tg, "numpy_s": ref, "tg_over_numpy": tg / ref}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    Device.configure(devices={"CPU": {"count": 4}})
    rows = bytes_table(1 << 20)
    timing = ring_timing(1 << 24, args.repeat)
    if args.json:
        print(json.dumps({"bytes": rows, "ring_allreduce": timing}, indent=2))
        return
    print("allreduce of 2^20 float32: bytes sent per device (most loaded device) against the textbook")
    print(f"{'devices':>7} {'algorithm':>9} {'bytes':>10} {'textbook':>10} {'ratio':>6}")
    for r in rows:
        print(f"{r['devices']:>7} {r['algorithm']:>9} {r['bytes_per_device']:>10} {r['textbook']:>10.0f} "
              f"{r['ratio']:>6.3f}")
    print(f"\nring allreduce of 2^24 float32 on 2 CPU devices: {timing['tg_s'] * 1e3:.1f} ms; numpy a + b "
          f"{timing['numpy_s'] * 1e3:.1f} ms; tg/numpy {timing['tg_over_numpy']:.2f}x (goal <= 2)")


if __name__ == "__main__":
    main()
