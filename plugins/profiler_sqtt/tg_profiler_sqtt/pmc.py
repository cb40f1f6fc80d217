"""PMC decoding: a kernel slot's counter readback -> per-instance values and per-counter totals.

The readback is laid out by its schedule (one entry per counter, as the queue programmed it: amd.md section 9):
counter `name` of hardware `block` owns `size` bytes at `off`, one 8-byte record per instance in the order the
queue read them, xcc, then instance, SE, SA and WGP (WGP fastest). A record is the counter's LO word, then its HI
word; SQ counters on gfx11 have no HI register, so their HI word is never written and is not part of the value.
SQ instances of WGPs that are not active (harvested: the device's CU bitmap) are skipped by the readback, so their
records stay zero; `active` says which those are, and a nonzero record there means the blob and the schedule (or
the mask) do not belong together, which is an error rather than a number.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NO_HI_WORD = frozenset({"SQ"})  # blocks whose counters have no _HI register on gfx11
SHAPE_KEYS = ("xcc", "inst", "se", "sa", "wgp")
RECORD_BYTES = 8


class PMCError(ValueError):
    """A readback that does not fit its schedule: the message names the counter and the byte offset."""


@dataclass(frozen=True)
class CounterSample:
    """One schedule entry: where counter `name` of `block` lives in the readback and over which instances."""
    name: str
    block: str
    xcc: int
    inst: int
    se: int
    sa: int
    wgp: int
    off: int
    size: int

    @staticmethod
    def of(entry: Mapping[str, Any] | Any) -> CounterSample:
        """From a mapping (a schedule read from JSON) or any object with these attributes."""
        def get(key: str) -> Any:
            return entry.get(key) if isinstance(entry, Mapping) else getattr(entry, key, None)
        missing = [k for k in ("name", "block", *SHAPE_KEYS, "off", "size") if get(k) is None]
        if missing:
            raise PMCError(f"schedule entry {entry!r} lacks {', '.join(missing)}")
        xcc, inst, se, sa, wgp, off, size = (int(get(k)) for k in (*SHAPE_KEYS, "off", "size"))
        return CounterSample(str(get("name")), str(get("block")), xcc, inst, se, sa, wgp, off, size)

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        return self.xcc, self.inst, self.se, self.sa, self.wgp


@dataclass(frozen=True)
class Counter:
    """A decoded counter: `values[xcc, inst, se, sa, wgp]` (uint64; 0 where not active), `active` (bool, same
    shape), and `total`, the sum over active instances."""
    name: str
    block: str
    values: np.ndarray
    active: np.ndarray

    @property
    def total(self) -> int:
        return int(self.values[self.active].sum(dtype=np.uint64))


ActiveWGPs = np.ndarray | Callable[[int, int, int, int], bool] | None


def _active_mask(s: CounterSample, active_wgps: ActiveWGPs) -> np.ndarray:
    mask = np.ones(s.shape, bool)
    if s.wgp <= 1 or active_wgps is None:
        return mask  # only per-WGP counters (SQ) skip instances
    if callable(active_wgps):
        for x, se, sa, w in np.ndindex(s.xcc, s.se, s.sa, s.wgp):
            mask[x, :, se, sa, w] = bool(active_wgps(x, se, sa, w))
        return mask
    a = np.asarray(active_wgps, bool)
    want = (s.xcc, s.se, s.sa, s.wgp)
    if a.shape != want:
        raise PMCError(f"counter {s.name}: the active-WGP mask has shape {a.shape}; its instances need "
                       f"(xcc, se, sa, wgp) = {want}")
    mask[:] = a[:, None]
    return mask


def decode_pmc(blob: bytes | bytearray | memoryview | np.ndarray, schedule: Sequence[Mapping[str, Any] | Any],
               active_wgps: ActiveWGPs = None) -> dict[str, Counter]:
    """Every scheduled counter of one readback, by name, in schedule order. `active_wgps` is the device's active
    WGPs as a bool array [xcc, se, sa, wgp] or a function (xcc, se, sa, wgp) -> bool; None: all active."""
    data = np.frombuffer(blob, np.uint8) if not isinstance(blob, np.ndarray) else blob.view(np.uint8).ravel()
    out: dict[str, Counter] = {}
    for entry in schedule:
        s = CounterSample.of(entry)
        if s.name in out:
            raise PMCError(f"counter {s.name} is scheduled twice")
        if min(s.shape) < 1:
            raise PMCError(f"counter {s.name}: instance counts {dict(zip(SHAPE_KEYS, s.shape))} must all be >= 1")
        if s.size != RECORD_BYTES * int(np.prod(s.shape)):
            raise PMCError(f"counter {s.name}: size {s.size} bytes at offset {s.off} is not {RECORD_BYTES} bytes "
                           f"for each of its {int(np.prod(s.shape))} instances {dict(zip(SHAPE_KEYS, s.shape))}")
        if s.off < 0 or s.off + s.size > data.size:
            raise PMCError(f"counter {s.name}: bytes {s.off}..{s.off + s.size} lie outside the {data.size}-byte "
                           "readback")
        if s.off % 4:
            raise PMCError(f"counter {s.name}: offset {s.off} is not 4-byte aligned (records are u32 words)")
        words = data[s.off:s.off + s.size].view("<u4").reshape(*s.shape, 2).astype(np.uint64)
        values = words[..., 0] if s.block in NO_HI_WORD else words[..., 0] | (words[..., 1] << np.uint64(32))
        active = _active_mask(s, active_wgps)
        written = np.flatnonzero((words != 0).any(axis=-1)[~active])
        if written.size:
            idx = np.argwhere(~active)[written[0]]
            record = s.off + RECORD_BYTES * int(np.ravel_multi_index(tuple(idx), s.shape))
            raise PMCError(f"counter {s.name}: the record of inactive instance "
                           f"{dict(zip(SHAPE_KEYS, map(int, idx)))} at byte offset {record} is not zero: the "
                           "readback skips inactive WGPs, so the blob, its schedule or the active-WGP mask is wrong")
        out[s.name] = Counter(s.name, s.block, np.where(active, values, np.uint64(0)), active)
    return out


def totals(counters: Mapping[str, Counter]) -> dict[str, int]:
    """Each counter's total over its active instances."""
    return {name: c.total for name, c in counters.items()}
