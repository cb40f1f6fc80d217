"""Multi-device collectives on CPU devices (CPU:0..CPU:3) and mock AMD GPUs (AMD:0..AMD:3, docs/architecture.md
"Multi-device").

1. Bytes each device sends in an allreduce of 2^20 float32 on 2, 3 and 4 devices, per algorithm (RING=0 naive,
   RING=2 ring, ALL2ALL=2 all-to-all), from the schedule's copies, against the textbook figures: naive (n-1) of
   the data per device, ring and all-to-all 2(n-1)/n. On AMD (`--device AMD` or `both`) the allreduce also runs,
   and the mock KFD's SDMA engines report the bytes they copied from each GPU's VRAM into other GPUs' VRAM
   (`measured`) and any they copied to or from host memory meanwhile (`staged`, which should be 0).
2. On CPU: time of each allreduce (sum) of 2^24 float32 on 2 CPU devices, replayed by a TinyJit, against numpy
   adding the same arrays in the same run, into a fresh output (`a + b`) and into a preallocated one as tg's
   replays do (goal for the ring: within 2x). Each result is checked against numpy first. CPU devices share host
   memory, so their kernels read each other's buffers in place (the figures of part 1 count those reads). (Not on
   the mock AMD GPUs: their kernels run on an emulator, whose speed says nothing of a GPU's.)

Usage: python bench/multi.py [--device CPU|AMD|both] [--json] [--repeat N]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def _sync(devs: list[str]) -> None:
    for d in devs:
        Device[d].synchronize()


def _mock_kfd() -> Any:
    """The mock KFD driver behind the AMD devices, or None on a machine with a real /dev/kfd."""
    dev: Any = Device["AMD"]  # tg-amd's AMDDevice: its `system` is the KFDSystem (core's Compiled has none)
    system = dev.system
    return system.os if system.is_mock else None


def bytes_table(numel: int, kind: str) -> list[dict]:
    """Per device count and algorithm: the most loaded device's bytes from the schedule (and on the mock AMD GPUs
    measured by its SDMA engines) against the textbook."""
    rows = []
    for n in (2, 3, 4):
        devs = [f"{kind}:{i}" for i in range(n)]
        data = np.random.default_rng(n).uniform(0.5, 1.5, (n, numel)).astype(np.float32)
        parts = Tensor(data).shard(devs, axis=0).realize()
        for algo, ctx in ALGOS.items():
            with Context(**ctx):
                out = multi.allreduce(parts)
                sent = multi.bytes_sent(out)  # builds the schedule: on AMD its kernels are compiled and uploaded
                want = textbook(algo, n, numel * 4)
                row = {"device": kind, "devices": n, "algorithm": algo, "bytes_per_device": max(sent.values()),
                       "textbook": want, "ratio": max(sent.values()) / want}
                mock = _mock_kfd() if kind == "AMD" else None
                if mock is not None:
                    _sync(devs)
                    peer0 = mock.peer_copies()
                    all0 = [dict(g.sdma_traffic) for g in mock.gpus]
                    out.realize()
                    _sync(devs)
                    peer = {k: v - peer0.get(k, 0) for k, v in mock.peer_copies().items()}
                    by_src = [sum(v for (s, _), v in peer.items() if s == i) for i in range(n)]
                    staged = sum(v - old.get(k, 0) for g, old in zip(mock.gpus, all0)
                                 for k, v in g.sdma_traffic.items() if k[0][0] != "vram" or k[1][0] != "vram")
                    if not np.allclose(out.numpy(), data.sum(0), rtol=1e-5):
                        raise SystemExit(f"{algo} allreduce on {n} AMD GPUs gave a wrong result")
                    row.update(measured=max(by_src), measured_ratio=max(by_src) / want, staged=staged)
            rows.append(row)
    return rows


def allreduce_timing(numel: int, repeat: int) -> dict:
    """Each algorithm's allreduce (sum) of two float32 vectors of `numel` on CPU:0 and CPU:1, each replayed by a
    TinyJit (which writes into the buffers it captured: preallocated outputs, one per device), against numpy adding
    the same arrays two ways: `a + b` (a fresh output each call, whose pages fault in as it is written) and
    `np.add(a, b, out=c)` (a preallocated output, as tg's), both on one core where tg's kernels use every core; and,
    for that, tg's own `a + b` on one CPU device in a TinyJit. All are timed in turn in each of `repeat` rounds,
    best of the rounds each, so a disturbance by other work on the machine hits every side alike."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(numel).astype(np.float32), rng.standard_normal(numel).astype(np.float32)
    c = np.empty_like(a)
    parts = Tensor(np.stack([a, b])).shard(["CPU:0", "CPU:1"], axis=0).realize()
    runs: dict[str, Callable[[], object]] = {}
    for algo, ctx in ALGOS.items():
        with Context(**ctx):
            jit = TinyJit(lambda p: multi.allreduce(p, "sum"))
            for _ in range(3):  # eager, capture, replay
                out = jit(parts)
            if not np.allclose(out.numpy(), a + b, rtol=1e-6, atol=1e-6):
                raise SystemExit(f"{algo} allreduce gave a wrong result")
        runs[algo] = functools.partial(_replay, jit, parts)
    ta, tb = Tensor(a, device="CPU:0").realize(), Tensor(b, device="CPU:0").realize()
    add = TinyJit(lambda x, y: (x + y).realize())
    for _ in range(3):
        got = add(ta, tb)
    if not np.array_equal(got.numpy(), a + b):
        raise SystemExit("tg's a + b on one device gave a wrong result")
    runs["tg a + b, 1 dev"] = lambda: add(ta, tb)  # the same cores as the allreduce's kernels: what one device costs
    runs["numpy a + b"] = lambda: a + b
    runs["numpy add out="] = lambda: np.add(a, b, out=c)
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeat):
        for name, fn in runs.items():
            best[name] = min(best[name], best_of(fn, 1))
    return {"elements": numel, "seconds": best, "load": os.getloadavg(),
            "ring_over_numpy_fresh": best["ring"] / best["numpy a + b"],
            "ring_over_numpy_out": best["ring"] / best["numpy add out="],
            "ring_over_tg_add": best["ring"] / best["tg a + b, 1 dev"]}


def _replay(jit: TinyJit, parts: Tensor) -> None:
    jit(parts)
    _sync(["CPU:0", "CPU:1"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("CPU", "AMD", "both"), default="CPU",
                    help="CPU devices, mock AMD GPUs (bytes only), or both")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    kinds = ["CPU", "AMD"] if args.device == "both" else [args.device]
    Device.configure(devices={"CPU": {"count": 4}, **({"AMD": {"mock_gpus": 4}} if "AMD" in kinds else {})})
    rows = [r for kind in kinds for r in bytes_table(1 << 20, kind)]
    timing = allreduce_timing(1 << 24, args.repeat) if "CPU" in kinds else None
    if args.json:
        print(json.dumps({"bytes": rows, "allreduce_timing": timing}, indent=2))
        return
    print("allreduce of 2^20 float32: bytes sent per device (most loaded device) against the textbook; AMD: also "
          "measured by the mock's SDMA engines (VRAM to VRAM) and staged through host memory")
    print(f"{'device':>6} {'devices':>7} {'algorithm':>9} {'bytes':>10} {'textbook':>10} {'ratio':>6} "
          f"{'measured':>10} {'ratio':>6} {'staged':>6}")
    for r in rows:
        extra = (f" {r['measured']:>10} {r['measured_ratio']:>6.3f} {r['staged']:>6}" if "measured" in r else "")
        print(f"{r['device']:>6} {r['devices']:>7} {r['algorithm']:>9} {r['bytes_per_device']:>10} "
              f"{r['textbook']:>10.0f} {r['ratio']:>6.3f}{extra}")
    if timing is not None:
        secs = timing["seconds"]
        print(f"\nallreduce (sum) of 2^24 float32 on CPU:0 and CPU:1, TinyJit replays, best of {args.repeat} rounds "
              f"(load average {', '.join(f'{x:.2f}' for x in timing['load'])}):")
        for name, sec in secs.items():
            print(f"  {name:>16} {sec * 1e3:7.1f} ms")
        print(f"ring / numpy a + b (fresh output) {timing['ring_over_numpy_fresh']:.2f}x; ring / numpy add into a "
              f"preallocated output (as tg's) {timing['ring_over_numpy_out']:.2f}x (goal <= 2); ring / tg's a + b on one device "
              f"(the same cores) {timing['ring_over_tg_add']:.2f}x")

if __name__ == "__main__":
    main()
