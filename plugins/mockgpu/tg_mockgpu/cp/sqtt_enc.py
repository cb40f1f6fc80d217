"""The SQTT stream the mock writes: RDNA3 packets (layout 3, amd.md 9) of nibbles, and a dispatch's waves as
packets of one shader engine.

A packet is a run of 4-bit nibbles, low nibble first; its low bits are its type's pattern, its length fixed by
the type. Each packet's `delta` is the cycles since the packet before it; a gap larger than a packet's delta
field holds goes into a timestamp packet first (TS_DELTA_SHORT for 4..19 cycles, else TS_DELTA_OR_MARK with
rt = pl = 0). Field positions are the ones tinygrad's reverse-engineered decoder reads (amd.md 9).

What a dispatch writes on an SE (work.py's placement and cycle model): a WAVESTART and a WAVEEND for every
wave the SE ran; for the waves of the unit the trace follows (SQ_THREAD_TRACE_MASK's SA, WGP and SIMD) each
issued instruction: VALU -> VALUINST (transcendental, 64-bit and v_cmpx ops -> INST VALUT_4 / VALUB_x /
VALU1_WR_EXEC), s_waitcnt/s_nop/s_clause and other SOPP -> IMMEDIATE, a branch -> INST JUMP (taken) or
JUMP_NO, SMEM -> INST SMEM_RD, GLOBAL/SCRATCH -> SGMEM_RD_1 / SGMEM_WR_2, FLAT -> FLAT_RD_2 / FLAT_WR_3, DS ->
LDS_RD / LDS_WR_2, s_barrier -> BARRIER, other SALU -> SALU (SALU_WR_EXEC when it writes EXEC). s_delay_alu
issues nothing and s_endpgm is the WAVEEND. Register writes the trace records (SQ_THREAD_TRACE_USERDATA_*, the
RGP markers) are REG packets (slot 4, hi_byte 2, subop = the register's address); an event the trace records
(THREAD_TRACE_MARKER, _FINISH) is a REG packet with hi_byte 0x82, subop 0xFF and the event type as its value,
as the gfx1100 captures in ../shared/data/sqtt show them.
"""
from __future__ import annotations

from dataclasses import dataclass

from tg_mockgpu.cp.work import DispatchWork


@dataclass(frozen=True)
class PacketLayout:
    pattern: int
    width: int                              # bits of the pattern
    nibbles: int
    fields: dict[str, tuple[int, int]]      # name -> (lowest bit, bits)


LAYOUTS: dict[str, PacketLayout] = {
    "NOP": PacketLayout(0b0000, 4, 1, {}),
    "VALUINST": PacketLayout(0b011, 3, 3, {"delta": (3, 3), "flag": (6, 1), "wave": (7, 5)}),
    "IMMEDIATE": PacketLayout(0b1101, 4, 3, {"delta": (4, 3), "wave": (7, 5)}),
    "TS_DELTA_SHORT": PacketLayout(0b1000, 4, 2, {"delta": (4, 4)}),
    "WAVEEND": PacketLayout(0b10101, 5, 5, {"delta": (5, 3), "sa": (8, 1), "simd": (9, 2), "wgp": (11, 3),
                                            "wave": (15, 5)}),
    "WAVESTART": PacketLayout(0b01100, 5, 8, {"delta": (5, 2), "sa": (7, 1), "simd": (8, 2), "wgp": (10, 3),
                                              "wave": (13, 5), "id": (18, 14)}),
    "REG": PacketLayout(0b1001, 4, 16, {"delta": (4, 3), "slot": (7, 3), "hi_byte": (8, 8), "subop": (16, 16),
                                        "value": (32, 32)}),
    "TS_DELTA_OR_MARK": PacketLayout(0b0000001, 7, 12, {"pl": (8, 1), "rt": (9, 1), "delta": (12, 36)}),
    "LAYOUT_HEADER": PacketLayout(0b0010001, 7, 16, {"layout": (7, 6), "simd": (13, 2), "group": (15, 3),
                                                     "sel_a": (28, 4), "sel_b": (33, 4)}),
    "INST": PacketLayout(0b010, 3, 5, {"delta": (4, 3), "wave": (8, 5), "op": (13, 7)}),
}
SHORT_MIN, SHORT_MAX = 4, 19          # TS_DELTA_SHORT's time step: its 4-bit delta + 4
LAYOUT_RDNA3, SEL_A = 3, 6
REG_SLOT, REG_UCONFIG, REG_EVENT, EVENT_SUBOP = 4, 2, 0x82, 0xFF
UNIT_NIBBLES = 64                     # SQ_THREAD_TRACE_WPTR counts 32-byte units

# TOKEN_MASK.token_exclude bits (gfx10+ SQ_TT_TOKEN_EXCLUDE) of the packets the mock writes
EXCLUDE_BIT = {"VALUINST": 2, "WAVESTART": 4, "WAVEEND": 4, "IMMEDIATE": 5, "REG": 6, "INST": 8}

# the INST packet's op for each instruction class (amd.md 9); VALU and IMMEDIATE have packets of their own
INST_OP = {"SALU": 0x0, "SALU_EXEC": 0x72, "SMEM": 0x1, "MESSAGE": 0x9, "VALU_TRANS": 0xB, "VALU_SHIFT64": 0xD,
           "VALU_MAD64": 0xE, "VALU_F64": 0xF, "BARRIER": 0x13, "FLAT_RD": 0x1C, "FLAT_WR": 0x1D, "VMEM_RD": 0x21,
           "VMEM_WR": 0x24, "LDS_RD": 0x29, "LDS_WR": 0x2B, "VALU_EXEC": 0x73}
JUMP, JUMP_NO = 0x3, 0x4


def pack(name: str, **values: int) -> int:
    """A packet's bits: its pattern and its fields (each must fit)."""
    lay = LAYOUTS[name]
    bits = lay.pattern
    for key, v in values.items():
        lo, width = lay.fields[key]
        if not 0 <= v < 1 << width:
            raise ValueError(f"{name}.{key} = {v} does not fit its {width} bits")
        bits |= v << lo
    return bits


class Stream:
    """One SE's trace as nibbles, with the time of its last packet (cycles from the trace's start)."""

    def __init__(self) -> None:
        self.nibbles = bytearray()
        self.time = 0

    def put(self, name: str, time: int, **values: int) -> None:
        """Packet `name` at cycle `time` (never before the last packet's)."""
        gap = max(0, time - self.time)
        spec = LAYOUTS[name].fields.get("delta")
        room = (1 << spec[1]) - 1 if spec else 0
        if gap > room:
            self._advance(gap)
            gap = 0
        if spec:
            values["delta"] = gap
        self._raw(name, pack(name, **values))
        self.time = max(self.time, time)

    def _advance(self, gap: int) -> None:
        if SHORT_MIN <= gap <= SHORT_MAX:
            self._raw("TS_DELTA_SHORT", pack("TS_DELTA_SHORT", delta=gap - SHORT_MIN))
            return
        most = (1 << 36) - 1
        while gap:
            step = min(gap, most)
            self._raw("TS_DELTA_OR_MARK", pack("TS_DELTA_OR_MARK", delta=step))
            gap -= step

    def _raw(self, name: str, bits: int) -> None:
        self.nibbles.extend((bits >> (4 * i)) & 0xF for i in range(LAYOUTS[name].nibbles))

    def pad(self) -> None:
        """NOPs up to the next whole 32-byte unit (what the hardware flushes when tracing finishes)."""
        self.nibbles.extend(bytes(-len(self.nibbles) % UNIT_NIBBLES))

    def to_bytes(self, start: int, end: int) -> bytes:
        """Nibbles [start, end) (both even) as bytes, low nibble first."""
        n = self.nibbles
        return bytes(n[i] | n[i + 1] << 4 for i in range(start, end, 2))


def header(simd: int) -> tuple[str, dict[str, int]]:
    return "LAYOUT_HEADER", {"layout": LAYOUT_RDNA3, "simd": simd, "sel_a": SEL_A}


def dispatch_packets(work: DispatchWork, se: int, t0: int, unit: tuple[int, int, int] | None, exclude: int,
                     first_id: int) -> list[tuple[int, str, dict[str, int]]]:
    """The packets (cycle, name, fields) of SE `se` for a dispatch that started at cycle t0, in time order:
    every wave's start and end, and the instructions of the waves on `unit` (sa, wgp, simd; None: no
    instruction tracing on this SE). `exclude` is TOKEN_MASK's token_exclude; `first_id` numbers the waves."""
    def wanted(name: str) -> bool:
        return not exclude >> EXCLUDE_BIT[name] & 1
    events: list[tuple[int, int, str, dict[str, int]]] = []
    for w in (int(i) for i in (work.se == se).nonzero()[0]):
        where = {"sa": int(work.sa[w]), "simd": int(work.simd[w]), "wgp": int(work.wgp[w]),
                 "wave": int(work.slot[w])}
        start = t0 + int(work.start[w])
        if wanted("WAVESTART"):
            events.append((start, len(events), "WAVESTART", {**where, "id": (first_id + w) & 0x3FFF}))
        if unit is not None and (where["sa"], where["wgp"], where["simd"]) == unit:
            for t, cls, taken in work.issued.get(w, ()):
                p = _issue(cls, taken, where["wave"])
                if p is not None and wanted(p[0]):
                    events.append((t0 + t, len(events), *p))
        if wanted("WAVEEND"):
            events.append((start + int(work.cycles[w]), len(events), "WAVEEND", where))
    events.sort(key=lambda e: (e[0], e[1]))
    return [(t, name, f) for t, _, name, f in events]


def _issue(c: str, taken: bool, wave: int) -> tuple[str, dict[str, int]] | None:
    """The packet of one issued instruction of class `c` (work.py), None when it issues none."""
    if c in ("NONE", "ENDPGM"):
        return None
    if c == "VALU":
        return "VALUINST", {"wave": wave}
    if c == "IMMEDIATE":
        return "IMMEDIATE", {"wave": wave}
    if c == "JUMP":
        return "INST", {"wave": wave, "op": JUMP if taken else JUMP_NO}
    return "INST", {"wave": wave, "op": INST_OP[c]}
