"""Dependencies between the accesses of one batch, per buffer byte range.

A `DepsTracker` remembers, for every byte range of every buffer, the last access that wrote it and the
accesses that read it since. A new access depends only on recorded accesses it overlaps: a read on the
writers (read after write), a write on the writers and the readers (write after write, write after read).
Overlap is strict: `[0, 4)` and `[4, 8)` touch and do not conflict. A write cuts what it covers out of the
recorded ranges and keeps the parts outside it with their old dependency, so a later access of those parts
still waits for the old one; a zero-length range is no access at all.

Memory is identified by a `Region`: a key naming the memory (a base Buffer, or whatever the caller uses
for a base plus a lane) and a half-open byte range in it. A `Buffer` is its base's region at its offset, so
views of one buffer interact byte-exactly and different buffers never do.

Per key the recorded ranges are two sorted lists of disjoint segments (writers; readers, each segment with
the readers of exactly its bytes), searched with bisect, so an access costs O(log n) plus the segments it
touches; a batch of thousands of kernels stays linear in practice.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tg_core.device import Buffer

D = TypeVar("D")


@dataclass(frozen=True, slots=True)
class Region:
    """Bytes `[start, end)` of the memory named by `key` (compared by `==`/hash: a base Buffer compares by
    identity, so two distinct buffers never alias)."""
    key: Hashable
    start: int
    end: int

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"Region.{name} is a byte offset (an int), got {v!r}")
        if not 0 <= self.start <= self.end:
            raise ValueError(f"Region [{self.start}, {self.end}) of {self.key!r}: a byte range needs "
                             f"0 <= start <= end")


def region_of(buf: Buffer | Region) -> Region:
    """The bytes `buf` covers in its base buffer (a Region is returned as it is)."""
    if isinstance(buf, Region):
        return buf
    if isinstance(buf, Buffer):
        return Region(buf.base, buf.offset, buf.offset + buf.nbytes)
    raise TypeError(f"a dependency is tracked on a Buffer or a Region, got {type(buf).__name__}: {buf!r}")


class _Segments(Generic[D]):
    """Disjoint half-open segments sorted by start, each with a value. `starts`/`ends` are parallel lists
    so bisect finds the overlapping run directly: segments i..j-1 overlap [s, e) where i is the first
    whose end is > s and j the first whose start is >= e."""
    __slots__ = ("starts", "ends", "vals")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.vals: list[D] = []

    def span(self, s: int, e: int) -> tuple[int, int]:
        return bisect_right(self.ends, s), bisect_left(self.starts, e)

    def replace(self, i: int, j: int, pieces: list[tuple[int, int, D]]) -> None:
        self.starts[i:j] = [p[0] for p in pieces]
        self.ends[i:j] = [p[1] for p in pieces]
        self.vals[i:j] = [p[2] for p in pieces]

    def __len__(self) -> int:
        return len(self.starts)


def _cut(seg: _Segments, i: int, j: int, s: int, e: int) -> tuple[list[tuple[int, int, Any]], list[tuple[int, int, Any]]]:
    """The parts of segments i..j-1 left of s and right of e (each at most one segment)."""
    left = [(seg.starts[i], s, seg.vals[i])] if i < j and seg.starts[i] < s else []
    right = []
    if i < j and seg.ends[j - 1] > e:
        val = seg.vals[j - 1]
        # one segment split on both sides: the two reader lists must not be one list (appends would leak)
        right.append((e, seg.ends[j - 1], list(val) if left and i == j - 1 and isinstance(val, list) else val))
    return left, right


class DepsTracker(Generic[D]):
    """Per batch: which earlier accesses a new access must wait for. Dependencies (`dep`) are opaque to the
    tracker (a call's tag, a (device, queue, tag) tuple, ...) and are compared by identity when the result
    is de-duplicated, so pass one object per access."""

    def __init__(self) -> None:
        self._writers: dict[Hashable, _Segments[D]] = {}
        self._readers: dict[Hashable, _Segments[list[D]]] = {}

    def access(self, bufs: Sequence[Buffer | Region], writes: Collection[int] | None, dep: D) -> list[D]:
        """Record an access of `bufs` by `dep` and return the recorded accesses it depends on, de-duplicated
        in first-seen order (per buffer in argument order: its writers by address, then, if it is written,
        its readers by address and in access order). `writes` are the indices into `bufs` that are written,
        the others are read; None means every buffer is written (nothing is known about the call)."""
        regions = [region_of(b) for b in bufs]
        if writes is None:
            written = set(range(len(regions)))
        else:
            written = set(writes)
            bad = sorted(w for w in written if not isinstance(w, int) or not 0 <= w < len(regions))
            if bad:
                raise IndexError(f"written indices {bad} are not indices of the {len(regions)} accessed buffers "
                                 f"(allowed: 0..{len(regions) - 1})")
        waits: dict[int, D] = {}  # id -> dep: dict order is first-seen order
        for idx, r in enumerate(regions):
            if r.start == r.end:
                continue
            if (w := self._writers.get(r.key)) is not None:
                i, j = w.span(r.start, r.end)
                for d in w.vals[i:j]:
                    waits.setdefault(id(d), d)
            if idx in written and (rd := self._readers.get(r.key)) is not None:
                i, j = rd.span(r.start, r.end)
                for readers in rd.vals[i:j]:
                    for d in readers:
                        waits.setdefault(id(d), d)
        # the waits are against the state before this access: record it only now, in argument order
        for idx, r in enumerate(regions):
            if r.start == r.end:
                continue
            if idx in written:
                self._record_write(r, dep)
            else:
                self._record_read(r, dep)
        return list(waits.values())

    def _record_write(self, r: Region, dep: D) -> None:
        s, e = r.start, r.end
        w = self._writers.setdefault(r.key, _Segments())
        i, j = w.span(s, e)
        left, right = _cut(w, i, j, s, e)
        w.replace(i, j, [*left, (s, e, dep), *right])
        if (rd := self._readers.get(r.key)) is not None:  # readers since the last write: none left in [s, e)
            i, j = rd.span(s, e)
            if i < j:
                left, right = _cut(rd, i, j, s, e)
                rd.replace(i, j, [*left, *right])

    def _record_read(self, r: Region, dep: D) -> None:
        s, e = r.start, r.end
        rd = self._readers.setdefault(r.key, _Segments())
        i, j = rd.span(s, e)
        if j == i + 1 and rd.starts[i] == s and rd.ends[i] == e:
            self._add_reader(rd.vals[i], dep)  # the common case: the same range read again
            return
        pieces: list[tuple[int, int, list[D]]] = []
        pos = s  # the next byte of [s, e) not yet given a segment
        for k in range(i, j):
            st, en, readers = rd.starts[k], rd.ends[k], rd.vals[k]
            if st < s:  # the part left of s keeps its readers as they are
                pieces.append((st, s, list(readers)))
                st = s
            if pos < st:  # a gap: only this reader
                pieces.append((pos, st, [dep]))
            inner = min(en, e)
            if en > e:  # split on the right: the inside gets a copy, the outside keeps the list
                pieces.append((st, inner, list(readers)))
                self._add_reader(pieces[-1][2], dep)
                pieces.append((e, en, readers))
            else:
                self._add_reader(readers, dep)
                pieces.append((st, inner, readers))
            pos = inner
        if pos < e:
            pieces.append((pos, e, [dep]))
        rd.replace(i, j, pieces)

    @staticmethod
    def _add_reader(readers: list[D], dep: D) -> None:
        if not readers or readers[-1] is not dep:  # one call reading a range twice is one reader
            readers.append(dep)

    def segments(self, key: Hashable) -> tuple[int, int]:
        """How many writer and reader segments are recorded for `key` (for tests and diagnostics)."""
        w, rd = self._writers.get(key), self._readers.get(key)
        return (len(w) if w is not None else 0, len(rd) if rd is not None else 0)

