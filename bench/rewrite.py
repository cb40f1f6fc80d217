"""Graph building and symbolic rewriting throughput on three large graphs.

  interleaved  a 10^5-term sum x[i%4]*c_i over four bounded variables (like terms interleaved)
  nested       a 1000-deep index expression e -> ((e*4+3)//2)%7 + x
  many         10^5 independent small index expressions under one sink

For each: nodes in the built graph, build rate (nodes/s), rewrite rate (input nodes/s), the size of
the result, and peak memory of the process. Usage: python bench/rewrite.py [--json] [--scale S]
"""
from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tg_core.dtype import dtypes  # noqa: E402
from tg_core.uop import Ops, UOp, graph_rewrite  # noqa: E402
from tg_core.uop.symbolic import symbolic  # noqa: E402


def build_interleaved(n: int) -> UOp:
    xs = [UOp.variable(f"x{i}", 0, 100) for i in range(4)]
    e = UOp.const(dtypes.weakint, 7)
    for i in range(n):
        e = e + xs[i % 4] * (i + 1)
    return e


def build_nested(depth: int) -> UOp:
    x = UOp.variable("x", 0, 1000)
    e = x
    for _ in range(depth):
        e = ((e * 4 + 3) // 2) % 7 + x
    return e


def build_many(n: int) -> UOp:
    a, b = UOp.variable("a", 0, 255), UOp.variable("b", 0, 63)
    exprs = []
    for i in range(n):
        r = UOp.range(i % 97 + 3, i)
        exprs.append(((r * 4 + a) * 2 + b * (i % 5 + 1)) // 2 + i)
    return UOp(Ops.SINK, dtypes.void, tuple(exprs))


CASES = {"interleaved": (build_interleaved, 100_000), "nested": (build_nested, 1000), "many": (build_many, 100_000)}


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_case(name: str, scale: float) -> dict:
    build, size = CASES[name]
    size = max(1, int(size * scale))
    gc.collect()
    t0 = time.perf_counter()
    graph = build(size)
    t1 = time.perf_counter()
    nodes = len(graph.toposort())
    t2 = time.perf_counter()
    out = graph_rewrite(graph, symbolic, bottom_up=True)  # what UOp.simplify() does
    t3 = time.perf_counter()
    out_nodes = len(out.toposort())
    result = out.render()[:100] if name == "interleaved" else f"{out_nodes} nodes"
    # the same rules sources-first (the order most passes use), on a fresh copy so no cache carries over
    del out
    graph = build(size)
    t4 = time.perf_counter()
    out2 = graph_rewrite(graph, symbolic)
    t5 = time.perf_counter()
    same_size = len(out2.toposort()) == out_nodes
    return {"case": name, "size": size, "nodes": nodes, "build_s": t1 - t0, "build_nodes_per_s": nodes / (t1 - t0),
            "rewrite_s": t3 - t2, "rewrite_nodes_per_s": nodes / (t3 - t2),
            "sources_first_s": t5 - t4, "sources_first_nodes_per_s": nodes / (t5 - t4), "same_result_size": same_size,
            "result_nodes": out_nodes,
            "result": result, "peak_mib": peak_mib()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object per case")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every graph's size")
    ap.add_argument("cases", nargs="*", help="cases to run (default: all)")
    args = ap.parse_args()
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; choose from {list(CASES)}")
    for name in args.cases or list(CASES):
        r = run_case(name, args.scale)
        if args.json:
            print(json.dumps(r))
        else:
            print(f"{name:12s} {r['nodes']:>8d} nodes  build {r['build_nodes_per_s'] / 1e3:7.0f}k nodes/s  "
                  f"rewrite {r['rewrite_nodes_per_s'] / 1e3:7.0f}k nodes/s ({r['rewrite_s']:.2f} s)  "
                  f"[sources-first {r['sources_first_nodes_per_s'] / 1e3:5.0f}k/s]  "
                  f"-> {r['result_nodes']} nodes  peak {r['peak_mib']:.0f} MiB")
            if name == "interleaved":
                print(f"{'':12s} result: {r['result']}")


if __name__ == "__main__":
    main()
