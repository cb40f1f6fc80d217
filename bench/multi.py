"""Multi-device collectives on CPU devices (CPU:0..CPU:3) and mock AMD GPUs (AMD:0..AMD:3, docs/architecture.md
"Multi-device").

1. Bytes each device sends in an allreduce of 2^20 float32 on 2, 3 and 4 devices, per algorithm (RING=0 naive,
   RING=2 ring, ALL2ALL=2 all-to-all), from the schedule's copies, against the textbook figures: naive (n-1) of
   the data per device, ring and all-to-all 2(n-1)/n. On AMD (`--device AMD` or `both`) the allreduce also runs,
   and the mock KFD's SDMA engines report the bytes they copied from each GPU's VRAM into other GPUs' VRAM
   (`measured`) and any they copied to or from host memory meanwhile (`staged`, which should be 0).
2. On CPU: time of a ring allreduce (sum) of 2^24 float32 on 2 CPU devices, replayed by a TinyJit, against numpy's
   `a + b` of the same arrays measured in the same run (goal: within 2x). The result is checked against numpy
   first. (Not on the mock AMD GPUs: their kernels run on an emulator, whose speed says nothing of a GPU's.)

Usage: python bench/multi.py [--device CPU|AMD|both] [--json] [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import sys
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
    ap.add_argument("--device", choices=("CPU", "AMD", "both"), default="CPU",
                    help="CPU devices, mock AMD GPUs (bytes only), or both")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    kinds = ["CPU", "AMD"] if args.device == "both" else [args.device]
    Device.configure(devices={"CPU": {"count": 4}, **({"AMD": {"mock_gpus": 4}} if "AMD" in kinds else {})})
    rows = [r for kind in kinds for r in bytes_table(1 << 20, kind)]
    timing = ring_timing(1 << 24, args.repeat) if "CPU" in kinds else None
    if args.json:
        print(json.dumps({"bytes": rows, "ring_allreduce": timing}, indent=2))
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
        print(f"\nring allreduce of 2^24 float32 on 2 CPU devices: {timing['tg_s'] * 1e3:.1f} ms; numpy a + b "
              f"{timing['numpy_s'] * 1e3:.1f} ms; tg/numpy {timing['tg_over_numpy']:.2f}x (goal <= 2)")


if __name__ == "__main__":
    main()
