"""tg_profiler_sqtt.sqtt.decode on the real gfx1100 captures (the README's invariants) and on synthetic streams,
checked against the independent reference decoder of sqtt_reference.py."""
from __future__ import annotations

import numpy as np
import pytest

from tg_profiler_sqtt import packets
from tg_profiler_sqtt.sqtt import Packet, SQTTError, Trace, decode

import sqtt_reference as ref

STREAMS = ref.streams()
INSTRUCTION_KINDS = ("INST", "VALUINST", "IMMEDIATE", "IMMEDIATE_MASK")


@pytest.fixture(scope="module", params=STREAMS, ids=[f"{r}-se{s}" for r, s in STREAMS])
def capture(request) -> tuple[str, int, bytes, Trace]:
    run, se = request.param
    data = ref.stream(run, se)
    return run, se, data, decode(data)


def test_there_are_captures():
    # the parametrized tests below must have something to run on
    assert len(STREAMS) == 24 and {r.split("_run")[0] for r in ref.RUNS} == {"empty", "plus"}


def test_matches_the_reference_decoder(capture):
    _, _, data, trace = capture
    expected, stop = ref.decode(data)
    assert [p.kind for p in trace] == [p.kind for p in expected]
    assert trace.offsets.tolist() == [p.offset for p in expected]
    assert trace.times.tolist() == [p.time for p in expected]
    assert trace.raws.tolist() == [p.raw for p in expected]
    assert trace.tail == (stop if stop < 2 * len(data) else None)


def test_starts_with_an_rdna3_layout_header(capture):
    trace = capture[3]
    assert trace[0].kind == "LAYOUT_HEADER" and trace[0].layout == 3 and trace[0].offset == 0


def test_time_never_decreases(capture):
    assert np.all(np.diff(capture[3].times) >= 0)


def test_packets_tile_the_stream(capture):
    # each packet starts where the one before it ended; the stream ends after the last one, or inside a last
    # packet cut off by the end (the hardware stops mid-packet)
    _, _, data, trace = capture
    ends = trace.offsets + packets.NIBBLES[trace.kinds]
    assert trace.offsets[0] == 0 and np.array_equal(trace.offsets[1:], ends[:-1])
    if trace.tail is None:
        assert ends[-1] == 2 * len(data)
    else:
        low_byte = (int.from_bytes(data, "little") >> (4 * trace.tail)) & 0xFF
        assert trace.tail == ends[-1] and trace.tail + ref.TABLE[ref.kind_of(low_byte)][1] > 2 * len(data)


def test_wave_starts_and_ends_pair_up_per_slot(capture):
    trace = capture[3]
    open_slots: set[tuple[int, int, int, int]] = set()
    for p in trace:
        if p.kind in ("WAVESTART", "WAVEEND"):
            slot = (p.sa, p.wgp, p.simd, p.wave)
            if p.kind == "WAVESTART":
                assert slot not in open_slots, f"second WAVESTART on {slot} at nibble {p.offset}"
                open_slots.add(slot)
            else:
                assert slot in open_slots, f"WAVEEND without WAVESTART on {slot} at nibble {p.offset}"
                open_slots.remove(slot)
    assert not open_slots
    assert trace.count("WAVESTART") == trace.count("WAVEEND")


def test_instruction_packets_only_where_instruction_tracing_is_on(capture):
    # the queue excludes INST, VALUINST and IMMEDIATE tokens on SEs outside SQTT_ITRACE_SE_MASK
    run, se, _, trace = capture
    itrace = next(s["itrace"] for s in ref.run_meta(run)["sqtt"] if s["se"] == se)
    if not itrace:
        assert trace.where(*INSTRUCTION_KINDS).size == 0


@pytest.mark.parametrize("run", ref.RUNS)
def test_each_run_is_one_wave_on_one_se(run):
    # one wave per kernel (README): one WAVESTART and one WAVEEND in all six streams together, on the same SE
    traces = {s["se"]: decode(ref.stream(run, s["se"])) for s in ref.run_meta(run)["sqtt"]}
    starts = {se: t.count("WAVESTART") for se, t in traces.items()}
    ends = {se: t.count("WAVEEND") for se, t in traces.items()}
    assert sum(starts.values()) == 1 and starts == ends
    se = next(se for se, n in starts.items() if n)
    kinds = {packets.KIND_NAMES[k] for k in traces[se].kinds}
    if run.startswith("plus"):  # the plus kernel ran with instruction tracing on its SE
        assert {"INST", "VALUINST", "IMMEDIATE"} <= kinds
    else:
        assert not kinds & set(INSTRUCTION_KINDS)


def test_fields_as_attributes_and_as_columns(capture):
    trace = capture[3]
    for kind in ("WAVESTART", "REG", "TS_WAVE_STATE", "INST"):
        for name in packets.BY_NAME[kind].fields:
            assert trace.field(name, kind).tolist() == [getattr(p, name) for p in trace if p.kind == kind]
    p = trace[1]
    assert p.fields() == {k: getattr(p, k) for k in packets.BY_NAME[p.kind].fields}
    assert trace[-1] == list(trace)[-1] and trace[-2:] == list(trace)[-2:]


def test_field_errors_name_what_exists():
    trace = decode(ref.encode([ref.header(), ("NOP", 0)]))
    with pytest.raises(AttributeError, match="a LAYOUT_HEADER packet has no field 'wave'; its fields: layout"):
        trace[0].wave
    with pytest.raises(KeyError, match="no packet type 'WAVE'; the RDNA3 types: VALUINST"):
        trace.count("WAVE")
    with pytest.raises(KeyError, match="a NOP packet has no field 'delta'; its fields: none"):
        trace.field("delta", "NOP")
    with pytest.raises(IndexError):
        trace[len(trace)]


def test_inst_op_names():
    ops = {0x1: "SMEM_RD", 0x21: "SGMEM_RD_1", 0x24: "SGMEM_WR_2", 0x73: "VALU1_WR_EXEC", 0x50: "OTHER_SIMD_0x50",
           0x7F: "UNKNOWN_0x7f"}
    trace = decode(ref.encode([ref.header()] + [("INST", ref.packet_bits("INST", op=op)) for op in ops]))
    assert [p.op_name for p in trace if p.kind == "INST"] == list(ops.values())


def random_stream(rng: np.random.Generator, n: int) -> list[tuple[str, int]]:
    """`n` packets of random kinds (weighted towards the short ones real traces are full of), random fields."""
    kinds = [k for k in ref.TABLE if k != "LAYOUT_HEADER"]
    weights = np.array([1.0 if ref.TABLE[k][1] > 8 else 4.0 for k in kinds])
    items = [ref.header()]
    for kind in rng.choice(kinds, size=n, p=weights / weights.sum()):
        pattern, _, delta, named = ref.TABLE[kind]
        spec = dict(named, **({"delta": delta} if delta else {}))
        values = {name: int(rng.integers(0, 1 << (hi - lo + 1), dtype=np.uint64)) for name, (hi, lo) in spec.items()}
        items.append((str(kind), ref.packet_bits(str(kind), **values)))
    return items


@pytest.mark.parametrize("seed", range(4))
def test_random_streams_match_the_reference(seed):
    # every packet type, every field value range, delta rules (TS_DELTA_SHORT's +4, markers) included
    items = random_stream(np.random.default_rng(seed), 3000)
    data = ref.encode(items)
    trace, (expected, stop) = decode(data), ref.decode(data)
    assert [p.kind for p in trace][:len(items)] == [k for k, _ in items]
    assert [(p.kind, p.offset, p.time, p.raw) for p in trace] == [(p.kind, p.offset, p.time, p.raw) for p in expected]
    assert trace.tail is None and stop == 2 * len(data)


def test_delta_rules():
    items = [ref.header(), ("TS_DELTA_SHORT", ref.packet_bits("TS_DELTA_SHORT", delta=0)),  # 0 + 4
             ("TS_DELTA_OR_MARK", ref.packet_bits("TS_DELTA_OR_MARK", delta=1000, rt=1, pl=0)),  # a marker: 0
             ("TS_DELTA_OR_MARK", ref.packet_bits("TS_DELTA_OR_MARK", delta=1000, rt=1, pl=1)),  # 1000
             ("TS_DELTA_OR_MARK", ref.packet_bits("TS_DELTA_OR_MARK", delta=(1 << 36) - 1)),  # the widest delta
             ("VALUINST", ref.packet_bits("VALUINST", delta=7, wave=3)), ("NOP", 0)]
    trace = decode(ref.encode(items))
    assert trace.times[:6].tolist() == [0, 4, 4, 1004, 1004 + (1 << 36) - 1, 1004 + (1 << 36) - 1 + 7]


def test_large_stream_matches_its_parts():
    # a multi-megabyte stream (the size of a real trace window) decodes to the same packets as its pieces
    rng = np.random.default_rng(7)
    parts = [ref.encode(random_stream(rng, 2000)) for _ in range(8)]
    whole = decode(b"".join(parts * 64))
    first = [decode(p) for p in parts]
    n = sum(len(t) for t in first)
    assert len(whole) == 64 * n
    assert whole.kinds[:n].tolist() == sum((t.kinds.tolist() for t in first), [])
    assert whole.raws[:n].tolist() == sum((t.raws.tolist() for t in first), [])
    # times continue across the joins: each piece's deltas add to the end time of the one before
    sums = np.cumsum([int(t.times[-1]) for t in first])
    assert whole.times[np.cumsum([len(t) for t in first]) - 1].tolist() == sums.tolist()


def test_packet_repr_and_equality():
    trace = decode(ref.encode([ref.header(), ("WAVESTART", ref.packet_bits("WAVESTART", wave=5, simd=2, delta=3))]))
    p = trace[1]
    assert p == Packet("WAVESTART", 3, 16, p.raw) and hash(p) == hash(Packet("WAVESTART", 3, 16, p.raw))
    assert repr(p).startswith("<WAVESTART t=3 @16 ") and "wave=5" in repr(p) and p.byte_offset == 8


# ---- malformed input ---------------------------------------------------------------------------------------------

def test_truncated_stream_names_the_offset():
    data = ref.stream(*STREAMS[0])
    with pytest.raises(SQTTError, match=r"truncated SQTT stream: 1000 bytes .* 8 bytes into the unit at byte offset "
                                        r"992"):
        decode(data[:1000])
    assert len(decode(data[:992])) > 0  # whole units decode (the cut packet at the end is the tail)


def test_empty_stream():
    with pytest.raises(SQTTError, match="empty SQTT stream: expected a LAYOUT_HEADER at byte offset 0"):
        decode(b"")


def test_bad_header_names_the_offset():
    data = bytearray(ref.stream(*STREAMS[0]))
    data[0] = 0x00  # a NOP where the header's low byte was
    with pytest.raises(SQTTError, match="bad SQTT header at byte offset 0: the stream starts with a NOP packet "
                                        r"\(low byte 0x00\), not a LAYOUT_HEADER"):
        decode(bytes(data))


@pytest.mark.parametrize("layout", [0, 4, 63])
def test_other_layouts_are_refused(layout):
    with pytest.raises(SQTTError, match=f"bad SQTT header at byte offset 0: layout {layout}; supported: 3"):
        decode(ref.encode([ref.header(layout=layout)]))
