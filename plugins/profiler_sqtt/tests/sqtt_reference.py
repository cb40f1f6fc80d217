"""An obvious SQTT reference for the tests (and the benchmark's baseline): a packet table of its own, written out
from amd.md section 9 and tinygrad's field definitions, a decoder that walks the stream one packet at a time, an
encoder that builds streams from packets, and the capture files of ../shared/data/sqtt/.

Slow on purpose: nothing here is shared with tg_profiler_sqtt, so the fast decoder is checked against a second,
independent reading of the format."""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

# name: (low-bit pattern as written, msb first; length in nibbles; delta field (hi, lo) or None; other fields)
TABLE: dict[str, tuple[str, int, tuple[int, int] | None, dict[str, tuple[int, int]]]] = {
    "VALUINST": ("011", 3, (5, 3), {"flag": (6, 6), "wave": (11, 7)}),
    "VMEMEXEC": ("1111", 2, (5, 4), {"src": (7, 6)}),
    "ALUEXEC": ("1110", 2, (5, 4), {"src": (7, 6)}),
    "IMMEDIATE": ("1101", 3, (6, 4), {"wave": (11, 7)}),
    "IMMEDIATE_MASK": ("00100", 6, (7, 5), {"mask": (23, 8)}),
    "WAVERDY": ("10100", 6, (7, 5), {"mask": (23, 8)}),
    "TS_DELTA_S8_W3": ("0100001", 16, (10, 8), {}),
    "WAVEEND": ("10101", 5, (7, 5), {"sa": (8, 8), "simd": (10, 9), "wgp": (13, 11), "wave": (19, 15)}),
    "WAVESTART": ("01100", 8, (6, 5), {"sa": (7, 7), "simd": (9, 8), "wgp": (12, 10), "wave": (17, 13),
                                        "id": (31, 18)}),
    "TS_DELTA_S5_W2": ("11100", 12, (6, 5), {}),
    "WAVEALLOC": ("00101", 5, (7, 5), {}),
    "TS_DELTA_S5_W3": ("00110", 13, (7, 5), {}),
    "PERF": ("10110", 7, (7, 5), {"arg": (27, 8)}),
    "UTILCTR": ("0110001", 12, (8, 7), {"ctr": (47, 9)}),
    "TS_DELTA_SHORT": ("1000", 2, (7, 4), {}),
    "NOP": ("0000", 1, None, {}),
    "TS_WAVE_STATE": ("1010001", 6, (15, 7), {"coarse": (23, 16)}),
    "EVENT": ("01100001", 6, (10, 8), {"event": (23, 11)}),
    "EVENT_BIG": ("11100001", 8, (10, 8), {"event": (31, 11)}),
    "REG": ("1001", 16, (6, 4), {"slot": (9, 7), "subop": (31, 16), "value": (63, 32)}),
    "SNAPSHOT": ("1110001", 16, (9, 7), {"snap": (63, 10)}),
    "TS_DELTA_OR_MARK": ("0000001", 12, (47, 12), {"pl": (8, 8), "rt": (9, 9)}),
    "LAYOUT_HEADER": ("0010001", 16, None, {"layout": (12, 7), "simd": (14, 13)}),
    "INST": ("010", 5, (6, 4), {"flag1": (3, 3), "flag2": (7, 7), "wave": (12, 8), "op": (19, 13)}),
}


@functools.cache
def kind_of(low_byte: int) -> str:
    """The type of a packet from its low byte: the longest pattern that matches, NOP if none does."""
    best, width = "NOP", 0
    for name, (pattern, *_rest) in TABLE.items():
        if int(pattern, 2) == low_byte & ((1 << len(pattern)) - 1) and len(pattern) > width:
            best, width = name, len(pattern)
    return best


@dataclass(frozen=True)
class RefPacket:
    kind: str
    offset: int   # nibbles
    time: int
    raw: int


def decode(data: bytes) -> tuple[list[RefPacket], int]:
    """(packets, nibble offset where decoding stopped: the end, or a last packet that does not fit)."""
    total = 2 * len(data)
    out, pos, time = [], 0, 0
    while pos < total:
        # the 9 bytes from the packet's first one hold it whole (16 nibbles, plus one when it starts odd)
        window = int.from_bytes(data[pos // 2:pos // 2 + 9], "little") >> (4 * (pos & 1))
        kind = kind_of(window & 0xFF)
        _, nibbles, delta, _ = TABLE[kind]
        if pos + nibbles > total:
            break
        raw = window & ((1 << (4 * nibbles)) - 1)
        d = (raw >> delta[1]) & ((1 << (delta[0] - delta[1] + 1)) - 1) if delta else 0
        if kind == "TS_DELTA_SHORT":
            d += 4
        if kind == "TS_DELTA_OR_MARK" and raw >> 9 & 1 and not raw >> 8 & 1:
            d = 0  # a marker
        time += d
        out.append(RefPacket(kind, pos, time, raw))
        pos += nibbles
    return out, pos


def packet_bits(kind: str, **fields: int) -> int:
    """The bits of one packet of `kind` with these field values (delta included), checked to fit."""
    pattern, nibbles, delta, named = TABLE[kind]
    spec = dict(named, **({"delta": delta} if delta else {}))
    raw = int(pattern, 2)
    for name, value in fields.items():
        hi, lo = spec[name]
        assert 0 <= value < 1 << (hi - lo + 1), (kind, name, value)
        raw |= value << lo
    assert raw < 1 << (4 * nibbles) and kind_of(raw & 0xFF) == kind, (kind, fields)
    return raw


def encode(items: list[tuple[str, int]]) -> bytes:
    """A stream of (kind, packet bits) items, padded with NOPs to whole 32-byte units."""
    stream, pos = 0, 0
    for kind, raw in items:
        stream |= raw << (4 * pos)
        pos += TABLE[kind][1]
    nbytes = -(-((pos + 1) // 2) // 32) * 32
    return stream.to_bytes(nbytes, "little")


def header(layout: int = 3, simd: int = 0) -> tuple[str, int]:
    return "LAYOUT_HEADER", packet_bits("LAYOUT_HEADER", layout=layout, simd=simd)


# ---- the captures ---------------------------------------------------------------------------------------------

# beside the checkout (../shared), else where the workplace keeps it (a checkout made elsewhere, as CI's may be)
CAPTURES = next((p for p in (Path(__file__).resolve().parents[3].parent / "shared" / "data" / "sqtt" / "gfx1100",
                             Path("/work/shared/data/sqtt/gfx1100")) if p.is_dir()),
                Path("/work/shared/data/sqtt/gfx1100"))
RUNS = sorted(p.name for p in CAPTURES.iterdir()) if CAPTURES.is_dir() else []


def run_meta(run: str) -> dict:
    if not CAPTURES.is_dir():
        pytest.skip(f"the SQTT captures are not at {CAPTURES}")
    return json.loads((CAPTURES / run / "meta.json").read_text())


def streams() -> list[tuple[str, int]]:
    """(run, se) of every SQTT capture."""
    return [(run, s["se"]) for run in RUNS for s in json.loads((CAPTURES / run / "meta.json").read_text())["sqtt"]]


def stream(run: str, se: int) -> bytes:
    entry = next(s for s in run_meta(run)["sqtt"] if s["se"] == se)
    return (CAPTURES / run / entry["file"]).read_bytes()
