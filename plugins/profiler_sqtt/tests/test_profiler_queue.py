"""tg-profiler-sqtt on tg-amd's compute queue, on the mock GPU, with the counter and trace hardware modelled in the
test (until the mock models them): the packets the profiler adds are decoded as the command processor runs them,
a fake PMC answers each COPY_DATA of a counter register with a value that names the SELECT programmed for it and
the instance GRBM_GFX_INDEX chose, a fake SQTT writes a real gfx1100 capture into the window each SE was given and
stores the write pointer the gfx11.0 way. Checked: the register programming, the slot ring (addresses per slot,
tags, the count), the decoded results against what the fakes wrote, JIT replays, the warnings."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from profiler_helpers import profile_with

from tg_core.tensor import Tensor
from tg_mockgpu.cp import pm4 as mock_pm4
from tg_mockgpu.cp.memory import write32
from tg_profiler_sqtt import counters, results
from tg_profiler_sqtt import sequences as seq
from tg_profiler_sqtt.ring import ProfileWarning
from tg_profiler_sqtt.settings import Settings

import sqtt_reference as ref

CAPTURE = "plus_run_0"
LO_TO_SELECT = {lo: regs.select[n] for regs in counters.BLOCKS.values() for n, lo in enumerate(regs.lo)}
HI_TO_SELECT = {hi: regs.select[n] for regs in counters.BLOCKS.values() if regs.hi for n, hi in enumerate(regs.hi)}


def fake_value(sel: int, index: int) -> int:
    """What the fake counter hardware reads for counter `sel` on the instance GRBM_GFX_INDEX `index` selects."""
    se, sa, inst = index >> 16 & 0xFF, index >> 8 & 0xFF, index & 0xFF
    return 1_000_000 * sel + 10_000 * se + 1000 * sa + inst + 1


class FakeHardware:
    """Records every packet the queue runs; answers counter and trace-pointer reads; writes SQTT windows."""

    def __init__(self, monkeypatch, traces: dict[int, bytes] | None = None, fill: bool = False):
        self.seen: list[tuple[str, list[int]]] = []
        self.uconfig: dict[int, int] = {}
        self.index = seq.BROADCAST
        self.bases: dict[int, int] = {}   # SE -> its window's address (BUF0_BASE / BUF0_SIZE)
        self.sizes: dict[int, int] = {}
        self.traces, self.fill = traces or {}, fill
        execute = mock_pm4.PM4Queue._execute
        hw = self

        def run(queue, f, name, p, active, bad):
            hw.seen.append((name, list(p)))
            # the fakes own the performance monitor: these packets never reach the mock's own model of it
            if name == "SET_UCONFIG_REG":
                for i, v in enumerate(p[1:]):
                    hw.write(seq.UCONFIG_BASE + p[0] + i, v)
                return True
            if name == "SET_SH_REG" and p[0] == seq.COMPUTE_THREAD_TRACE_ENABLE - 0x2C00:
                return True
            if name == "WAIT_REG_MEM" and not p[0] & 0x10 and p[1] == seq.SQ_THREAD_TRACE_STATUS:
                return True  # never busy
            if name == "EVENT_WRITE" and p[0] & 0x3F in (seq.THREAD_TRACE_MARKER, seq.THREAD_TRACE_FINISH):
                if p[0] & 0x3F == seq.THREAD_TRACE_FINISH:
                    for se, va in hw.bases.items():
                        data = hw.traces.get(se, b"")
                        for i in range(0, len(data), 4):
                            write32(queue.mem, va + i, int.from_bytes(data[i:i + 4], "little"))
                return True
            if name == "COPY_DATA" and p[0] & 0xF == 4:
                write32(queue.mem, p[3] | p[4] << 32, hw.read(p[1]))
                return True
            return execute(queue, f, name, p, active, bad)
        monkeypatch.setattr(mock_pm4.PM4Queue, "_execute", run)

    def write(self, reg: int, v: int) -> None:
        self.uconfig[reg] = v
        se = self.index >> 16 & 0xFF
        if reg == seq.GRBM_GFX_INDEX:
            self.index = v
        elif reg == seq.SQ_THREAD_TRACE_BUF0_BASE:
            self.bases[se] = (v | (self.uconfig.get(seq.SQ_THREAD_TRACE_BUF0_SIZE, 0) & 0xF) << 32) << 12
        elif reg == seq.SQ_THREAD_TRACE_BUF0_SIZE:
            self.sizes[se] = (v >> 8) << 12

    def read(self, reg: int) -> int:
        if reg == seq.SQ_THREAD_TRACE_WPTR:
            se = self.index >> 16 & 0xFF
            data = self.traces.get(se, b"")
            n = self.sizes[se] - 32 if self.fill and data else len(data)
            return ((self.bases[se] // 32) + n // 32) & 0x1FFFFFFF  # gfx11.0: counted from address 0
        if reg in LO_TO_SELECT:
            return fake_value(self.uconfig[LO_TO_SELECT[reg]], self.index) & 0xFFFFFFFF
        if reg in HI_TO_SELECT:
            return 7  # a HI word, so that 64-bit counters are seen to combine
        raise AssertionError(f"COPY_DATA of register {reg:#x}, which the profiler does not read")


def two_kernels(dev) -> tuple[float, float]:
    a = np.arange(300, dtype=np.float32)
    x = Tensor(a, device=dev.device).realize()
    dev.synchronize()
    results.take(dev.device)
    got = ((x * 3).contiguous() + 1).sum().numpy()
    return float(got), float((a * 3 + 1).sum())


def test_pmc_counters_are_programmed_read_per_instance_and_decoded(monkeypatch, amd):
    hw = FakeHardware(monkeypatch)
    prof = profile_with(monkeypatch, amd, Settings(pmc=True, counters=counters.DEFAULT, slots=8))
    got, want = two_kernels(amd)
    assert got == pytest.approx(want)
    amd.synchronize()
    ring = prof.ring(amd)
    done = results.take(amd.device)
    assert len(done) >= 2 and [p.sequence for p in done] == list(range(done[0].sequence, done[0].sequence + len(done)))
    topo = ring.topo
    assert (topo.ses, topo.sas, topo.wgps) == (6, 2, 4)  # the mock's 7900 XTX
    for p in done:
        assert p.start and p.end >= p.start
        assert set(p.counters) == set(counters.DEFAULT)
        for s in ring.sched:
            c = p.counters[s.name]
            hi = 0 if s.block == "SQ" else 7 << 32
            for inst, se, sa, wgp in np.ndindex(s.inst, s.se, s.sa, s.wgp):
                index = seq.grbm_index(instance=inst) if s.inst > 1 else seq.grbm_index(se, sa, wgp << 2)
                assert int(c.values[0, inst, se, sa, wgp]) == fake_value(s.perf_sel, index) + hi, (s.name, se, sa)
            assert p.totals[s.name] == int(c.values.sum())
    # the programming: SQ counters on the even SELECT registers, the perfmon states, PERFCOUNT_ENABLE on
    sets = [p for n, p in hw.seen if n == "SET_UCONFIG_REG"]
    sq = [s for s in ring.sched if s.block == "SQ"]
    assert [s.select for s in sq] == [0xD9C0 + 2 * n for n in range(len(sq))]
    assert [seq.UCONFIG_BASE + 0x39C0 - 0xC000 + 0xA000 + 2 * n for n in range(len(sq))] == [s.select for s in sq]
    perfmon = [p[1] for p in sets if p[0] == seq.CP_PERFMON_CNTL - seq.UCONFIG_BASE]
    assert perfmon[:3] == [seq.PERFMON_STOP, seq.PERFMON_STOP, seq.PERFMON_START] or \
        perfmon[:2] == [seq.PERFMON_STOP, seq.PERFMON_START]
    assert seq.PERFMON_SAMPLE in perfmon
    start_x = [p for n, p in hw.seen if n == "SET_SH_REG" and len(p) == 9]
    assert start_x and all(p[8] == 1 for p in start_x)


def test_each_dispatch_takes_the_next_slot_of_the_ring(monkeypatch, amd):
    FakeHardware(monkeypatch)
    prof = profile_with(monkeypatch, amd, Settings(pmc=True, counters=("SQ_WAVES",), slots=3))
    a = np.arange(16, dtype=np.float32)
    x = Tensor(a, device=amd.device).realize()
    amd.synchronize()
    ring = prof.ring(amd)
    results.take(amd.device)
    before = int(ring.log[0])
    for i in range(2):
        np.testing.assert_allclose((x + i).numpy(), a + i)
        amd.synchronize()
    after = int(ring.log[0])
    assert after == before + 2
    done = results.take(amd.device)
    assert [(p.sequence, p.slot) for p in done] == [(k, k % 3) for k in range(before, after)]
    # every slot's tag names a site with this kernel's name
    assert all(int(ring.log[1 + p.slot]) == ring.sites.index(p.site) + 1 for p in done)


def test_overwritten_slots_warn_with_how_many(monkeypatch, amd):
    FakeHardware(monkeypatch)
    prof = profile_with(monkeypatch, amd, Settings(pmc=True, counters=("SQ_WAVES",), slots=2))
    a = np.arange(16, dtype=np.float32)
    x = Tensor(a, device=amd.device).realize()
    amd.synchronize()
    results.take(amd.device)
    ring = prof.ring(amd)
    ring.log[0] = int(ring.log[0]) + 5  # forced: five dispatches nobody read (their slots hold old tags)
    with pytest.warns(ProfileWarning, match=r"3 profiled dispatches were overwritten.*PROF_SLOTS"):
        amd.synchronize()
    results.take(amd.device)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProfileWarning)
        np.testing.assert_allclose((x * 2).numpy(), a * 2)
        amd.synchronize()
    assert len(results.take(amd.device)) == 1


def sqtt_settings(**kw) -> Settings:
    return Settings(sqtt=True, buffer_mib=1, slots=4, **kw)


def test_sqtt_windows_per_slot_and_se_and_the_traces_read_back(monkeypatch, amd):
    traces = {se: ref.stream(CAPTURE, se) for se in range(6)}
    hw = FakeHardware(monkeypatch, traces)
    prof = profile_with(monkeypatch, amd, sqtt_settings())
    a = np.arange(16, dtype=np.float32)
    x = Tensor(a, device=amd.device).realize()
    amd.synchronize()
    results.take(amd.device)
    ring = prof.ring(amd)
    np.testing.assert_allclose((x + 1).numpy(), a + 1)
    amd.synchronize()
    (p,) = results.take(amd.device)
    assert ring.window == (1 << 20) // 4
    for se in range(6):
        assert hw.bases[se] == ring.address["sqtt_buf"] + ring.window_offset(se, p.slot)
        assert hw.sizes[se] == ring.window
        assert p.raw_traces[se] == traces[se]
        assert p.traces[se][0].kind == "LAYOUT_HEADER"
    assert p.full == ()
    # instruction tracing on SEs 0 and 1 only (SQTT_ITRACE_SE_MASK 0b11): their token masks differ
    tokens = [p[1] for n, p in hw.seen if n == "SET_UCONFIG_REG" and p[0] == seq.SQ_THREAD_TRACE_TOKEN_MASK - 0xC000]
    assert tokens == [0x1F1800, 0x1F1800] + [0x1F1927] * 4
    names = [n for n, _ in hw.seen]
    d = names.index("DISPATCH_DIRECT")
    assert hw.seen[d + 1] == ("EVENT_WRITE", [seq.THREAD_TRACE_MARKER])
    # RGP markers: pipeline bind, then the event with the grid, through USERDATA_2/3
    marks = [p[1:] for n, p in hw.seen[:d] if n == "SET_UCONFIG_REG" and p[0] == seq.SQ_THREAD_TRACE_USERDATA_2 - 0xC000]
    assert marks[0][0] == seq.RGP_BIND_PIPELINE | seq.RGP_BIND_POINT_COMPUTE
    assert marks[2][0] == seq.RGP_HAS_THREAD_DIMS and marks[3][1:] + marks[4] == [
        g for g in next(p for n, p in hw.seen if n == "DISPATCH_DIRECT")[:3]]


def test_a_full_trace_window_warns(monkeypatch, amd):
    FakeHardware(monkeypatch, {0: ref.stream(CAPTURE, 0)}, fill=True)
    profile_with(monkeypatch, amd, sqtt_settings())
    a = np.arange(16, dtype=np.float32)
    x = Tensor(a, device=amd.device).realize()
    amd.synchronize()
    results.take(amd.device)
    with pytest.warns(ProfileWarning, match=r"SQTT window of SE 0 filled.*SQTT_BUFFER_SIZE"):
        np.testing.assert_allclose((x + 1).numpy(), a + 1)
        amd.synchronize()
    (p,) = results.take(amd.device)
    assert 0 in p.full


def test_every_replay_of_every_jit_kernel_is_profiled(monkeypatch, amd):
    from tg_core.engine.jit import TinyJit
    FakeHardware(monkeypatch)
    profile_with(monkeypatch, amd, Settings(pmc=True, counters=("SQ_WAVES", "GRBM_GUI_ACTIVE"), slots=32))

    @TinyJit
    def f(x: Tensor) -> Tensor:
        y = (x * 2).contiguous().realize()
        z = (y + 1).contiguous().realize()
        return (z * z).contiguous().realize()
    a = np.arange(64, dtype=np.float32)
    xs = [Tensor(a + i, device=amd.device).realize() for i in range(7)]
    for x in xs[:2]:
        f(x)
    amd.synchronize()
    results.take(amd.device)
    for i, x in enumerate(xs[2:]):
        np.testing.assert_allclose(f(x).numpy(), ((a + i + 2) * 2 + 1) ** 2)
    amd.synchronize()
    done = results.take(amd.device)
    assert len(done) == 15
    assert len({id(p.site) for p in done}) == 3 and [p.site for p in done] == [p.site for p in done[:3]] * 5
    assert [p.sequence for p in done] == list(range(done[0].sequence, done[0].sequence + 15))


def test_no_profiler_without_pmc_or_sqtt():
    from tg_profiler_sqtt.plugin import profiler
    assert not profiler().settings.enabled or "PMC" in __import__("os").environ


def test_results_go_into_the_trace_file(monkeypatch, amd, tmp_path):
    import json

    from tg_core import profile
    from tg_core.profile import events as ev
    from tg_core.profile import state
    from tg_profiler_sqtt.sqtt import decode
    traces = {se: ref.stream(CAPTURE, se) for se in range(6)}
    FakeHardware(monkeypatch, traces)
    profile_with(monkeypatch, amd, Settings(pmc=True, counters=("SQ_WAVES", "GRBM_GUI_ACTIVE"), sqtt=True,
                                            buffer_mib=1, slots=4))
    a = np.arange(16, dtype=np.float32)
    x = Tensor(a, device=amd.device).realize()
    amd.synchronize()
    results.take(amd.device)
    monkeypatch.setattr(state, "on", True)
    profile.collect()
    ev.take()
    np.testing.assert_allclose((x + 1).numpy(), a + 1)
    amd.synchronize()
    doc = json.loads(profile.write_trace(tmp_path / "trace.json", profile.collect()).read_text())
    monkeypatch.setattr(state, "on", False)
    (p,) = results.take(amd.device)
    evs = doc["traceEvents"]
    for e in evs:
        assert {"name", "ph", "ts", "pid", "tid"} <= set(e) and (e["ph"] != "X" or e["dur"] >= 0), e
    last: dict[tuple[int, int], float] = {}
    for e in evs:
        if e["ph"] == "X":
            key = (e["pid"], e["tid"])
            assert e["ts"] >= last.get(key, 0.0), e
            last[key] = e["ts"]
    (pmc,) = [e for e in evs if e.get("cat") == "pmc"]
    assert pmc["name"] == p.kernel and pmc["args"]["counters"] == p.totals
    (kernel,) = [e for e in evs if e.get("cat") == "kernel" and e["name"] == p.kernel]
    assert kernel["args"]["counters"] == p.totals  # the kernel's own event carries them too
    assert kernel["ts"] <= pmc["ts"] and pmc["ts"] + pmc["dur"] <= kernel["ts"] + kernel["dur"] + 1e-3
    pairs = sum(min(sum(1 for q in t if q.kind == "WAVESTART"), sum(1 for q in t if q.kind == "WAVEEND"))
                for t in map(decode, traces.values()))
    waves = [e for e in evs if e.get("cat") == "wave"]
    assert pairs >= 1 and len(waves) == pairs
    tracks = {m["tid"]: m["args"]["name"] for m in evs if m["name"] == "thread_name" and m["pid"] == waves[0]["pid"]}
    assert all(tracks[w["tid"]].startswith("SQTT SE") for w in waves)
