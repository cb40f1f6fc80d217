"""The profiler's settings (environment variables) and PMC schedules: defaults, the errors for bad values, the
register each counter of a list gets and where its records lie in a slot's readback."""
from __future__ import annotations

import pytest

from tg_profiler_sqtt import counters
from tg_profiler_sqtt.counters import Topology, schedule
from tg_profiler_sqtt.settings import Settings

XTX = Topology(xccs=1, ses=6, sas=2, wgps=4)


def test_defaults_are_off_with_32_slots_and_8_mib_windows():
    s = Settings.from_env({})
    assert not s.enabled and s.slots == 32 and s.itrace_se_mask == 0b11 and s.simd_sel == 0
    assert s.window() == 8 << 20  # 256 MiB over 32 slots
    on = Settings.from_env({"PMC": "1", "SQTT": "yes", "PROF_SLOTS": "4", "SQTT_BUFFER_SIZE": "2"})
    assert on.pmc and on.sqtt and on.counters == counters.DEFAULT and on.window() == (2 << 20) // 4


@pytest.mark.parametrize("env, match", [
    ({"PMC": "maybe"}, r"PMC='maybe': allowed 1/true/yes/on or 0/false/no/off"),
    ({"PROF_SLOTS": "0"}, r"PROF_SLOTS=0 is out of range: allowed 1\.\."),
    ({"SQTT_SIMD_SEL": "4"}, r"SQTT_SIMD_SEL=4 is out of range: allowed 0\.\.3"),
    ({"SQTT_BUFFER_SIZE": "big"}, r"SQTT_BUFFER_SIZE='big' is not an integer"),
    ({"SQTT": "1", "SQTT_BUFFER_SIZE": "1", "PROF_SLOTS": "512"}, r"at least 4096: raise SQTT_BUFFER_SIZE"),
    ({"PMC": "1", "PMC_COUNTERS": "SQ_WAVES,SQ_NOPE"}, r"unknown counter SQ_NOPE; available on gfx11: .*SQ_WAVES"),
    ({"PMC": "1", "PMC_COUNTERS": "SQ_WAVES,SQ_WAVES"}, r"names SQ_WAVES more than once"),
])
def test_bad_settings_say_what_is_allowed(env, match):
    with pytest.raises(ValueError, match=match):
        Settings.from_env(env)


def test_the_default_schedule_of_a_7900_xtx():
    sched = schedule(counters.DEFAULT, XTX)
    by = {s.name: s for s in sched}
    assert [s.name for s in sched] == list(counters.DEFAULT)
    sq = [s for s in sched if s.block == "SQ"]
    # SQ: one record per WGP (6 SEs x 2 SAs x 4 WGPs), the n-th SQ counter on SELECT 2n, sampled at LO n, no HI
    assert all((s.inst, s.se, s.sa, s.wgp, s.size) == (1, 6, 2, 4, 48 * 8) for s in sq)
    assert [(s.select, s.lo, s.hi) for s in sq] == [(0xD9C0 + 2 * n, 0xD1C0 + 2 * n, None) for n in range(len(sq))]
    assert (by["GRBM_GUI_ACTIVE"].inst, by["GRBM_GUI_ACTIVE"].size, by["GRBM_GUI_ACTIVE"].select) == (1, 8, 0xD840)
    assert (by["GL2C_HIT"].inst, by["GL2C_HIT"].lo, by["GL2C_HIT"].hi) == (32, 0xD380, 0xD381)
    assert (by["GL2C_MISS"].select, by["GL2C_MISS"].lo) == (0xDB82, 0xD382)
    # back to back, in list order
    offs = [(s.off, s.size) for s in sched]
    assert offs[0][0] == 0 and all(a + n == b for (a, n), (b, _) in zip(offs, offs[1:]))
    assert counters.readback_bytes(sched) == 5 * 384 + 8 + 2 * 256
    assert by["SQ_INSTS_VALU"].perf_sel == 62 and by["SQ_INSTS_SALU"].perf_sel == 58


def test_a_block_runs_out_of_counters():
    nine = [n for n, (b, _) in counters.COUNTERS.items() if b == "SQ"][:9]
    with pytest.raises(ValueError, match=r"asks for 9 SQ counters .*the SQ block has 8"):
        schedule(nine, XTX)


def test_two_xccs_double_every_record_run():
    s = schedule(["SQ_WAVES"], Topology(xccs=2, ses=6, sas=2, wgps=4))[0]
    assert (s.xcc, s.size) == (2, 2 * 48 * 8)
