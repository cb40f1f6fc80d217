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

import numpy as np

from tg_mockgpu.cp.work import CLASSES, DispatchWork


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


KINDS = tuple(LAYOUTS)
KIND = {name: i for i, name in enumerate(KINDS)}
NIBBLES = np.array([LAYOUTS[k].nibbles for k in KINDS], np.int64)
DELTA_LO = np.array([LAYOUTS[k].fields.get("delta", (0, 0))[0] for k in KINDS], np.uint64)
ROOM = np.array([(1 << LAYOUTS[k].fields.get("delta", (0, 0))[1]) - 1 for k in KINDS], np.int64)
MAX_MARK = (1 << 36) - 1              # TS_DELTA_OR_MARK's delta field


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


def pack_many(name: str, n: int, **values: np.ndarray | int) -> np.ndarray:
    """`pack` over arrays: n packets' bits (uint64)."""
    lay = LAYOUTS[name]
    bits = np.full(n, lay.pattern, np.uint64)
    for key, v in values.items():
        lo, width = lay.fields[key]
        a = np.asarray(v, np.int64)
        if a.size and (a.min() < 0 or a.max() >= 1 << width):
            raise ValueError(f"{name}.{key} has values outside its {width} bits")
        bits |= a.astype(np.uint64) << np.uint64(lo)
    return bits


class Stream:
    """One SE's trace as nibbles, with the time of its last packet (cycles from the trace's start)."""

    def __init__(self, time: int = 0) -> None:
        self.nibbles = bytearray()
        self.time = time

    def put(self, name: str, time: int, **values: int) -> None:
        """Packet `name` at cycle `time` (a time before the last packet's counts as the last packet's)."""
        self.put_many(np.array([time], np.int64), np.array([KIND[name]]), np.array([pack(name, **values)], np.uint64))

    def put_many(self, times: np.ndarray, kinds: np.ndarray, bits: np.ndarray) -> None:
        """Packets in time order: their cycles, kinds (KIND) and bits without the delta. Each packet's delta is
        the gap since the packet before it; a gap its delta field cannot hold goes into a timestamp packet just
        before it (TS_DELTA_SHORT for 4..19 cycles, else TS_DELTA_OR_MARK)."""
        if not len(times):
            return
        prev = np.concatenate([[self.time], np.maximum.accumulate(times)[:-1]])
        gap = np.maximum(times - prev, 0)
        if gap.max() > MAX_MARK:   # longer than one timestamp packet holds (hours of GPU time): one at a time
            for t, k, b in zip(times.tolist(), kinds.tolist(), bits.tolist()):
                g = max(0, t - self.time)
                while g > MAX_MARK:
                    self._append(np.array([pack("TS_DELTA_OR_MARK", delta=MAX_MARK)], np.uint64), np.array([12]))
                    self.time += MAX_MARK
                    g -= MAX_MARK
                self.put_many(np.array([self.time + g]), np.array([k]), np.array([b], np.uint64))
            return
        ts = gap > ROOM[kinds]
        short = ts & (gap >= SHORT_MIN) & (gap <= SHORT_MAX)
        g = gap.astype(np.uint64)
        pre = np.where(short, LAYOUTS["TS_DELTA_SHORT"].pattern | (g - np.uint64(SHORT_MIN)) << np.uint64(4),
                       LAYOUTS["TS_DELTA_OR_MARK"].pattern | g << np.uint64(12))
        pre_len = np.where(ts, np.where(short, 2, 12), 0)
        main = bits | np.where(ts, np.uint64(0), g) << DELTA_LO[kinds]
        both = np.stack([pre, main], 1).ravel()
        lens = np.stack([pre_len, NIBBLES[kinds]], 1).ravel()
        keep = lens > 0
        self._append(both[keep], lens[keep])
        self.time = max(self.time, int(times.max()))

    def _append(self, bits: np.ndarray, lens: np.ndarray) -> None:
        at = np.repeat(np.cumsum(lens) - lens, lens)
        shift = (4 * (np.arange(int(lens.sum())) - at)).astype(np.uint64)
        self.nibbles += ((np.repeat(bits, lens) >> shift) & np.uint64(0xF)).astype(np.uint8).tobytes()

    def pad(self) -> None:
        """NOPs up to the next whole 32-byte unit (what the hardware flushes when tracing finishes)."""
        self.nibbles.extend(bytes(-len(self.nibbles) % UNIT_NIBBLES))

    def to_bytes(self, start: int, end: int) -> bytes:
        """Nibbles [start, end) (both even) as bytes, low nibble first."""
        n = np.frombuffer(self.nibbles, np.uint8, end - start, start)
        return (n[0::2] | n[1::2] << 4).astype(np.uint8).tobytes()


def header(simd: int) -> tuple[str, dict[str, int]]:
    return "LAYOUT_HEADER", {"layout": LAYOUT_RDNA3, "simd": simd, "sel_a": SEL_A}


def dispatch_packets(work: DispatchWork, se: int, t0: int, unit: tuple[int, int, int] | None, exclude: int,
                     first_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The packets (cycles, kinds, bits without delta; Stream.put_many) of SE `se` for a dispatch that started at
    cycle t0, in time order: every wave's start and end, and the instructions of the waves on `unit` (sa, wgp,
    simd; None: no instruction tracing on this SE). `exclude` is TOKEN_MASK's token_exclude; `first_id` numbers
    the waves. Ties keep each wave's own order, waves in dispatch order."""
    def wanted(name: str) -> bool:
        return not exclude >> EXCLUDE_BIT[name] & 1
    mine = np.flatnonzero(work.se == se)
    sa, simd, wgp, slot = work.sa[mine], work.simd[mine], work.wgp[mine], work.slot[mine]
    start = t0 + work.start[mine]
    n = len(mine)
    times, ranks, order, kinds, bits = [], [], [], [], []
    if wanted("WAVESTART"):
        times.append(start)
        ranks.append(np.arange(n))
        order.append(np.zeros(n, np.int64))
        kinds.append(np.full(n, KIND["WAVESTART"]))
        bits.append(pack_many("WAVESTART", n, sa=sa, simd=simd, wgp=wgp, wave=slot, id=(first_id + mine) & 0x3FFF))
    if wanted("WAVEEND"):
        times.append(start + work.cycles[mine])
        ranks.append(np.arange(n))
        order.append(np.full(n, 1 << 40, np.int64))
        kinds.append(np.full(n, KIND["WAVEEND"]))
        bits.append(pack_many("WAVEEND", n, sa=sa, simd=simd, wgp=wgp, wave=slot))
    if unit is not None:
        on_unit = (sa == unit[0]) & (wgp == unit[1]) & (simd == unit[2])
        for rank in np.flatnonzero(on_unit).tolist():
            got = work.issued.get(int(mine[rank]))
            if got is None:
                continue
            when, cls, taken = got
            kind = ISSUE_KIND[cls]
            op = np.where(cls == CLASS_JUMP, np.where(taken, JUMP, JUMP_NO), ISSUE_OP[cls])
            keep = (kind >= 0) & ~(exclude >> EXCLUDE_OF_KIND[np.maximum(kind, 0)] & 1).astype(bool)
            kind, op, idx = kind[keep], op[keep], np.flatnonzero(keep)
            wave = np.uint64(int(slot[rank]))
            inst = kind == KIND["INST"]
            b = PATTERN[kind] | np.where(inst, wave << np.uint64(8) | op.astype(np.uint64) << np.uint64(13),
                                         wave << np.uint64(7))
            times.append(t0 + when[keep])
            ranks.append(np.full(len(idx), rank, np.int64))
            order.append(1 + idx)
            kinds.append(kind)
            bits.append(b)
    if not times:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint64)
    tt, rr, oo, kk, bb = (np.concatenate(x) for x in (times, ranks, order, kinds, bits))
    idx = np.lexsort((oo, rr, tt))
    return tt[idx], kk[idx], bb[idx]


def _issue_tables() -> tuple[np.ndarray, np.ndarray]:
    """Per instruction class (work.py CLASSES): the kind of packet it issues (-1: none) and the INST op."""
    kind, op = np.full(len(CLASSES), -1, np.int64), np.zeros(len(CLASSES), np.int64)
    for i, c in enumerate(CLASSES):
        if c in ("NONE", "ENDPGM"):
            continue   # s_delay_alu issues nothing; s_endpgm is the WAVEEND
        if c in ("VALU", "IMMEDIATE"):
            kind[i] = KIND["VALUINST" if c == "VALU" else "IMMEDIATE"]
        else:
            kind[i], op[i] = KIND["INST"], INST_OP.get(c, JUMP)
    return kind, op


ISSUE_KIND, ISSUE_OP = _issue_tables()
CLASS_JUMP = CLASSES.index("JUMP")
PATTERN = np.array([LAYOUTS[k].pattern for k in KINDS], np.uint64)
EXCLUDE_OF_KIND = np.array([EXCLUDE_BIT.get(k, 31) for k in KINDS], np.int64)   # 31: never excluded
