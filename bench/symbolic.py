"""Symbolic shapes against int shapes, measured in the same run: a decode step's attention over a KV cache.

  replay    one jitted call of softmax(q @ k^T) @ k over cache[:, :pos+1] (H x MAX x D float32) at a fixed
            position: start_pos a bound variable (one kernel for every position) vs the same with an int
            position (kernels made for that position); best of --reps, each read back with .numpy()
  new pos   the first eager call at a position not seen before: with a variable the kernels are cached, with
            an int they are scheduled and compiled again (what a decode loop without variables pays per token)

Each result is checked against numpy first. A ratio int/symbolic > 1 means the symbolic version is faster.
Usage: python bench/symbolic.py [--device CPU:LLVM] [--reps N] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tg_core import Tensor, TinyJit, Variable  # noqa: E402

H, MAX, D = 8, 1024, 64


def _reference(q: np.ndarray, keys: np.ndarray) -> np.ndarray:
    s = q @ keys.transpose(0, 2, 1)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ keys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="CPU:LLVM")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    dev = args.device
    rng = np.random.default_rng(0)
    cache_np = rng.standard_normal((H, MAX, D)).astype(np.float32)
    q_np = rng.standard_normal((H, 1, D)).astype(np.float32)
    cache = Tensor(cache_np, device=dev).realize()
    q = Tensor(q_np, device=dev).realize()
    start_pos = Variable("bench_pos", 0, MAX - 1)

    def attend(qt: Tensor, pos) -> Tensor:
        keys = cache[:, :pos + 1]
        return (qt @ keys.transpose(-1, -2)).softmax(-1) @ keys

    pos = 700
    symbolic, concrete = TinyJit(attend), TinyJit(attend)
    calls: dict[str, Callable[[], np.ndarray]] = {
        "symbolic": lambda: symbolic(q, start_pos.bind(pos)).numpy(),
        "int": lambda: concrete(q, pos).numpy(),
    }
    best: dict[str, float] = {}
    for name, call in calls.items():
        for _ in range(3):  # eager, capture, first replay
            got = call()
        if not np.allclose(got, _reference(q_np, cache_np[:, :pos + 1]), rtol=1e-4, atol=1e-4):
            print(f"wrong result ({name})", file=sys.stderr)
            return 1
        times = []
        for _ in range(args.reps):
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
        best[name] = min(times)
    attend(q, start_pos.bind(pos - 1)).numpy()  # the symbolic kernels, eagerly: cached from here on
    new_pos: dict[str, float] = {}
    for name, arg in (("int", 501), ("symbolic", start_pos.bind(502))):
        t = time.perf_counter()
        got = attend(q, arg).numpy()
        new_pos[name] = time.perf_counter() - t
        p = arg if isinstance(arg, int) else 502
        if not np.allclose(got, _reference(q_np, cache_np[:, :p + 1]), rtol=1e-4, atol=1e-4):
            print(f"wrong result (new position, {name})", file=sys.stderr)
            return 1
    rows = {"replay": best, "new pos": new_pos}
    if args.json:
        print(json.dumps({k: {**v, "ratio": v["int"] / v["symbolic"]} for k, v in rows.items()}))
        return 0
    print(f"decode attention over a {H}x{MAX}x{D} KV cache on {dev}, position {pos}")
    print(f"{'case':10} {'symbolic':>12} {'int':>12} {'int/symbolic':>13}")
    for k, v in rows.items():
        print(f"{k:10} {v['symbolic'] * 1e6:10.0f}us {v['int'] * 1e6:10.0f}us {v['int'] / v['symbolic']:13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
