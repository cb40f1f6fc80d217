"""Host overheads of hcq on the reference HCQ device (HCQREF), with the device's execution excluded.

  replay     one TinyJit replay of a function of N kernels (N = 10 and 100; a chain x = (x + 1).contiguous()):
             the whole TinyJit call, and the linked batches' host programs alone (address table, fence, per-run
             patches, ring pushes, doorbells); per call and per kernel
  eager      the same function called without the JIT: schedule, build the batch, encode, link and submit
  batch1000  build (dependencies, queue ops) + encode + link of one 1000-kernel batch, once, each step timed

Execution is excluded: the reference device's queues consume the commands without running the kernels
(`HCQRefDevice.execute = False`: the "GPU" answers immediately), every timed call starts with the queues idle
(`synchronize()` before it, untimed), so no call waits in its fence for the previous one, and the queue threads
are woken only after the timed call (they share the interpreter lock with the host; a real GPU does not). The results are checked
first with execution on (the chain adds N). Figures are the median and the best of `--repeat` calls.

Goals (issue 12): replay <= 2 us per kernel and <= 20 us per call; eager >= 20x the replay; batch1000 <= 0.5 s.
The host programs of the linked batches are compiled by the CPU device when its plugin is installed (hcq/hostc.py);
`--interpret` leaves the CPU device out, so core interprets them (hcq/host.py).
Usage: python bench/hcq.py [--json] [--repeat R] [--kernels 10,100] [--batch 1000] [--interpret]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tg_core.device import Device  # noqa: E402
from tg_core.engine.jit import TinyJit  # noqa: E402
from tg_core.engine.realize import buffer_of  # noqa: E402
from tg_core.hcq import encode as hcq_encode  # noqa: E402
from tg_core.hcq import ops as q  # noqa: E402
from tg_core.hcq.batch import Item, build  # noqa: E402
from tg_core.hcq.device import copy_queues  # noqa: E402
from tg_core.hcq.engine import writes_of  # noqa: E402
from tg_core.hcq.link import LinkedBatch, link  # noqa: E402
from tg_core.hcq.testing import hcqref_registry  # noqa: E402
from tg_core.tensor import Tensor  # noqa: E402

DEV = "HCQREF"
GOAL_REPLAY_US_PER_KERNEL, GOAL_REPLAY_US_PER_CALL, GOAL_EAGER_RATIO, GOAL_BATCH_S = 2.0, 20.0, 20.0, 0.5


def chain(n: int) -> Callable[[Tensor], Tensor]:
    """A function of exactly `n` kernels: each step is its own kernel (contiguous) reading the previous one."""
    def f(x: Tensor) -> Tensor:
        for _ in range(n):
            x = (x + 1).contiguous()
        return x
    return f


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    """Seconds per call of `fn`, each call started with the device's queues idle (waiting for them is untimed).

    The doorbells' wake-ups of the queue threads are held until the call returns: the reference device's "GPU"
    is a Python thread of this process, and once woken it would compete with the host for the interpreter
    lock, which a real GPU does not. The doorbell words are still written inside the call."""
    dev = Device[DEV]
    ring, held = dev.ring, []
    out = []
    try:
        dev.ring = held.append  # type: ignore[method-assign]
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
            if not held:  # the doorbells no longer go through HCQRefDevice.ring: the deferral would be silent
                raise AssertionError("a timed call rang no doorbell through the device's ring(): update timed()")
            for queue in held:
                ring(queue)
            held.clear()
            dev.synchronize()
    finally:
        dev.ring = ring  # type: ignore[method-assign]
        for queue in held:
            ring(queue)
    dev.synchronize()
    return out


def figures(samples: list[float], kernels: int) -> dict[str, float]:
    med, best = statistics.median(samples), min(samples)
    return {"median_us": med * 1e6, "best_us": best * 1e6, "median_us_per_kernel": med * 1e6 / kernels,
            "best_us_per_kernel": best * 1e6 / kernels}


def bench_function(n: int, repeat: int) -> dict[str, Any]:
    dev = Device[DEV]
    f, jf = chain(n), TinyJit(chain(n))
    x = Tensor(np.arange(16, dtype=np.float32), device=DEV).realize()
    want = np.arange(16, dtype=np.float32) + n
    dev.execute = True
    for _ in range(3):  # call 0 runs eagerly, call 1 captures and links, call 2 replays: all must be right
        got = jf(x).numpy()
        if not np.array_equal(got, want):
            raise AssertionError(f"the {n}-kernel function under TinyJit gave {got[:4]}..., expected {want[:4]}...")
    if not np.array_equal(f(x).numpy(), want):
        raise AssertionError(f"the {n}-kernel function run eagerly gave a wrong result")
    segments = jf.captured.hcq if jf.captured is not None else None
    linked = [s for s in segments or () if isinstance(s, LinkedBatch)]
    if not linked or len(linked) != len(segments or ()):
        raise AssertionError(f"the {n}-kernel capture is not all linked batches: {segments!r}")
    dev.execute = False  # from here on the queues answer immediately: only host time is measured
    try:
        encodes = hcq_encode.stats["encodes"]
        replay = timed(lambda: jf(x), repeat)
        if hcq_encode.stats["encodes"] != encodes:
            raise AssertionError("a JIT replay encoded a batch")
        inputs = [buffer_of(x.uop)]  # the chain's one input; a batch without inputs takes none
        host = timed(lambda: [lb.run(inputs if lb.inputs else None, {}) for lb in linked], repeat)
        eager = timed(lambda: f(x).realize(), max(3, repeat // 10))
    finally:
        dev.execute = True
    r = {"kernels": n, "batches": len(linked), "host_program_compiled": all(lb.compiled for lb in linked), "per_run_statements": sum(lb.program.nstmts for lb in linked),
         "link_statements": sum(lb.link_stmts for lb in linked), "replay": figures(replay, n),
         "host_program": figures(host, n), "eager": figures(eager, n)}
    r["eager_over_replay"] = r["eager"]["median_us"] / r["replay"]["median_us"]
    return r


def bench_batch(n_kernels: int, repeat: int) -> dict[str, Any]:
    """Build + encode + link one batch of `n_kernels` kernels (the 100-kernel chain's items, repeated)."""
    jf = TinyJit(chain(min(100, n_kernels)))
    x = Tensor(np.arange(16, dtype=np.float32), device=DEV).realize()
    for _ in range(2):
        jf(x)
    captured = jf.captured.items
    per = [Item(it.ast, [q.mem(b.ensure_allocated()) for b in it.bufs], writes_of(it.ast))
           for it in captured if not it.inputs]  # the items reading x take an address-table slot in a JIT; here none
    items = (per * (n_kernels // len(per) + 1))[:n_kernels]
    devs = sorted({q.device_of(r) for it in items for r in it.refs})
    steps: dict[str, list[float]] = {"build": [], "encode": [], "link": []}
    for _ in range(repeat):
        t0 = time.perf_counter()
        batch = build(items, copy_queues(devs))
        t1 = time.perf_counter()
        lowered = hcq_encode.encode(batch)
        t2 = time.perf_counter()
        link(lowered, batch.devices)
        t3 = time.perf_counter()
        for k, v in zip(steps, (t1 - t0, t2 - t1, t3 - t2)):
            steps[k].append(v)
    out = {k: statistics.median(v) for k, v in steps.items()}
    total = [sum(s) for s in zip(*steps.values())]
    return {"kernels": n_kernels, "steps_s": out, "total_s": statistics.median(total), "best_total_s": min(total)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object per case")
    ap.add_argument("--repeat", type=int, default=200, help="timed calls per figure (default 200)")
    ap.add_argument("--kernels", default="10,100", help="kernels per function, comma-separated (default 10,100)")
    ap.add_argument("--batch", type=int, default=1000, help="kernels of the encoded and linked batch (default 1000)")
    ap.add_argument("--interpret", action="store_true",
                    help="no CPU device: the host programs are interpreted by core (default: compiled by the CPU "
                         "device when its plugin is installed)")
    args = ap.parse_args()
    Device.reset(hcqref_registry(cpu=not args.interpret))
    try:
        for n in (int(k) for k in args.kernels.split(",")):
            r = bench_function(n, args.repeat)
            if args.json:
                print(json.dumps({"case": f"function{n}", **r}))
                continue
            rp, hp, ea = r["replay"], r["host_program"], r["eager"]
            how = "compiled by the CPU device" if r["host_program_compiled"] else "interpreted"
            print(f"function of {n:3d} kernels ({r['batches']} linked batch{'es' if r['batches'] != 1 else ''}, "
                  f"{r['per_run_statements']} host statements per run ({how}), {r['link_statements']} run once at "
                  "link):")
            print(f"  JIT replay    {rp['median_us']:9.1f} us/call  {rp['median_us_per_kernel']:7.2f} us/kernel  "
                  f"(best {rp['best_us']:.1f} us)   goal <= {GOAL_REPLAY_US_PER_CALL:.0f} us/call, "
                  f"<= {GOAL_REPLAY_US_PER_KERNEL:.0f} us/kernel")
            print(f"  host program  {hp['median_us']:9.1f} us/call  {hp['median_us_per_kernel']:7.2f} us/kernel  "
                  f"(best {hp['best_us']:.1f} us; the rest of the replay is TinyJit's own work)")
            print(f"  eager         {ea['median_us']:9.1f} us/call  {ea['median_us_per_kernel']:7.2f} us/kernel  "
                  f"= {r['eager_over_replay']:.1f}x the replay   goal >= {GOAL_EAGER_RATIO:.0f}x")
        b = bench_batch(args.batch, max(1, min(args.repeat, 3)))
        if args.json:
            print(json.dumps({"case": f"batch{args.batch}", **b}))
        else:
            s = b["steps_s"]
            print(f"batch of {b['kernels']} kernels: build + encode + link {b['total_s']:.3f} s "
                  f"(build {s['build']:.3f}, encode {s['encode']:.3f}, link {s['link']:.3f}; best total "
                  f"{b['best_total_s']:.3f} s)   goal <= {GOAL_BATCH_S} s")
    finally:
        Device.reset()


if __name__ == "__main__":
    main()
