"""Core lowering time per kernel: opts, lane expansion, index simplification, REDUCE/END lowering and
linearize (`lower_kernel` + `linearize`), not the device's own compile.

The kernels are captured by running the workloads once on the device (default CPU:X86) with a hook on
`tg_core.codegen.pipeline.lower_kernel` that records each call's arguments (a renderer may lower one kernel
several times, e.g. X86 trying vector lane widths: each call is a row). Then every recorded call is timed
again through `linearize_kernel`, best of N (the machine is shared: the best run is the least disturbed).

Workloads:
  bench        the kernels of `tg bench`'s cases (elementwise, sum, matmul 512/1024, softmax, mlp, launch)
  demo         one training step of `tg demo`'s MLP (forward, backward, Adam)
  prefill      a transformer block (attention + MLP) on a 32-token prompt
  decode       the same block on one token attending over a 32-entry cache

Usage: python bench/codegen.py [--device CPU:X86] [--repeat N] [--json] [--dump FILE]
  --dump FILE writes str(Program) of every recorded call (to compare programs before and after a change).
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from tg_core.codegen import pipeline  # noqa: E402

Call = tuple[Any, bool, tuple, Any]  # (ast, lower_reduce, opts, extra_matcher)
_recording = [True]  # a workload clears it around its setup (decode's prompt is prefill's work)
first_ms: list[float] = []  # lower_kernel's time (no linearize) at each recorded call, inside the workload


def _capture(fn: Callable[[], None]) -> list[Call]:
    """Every lower_kernel call that running `fn` makes, in order."""
    calls: list[Call] = []
    real = pipeline.lower_kernel
    _recording[0] = True

    def hook(ast: Any, lower_reduce: bool = True, opts: Any = (), extra_matcher: Any = None) -> Any:
        t0 = time.perf_counter()
        out = real(ast, lower_reduce, opts, extra_matcher)
        if _recording[0]:
            calls.append((ast, lower_reduce, tuple(opts), extra_matcher))
            first_ms.append((time.perf_counter() - t0) * 1e3)
        return out
    pipeline.lower_kernel = hook
    try:
        fn()
    finally:
        pipeline.lower_kernel = real
    return calls


def _bench_cases(device: str) -> None:
    from tg_core.bench import FULL, _Bench
    b = _Bench(device, FULL, 1)
    rng = np.random.default_rng(0)
    from tg_core.tensor import Tensor
    t = b.tensor
    n = FULL.n_elementwise
    a, c = t(rng.standard_normal(n, dtype=np.float32)), t(rng.standard_normal(n, dtype=np.float32))
    (a * c + 1).realize()
    a.sum().realize()
    for m in FULL.matmul:
        x, y = t(rng.standard_normal((m, m), dtype=np.float32)), t(rng.standard_normal((m, m), dtype=np.float32))
        (x @ y).realize()
    r, cols = FULL.softmax
    t(rng.standard_normal((r, cols), dtype=np.float32)).softmax(-1).realize()
    x, w1, b1, w2, b2, w3, b3 = (t(w) for w in b._mlp_weights())
    ((x @ w1 + b1).relu() @ w2 + b2).relu().matmul(w3).add(b3).realize()
    (t(np.arange(16, dtype=np.float32)) + 1).realize()
    del Tensor


def _demo_step(device: str) -> None:
    from tg_core.nn import Linear
    from tg_core.nn.optim import Adam
    from tg_core.nn.state import get_parameters
    from tg_core.tensor import Tensor
    Tensor.manual_seed(0)
    l1, l2 = Linear(64, 128), Linear(128, 10)
    opt = Adam(get_parameters([l1, l2]), lr=3e-3)
    rng = np.random.default_rng(0)
    xb = Tensor(rng.random((64, 64), dtype=np.float32), device=device)
    yb = Tensor(rng.integers(0, 10, 64).astype(np.int32), device=device)
    with Tensor.train():
        opt.zero_grad()
        loss = l2(l1(xb).relu()).sparse_categorical_crossentropy(yb)
        loss.backward()
        opt.step()
        loss.item()


class _Block:
    """A pre-norm transformer block: causal multi-head self-attention and a GELU MLP, with a KV cache."""

    def __init__(self, dim: int = 64, heads: int = 4, ctx: int = 64):
        from tg_core.nn import LayerNorm, Linear
        self.dim, self.heads, self.hd = dim, heads, dim // heads
        self.ln1, self.ln2 = LayerNorm(dim), LayerNorm(dim)
        self.qkv, self.proj = Linear(dim, 3 * dim), Linear(dim, dim)
        self.up, self.down = Linear(dim, 4 * dim), Linear(4 * dim, dim)

    def __call__(self, x: Any, past: tuple[Any, Any] | None = None) -> tuple[Any, tuple[Any, Any]]:
        from tg_core.tensor import Tensor
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, self.heads, self.hd).permute(2, 0, 3, 1, 4).chunk(3)
        q, k, v = q.reshape(b, self.heads, t, self.hd), k.reshape(b, self.heads, t, self.hd), \
            v.reshape(b, self.heads, t, self.hd)
        if past is not None:
            k, v = past[0].cat(k, dim=2), past[1].cat(v, dim=2)
        s = k.shape[2]
        att = (q @ k.transpose(-1, -2)) * (1.0 / self.hd ** 0.5)
        if t > 1:  # causal mask on the prompt
            mask = Tensor.ones(t, s).tril(s - t).reshape(1, 1, t, s)
            att = mask.where(att, float("-inf"))
        y = (att.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(b, t, self.dim)
        x = x + self.proj(y)
        x = x + self.down(self.up(self.ln2(x)).gelu())
        return x, (k, v)


def _transformer(device: str, decode: bool) -> None:
    from tg_core.tensor import Tensor
    Tensor.manual_seed(0)
    blk = _Block()
    rng = np.random.default_rng(0)
    prompt = Tensor(rng.standard_normal((1, 32, 64), dtype=np.float32), device=device)
    _recording[0] = not decode
    out, (k, v) = blk(prompt)
    if not decode:
        out.realize()
        return
    k, v = k.realize(), v.realize()
    _recording[0] = True
    tok = Tensor(rng.standard_normal((1, 1, 64), dtype=np.float32), device=device)
    blk(tok, (k, v))[0].realize()


WORKLOADS: dict[str, Callable[[str], None]] = {
    "bench": _bench_cases, "demo": _demo_step,
    "prefill": lambda d: _transformer(d, False), "decode": lambda d: _transformer(d, True),
}


def _time(call: Call, repeat: int) -> tuple[float, Any]:
    best, prog = float("inf"), None
    for _ in range(repeat):
        prog = None
        gc.collect()
        t0 = time.perf_counter()
        prog = pipeline.linearize_kernel(call[0], call[1], call[2], call[3])
        best = min(best, time.perf_counter() - t0)
    return best, prog


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="CPU:X86")
    ap.add_argument("--repeat", type=int, default=3, help="best of N timings per kernel (default 3)")
    ap.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), help="workloads to run (default: all)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dump", help="write every recorded kernel's str(Program) to this file")
    args = ap.parse_args(argv)
    from tg_core.device import Device
    Device.DEFAULT = args.device
    rows: list[dict] = []
    dumps: list[str] = []
    for name in args.only or list(WORKLOADS):
        first_ms.clear()
        calls = _capture(lambda w=WORKLOADS[name]: w(args.device))
        firsts = list(first_ms)
        # one row per distinct call (a workload realizing the same kernel twice lowers it once here)
        seen: set = set()
        for call, first in zip(calls, firsts):
            key = (id(call[0]), call[1], call[2], id(call[3]))
            if key in seen:
                continue
            seen.add(key)
            secs, prog = _time(call, args.repeat)
            rows.append({"workload": name, "kernel": prog.name, "opts": len(call[2]), "uops": len(prog.uops),
                         "first_ms": first, "ms": secs * 1e3})
            dumps.append(f"== {name} {prog.name} opts={list(call[2])}\n{prog}\n")
    if args.dump:
        Path(args.dump).write_text("".join(dumps))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"core lowering per kernel on {args.device} (best of {args.repeat})")
    print("  first: lower_kernel (no linearize) the first time, in the workload; ms: linearize_kernel again, best of N")
    print(f"{'workload':9s} {'kernel':32s} {'opts':>4s} {'uops':>5s} {'first':>8s} {'ms':>8s}")
    for r in rows:
        print(f"{r['workload']:9s} {r['kernel'][:32]:32s} {r['opts']:4d} {r['uops']:5d} {r['first_ms']:8.2f} "
              f"{r['ms']:8.2f}")
    for name in [*(args.only or list(WORKLOADS)), None]:
        sel = [r for r in rows if name is None or r["workload"] == name]
        print(f"total {name or 'all':9s} {len(sel):3d} lowerings  first {sum(r['first_ms'] for r in sel):8.1f} ms"
              f"  again {sum(r['ms'] for r in sel):8.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
