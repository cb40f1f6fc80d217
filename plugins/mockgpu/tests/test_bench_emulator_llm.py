"""bench/emulator_llm.py's cases: the instruction loops are LLVM IR through tg-amd's compiler (LLVM must emit
v_wmma_f32_16x16x16_f16 and v_dot4_i32_iu8 for them), the quant_linear cases tg-amd's kernels on the AMD device; the
emulator's results must match numpy and the timed dispatch must be the kernel's (its wave count). The bench checks
all of it; this guards the bench and the paths under it. No timing is asserted."""
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
    llm = _load("emulator_llm")
    waves = llm.GROUPS * llm.WAVES_PER_GROUP
    prepared = {"wmma": llm.wmma_loop_case(2), "dot4": llm.dot4_loop_case(2)}
    try:
        got = llm.measure(prepared, 1)
    finally:
        for c in prepared.values():
            c.close()
    for name, inst in (("wmma", "v_wmma_f32_16x16x16_f16"), ("dot4", "v_dot4_i32_iu8")):
        r = got[name]
        assert r["correct"] is True and r["instructions"] == [inst]
        assert r["waves"] == waves and r["lane_instructions"] >= waves * 32 * 8     # 2 iterations of 4 each


def test_quant_linear_cases_time_the_linear_kernel():
    llm = _load("emulator_llm")
    # small shapes: two WMMA waves of 32 outputs x 32 tokens (IQ4_XS: one wave of two output tiles), 32 sudot4 waves
    prepared = {"Q6_K-wmma": llm.linear_case("Q6_K", (32, 32, 256)), "Q6_K-sudot4": llm.linear_case("Q6_K", (1, 32, 256)),
                "IQ4_XS-wmma": llm.linear_case("IQ4_XS", (32, 32, 256))}
    got = llm.measure(prepared, 1)  # raises if a timed dispatch's wave count is not the kernel's
    assert all(r["correct"] is True for r in got.values())
    assert [got[n]["waves"] for n in prepared] == [2, 32, 1]
    assert got["Q6_K-wmma"]["path"] == "wmma" and got["Q6_K-sudot4"]["path"] == "sudot4"
