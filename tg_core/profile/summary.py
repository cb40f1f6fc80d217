"""The per-kernel summary of a profile: calls, total and mean time, share of all kernel time, and GFLOP/s and
GB/s from the kernels' op and byte estimates (estimates.py) over the time they took."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tg_core.profile.estimates import estimate
from tg_core.profile.events import Event
from tg_core.profile.trace import aligned


@dataclass
class KernelRow:
    """One kernel name's runs: `total_ns` of device (or host-timed) time, `ops` and `bytes` summed over runs."""
    name: str
    devices: set[str]
    calls: int = 0
    total_ns: float = 0.0
    ops: int = 0
    bytes: int = 0

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.calls if self.calls else 0.0

    @property
    def gflops(self) -> float:
        """GFLOP/s: ops per nanosecond."""
        return self.ops / self.total_ns if self.total_ns > 0 else 0.0

    @property
    def gbps(self) -> float:
        """GB/s: bytes per nanosecond."""
        return self.bytes / self.total_ns if self.total_ns > 0 else 0.0


def kernel_rows(events: Iterable[Event]) -> list[KernelRow]:
    """Per kernel name, its runs summed; the most time first."""
    rows: dict[str, KernelRow] = {}
    for e in events:
        if e.kind != "kernel":
            continue
        row = rows.get(e.name)
        if row is None:
            row = rows[e.name] = KernelRow(e.name, set())
        s, t = aligned(e)
        row.devices.add(e.process)
        row.calls += 1
        row.total_ns += max(t - s, 0.0)
        data = e.data or {}
        if data.get("ast") is not None:
            ops, nbytes = estimate(data["ast"], data.get("var_vals"))
            row.ops += ops
            row.bytes += nbytes
    return sorted(rows.values(), key=lambda r: -r.total_ns)


def _time(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms" if ns >= 1e6 else f"{ns / 1e3:.1f} us"


def format_rows(rows: list[KernelRow], limit: int | None = 30) -> str:
    """The summary as a table (the `limit` rows with the most time, then one line for the rest)."""
    total = sum(r.total_ns for r in rows)
    width = min(max((len(r.name) for r in rows), default=6), 48)
    head = (f"{'kernel':<{width}}  {'device':<10} {'calls':>7} {'total':>11} {'mean':>10} {'share':>6} "
            f"{'GFLOP/s':>9} {'GB/s':>8}")
    lines = [head, "-" * len(head)]
    shown = rows if limit is None else rows[:limit]
    for r in shown:
        name = r.name if len(r.name) <= width else r.name[:width - 1] + "~"
        share = 100 * r.total_ns / total if total else 0.0
        lines.append(f"{name:<{width}}  {','.join(sorted(r.devices)):<10} {r.calls:>7} {_time(r.total_ns):>11} "
                     f"{_time(r.mean_ns):>10} {share:>5.1f}% {r.gflops:>9.2f} {r.gbps:>8.2f}")
    rest = rows[len(shown):]
    if rest:
        lines.append(f"... {len(rest)} more kernels, {_time(sum(r.total_ns for r in rest))} in "
                     f"{sum(r.calls for r in rest)} calls")
    lines.append(f"{len(rows)} kernels, {sum(r.calls for r in rows)} calls, {_time(total)} of kernel time")
    return "\n".join(lines)
