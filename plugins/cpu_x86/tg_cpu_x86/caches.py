"""The host's per-core data caches (L1d size and ways, L2 size), which the CPU heuristic sizes a matmul's K blocks
(L2) and its register tile's rows (L1's sets and ways: rows of A that map to one set) from.

Read once, at first use, from Linux's sysfs (/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size,
ways_of_associativity}: the kernel fills it from CPUID leaf 4 on x86, or the device tree elsewhere). Where sysfs
has no cache description (a container without /sys, another OS) the sizes of a common x86 core are assumed, 32 KB
8-way and 1 MB, and the `tg.cpu` logger says so: they only choose block sizes and tile rows, never whether the code
is correct.
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
    """Data cache bytes of one core: L1d and L2 (unified), and L1d's associativity."""
    l1: int = 32 * 1024
    l2: int = 1024 * 1024
    source: str = "assumed"     # "sysfs" when read from the host
    l1_ways: int = 8


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
    ways: dict[int, int] = {}
    for d in sorted(root.glob("index*")):
        try:
            level = int((d / "level").read_text())
            kind = (d / "type").read_text().strip()
            size = parse_size((d / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and level in (1, 2):
            sizes.setdefault(level, size)
            try:
                ways.setdefault(level, int((d / "ways_of_associativity").read_text()))
            except (OSError, ValueError):
                pass
    if not sizes:
        return None
    default = Caches()
    l1_ways = ways.get(1, 0)
    return Caches(sizes.get(1, default.l1), sizes.get(2, default.l2), "sysfs",
                  l1_ways if l1_ways > 0 else default.l1_ways)


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
