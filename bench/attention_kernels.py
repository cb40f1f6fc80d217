"""tg-amd's attention and gated delta kernels on the mock AMD GPU beside core's Tensor code for the same call on the
same device: flash_attention_decode (one query token over a KV cache), flash_attention_prefill (a chunk of queries
at an unaligned start) and gated_delta_prefill (a chunk of recurrent-state updates).

Each case runs both paths alternately, one run of each per round after a warm-up round that compiles (`--repeat`
rounds; the best counts), so both see the same machine load; every result is checked against numpy (float64). The
figure is the kernel's wall time over the Tensor code's, on the emulator: it counts emulated instructions and
launches, not a real GPU's cycles. Usage: python bench/attention_kernels.py [--json] [--repeat N] [--cases a,b]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tg_core import Tensor
from tg_core.kernels import kernel_for
from tg_core.llm.delta import gated_delta_reference
from tg_core.llm.model import Block
from tg_core.testing.delta import delta_args, np_gated_delta

DEV = "AMD"


def _attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    T, S, D = q.shape[3], k.shape[2], q.shape[4]
    s = np.einsum("bhgtd,bhsd->bhgts", q.astype(np.float64), k.astype(np.float64)) / math.sqrt(D)
    s = np.where(np.arange(S)[None, :] <= np.arange(T)[:, None] + (S - T), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhgts,bhsd->bhgtd", e, v.astype(np.float64)) / e.sum(-1, keepdims=True)


def attention_case(name: str, kernel: str, hk: int, g: int, t: int, start: int, cap: int, d: int):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, hk, g, t, d)).astype(np.float32)
    kv = rng.standard_normal((2, 1, hk, cap, d)).astype(np.float32)
    s = start + t
    want = _attention_ref(q, kv[0][:, :, :s], kv[1][:, :, :s])
    cache, qt = Tensor(kv, device=DEV), Tensor(q, device=DEV)
    keys, values = cache[0][:, :, :s], cache[1][:, :, :s]
    k = kernel_for(kernel, DEV)
    assert k is not None and k.supports(qt, keys, values, 1 / math.sqrt(d)), f"{kernel} declined {name}"

    def ours() -> np.ndarray:
        return k.build(qt, keys, values, 1 / math.sqrt(d)).numpy()

    def tensor() -> np.ndarray:
        return Block._attention(qt, keys, values).numpy()
    return ours, tensor, want, 2e-3


def delta_case():
    args = delta_args(B=1, H=4, T=16, Kd=64, Vd=32, seed=0)
    q, k_, v, beta, alpha, state = args
    want, _ = np_gated_delta(q, k_, v, beta, alpha, state)
    k = kernel_for("gated_delta_prefill", DEV)
    assert k is not None

    def run(fn: Callable[..., Tensor]) -> Callable[[], np.ndarray]:
        def go() -> np.ndarray:
            st = Tensor(args[5], device=DEV).contiguous().realize()
            return fn(*(Tensor(x, device=DEV) for x in args[:5]), st).numpy()
        return go
    return run(k.build), run(gated_delta_reference), want, 1e-4


CASES: dict[str, Callable[[], tuple[Any, ...]]] = {
    "decode_g4_d128_s2048": lambda: attention_case("decode", "flash_attention_decode", 1, 4, 1, 2047, 2048, 128),
    "prefill_g2_d64_t64_at448": lambda: attention_case("prefill", "flash_attention_prefill", 1, 2, 64, 448, 512, 64),
    "gated_delta_h4_t16": delta_case,
}


def measure(names: list[str], repeat: int) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        ours, tensor, want, tol = CASES[name]()
        best = {"kernel": math.inf, "tensor": math.inf}
        for rnd in range(repeat + 1):
            for side, fn in (("kernel", ours), ("tensor", tensor)):
                t0 = time.perf_counter()
                got = fn()
                dt = time.perf_counter() - t0
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"{name} {side}")
                if rnd:  # round 0 compiles
                    best[side] = min(best[side], dt)
        rows.append({"case": name, "kernel_s": best["kernel"], "tensor_s": best["tensor"],
                     "kernel_over_tensor": best["kernel"] / best["tensor"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="timed rounds after the warm-up (default 3)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    a = ap.parse_args()
    names = [c for c in a.cases.split(",") if c]
    bad = [c for c in names if c not in CASES]
    if bad or a.repeat < 1:
        ap.error(f"unknown cases {bad} (known: {', '.join(CASES)})" if bad else "--repeat must be at least 1")
    rows = measure(names, a.repeat)
    load = os.getloadavg()[0]
    if a.json:
        print(json.dumps({"load": load, "rows": rows}))
        return
    print(f"load average {load:.2f}; best of {a.repeat} alternating rounds, mock AMD GPU (emulated)")
    for r in rows:
        print(f"{r['case']:28s} kernel {r['kernel_s'] * 1e3:9.1f} ms  Tensor code {r['tensor_s'] * 1e3:9.1f} ms  "
              f"ratio {r['kernel_over_tensor']:.3f}")


if __name__ == "__main__":
    main()
