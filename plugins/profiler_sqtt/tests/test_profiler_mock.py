"""tg-profiler-sqtt end to end on the mock GPU, whose command processor counts what its emulator executed and
writes RDNA3 thread traces through the registers the profiler programs (tg-mockgpu cp/perf.py): counters follow
the work, every replayed JIT kernel is traced, and the warnings come when slots or windows run out."""
from __future__ import annotations

import numpy as np
import pytest
from profiler_helpers import profile_with

from tg_core.tensor import Tensor
from tg_profiler_sqtt import results
from tg_profiler_sqtt.ring import ProfileWarning
from tg_profiler_sqtt.settings import Settings


def run_one(dev, n: int) -> results.DispatchProfile:
    a = np.arange(n, dtype=np.float32)
    x = Tensor(a, device=dev.device).realize()
    dev.synchronize()
    results.take(dev.device)
    np.testing.assert_allclose((x * 3 + 1).numpy(), a * 3 + 1)
    dev.synchronize()
    (p,) = results.take(dev.device)
    return p


def test_valu_instructions_double_with_the_grid(monkeypatch, amd):
    profile_with(monkeypatch, amd, Settings(pmc=True, counters=("SQ_INSTS_VALU", "SQ_WAVES", "SQ_INSTS_SALU"),
                                            slots=4))
    small, big = run_one(amd, 4096), run_one(amd, 8192)
    assert small.site.grid[0] is not None and big.site.grid[0] == 2 * small.site.grid[0]
    assert small.totals["SQ_INSTS_VALU"] > 0
    assert big.totals["SQ_INSTS_VALU"] == 2 * small.totals["SQ_INSTS_VALU"]
    assert big.totals["SQ_WAVES"] == 2 * small.totals["SQ_WAVES"]
    # per instance: the work lands on WGPs, and the instances add up to the total
    c = big.counters["SQ_INSTS_VALU"]
    assert int(c.values.sum()) == big.totals["SQ_INSTS_VALU"] and (c.values > 0).sum() > 1


def jit3():
    from tg_core.engine.jit import TinyJit

    @TinyJit
    def f(x: Tensor) -> Tensor:
        y = (x * 2).contiguous().realize()
        z = (y + 1).contiguous().realize()
        return (z * z).contiguous().realize()
    return f


def test_a_3_kernel_jit_replayed_5_times_gives_15_traces(monkeypatch, amd):
    from tg_profiler_sqtt.sqtt import decode
    profile_with(monkeypatch, amd, Settings(sqtt=True, buffer_mib=4, slots=32))
    f = jit3()
    a = np.arange(256, dtype=np.float32)
    xs = [Tensor(a + i, device=amd.device).realize() for i in range(7)]
    for x in xs[:2]:
        f(x)
    amd.synchronize()
    results.take(amd.device)
    for i, x in enumerate(xs[2:]):
        np.testing.assert_allclose(f(x).numpy(), ((a + i + 2) * 2 + 1) ** 2)
    amd.synchronize()
    done = results.take(amd.device)
    assert len(done) == 15 and [p.site for p in done] == [p.site for p in done[:3]] * 5
    for p in done:
        starts = sum(sum(1 for q in decode(b) if q.kind == "WAVESTART") for b in p.raw_traces.values())
        ends = sum(sum(1 for q in decode(b) if q.kind == "WAVEEND") for b in p.raw_traces.values())
        assert starts == ends >= 1, p.kernel


def test_slots_overwritten_within_one_submit_warn(monkeypatch, amd):
    profile_with(monkeypatch, amd, Settings(pmc=True, counters=("SQ_WAVES",), slots=2))
    f = jit3()
    a = np.arange(64, dtype=np.float32)
    x = Tensor(a, device=amd.device).realize()
    f(x)
    f(x)
    amd.synchronize()
    results.take(amd.device)
    with pytest.warns(ProfileWarning, match=r"1 profiled dispatch was overwritten.*raise PROF_SLOTS"):
        np.testing.assert_allclose(f(x).numpy(), ((a * 2) + 1) ** 2)
        amd.synchronize()
    done = results.take(amd.device)
    assert len(done) == 2 and all(p.totals["SQ_WAVES"] > 0 for p in done)


def test_a_trace_window_too_small_warns(monkeypatch, amd):
    profile_with(monkeypatch, amd, Settings(sqtt=True, buffer_mib=1, slots=256))  # 4 KiB windows
    a = np.random.default_rng(0).random((16, 4096), dtype=np.float32)
    x = Tensor(a, device=amd.device).realize()
    amd.synchronize()
    results.take(amd.device)
    # a 4096-long loop per lane: the traced SE's instruction packets overflow its window
    with pytest.warns(ProfileWarning, match=r"SQTT window of SE 0 filled.*raise SQTT_BUFFER_SIZE"):
        np.testing.assert_allclose(x.sum(axis=1).numpy(), a.sum(axis=1), rtol=1e-5)
        amd.synchronize()
    (p,) = results.take(amd.device)
    assert p.full == (0,) and len(p.raw_traces[0]) == 4096 - 32
    assert p.traces[0][0].kind == "LAYOUT_HEADER"


def test_the_trace_file_shows_counters_waves_and_their_instructions(monkeypatch, amd):
    from tg_core import profile
    from tg_core.profile import events as ev
    from tg_core.profile import state
    profile_with(monkeypatch, amd, Settings(pmc=True, counters=("SQ_INSTS_VALU",), sqtt=True, buffer_mib=4, slots=4))
    a = np.arange(256, dtype=np.float32)
    x = Tensor(a, device=amd.device).realize()
    amd.synchronize()
    results.take(amd.device)
    monkeypatch.setattr(state, "on", True)
    profile.collect()
    ev.take()
    np.testing.assert_allclose((x * 3 + 1).numpy(), a * 3 + 1)
    amd.synchronize()
    evs = profile.collect()
    monkeypatch.setattr(state, "on", False)
    (p,) = results.take(amd.device)
    (kernel,) = [e for e in evs if e.kind == "kernel"]
    assert kernel.data["counters"] == p.totals and p.totals["SQ_INSTS_VALU"] > 0
    waves = [e for e in evs if e.kind == "wave"]
    ins = [e for e in evs if e.kind == "instruction"]
    assert waves and ins and {e.track for e in ins} <= {e.track for e in waves}
    for track in {e.track for e in ins}:
        mine = [e.name for e in ins if e.track == track]
        assert mine[-1] == "s_endpgm" and any(n.startswith("v_mul_f32") for n in mine), mine
        spans = [(w.start, w.end) for w in waves if w.track == track]
        assert all(any(a <= e.start <= b for a, b in spans) for e in ins if e.track == track)


def test_the_export_reads_dispatches_nobody_synchronized(monkeypatch, amd):
    from tg_core import profile
    from tg_core.profile import events as ev
    from tg_core.profile import state
    profile_with(monkeypatch, amd, Settings(pmc=True, counters=("SQ_WAVES",), slots=4))
    x = Tensor(np.arange(64, dtype=np.float32), device=amd.device).realize()
    amd.synchronize()
    monkeypatch.setattr(state, "on", True)
    profile.collect()
    ev.take()
    (x + 1).realize()  # no host read, no synchronize: the slot is unread until the export collects
    evs = profile.collect()
    monkeypatch.setattr(state, "on", False)
    (pmc,) = [e for e in evs if e.kind == "pmc"]
    assert pmc.data["counters"]["SQ_WAVES"] > 0


CHILD = """
import json, numpy as np
from tg_core.device import Device
from tg_core.tensor import Tensor
from tg_profiler_sqtt import results
dev = Device["AMD"]
a = np.arange(4096, dtype=np.float32)
x = Tensor(a, device="AMD").realize()
dev.synchronize()
results.take("AMD")
np.testing.assert_allclose((x * 3 + 1).numpy(), a * 3 + 1)
dev.synchronize()
(p,) = results.take("AMD")
print(json.dumps({"totals": p.totals, "traced": sorted(se for se, t in p.traces.items()
                                                  if any(q.kind == "WAVESTART" for q in t)),
                  "queue": dev.queue_kind, "xccs": dev.xccs}))
"""


@pytest.mark.parametrize("queue, xccs", [("aql", 1), ("pm4", 2)])
def test_aql_queues_and_two_xccs_count_what_pm4_counts(queue, xccs):
    import json
    import os
    import subprocess
    import sys

    def run(env: dict[str, str]) -> dict:
        full = {**os.environ, "PMC": "1", "PMC_COUNTERS": "SQ_INSTS_VALU,SQ_WAVES,GRBM_GUI_ACTIVE", "SQTT": "1",
                "SQTT_BUFFER_SIZE": "4", "PROF_SLOTS": "4", **env}
        out = subprocess.run([sys.executable, "-c", CHILD], env=full, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])
    base = run({"TG_AMD_QUEUE": "pm4", "TG_AMD_MOCK_XCCS": "1"})
    got = run({"TG_AMD_QUEUE": queue, "TG_AMD_MOCK_XCCS": str(xccs)})
    assert (got["queue"], got["xccs"]) == (queue, xccs)
    assert got["totals"]["SQ_INSTS_VALU"] == base["totals"]["SQ_INSTS_VALU"] > 0
    assert got["totals"]["SQ_WAVES"] == base["totals"]["SQ_WAVES"] > 0
    assert got["traced"] and set(base["traced"]) <= set(got["traced"])
