"""`tg bench`: how fast a device runs the workloads the project tracks, beside numpy in the same run.

Wall time is what the ratio uses; the process's CPU time of the same best runs is reported beside it
(on a shared machine it separates tg's own cost from waiting for a core). Each case builds its inputs once,
runs tg once (warm-up: scheduling, codegen and compilation happen here) and checks that result against
numpy; a wrong result is reported and not timed. Then tg and numpy are each timed best-of-N (tg including
its device synchronize), and the case prints both times, the ratio numpy_time / tg_time (> 1: tg is
faster) and the throughput (GFLOP/s for compute, GB/s for memory-bound
cases, microseconds per kernel for launch overhead), beside the vector ISA of the renderer's code (`avx2`,
`avx512`; "-" for a renderer without one). GFLOP/s rows also give the fraction of the machine's fp32 peak they
reach, where the device measures one (`fp32_peak_gflops()`: the CPU runs a loop of FMAs as wide as the host's
vectors, tg_cpu_x86/peak.py), measured in the same run after the cases; the report's header names the peak.

Cases (full size; `--quick` uses small sizes for smoke runs):
  elementwise  a*b+1 on 16M float32               sum         sum of 16M float32
  matmul       512x512 and 1024x1024 float32      softmax     4096x1024 float32 over the last axis
  mlp          the demo MLP forward: batch 256, 784-1024-1024-10, relu
  launch       1000 eager realizes of x+1 on 16 elements (one tiny kernel each); launch_jit: the same
               replayed by a TinyJit
  first_mlp    the MLP forward in a fresh process (subprocess): schedule + codegen + compile + run; on CPU:LLVM also
               with a warm TG_LLVM_CACHE (compiled kernels from disk), reported beside it
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tg_core.cli import command

RNG_SEED = 0
_LLVM_CACHE = "TG_LLVM_CACHE"  # tg_cpu_x86/objcache.py: first_mlp measures without it, then with it warm


@dataclass
class Result:
    """One measured case. `verified` is False when tg's result did not match numpy (then nothing is timed)
    or when the case failed; `error` says why."""
    name: str
    size: str
    verified: bool = False
    tg_s: float | None = None
    numpy_s: float | None = None
    ratio: float | None = None              # numpy_s / tg_s: > 1 means tg is faster
    tg_cpu_s: float | None = None           # CPU time of this process (all threads): on a busy machine it
    numpy_cpu_s: float | None = None        # shows what wall time hides (e.g. launch overhead)
    throughput: float | None = None
    unit: str = ""                          # "GFLOP/s", "GB/s" or "us/kernel" (none for first_mlp)
    max_error: float | None = None          # the largest error of a result that does not match numpy
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sizes:
    n_elementwise: int
    n_sum: int
    matmul: tuple[int, ...]
    softmax: tuple[int, int]
    mlp: tuple[int, int, int, int, int]     # batch, in, hidden1, hidden2, out
    launches: int


FULL = Sizes(1 << 24, 1 << 24, (512, 1024), (4096, 1024), (256, 784, 1024, 1024, 10), 1000)
QUICK = Sizes(1 << 16, 1 << 16, (32, 64), (64, 128), (16, 784, 64, 64, 10), 50)


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """The best wall time and the best CPU time of this process (all its threads) over `repeat` runs."""
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return min(wall), min(cpu)


def _check(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> float | None:
    """The largest error when `got` does not match `want`, else None."""
    if got.shape != want.shape:
        raise AssertionError(f"shape {got.shape}, numpy has {want.shape}")
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bad = err > atol + rtol * np.abs(want.astype(np.float64))
    return float(err.max()) if bad.any() or not np.isfinite(got).all() else None


class _Bench:
    def __init__(self, device: str, sizes: Sizes, repeat: int):
        from tg_core.device import Device
        self.device, self.sizes, self.repeat = device, sizes, repeat
        self.dev = Device[device]
        self.rng = np.random.default_rng(RNG_SEED)

    def tensor(self, a: np.ndarray) -> Any:
        from tg_core.tensor import Tensor
        return Tensor(a, device=self.device).realize()

    def randn(self, *shape: int, scale: float = 1.0) -> np.ndarray:
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def measure(self, name: str, size: str, tg_fn: Callable[[], Any], np_fn: Callable[[], np.ndarray],
                rtol: float, atol: float, work: float, unit: str) -> Result:
        """Warm up and verify `tg_fn` (returns a realized Tensor) against `np_fn`, then time both. `work` is
        FLOPs (GFLOP/s) or bytes (GB/s) per run."""
        res = Result(name, size)
        want = np_fn()
        got = tg_fn().numpy()
        res.max_error = _check(got, want, rtol, atol)
        if res.max_error is not None:
            res.error = f"result differs from numpy (max abs error {res.max_error:.3g})"
            return res
        res.verified = True
        def run() -> None:
            tg_fn()
            self.dev.synchronize()
        res.tg_s, res.tg_cpu_s = _best(run, self.repeat)
        res.numpy_s, res.numpy_cpu_s = _best(np_fn, self.repeat)
        res.ratio = res.numpy_s / res.tg_s
        res.throughput, res.unit = work / res.tg_s / 1e9, unit
        return res

    # ---- cases ----------------------------------------------------------------------------------------------

    def elementwise(self) -> list[Result]:
        n = self.sizes.n_elementwise
        a_np, b_np = self.randn(n), self.randn(n)
        a, b = self.tensor(a_np), self.tensor(b_np)
        return [self.measure("elementwise", f"a*b+1, {n} float32", lambda: (a * b + 1).realize(),
                             lambda: a_np * b_np + 1, 1e-6, 1e-6, 3 * 4 * n, "GB/s")]

    def sum(self) -> list[Result]:
        n = self.sizes.n_sum
        a_np = self.rng.random(n, dtype=np.float32)
        a = self.tensor(a_np)
        return [self.measure("sum", f"{n} float32", lambda: a.sum().realize(), lambda: a_np.sum(),
                             1e-4, 0.0, 4 * n, "GB/s")]

    def matmul(self) -> list[Result]:
        return [self._matmul(n) for n in self.sizes.matmul]

    def _matmul(self, n: int) -> Result:
        a_np, b_np = self.randn(n, n), self.randn(n, n)
        a, b = self.tensor(a_np), self.tensor(b_np)
        return self.measure("matmul", f"{n}x{n} float32", lambda: (a @ b).realize(), lambda: a_np @ b_np, 1e-4,
                            1e-4 * n, 2 * n ** 3, "GFLOP/s")

    def softmax(self) -> list[Result]:
        r, c = self.sizes.softmax
        x_np = self.randn(r, c, scale=3.0)
        x = self.tensor(x_np)

        def ref() -> np.ndarray:
            e = np.exp(x_np - x_np.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)
        return [self.measure("softmax", f"{r}x{c} float32", lambda: x.softmax(-1).realize(), ref, 1e-4, 1e-6,
                             2 * 4 * r * c, "GB/s")]

    def _mlp_weights(self) -> list[np.ndarray]:
        batch, *dims = self.sizes.mlp
        out = [self.randn(batch, dims[0])]
        for i, o in zip(dims, dims[1:]):
            out += [self.randn(i, o, scale=1 / np.sqrt(i)), self.randn(o, scale=0.1)]
        return out

    def mlp(self) -> list[Result]:
        batch, *dims = self.sizes.mlp
        arrays = self._mlp_weights()
        x, w1, b1, w2, b2, w3, b3 = (self.tensor(a) for a in arrays)
        flops = 2 * batch * sum(i * o for i, o in zip(dims, dims[1:]))
        return [self.measure("mlp", f"batch {batch}, {'-'.join(map(str, dims))}",
                             lambda: ((x @ w1 + b1).relu() @ w2 + b2).relu().matmul(w3).add(b3).realize(),
                             lambda: _np_mlp(*arrays), 1e-3, 1e-3, flops, "GFLOP/s")]

    def launch(self) -> list[Result]:
        from tg_core.engine.jit import TinyJit
        n = self.sizes.launches
        x_np = np.arange(16, dtype=np.float32)
        x = self.tensor(x_np)

        # the same `x + 1` each time, as the eager and the JIT row of the speed targets state it
        def eager() -> Any:
            for _ in range(n):
                y = (x + 1).realize()
            return y

        def np_loop() -> np.ndarray:
            for _ in range(n):
                y = x_np + 1
            return y
        res = self.measure("launch", f"{n} eager realizes, x+1 on 16 float32", eager, np_loop, 0, 0, n, "us/kernel")
        _per_kernel(res, n)

        step = TinyJit(lambda t: t + 1)

        def jitted() -> Any:
            for _ in range(n):
                y = step(x)
            return y

        jit = self.measure("launch_jit", f"{n} TinyJit replays, x+1 on 16 float32", jitted, np_loop, 0, 0, n,
                           "us/kernel")
        _per_kernel(jit, n)
        jit.extra["captured_kernels"] = len(step.jit_cache)
        return [res, jit]

    def first_mlp(self) -> list[Result]:
        """The MLP forward in a new process: nothing cached, so this is schedule + codegen + compile + run. A
        renderer with a disk cache of compiled code (CPU:LLVM's TG_LLVM_CACHE, off by default) is measured
        without it, and again in a third process once a second one has filled a temporary cache (`extra`)."""
        batch, *dims = self.sizes.mlp
        res = Result("first_mlp", f"batch {batch}, {'-'.join(map(str, dims))}, fresh process")
        env = {k: v for k, v in os.environ.items() if k != _LLVM_CACHE}
        out = self._fresh_process(res, env)
        if out is None:
            return [res]
        res.verified, res.tg_s, res.numpy_s = True, out["tg_s"], out["numpy_s"]
        res.ratio = res.numpy_s / res.tg_s
        res.extra["import_s"] = out["import_s"]
        if self.dev.renderer is not None and self.dev.renderer.name == "LLVM":
            with tempfile.TemporaryDirectory(prefix="tg-bench-llvm-cache-") as cache:
                env[_LLVM_CACHE] = cache
                if self._fresh_process(res, env) is not None and (warm := self._fresh_process(res, env)) is not None:
                    res.extra["llvm_cache_s"] = warm["tg_s"]
        return [res]

    def _fresh_process(self, res: Result, env: dict[str, str]) -> dict[str, Any] | None:
        """first_mlp's run in a new process with `env`: its JSON line, or None (`res` then says what failed)."""
        root = str(Path(__file__).resolve().parents[1])
        env = dict(env, PYTHONPATH=os.pathsep.join([root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
        code = _FIRST_MLP.format(device=self.device, sizes=tuple(self.sizes.mlp), seed=RNG_SEED)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
        if proc.returncode != 0:
            last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit code {proc.returncode}"
            res.verified, res.error = False, f"subprocess failed: {last}"
            return None
        out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        if not out["ok"]:
            res.verified, res.max_error = False, out["max_error"]
            res.error = f"result differs from numpy (max abs error {out['max_error']:.3g})"
            return None
        return out


def _per_kernel(res: Result, n: int) -> None:
    if res.tg_s is not None:
        res.throughput, res.unit = res.tg_s / n * 1e6, "us/kernel"


def _np_mlp(x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray, w3: np.ndarray,
            b3: np.ndarray) -> np.ndarray:
    h = np.maximum(x @ w1 + b1, 0)
    h = np.maximum(h @ w2 + b2, 0)
    return h @ w3 + b3


# run by `python -c` in a fresh process; prints one JSON line
_FIRST_MLP = """
import json, time
t0 = time.perf_counter()
import numpy as np
from tg_core.device import Device
from tg_core.tensor import Tensor
from tg_core.bench import _np_mlp
t_import = time.perf_counter() - t0
batch, *dims = {sizes}
rng = np.random.default_rng({seed})
arrays = [rng.standard_normal((batch, dims[0])).astype(np.float32)]
for i, o in zip(dims, dims[1:]):
    arrays += [(rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32),
               (rng.standard_normal(o) * 0.1).astype(np.float32)]
dev = Device[{device!r}]
x, w1, b1, w2, b2, w3, b3 = (Tensor(a, device={device!r}).realize() for a in arrays)
t = time.perf_counter()
out = ((x @ w1 + b1).relu() @ w2 + b2).relu().matmul(w3).add(b3).realize()
dev.synchronize()
tg_s = time.perf_counter() - t
t = time.perf_counter()
want = _np_mlp(*arrays)
numpy_s = time.perf_counter() - t
got = out.numpy()
err = float(np.abs(got - want).max())
print(json.dumps({{"tg_s": tg_s, "numpy_s": numpy_s, "import_s": t_import, "max_error": err,
                  "ok": bool(np.allclose(got, want, rtol=1e-3, atol=1e-3))}}))
"""

CASES: dict[str, Callable[[_Bench], list[Result]]] = {
    "elementwise": _Bench.elementwise, "sum": _Bench.sum, "matmul": _Bench.matmul, "softmax": _Bench.softmax,
    "mlp": _Bench.mlp, "launch": _Bench.launch, "first_mlp": _Bench.first_mlp,
}


def run(device: str | None = None, cases: list[str] | None = None, quick: bool = False,
        repeat: int | None = None) -> dict[str, Any]:
    """Run the cases (all by default) on `device` (default: the default device); the report as a dict."""
    from tg_core.device import Device
    unknown = [c for c in cases or [] if c not in CASES]
    if unknown:
        raise ValueError(f"unknown bench case(s) {', '.join(unknown)}; the cases are {', '.join(CASES)}")
    device = device or Device.DEFAULT
    b = _Bench(device, QUICK if quick else FULL, repeat or (3 if quick else 5))
    results: list[Result] = []
    for name in cases or list(CASES):
        try:
            results += CASES[name](b)
        except Exception as e:  # one broken case must not hide the others' numbers
            results.append(Result(name, "", error=f"{type(e).__name__}: {e}"))
    renderer = b.dev.renderer.name if b.dev.renderer is not None else None
    # the instance the cases rendered with (an ISA may be chosen when it is built, e.g. by TG_X86_ISA)
    isa = b.dev.render_with.vector_isa if b.dev.renderer is not None else None
    peak = _peak(b.dev, results)
    return {"device": b.dev.device, "renderer": renderer, "vector_isa": isa, "fp32_peak_gflops": peak, "quick": quick,
            "repeat": b.repeat, "numpy": np.__version__, "cases": [asdict(r) for r in results]}


def _peak(dev: Any, results: list[Result]) -> float | None:
    """The device's fp32 peak (GFLOP/s) when it measures one and some case reports GFLOP/s; each such case's
    `extra["peak_fraction"]` is set to its share of it."""
    flops = [r for r in results if r.verified and r.unit == "GFLOP/s" and r.throughput is not None]
    measure = getattr(dev, "fp32_peak_gflops", None)
    peak = measure() if flops and callable(measure) else None
    if peak is None or peak <= 0:
        return None
    for r in flops:
        assert r.throughput is not None
        r.extra["peak_fraction"] = r.throughput / peak
    return float(peak)


def format_report(report: dict[str, Any]) -> str:
    head = (f"tg bench on {report['device']}" + (f" ({report['renderer']} renderer)" if report["renderer"] else "")
            + f", best of {report['repeat']}" + (", quick sizes" if report["quick"] else "")
            + "; ratio = numpy time / tg time (> 1: tg is faster)"
            + (f"; fp32 peak {report['fp32_peak_gflops']:.0f} GFLOP/s" if report.get("fp32_peak_gflops") else ""))
    # the renderer's vector ISA beside each row's throughput: an avx2 and an avx512 run differ mostly there
    isa = report.get("vector_isa") or "-"
    rows = [("case", "size", "tg", "numpy", "ratio", "isa", "throughput (tg CPU time)")]
    for r in report["cases"]:
        if not r["verified"]:
            rows.append((r["name"], r["size"], "-", "-", "-", "-", f"WRONG/FAILED: {r['error']}"))
            continue
        extra = f"{r['throughput']:.3g} {r['unit']}" if r["throughput"] is not None else ""
        if "peak_fraction" in r["extra"]:
            extra += f", {r['extra']['peak_fraction']:.0%} of peak"
        if r["tg_cpu_s"] is not None:
            extra += f" (CPU {_fmt_time(r['tg_cpu_s'])})"
        if "import_s" in r["extra"]:
            extra = f"(import took {_fmt_time(r['extra']['import_s'])}"
            if "llvm_cache_s" in r["extra"]:
                extra += f"; with a warm {_LLVM_CACHE}: {_fmt_time(r['extra']['llvm_cache_s'])}"
            extra += ")"
        rows.append((r["name"], r["size"], _fmt_time(r["tg_s"]), _fmt_time(r["numpy_s"]), f"{r['ratio']:.2f}x", isa,
                     extra))
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    lines = [head] + ["  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[6] for row in rows]
    return "\n".join(lines)


def _fmt_time(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.3f} s"


def _bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", help="device to measure (default: the default device), e.g. CPU, CPU:LLVM, PYTHON")
    p.add_argument("--cases", help=f"comma-separated cases to run (default all): {', '.join(CASES)}")
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not a measurement")
    p.add_argument("--repeat", type=int, help="timed runs per case, the best is kept (default 5; 3 with --quick)")
    p.add_argument("--json", action="store_true", help="machine-readable output for tracking")


@command("bench", "measure a device on elementwise, reduction, matmul, softmax, MLP and launch overhead vs numpy",
         _bench_args)
def bench_command(args: argparse.Namespace) -> int:
    if args.repeat is not None and args.repeat < 1:
        print(f"tg bench: --repeat must be at least 1, got {args.repeat}", file=sys.stderr)
        return 2
    cases = [c.strip() for c in args.cases.split(",") if c.strip()] if args.cases else None
    try:
        report = run(args.device, cases, args.quick, args.repeat)
    except ValueError as e:
        print(f"tg bench: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0 if all(c["verified"] for c in report["cases"]) else 1
