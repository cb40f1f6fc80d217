"""CPU kernel speed against numpy, measured in the same run: the issue's five compute cases.

  ew       a*b+1 on 16M float32          sum      sum of 16M float32
  matmul   1024x1024 float32 @ itself    softmax  4096x1024 float32 along the last axis
  mlp      batch 256, 784-1024-1024-10, relu

Each case is realized as Tensors on the device (default CPU:LLVM) and timed two ways, best of --reps:
`kernel` runs only the scheduled kernels' runners on buffers allocated once (what codegen controls);
`realize` builds the Tensor expression and realizes it (adds scheduling-cache lookups, allocation and
eager overhead). numpy is timed the same way (its result allocated per call). A ratio > 1 means tg is
faster. Usage: python bench/cpu_kernels.py [--device CPU:LLVM] [--reps N] [--only ew,sum,...] [--json]
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

from tg_core import Tensor  # noqa: E402
from tg_core.device import Device  # noqa: E402
from tg_core.engine.realize import _buffers  # noqa: E402
from tg_core.schedule import create_schedule  # noqa: E402
from tg_core.uop.ops import Ops  # noqa: E402

RNG = np.random.default_rng(0)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def best(fn: Callable[[], object], reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def kernel_runner(t: Tensor) -> Callable[[], None]:
    """The scheduled kernels of `t`, their runners and buffers prepared once: calling runs only kernels."""
    dev = Device[t.device]
    items, _ = create_schedule([t.uop], [t.device])
    from tg_core.device import Buffer
    bufs: dict = {}

    def buf(node):
        if node not in bufs:
            known = _buffers.get(node)
            bufs[node] = known if known is not None else Buffer(t.device, node.arg, node.dtype).ensure_allocated()
        return bufs[node]
    calls = []
    for ast, nodes in items:
        if ast.op is Ops.COPY:
            raise ValueError("the benchmark cases have no copies")
        calls.append((dev.get_runner(ast), [buf(n) for n in nodes]))

    def run() -> None:
        for runner, bs in calls:
            runner(bs, {})
    return run


def cases(device: str) -> dict[str, tuple[Callable[[], Tensor], Callable[[], np.ndarray], float]]:
    """name -> (tg expression, numpy expression, flops or bytes for the rate column)."""
    n = 1 << 24
    a, b = f32(n), f32(n)
    x, y = f32(1024, 1024), f32(1024, 1024)
    s = f32(4096, 1024)
    xb, w1, b1 = f32(256, 784), f32(784, 1024) * .05, f32(1024)
    w2, b2, w3 = f32(1024, 1024) * .03, f32(1024), f32(1024, 10)
    T = {k: Tensor(v, device=device).realize() for k, v in dict(a=a, b=b, x=x, y=y, s=s, xb=xb, w1=w1, b1=b1, w2=w2,
                                                                  b2=b2, w3=w3).items()}

    def np_softmax(v: np.ndarray) -> np.ndarray:
        e = np.exp(v - v.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    mlp_flops = 2 * 256 * (784 * 1024 + 1024 * 1024 + 1024 * 10)
    return {
        "ew": (lambda: T["a"] * T["b"] + 1, lambda: a * b + 1, 3 * 4 * n),
        "sum": (lambda: T["a"].sum(), lambda: a.sum(), 4 * n),
        "matmul": (lambda: T["x"] @ T["y"], lambda: x @ y, 2 * 1024 ** 3),
        "softmax": (lambda: T["s"].softmax(-1), lambda: np_softmax(s), 2 * 4 * s.size),
        "mlp": (lambda: ((T["xb"] @ T["w1"] + T["b1"]).relu() @ T["w2"] + T["b2"]).relu() @ T["w3"],
                lambda: np.maximum(np.maximum(xb @ w1 + b1, 0) @ w2 + b2, 0) @ w3, mlp_flops),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="CPU:LLVM")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    dev = Device[args.device]
    if ":" in args.device and hasattr(dev, "select_renderer"):  # the renderer named after the device
        dev.select_renderer(args.device.split(":")[1])
    results = []
    for name, (tg_fn, np_fn, work) in cases(args.device).items():
        if args.only and name not in args.only.split(","):
            continue
        got, want = tg_fn().numpy(), np_fn()
        err = float(np.abs(got - want).max() / max(1e-30, float(np.abs(want).max())))
        t_np = best(np_fn, args.reps)
        t_kernel = best(kernel_runner(tg_fn()), args.reps)
        t_realize = best(lambda fn=tg_fn: fn().realize(), args.reps)
        unit = "GFLOP/s" if name in ("matmul", "mlp") else "GB/s"
        results.append(dict(case=name, numpy_ms=t_np * 1e3, kernel_ms=t_kernel * 1e3, realize_ms=t_realize * 1e3,
                            kernel_ratio=t_np / t_kernel, realize_ratio=t_np / t_realize,
                            rate=work / t_kernel / 1e9, unit=unit, rel_err=err))
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{'case':8} {'numpy ms':>9} {'kernel ms':>10} {'ratio':>6} {'realize ms':>11} {'ratio':>6} "
          f"{'rate':>14}  rel.err")
    for r in results:
        print(f"{r['case']:8} {r['numpy_ms']:9.2f} {r['kernel_ms']:10.2f} {r['kernel_ratio']:6.2f} "
              f"{r['realize_ms']:11.2f} {r['realize_ratio']:6.2f} {r['rate']:8.1f} {r['unit']:7} {r['rel_err']:.1e}")


if __name__ == "__main__":
    main()
