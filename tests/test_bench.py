"""`tg bench`: the JSON report of a quick run on PYTHON (every case present and verified against numpy),
and that a wrong result is reported instead of timed. No timing is asserted."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tg_core import bench

ROOT = Path(__file__).resolve().parents[1]
FIELDS = {"name", "size", "verified", "tg_s", "numpy_s", "ratio", "tg_cpu_s", "numpy_cpu_s", "throughput", "unit",
          "max_error", "error", "extra"}


def _tg(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tg_core", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_quick_json_report_on_python():
    proc = _tg("bench", "--quick", "--json", "--device", "PYTHON", "--repeat", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["device"] == "PYTHON" and report["quick"] is True and report["repeat"] == 1
    names = [c["name"] for c in report["cases"]]
    assert names == ["elementwise", "sum", "matmul", "matmul", "softmax", "mlp", "launch", "launch_jit", "first_mlp"]
    for c in report["cases"]:
        assert set(c) == FIELDS
        assert c["verified"] is True and c["error"] is None and c["max_error"] is None, c
        assert c["tg_s"] > 0 and c["numpy_s"] > 0
        assert (c["tg_cpu_s"] is None) == (c["name"] == "first_mlp")
        assert abs(c["ratio"] - c["numpy_s"] / c["tg_s"]) <= 1e-9 * c["ratio"]
    units = {c["name"]: c["unit"] for c in report["cases"]}
    assert units == {"elementwise": "GB/s", "sum": "GB/s", "matmul": "GFLOP/s", "softmax": "GB/s", "mlp": "GFLOP/s",
                     "launch": "us/kernel", "launch_jit": "us/kernel", "first_mlp": ""}
    jit = report["cases"][names.index("launch_jit")]
    assert jit["extra"]["captured_kernels"] == 1


def test_table_and_case_selection():
    proc = _tg("bench", "--quick", "--device", "PYTHON", "--cases", "sum,launch", "--repeat", "1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("tg bench on PYTHON") and "ratio = numpy time / tg time" in lines[0]
    assert [ln.split()[0] for ln in lines[2:]] == ["sum", "launch", "launch_jit"]


def test_unknown_case_and_bad_repeat():
    proc = _tg("bench", "--cases", "sum,nope")
    assert proc.returncode == 2 and "unknown bench case(s) nope; the cases are elementwise, sum" in proc.stderr
    proc = _tg("bench", "--repeat", "0")
    assert proc.returncode == 2 and "--repeat must be at least 1" in proc.stderr


def test_a_wrong_result_is_reported_not_timed():
    from tg_core.tensor import Tensor
    b = bench._Bench("PYTHON", bench.QUICK, 1)
    x = Tensor(np.arange(4, dtype=np.float32), device="PYTHON").realize()
    res = b.measure("bad", "4", lambda: (x + 1).realize(), lambda: np.arange(4, dtype=np.float32) + 2, 1e-6, 1e-6,
                    16, "GB/s")
    assert not res.verified and res.tg_s is None and res.numpy_s is None and res.ratio is None
    assert res.max_error == 1.0 and "differs from numpy (max abs error 1)" in res.error
    report = {"device": "PYTHON", "renderer": None, "quick": True, "repeat": 1, "cases": [bench.asdict(res)]}
    assert "WRONG/FAILED: result differs from numpy" in bench.format_report(report)


def test_the_renderers_vector_isa_is_reported():
    from tg_core.device import Device
    report = bench.run("PYTHON", ["sum"], quick=True, repeat=1)
    assert report["vector_isa"] is None  # the interpreter has no vector ISA: "-" in the table
    assert _isa_cell(bench.format_report(report)) == "-"
    renderer = Device["CPU"].renderer
    if renderer is None or renderer.vector_isa is None:
        return
    report = bench.run("CPU", ["sum"], quick=True, repeat=1)
    assert report["vector_isa"] == renderer.vector_isa in ("avx2", "avx512")
    assert _isa_cell(bench.format_report(report)) == renderer.vector_isa


def _isa_cell(table: str) -> str:
    header, row = table.splitlines()[1:3]
    return row[header.index("  isa ") + 2:].split()[0]


def test_gflops_rows_give_their_fraction_of_the_devices_peak():
    class Peaked:
        def fp32_peak_gflops(self) -> float:
            return 200.0

    flops = bench.Result("matmul", "n", verified=True, tg_s=1.0, numpy_s=1.0, ratio=1.0, throughput=50.0,
                         unit="GFLOP/s")
    memory = bench.Result("sum", "n", verified=True, tg_s=1.0, numpy_s=1.0, ratio=1.0, throughput=9.0, unit="GB/s")
    assert bench._peak(Peaked(), [flops, memory]) == 200.0
    assert flops.extra["peak_fraction"] == 0.25 and "peak_fraction" not in memory.extra
    assert bench._peak(object(), [flops]) is None  # a device that measures no peak: no fraction
    report = {"device": "X", "renderer": None, "quick": True, "repeat": 1, "fp32_peak_gflops": 200.0,
              "cases": [bench.asdict(flops), bench.asdict(memory)]}
    table = bench.format_report(report)
    assert "fp32 peak 200 GFLOP/s" in table.splitlines()[0]
    assert "50 GFLOP/s, 25% of peak" in table and "of peak" not in table.splitlines()[-1]  # the GB/s row
    report = bench.run("PYTHON", ["matmul"], quick=True, repeat=1)
    assert report["fp32_peak_gflops"] is None and all("peak_fraction" not in c["extra"] for c in report["cases"])


def test_cpu_matmul_reports_its_fraction_of_the_measured_peak():
    from tg_core.device import Device
    if not callable(getattr(Device["CPU"], "fp32_peak_gflops", None)) or Device["CPU"].fp32_peak_gflops() is None:
        return
    report = bench.run("CPU", ["matmul", "sum"], quick=True, repeat=1)
    assert report["fp32_peak_gflops"] > 0
    for c in report["cases"]:
        assert ("peak_fraction" in c["extra"]) == (c["name"] == "matmul")
        if c["name"] == "matmul":
            assert c["extra"]["peak_fraction"] == c["throughput"] / report["fp32_peak_gflops"]


def test_first_mlp_on_llvm_is_measured_cold_and_with_a_warm_cache(tmp_path, monkeypatch):
    """CPU:LLVM's first_mlp figure runs without TG_LLVM_CACHE even when the caller sets it (the figure is the
    cold compile); the warm-cache figure comes from a temporary directory of its own."""
    pytest.importorskip("llvmlite.binding")
    from tg_core.device import Device
    if "LLVM" not in [r.name for r in Device["CPU"].renderers]:
        pytest.skip("no LLVM renderer for CPU")
    mine = tmp_path / "callers-cache"
    monkeypatch.setenv("TG_LLVM_CACHE", str(mine))
    report = bench.run("CPU:LLVM", ["first_mlp"], quick=True, repeat=1)
    (case,) = report["cases"]
    assert case["verified"] is True and case["error"] is None, case
    assert case["tg_s"] > 0 and case["extra"]["llvm_cache_s"] > 0
    assert not mine.exists()  # neither figure used the caller's directory
    assert "with a warm TG_LLVM_CACHE: " in bench.format_report(report)
