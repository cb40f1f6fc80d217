"""What tg-profiler-sqtt costs a TinyJit replay on the AMD device (the mock GPU here): a function of 3 kernels
(4096 float32) replayed and synchronized, with profiling off, PMC=1 (the default counters), SQTT=1, and both,
each mode in a child process (the profiler reads its environment once), best of --repeat. Reported: seconds per
replay (submit + run + collection at synchronize) and the ratio to the unprofiled replay of the same run.

Usage: python bench/profiler_sqtt.py [--repeat N] [--json]

On the mock the cost is the mock's PM4 interpreter (~7 us a packet): PMC adds ~700 packets per dispatch (a GRBM
select and a COPY_DATA per counter instance, as the hardware needs), so the ratio says nothing about a real GPU;
tg's own host side (the host program, collection, decoding) is a few percent of it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

MODES = {"off": {}, "pmc": {"PMC": "1"}, "sqtt": {"SQTT": "1", "SQTT_BUFFER_SIZE": "16"},
         "pmc+sqtt": {"PMC": "1", "SQTT": "1", "SQTT_BUFFER_SIZE": "16"}}

CHILD = """
import sys, time, json
sys.path.insert(0, {bench!r})
import numpy as np
from timing import best_of
from tg_core.device import Device
from tg_core.engine.jit import TinyJit
from tg_core.tensor import Tensor

@TinyJit
def f(x):
    y = (x * 2).contiguous().realize()
    z = (y + 1).contiguous().realize()
    return (z * z).contiguous().realize()

dev = Device["AMD"]
a = np.arange(4096, dtype=np.float32)
x = Tensor(a, device="AMD").realize()
for _ in range(3):
    f(x)
np.testing.assert_allclose(f(x).numpy(), ((a * 2) + 1) ** 2)

def replay():
    f(x)
    dev.synchronize()
print(json.dumps(best_of(replay, {repeat})))
"""


def run(mode: str, repeat: int) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("PMC", "SQTT", "SQTT_BUFFER_SIZE", "PROFILE")}
    env.update(MODES[mode])
    code = CHILD.format(bench=str(Path(__file__).resolve().parent), repeat=repeat)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"mode {mode} failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    times = {m: run(m, args.repeat) for m in MODES}
    if args.json:
        print(json.dumps([{"mode": m, "seconds": t, "ratio_to_off": t / times["off"]} for m, t in times.items()]))
        return
    print(f"{'mode':10} {'replay+sync':>12} {'vs off':>8}")
    for m, t in times.items():
        print(f"{m:10} {t * 1e3:9.2f} ms {t / times['off']:7.2f}x")


if __name__ == "__main__":
    main()
