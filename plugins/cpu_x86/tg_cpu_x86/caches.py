"""The host's per-core data cache sizes (L1d, L2), which the CPU heuristic sizes a matmul's K blocks from.

Read once, at first use, from Linux's sysfs (/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}: the
kernel fills it from CPUID leaf 4 on x86, or the device tree elsewhere). Where sysfs has no cache description (a
container without /sys, another OS) the sizes of a common x86 core are assumed, 32 KB and 1 MB, and the `tg.cpu`
logger says so: they only choose block sizes, never whether the code is correct.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")
log = logging.getLogger("tg.cpu")


@dataclass(frozen=True)
class Caches:
    """Data cache bytes of one core: L1d and L2 (unified)."""
    l1: int = 32 * 1024
    l2: int = 1024 * 1024
    source: str = "assumed"     # "sysfs" when read from the host


_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)\s*$")


def parse_size(text: str) -> int:
    """sysfs' size text ("48K", "2048K", "4M") in bytes; ValueError for anything else."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"cache size {text!r} is not a number with an optional K, M or G suffix")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def read_sysfs(root: Path = SYSFS) -> Caches | None:
    """The L1 data and L2 sizes sysfs lists under `root`, or None when it lists neither."""
    sizes: dict[int, int] = {}
    for d in sorted(root.glob("index*")):
        try:
            level = int((d / "level").read_text())
            kind = (d / "type").read_text().strip()
            size = parse_size((d / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and level in (1, 2):
            sizes.setdefault(level, size)
    if not sizes:
        return None
    default = Caches()
    return Caches(sizes.get(1, default.l1), sizes.get(2, default.l2), "sysfs")


_HOST: Caches | None = None


def host_caches() -> Caches:
    """This machine's caches (read once; see the module docstring)."""
    global _HOST
    if _HOST is None:
        found = read_sysfs()
        if found is None:
            found = Caches()
            log.info("tg-cpu-x86: no cache sizes in %s; blocking for %d KB L1d and %d KB L2", SYSFS,
                     found.l1 >> 10, found.l2 >> 10)
        _HOST = found
    return _HOST
