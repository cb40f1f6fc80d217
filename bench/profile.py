"""What PROFILE=1 costs: `tg demo` with and without it, alternating, in fresh processes; best of N each.

    python bench/profile.py [--repeat 3] [--epochs 12] [--device CPU]

Reports both wall times (including, with PROFILE=1, writing the trace at exit) and their ratio; the budget
(issue 14) is at most 1.10.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time


def run(profile: bool, epochs: int, device: str | None, tmp: str) -> float:
    env = {**os.environ, "TMPDIR": tmp}
    env.pop("PROFILE", None)
    if profile:
        env["PROFILE"] = "1"
    if device:
        env["DEV"] = device
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "tg_core", "demo", "--epochs", str(epochs)], env=env,
                         capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"tg demo failed (PROFILE={int(profile)}):\n{res.stdout}\n{res.stderr}")
    if profile and "profile of" not in res.stderr:
        raise SystemExit(f"PROFILE=1 wrote no trace:\n{res.stderr}")
    return elapsed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--device", default=None)
    a = p.parse_args()
    off, on = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.repeat):
            off.append(run(False, a.epochs, a.device, tmp))
            on.append(run(True, a.epochs, a.device, tmp))
    print(f"tg demo --epochs {a.epochs}: off best {min(off):.2f} s {[round(x, 2) for x in off]}, "
          f"PROFILE=1 best {min(on):.2f} s {[round(x, 2) for x in on]}, ratio {min(on) / min(off):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
