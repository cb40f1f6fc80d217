"""bench/emulator.py runs on the AMD device's queue path: the row-sum case (32 waves, quick) is checked against numpy
and its lane-instruction count comes from the mock GPU's launcher. Guards the bench against API moves (it once read
an attribute the device had dropped). No timing is asserted."""
from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench" / "emulator.py"


def test_row_sum_case_counts_the_dispatch():
    spec = importlib.util.spec_from_file_location("bench_emulator", BENCH)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    r = mod.row_sum(1)
    assert r["correct"] is True
    # 1024 rows, one lane each, in 32-lane waves: 32 waves; every wave runs the 1024-step loop
    assert r["waves"] == 32 and r["lane_instructions"] >= 32 * 32 * 1024
    assert r["lane_instructions_per_second"] == r["lane_instructions"] / r["seconds"]
