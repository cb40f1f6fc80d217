"""Core profiling (tg_core/profile): events, the trace file, HCQ device timestamps, estimates, the summary, `tg profile`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tg_core import Tensor, TinyJit, profile
from tg_core.device import Buffer, Device
from tg_core.dtype import dtypes
from tg_core.hcq import ops as q
from tg_core.hcq.batch import Item
from tg_core.hcq.device import run_items
from tg_core.hcq.testing import hcqref_registry
from tg_core.plugins.config import load_config
from tg_core.plugins.errors import ConfigError
from tg_core.profile import state
from tg_core.profile.clock import ClockSync, clocks
from tg_core.profile.estimates import estimate
from tg_core.profile.summary import format_rows, kernel_rows
from tg_core.schedule.cache import schedule
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = ("name", "ph", "ts", "pid", "tid")


@pytest.fixture
def profiling() -> Iterator[None]:
    """Profiling on for one test, with nothing recorded before it; off (and forgotten) after."""
    was_on, was_forced = state.on, state._forced
    profile.reset()
    profile.enable(True)
    try:
        yield
    finally:
        profile.enable(was_on)
        state._forced = was_forced
        profile.reset()


@pytest.fixture
def hcqref() -> Iterator[None]:
    Device.reset(hcqref_registry())
    yield
    Device.reset()


def _cpu_available() -> bool:
    from tg_core.plugins.manager import get_registry
    return "CPU" in get_registry().device_names()


def _devices() -> list:
    cpu = pytest.param("CPU", marks=pytest.mark.skipif(not _cpu_available(), reason="tg-cpu-x86 not installed"))
    return ["PYTHON", cpu, "HCQREF"]


def _use(device: str) -> None:
    Device.reset(hcqref_registry() if device == "HCQREF" else None)


def _three_kernels(device: str) -> tuple[TinyJit, Tensor, Tensor]:
    @TinyJit
    def f(x: Tensor, y: Tensor) -> Tensor:
        a = (x * 2 + y).contiguous()
        b = (a * x).contiguous()
        return b.sum(axis=1)
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=device).realize()
    y = Tensor(np.ones((3, 4), np.float32), device=device).realize()
    return f, x, y


def _trace(tmp_path: Path) -> dict:
    path = profile.write_trace(tmp_path / "trace.json")
    return json.loads(path.read_text())


def _check_format(doc: dict) -> list[dict]:
    evs = doc["traceEvents"]
    assert evs, "an empty trace"
    for e in evs:
        missing = [k for k in REQUIRED if k not in e]
        assert not missing, f"event {e} lacks {missing}"
        assert isinstance(e["ts"], (int, float)) and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        assert e["ph"] in ("X", "C", "M"), e
    return evs


def _check_monotonic(evs: list[dict]) -> None:
    """Per track, times never run backwards; on a device queue, one event ends before the next starts."""
    tracks: dict[tuple[int, int], list[dict]] = defaultdict(list)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in evs if e["name"] == "thread_name"}
    for e in evs:
        if e["ph"] != "M":
            tracks[(e["pid"], e["tid"])].append(e)
    for key, es in tracks.items():
        ts = [e["ts"] for e in es]
        assert ts == sorted(ts), f"track {names.get(key)} runs backwards"
        if names.get(key, "").startswith(("COMPUTE", "COPY")):
            for a, b in zip(es, es[1:]):
                assert a["ts"] + a["dur"] <= b["ts"] + 0.002, f"{a['name']} and {b['name']} overlap on {names[key]}"


# ---- the trace file --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", _devices())
def test_trace_is_valid_and_ordered(device, profiling, tmp_path):
    _use(device)
    try:
        with profile.span("work", step=1):
            x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8), device=device)
            y = ((x @ x).relu() + 1).sum(axis=0)
            z = y.to("PYTHON") if device != "PYTHON" else y
            got = z.numpy()
        np.testing.assert_allclose(got, (np.maximum(np.arange(64.).reshape(8, 8) @ np.arange(64.).reshape(8, 8), 0)
                                         + 1).sum(axis=0), rtol=1e-5)
        doc = _trace(tmp_path)
    finally:
        Device.reset()
    evs = _check_format(doc)
    _check_monotonic(evs)
    processes = {e["args"]["name"] for e in evs if e["name"] == "process_name"}
    assert {"tg host", device} <= processes
    cats = {e.get("cat") for e in evs}
    assert {"kernel", "schedule", "span", "memory"} <= cats, cats
    if device != "PYTHON":
        assert "copy" in cats  # the result went to PYTHON
    work = next(e for e in evs if e["name"] == "work")
    assert work["args"] == {"step": 1}


def test_memory_counter_follows_allocations(profiling):
    buf = Buffer("PYTHON", 1000, "float32").ensure_allocated()
    buf.deallocate()
    samples = [e.data["bytes"] for e in profile.collect() if e.kind == "memory" and e.process == "PYTHON"]
    assert samples[-2] - samples[-1] == 4000
    assert samples[-2] == (samples[-3] if len(samples) > 2 else 0) + 4000


def test_nothing_is_recorded_when_off():
    assert not state.on
    profile.reset()
    x = Tensor(np.ones(4, np.float32), device="PYTHON")
    with profile.span("ignored"):
        (x + 1).numpy()
    assert profile.collect() == []


# ---- kernel counts and the JIT ---------------------------------------------------------------------------------

@pytest.mark.parametrize("device", _devices())
def test_jit_replays_give_one_event_per_kernel(device, profiling):
    _use(device)
    try:
        f, x, y = _three_kernels(device)
        f(x, y)
        f(x, y)  # the capture
        assert len(f.jit_cache) == 3
        for _ in range(5):
            out = f(x, y)
        expect = ((np.arange(12.).reshape(3, 4) * 2 + 1) * np.arange(12.).reshape(3, 4)).sum(axis=1)
        np.testing.assert_allclose(out.numpy(), expect, rtol=1e-6)
        evs = profile.collect()
    finally:
        Device.reset()
    kernels = [e for e in evs if e.kind == "kernel"]
    replayed = [e for e in kernels if e.data.get("jit") == f"replay of {f.name}"]
    captured = [e for e in kernels if e.data.get("jit") == f"capture of {f.name}"]
    assert len(replayed) == 15 and len(captured) == 3
    assert [e.name for e in replayed] == [e.name for e in captured] * 5
    phases = [e.name for e in evs if e.kind == "jit"]
    assert phases == [f"capture of {f.name}"] + [f"replay of {f.name}"] * 5
    for e in kernels:
        assert e.process == device and e.start <= e.end
        assert (e.clock == device) == (device == "HCQREF")  # device timestamps exactly on the HCQ device


# ---- HCQ device timestamps and clock alignment -------------------------------------------------------------------

def test_hcq_kernels_come_from_device_timestamps(profiling, hcqref, tmp_path, monkeypatch):
    # the reference device's clock runs 5 s ahead of the host's: only the alignment puts its events in place
    from tg_core.hcq import refdev
    ahead = 5_000_000_000
    monkeypatch.setattr(refdev, "time", types.SimpleNamespace(perf_counter_ns=lambda: time.perf_counter_ns() + ahead,
                                                              sleep=time.sleep, monotonic=time.monotonic))
    f, x, y = _three_kernels("HCQREF")
    with profile.span("submit and wait"):
        for _ in range(4):
            out = f(x, y)
        out.numpy()
    evs = profile.collect()
    mine = [e for e in evs if e.kind == "kernel" and e.data.get("jit") == f"replay of {f.name}"]
    assert len(mine) == 6
    for e in mine:
        assert e.clock == "HCQREF" and e.track == "COMPUTE:0" and e.data["device_clock"]
        assert e.start >= ahead  # raw device times
    sync = clocks["HCQREF"]
    assert sync.consistent and abs(sync.offset - ahead) <= sync.uncertainty
    doc = _trace(tmp_path)
    evs_json = _check_format(doc)
    _check_monotonic(evs_json)
    span = next(e for e in evs_json if e["name"] == "submit and wait")
    kernels = [e for e in evs_json if e.get("cat") == "kernel" and e["args"].get("jit") == f"replay of {f.name}"]
    assert len(kernels) == 6
    for e in kernels:
        assert e["args"]["clock"] == "device timestamps"
        assert span["ts"] - 0.002 <= e["ts"] <= e["ts"] + e["dur"] <= span["ts"] + span["dur"] + 0.002, (e, span)
    assert doc["otherData"]["clock_alignment"]["HCQREF"]["consistent"]


def test_hcq_copies_are_timed_on_the_copy_queue(profiling, hcqref):
    src = Buffer.from_numpy(np.arange(256, dtype=np.float32), "HCQREF")
    dst = Buffer("HCQREF", 256, "float32")
    run_items([Item(UOp(Ops.COPY, dtypes.void), [q.mem(dst.ensure_allocated()), q.mem(src)], (0,))])
    np.testing.assert_array_equal(np.frombuffer(dst.copyout(), np.float32), np.arange(256))
    copies = [e for e in profile.collect() if e.kind == "copy"]
    assert len(copies) == 1 and copies[0].clock == "HCQREF" and copies[0].track == "COPY:0"
    assert copies[0].data["bytes"] == 1024 and copies[0].start <= copies[0].end


def test_clock_sync_bounds():
    c = ClockSync()
    assert c.offset == 0.0
    c.observe(submitted=100, first=1150, last=1160, observed=200)  # offset in [960, 1050]
    c.observe(submitted=300, first=1320, last=1390, observed=400)  # offset in [990, 1020]
    assert (c.lo, c.hi) == (990, 1020) and c.offset == 1005 and c.uncertainty == 15 and c.consistent
    c.observe(submitted=500, first=1400, last=1400, observed=600)  # offset <= 900: crosses the others
    assert not c.consistent


# ---- estimates and the summary -----------------------------------------------------------------------------------

def _kernel(t: Tensor):
    items, _, var_vals = schedule([t.uop])
    (ast, _), = items
    return ast, var_vals


def test_estimates_of_known_kernels():
    n, k, m = 8, 16, 4
    a = Tensor(np.ones((n, k), np.float32), device="PYTHON").realize()
    b = Tensor(np.ones((k, m), np.float32), device="PYTHON").realize()
    assert estimate(*_kernel(a @ b)) == (2 * n * m * k, 4 * (n * k + k * m + n * m))
    assert estimate(*_kernel(a + 1)) == (n * k, 4 * 2 * n * k)
    assert estimate(*_kernel(a.sum(axis=1))) == (n * k, 4 * (n * k + n))
    v = Tensor(np.ones(k, np.float32), device="PYTHON").realize()
    assert estimate(*_kernel(a * v)) == (n * k, 4 * (2 * n * k + k))  # the broadcast vector is read once


def test_summary_of_a_matmul(profiling):
    n, k, m = 8, 16, 4
    a = Tensor(np.ones((n, k), np.float32), device="PYTHON").realize()
    b = Tensor(np.ones((k, m), np.float32), device="PYTHON").realize()
    for _ in range(3):
        (a @ b).realize()
    rows = kernel_rows(profile.collect())
    row = next(r for r in rows if "reduce" in r.name)
    assert row.calls == 3 and row.ops == 3 * 2 * n * m * k and row.bytes == 3 * 4 * (n * k + k * m + n * m)
    assert row.total_ns > 0 and row.gflops == pytest.approx(row.ops / row.total_ns)
    table = format_rows(rows)
    line = next(x for x in table.splitlines() if x.startswith(row.name[:20]))
    assert line.split()[2] == "3" and f"{row.gflops:.2f}" in line


# ---- the switch --------------------------------------------------------------------------------------------------

def test_config_key_profile(tmp_path):
    cfg = load_config(None, {"PROFILE": "1"}, tmp_path, tmp_path)
    assert cfg.profile is True and cfg.source("profile") == "environment variable PROFILE"
    assert load_config(None, {}, tmp_path, tmp_path).profile is None
    (tmp_path / "tg.yaml").write_text("profile: true\n")
    assert load_config(None, {}, tmp_path, tmp_path).profile is True
    assert load_config({"profile": False}, {}, tmp_path, tmp_path).profile is False
    with pytest.raises(ConfigError, match="PROFILE.*1/true/yes/on or 0/false/no/off"):
        load_config(None, {"PROFILE": "maybe"}, tmp_path, tmp_path)
    (tmp_path / "tg.yaml").write_text("profile: 3\n")
    with pytest.raises(ConfigError, match="profile.*true or false"):
        load_config(None, {}, tmp_path, tmp_path)


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "DEV": "PYTHON", **(env or {})}
    full.pop("PROFILE", None) if env is None or "PROFILE" not in env else None
    return subprocess.run([sys.executable, *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=300)


SCRIPT = """
import sys
import numpy as np
from tg_core import Tensor
a = Tensor(np.ones((8, 16), np.float32)).realize()
b = Tensor(np.ones((16, 4), np.float32)).realize()
for _ in range(int(sys.argv[1])):
    c = (a @ b).numpy()
assert (c == 16).all()
print("script done", sys.argv[1:])
"""


def test_tg_profile_end_to_end(tmp_path):
    (tmp_path / "work.py").write_text(SCRIPT)
    res = _run(["-m", "tg_core", "profile", "-o", "out.json", "work.py", "3"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert "script done ['3']" in res.stdout
    lines = res.stdout.splitlines()
    head = next(i for i, x in enumerate(lines) if x.startswith("kernel "))
    row = next(x for x in lines[head:] if "reduce" in x)
    assert row.split()[1:3] == ["PYTHON", "3"]
    assert f"trace written to {tmp_path / 'out.json'}" in res.stdout
    evs = _check_format(json.loads((tmp_path / "out.json").read_text()))
    _check_monotonic(evs)
    assert sum(e.get("cat") == "kernel" and "reduce" in e["name"] for e in evs) == 3


def test_tg_profile_reports_a_failing_script(tmp_path):
    (tmp_path / "bad.py").write_text("raise ValueError('boom')\n")
    res = _run(["-m", "tg_core", "profile", "bad.py"], tmp_path)
    assert res.returncode == 1 and "ValueError: boom" in res.stderr
    assert (tmp_path / "tg-profile-bad.json").is_file()
    res = _run(["-m", "tg_core", "profile", "missing.py"], tmp_path)
    assert res.returncode == 2 and "missing.py is not a file" in res.stderr


def test_profile_env_writes_the_trace_at_exit(tmp_path):
    (tmp_path / "work.py").write_text(SCRIPT)
    res = _run(["work.py", "2"], tmp_path, {"PROFILE": "1", "TMPDIR": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    line = next(x for x in res.stderr.splitlines() if "profile of" in x)
    path = Path(line.split(" written to ")[1].split(" (open")[0])
    assert path.parent == tmp_path
    evs = _check_format(json.loads(path.read_text()))
    assert sum(e.get("cat") == "kernel" and "reduce" in e["name"] for e in evs) == 2
