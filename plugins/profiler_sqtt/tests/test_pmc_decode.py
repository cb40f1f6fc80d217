"""tg_profiler_sqtt.pmc on the captures' PMC readbacks: totals from the schedule (checked record by record with
struct), inactive WGP slots, agreement with the SQTT traces of the same dispatch, and bad schedules."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from tg_profiler_sqtt.pmc import PMCError, decode_pmc, totals
from tg_profiler_sqtt.sqtt import decode

import sqtt_reference as ref


def readback(run: str) -> tuple[bytes, list[dict]]:
    pmc = ref.run_meta(run)["pmc"][0]
    return (ref.CAPTURES / run / pmc["file"]).read_bytes(), pmc["sched"]


def reference_totals(blob: bytes, sched: list[dict]) -> dict[str, int]:
    """Each counter's sum of its records, read one by one: LO, plus HI << 32 except for SQ (no HI on gfx11)."""
    out = {}
    for s in sched:
        n = s["xcc"] * s["inst"] * s["se"] * s["sa"] * s["wgp"]
        records = [struct.unpack_from("<II", blob, s["off"] + 8 * i) for i in range(n)]
        out[s["name"]] = sum(lo + (0 if s["block"] == "SQ" else hi << 32) for lo, hi in records)
    return out


@pytest.mark.parametrize("run", ref.RUNS)
def test_totals_follow_the_schedule(run):
    blob, sched = readback(run)
    counters = decode_pmc(blob, sched)
    assert list(counters) == [s["name"] for s in sched]
    assert totals(counters) == reference_totals(blob, sched)
    for s in sched:
        c = counters[s["name"]]
        assert c.values.shape == (s["xcc"], s["inst"], s["se"], s["sa"], s["wgp"]) and c.active.all()


@pytest.mark.parametrize("run", ref.RUNS)
def test_counters_agree_with_the_trace(run):
    # one wave (README): the SQ counters count on the SE whose trace has its WAVESTART, and on no other SE;
    # the plus kernel issues two VALU instructions (v_lshlrev_b32, v_add_f32), the empty one none
    blob, sched = readback(run)
    counters = decode_pmc(blob, sched)
    wave_se = [s["se"] for s in ref.run_meta(run)["sqtt"] if decode(ref.stream(run, s["se"])).count("WAVESTART")]
    busy = counters["SQ_BUSY_CYCLES"].values.sum(axis=(0, 1, 3, 4))
    assert np.flatnonzero(busy).tolist() == wave_se
    assert counters["SQ_INSTS_VALU"].total == (2 if run.startswith("plus") else 0)
    assert counters["GRBM_GUI_ACTIVE"].total > counters["SQ_BUSY_CYCLES"].total > 0


def test_inactive_wgp_slots_are_zero_and_not_counted():
    blob, sched = readback("plus_run_0")
    full = decode_pmc(blob, sched)
    busy = np.argwhere(full["SQ_BUSY_CYCLES"].values)[0]  # (xcc, inst, se, sa, wgp) of the wave's WGP
    # harvest every WGP of the other SA of that SE: their slots were never written (all zero), so this fits
    active = np.ones((1, 6, 2, 4), bool)
    active[0, busy[2], 1 - busy[3], :] = False
    counters = decode_pmc(blob, sched, active)
    for s in sched:
        c = counters[s["name"]]
        if s["wgp"] > 1:  # per-WGP counters (SQ) skip inactive WGPs
            assert not c.active[0, :, busy[2], 1 - busy[3]].any()
            assert (c.values[~c.active] == 0).all()
        else:  # the other blocks have no WGP instances to skip
            assert c.active.all()
    assert totals(counters) == totals(full)
    # the same mask as a function
    assert totals(decode_pmc(blob, sched, lambda x, se, sa, wgp: bool(active[x, se, sa, wgp]))) == totals(full)


def test_a_written_slot_marked_inactive_is_an_error():
    blob, sched = readback("plus_run_0")
    busy = np.argwhere(decode_pmc(blob, sched)["SQ_BUSY_CYCLES"].values)[0]
    active = np.ones((1, 6, 2, 4), bool)
    active[0, busy[2], busy[3], busy[4]] = False
    record = sched[0]["off"] + 8 * int(np.ravel_multi_index(tuple(busy), (1, 1, 6, 2, 4)))
    with pytest.raises(PMCError, match=f"counter SQ_BUSY_CYCLES: the record of inactive instance .*'se': {busy[2]}"
                                       f".* at byte offset {record} is not zero"):
        decode_pmc(blob, sched, active)


def test_hi_words_count_outside_sq():
    sched = [{"name": "A", "block": "GL2C", "xcc": 1, "inst": 2, "se": 1, "sa": 1, "wgp": 1, "off": 0, "size": 16},
             {"name": "B", "block": "SQ", "xcc": 1, "inst": 1, "se": 1, "sa": 1, "wgp": 2, "off": 16, "size": 16}]
    blob = struct.pack("<8I", 5, 1, 7, 0, 3, 9, 4, 0)  # B's HI words are not SQ registers: ignored
    assert totals(decode_pmc(blob, sched)) == {"A": 5 + (1 << 32) + 7, "B": 7}


@pytest.mark.parametrize("change, message", [
    ({"size": 376}, r"counter SQ_BUSY_CYCLES: size 376 bytes at offset 0 is not 8 bytes for each of its 48 instances"),
    ({"off": 4000}, r"counter SQ_BUSY_CYCLES: bytes 4000..4384 lie outside the 4096-byte readback"),
    ({"off": 2}, r"counter SQ_BUSY_CYCLES: offset 2 is not 4-byte aligned"),
    ({"se": 0, "size": 0}, r"counter SQ_BUSY_CYCLES: instance counts .*'se': 0.* must all be >= 1"),
])
def test_bad_schedules(change, message):
    blob, sched = readback("plus_run_0")
    with pytest.raises(PMCError, match=message):
        decode_pmc(blob, [dict(sched[0], **change)] + sched[1:])


def test_schedule_errors_name_the_problem():
    blob, sched = readback("plus_run_0")
    with pytest.raises(PMCError, match="counter SQ_BUSY_CYCLES is scheduled twice"):
        decode_pmc(blob, [sched[0], sched[0]])
    with pytest.raises(PMCError, match="lacks off, size"):
        decode_pmc(blob, [{k: v for k, v in sched[0].items() if k not in ("off", "size")}])
    with pytest.raises(PMCError, match=r"the active-WGP mask has shape \(6, 2, 4\); its instances need \(xcc, se, "
                                       r"sa, wgp\) = \(1, 6, 2, 4\)"):
        decode_pmc(blob, sched, np.ones((6, 2, 4), bool))
