"""Speed of tg-profiler-sqtt's SQTT decoder: MB/s of trace and packets/s on every gfx1100 capture.

Cases: each capture of ../shared/data/sqtt/gfx1100 (one SE's stream, about 4.6 KB), and `window`, all 24 captures
joined and repeated to 8 MiB (the size of one SE's default trace window). The reference is the obvious decoder
(tests/sqtt_reference.py: one Python step per packet), measured in the same run on the captures; the ratio is
tg/reference (> 1: tg is faster). Before timing, each capture's packets are checked against the reference.
The decoder compiles its scan once per process (reported separately, not in the times).

Usage: python bench/sqtt.py [--json] [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "profiler_sqtt" / "tests"))

from tg_profiler_sqtt import scan  # noqa: E402
from tg_profiler_sqtt.sqtt import decode  # noqa: E402

import sqtt_reference as ref  # noqa: E402

WINDOW = 8 << 20


def best(fn, repeat: int) -> float:
    """Best wall time of `repeat` calls (each at least 20 ms of calls, so small inputs are timed in bulk)."""
    times = []
    for _ in range(repeat):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed > 0.02:
                break
        times.append(elapsed / n)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if not ref.CAPTURES.is_dir():
        print(f"no captures at {ref.CAPTURES}", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    scan._function()
    compile_ms = (time.perf_counter() - t0) * 1e3
    rows, wrong = [], 0
    for run, se in ref.streams():
        data = ref.stream(run, se)
        trace = decode(data)
        expected, _ = ref.decode(data)
        if [(p.kind, p.offset, p.time, p.raw) for p in trace] != [(p.kind, p.offset, p.time, p.raw) for p in expected]:
            wrong += 1
            print(f"{run} se{se}: the decoder disagrees with the reference", file=sys.stderr)
        t_tg = best(lambda d=data: decode(d), args.repeat)
        t_ref = best(lambda d=data: ref.decode(d), max(1, args.repeat // 2))
        rows.append({"case": f"{run}/se{se}", "bytes": len(data), "packets": len(trace),
                     "tg_MBps": len(data) / t_tg / 1e6, "tg_Mpackets_s": len(trace) / t_tg / 1e6,
                     "ref_MBps": len(data) / t_ref / 1e6, "ref_Mpackets_s": len(trace) / t_ref / 1e6,
                     "ratio": t_ref / t_tg})
    joined = b"".join(ref.stream(r, s) for r, s in ref.streams())
    window = (joined * (WINDOW // len(joined) + 1))[:WINDOW // 32 * 32]
    n = len(decode(window))
    t_tg = best(lambda: decode(window), args.repeat)
    rows.append({"case": "window (8 MiB)", "bytes": len(window), "packets": n, "tg_MBps": len(window) / t_tg / 1e6,
                 "tg_Mpackets_s": n / t_tg / 1e6, "ref_MBps": None, "ref_Mpackets_s": None, "ratio": None})
    if args.json:
        print(json.dumps({"compile_ms": compile_ms, "rows": rows, "wrong": wrong}, indent=1))
    else:
        print(f"scan compiled in {compile_ms:.0f} ms (once per process, not in the times below)")
        print(f"{'case':22} {'bytes':>8} {'packets':>8} {'tg MB/s':>8} {'tg Mpk/s':>9} {'ref MB/s':>9} "
              f"{'ref Mpk/s':>9} {'tg/ref':>7}")
        for r in rows:
            refs = f"{r['ref_MBps']:9.2f} {r['ref_Mpackets_s']:9.2f} {r['ratio']:6.1f}x" if r["ratio"] else \
                f"{'-':>9} {'-':>9} {'-':>7}"
            print(f"{r['case']:22} {r['bytes']:8} {r['packets']:8} {r['tg_MBps']:8.1f} {r['tg_Mpackets_s']:9.2f} "
                  f"{refs}")
        caps = [r for r in rows if r["ratio"]]
        print(f"captures: min {min(r['tg_MBps'] for r in caps):.1f} MB/s, "
              f"median ratio {sorted(r['ratio'] for r in caps)[len(caps) // 2]:.1f}x")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
