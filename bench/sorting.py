"""Sorting ops on one 32,000-wide row of float32 logits (an LLM vocabulary): topk(10), sort and argsort,
each as kernels per call and time per call against numpy in the same run (np.argpartition for topk,
np.argsort(kind="stable") for sort and argsort). The first call (compile) is reported apart; the rest are
best of N, since the machine is shared.

tg ranks by counting (n*n compares per row, no data-dependent control flow), numpy by selection/sorting
(n log n): the ratio is large by design and grows with n.

Usage: python bench/sorting.py [--n 32000] [--k 10] [--repeat 3] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from timing import best_of  # noqa: E402  (bench/timing.py)

import tg_core.engine.realize  # noqa: E402,F401  (the module, for its stats)
from tg_core import Tensor  # noqa: E402

STATS = sys.modules["tg_core.engine.realize"].stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=32000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    logits = np.random.default_rng(0).normal(size=(a.n,)).astype(np.float32)
    x = Tensor(logits).realize()
    cases: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        f"topk({a.k})": (lambda: Tensor.realize_all(*x.topk(a.k)), lambda: np.argpartition(-logits, a.k)[:a.k]),
        "sort": (lambda: Tensor.realize_all(*x.sort()), lambda: np.sort(logits, kind="stable")),
        "argsort": (lambda: x.argsort().realize(), lambda: np.argsort(logits, kind="stable")),
    }
    rows = []
    for name, (tg_fn, np_fn) in cases.items():
        before = STATS["kernels"]
        t = time.perf_counter()
        tg_fn()
        first = time.perf_counter() - t
        kernels = STATS["kernels"] - before
        tg_s, np_s = best_of(tg_fn, a.repeat), best_of(np_fn, a.repeat)
        rows.append({"op": name, "n": a.n, "kernels": kernels, "first_s": first, "tg_s": tg_s, "numpy_s": np_s,
                     "ratio": tg_s / np_s})
    if a.json:
        print(json.dumps(rows))
        return
    print(f"{'op':<10} {'kernels':>7} {'first s':>8} {'tg s':>8} {'numpy s':>9} {'tg/numpy':>9}")
    for r in rows:
        print(f"{r['op']:<10} {r['kernels']:>7} {r['first_s']:>8.3f} {r['tg_s']:>8.3f} {r['numpy_s']:>9.5f} "
              f"{r['ratio']:>9.0f}")


if __name__ == "__main__":
    main()
