"""bench/emulator_llm.py's kernels are LLVM IR through tg-amd's compiler: LLVM must emit v_wmma_f32_16x16x16_f16 and
v_dot4_i32_iu8 for them, and the emulator's results must match numpy (the bench checks; this guards the bench and
the LLVM -> emulator path). No timing is asserted."""
from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_wmma_and_dot4_loops_run_llvm_code_correctly():
    llm, emu = _load("emulator_llm"), _load("emulator")
    waves = llm.GROUPS * llm.WAVES_PER_GROUP
    for fn, inst in ((llm.wmma, "v_wmma_f32_16x16x16_f16"), (llm.dot4, "v_dot4_i32_iu8")):
        r = fn(2, 1, emu.best)
        assert r["correct"] is True and r["instructions"] == [inst]
        assert r["waves"] == waves and r["lane_instructions"] >= waves * 32 * 8     # 2 iterations of 4 each
