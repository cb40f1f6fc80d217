"""SQTT decoding: a trace stream (what one shader engine wrote into its window) -> its packets.

    trace = decode(data)          # a Trace: a sequence of Packet, backed by numpy columns
    trace[0].kind                 # "LAYOUT_HEADER"
    [p for p in trace if p.kind == "WAVESTART"][0].wave
    trace.field("wave", "WAVESTART")   # the same for every WAVESTART at once, as an array

Every packet has `.kind` (its type's name, amd.md section 9), `.time` (the running sum of deltas up to and
including it), `.offset` (where it starts, in nibbles from the start of the stream), `.raw` (its bits) and its
type's fields as attributes (packets.py lists them). Packets are made on access: decoding a stream builds only
the columns (scan.py), which is what makes it fast; a Packet costs a Python object each when asked for.

What is checked: a stream is whole 32-byte units (the hardware's write pointer counts them), starts with a
LAYOUT_HEADER, and is layout 3 (RDNA3, the only packet tables here). The last packet may run past the end of the
stream (the hardware stops writing mid-packet when tracing stops): it is not a packet of the trace, and
`Trace.tail` says where it starts.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from tg_profiler_sqtt import packets
from tg_profiler_sqtt.scan import scan

UNIT_BYTES = 32  # SQ_THREAD_TRACE_WPTR counts 32-byte units


class SQTTError(ValueError):
    """A stream that is not a whole RDNA3 trace: the message names the byte offset and what was expected."""


class Packet:
    """One packet: kind, time, offset (nibbles), raw bits, and its type's fields as attributes."""
    __slots__ = ("kind", "time", "offset", "raw")

    def __init__(self, kind: str, time: int, offset: int, raw: int):
        self.kind, self.time, self.offset, self.raw = kind, time, offset, raw

    @property
    def byte_offset(self) -> float:
        """Where the packet starts in bytes (x.5: in the high nibble of that byte)."""
        return self.offset / 2

    def fields(self) -> dict[str, int]:
        """The fields of this packet's type, by name, in bit order."""
        return {name: (self.raw >> lo) & ((1 << width) - 1)
                for name, (lo, width) in packets.BY_NAME[self.kind].fields.items()}

    def __getattr__(self, name: str) -> Any:
        spec = packets.BY_NAME[self.kind].fields.get(name)
        if spec is None:
            if name == "op_name" and self.kind == "INST":
                return packets.inst_op_name(self.op)
            raise AttributeError(f"a {self.kind} packet has no field {name!r}; its fields: "
                                 f"{', '.join(packets.BY_NAME[self.kind].fields) or 'none'}")
        lo, width = spec
        return (self.raw >> lo) & ((1 << width) - 1)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Packet) and (self.kind, self.time, self.offset, self.raw) == \
            (other.kind, other.time, other.offset, other.raw)

    def __hash__(self) -> int:
        return hash((self.kind, self.time, self.offset, self.raw))

    def __repr__(self) -> str:
        fields = " ".join(f"{k}={v}" for k, v in self.fields().items() if k != "delta")
        return f"<{self.kind} t={self.time} @{self.offset}{' ' + fields if fields else ''}>"


class Trace(Sequence[Packet]):
    """The packets of one stream, as columns: `offsets` (nibbles), `kinds` (type ids, packets.KIND_NAMES),
    `raws` (packet bits), `times`. Indexing makes Packet objects; `field` and `where` work on whole columns."""

    def __init__(self, offsets: np.ndarray, kinds: np.ndarray, raws: np.ndarray, times: np.ndarray, nbytes: int,
                 tail: int | None):
        self.offsets, self.kinds, self.raws, self.times = offsets, kinds, raws, times
        self.nbytes = nbytes
        self.tail = tail  # nibble offset of a last packet cut off by the end of the stream, else None

    def __len__(self) -> int:
        return int(self.kinds.size)

    @overload
    def __getitem__(self, i: int) -> Packet: ...

    @overload
    def __getitem__(self, i: slice) -> list[Packet]: ...

    def __getitem__(self, i: int | slice) -> Packet | list[Packet]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(f"packet {i} of a trace of {len(self)}")
        return Packet(packets.KIND_NAMES[self.kinds[i]], int(self.times[i]), int(self.offsets[i]), int(self.raws[i]))

    def __iter__(self) -> Iterator[Packet]:
        names = packets.KIND_NAMES
        for k, t, o, r in zip(self.kinds.tolist(), self.times.tolist(), self.offsets.tolist(), self.raws.tolist()):
            yield Packet(names[k], t, o, r)

    def where(self, *kinds: str) -> np.ndarray:
        """Indices of the packets of these kinds, in stream order."""
        return np.flatnonzero(np.isin(self.kinds, [_kind_id(k) for k in kinds]))

    def count(self, kind: str) -> int:  # Sequence.count counts equal values; this counts a kind
        """How many packets of this kind the trace has."""
        return int(np.count_nonzero(self.kinds == _kind_id(kind)))

    def field(self, name: str, kind: str) -> np.ndarray:
        """Field `name` of every packet of `kind`, in stream order (uint64)."""
        spec = packets.BY_NAME[kind].fields.get(name) if kind in packets.BY_NAME else None
        if spec is None:
            _kind_id(kind)
            raise KeyError(f"a {kind} packet has no field {name!r}; its fields: "
                           f"{', '.join(packets.BY_NAME[kind].fields) or 'none'}")
        lo, width = spec
        return (self.raws[self.where(kind)] >> np.uint64(lo)) & np.uint64((1 << width) - 1)


def _kind_id(kind: str) -> int:
    if kind not in packets.BY_NAME:
        raise KeyError(f"no packet type {kind!r}; the RDNA3 types: {', '.join(t.name for t in packets.TYPES)}")
    return packets.BY_NAME[kind].id


def decode(data: bytes | bytearray | memoryview | np.ndarray) -> Trace:
    """The packets of one SE's trace stream (RDNA3, layout 3). Raises SQTTError for a stream that is not whole
    32-byte units, or that does not start with a layout-3 LAYOUT_HEADER."""
    n = np.frombuffer(data, np.uint8).size if not isinstance(data, np.ndarray) else data.nbytes
    if n == 0:
        raise SQTTError("empty SQTT stream: expected a LAYOUT_HEADER at byte offset 0")
    if n % UNIT_BYTES:
        cut = n - n % UNIT_BYTES
        raise SQTTError(f"truncated SQTT stream: {n} bytes is not a whole number of {UNIT_BYTES}-byte units "
                        f"(the hardware writes whole units); it ends {n % UNIT_BYTES} bytes into the unit at byte "
                        f"offset {cut}")
    offsets, kinds, raws, times, stop = scan(data)
    header = packets.BY_NAME["LAYOUT_HEADER"]
    if kinds[0] != header.id:
        raise SQTTError(f"bad SQTT header at byte offset 0: the stream starts with a "
                        f"{packets.KIND_NAMES[kinds[0]]} packet (low byte {int(raws[0]) & 0xFF:#04x}), not a "
                        f"LAYOUT_HEADER (low 7 bits {header.pattern:#09b})")
    lo, width = header.fields["layout"]
    layout = (int(raws[0]) >> lo) & ((1 << width) - 1)
    if layout != packets.LAYOUT_RDNA3:
        raise SQTTError(f"bad SQTT header at byte offset 0: layout {layout}; supported: "
                        f"{packets.LAYOUT_RDNA3} (RDNA3, gfx11)")
    return Trace(offsets, kinds, raws, times, n, stop if stop < 2 * n else None)
