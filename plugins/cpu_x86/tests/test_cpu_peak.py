"""The fp32 peak `tg bench` compares matmul GFLOP/s with: the FMA loop's code (checked by capstone), that it
runs every FMA it is counted for (its accumulators' sum), and the device's figure. No timing is asserted
beyond being a positive number."""
from __future__ import annotations

import numpy as np
import pytest

from tg_cpu_x86 import peak
from tg_cpu_x86.x86.isa import missing

capstone = pytest.importorskip("capstone")
ISAS = [pytest.param(isa, marks=pytest.mark.skipif(bool(missing(isa)), reason=f"this host cannot run {isa}"))
        for isa in ("avx2", "avx512")]


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_fma_loop_code_decodes_as_written(isa):
    asm = peak.fma_assembler(isa)
    code = asm.assemble()
    decoded = [(i.address, i.size, f"{i.mnemonic} {i.op_str}".strip())
               for i in capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64).disasm(code, 0)]
    assert [(off, len(blob), text) for off, blob, text in asm.listing()] == decoded
    v = "zmm" if isa == "avx512" else "ymm"
    fmas = [t for _, _, t in decoded if t.startswith("vfmadd231ps")]
    assert fmas == [f"vfmadd231ps {v}{i}, {v}12, {v}13" for i in range(peak.ACCUMULATORS)]
    assert decoded[-1][2] == "ret" and decoded[-1][0] + decoded[-1][1] == len(code)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("iters", [1, 7, 1000])
def test_every_fma_runs(isa, iters):
    loop = peak.FMALoop(isa)
    ab = np.zeros(loop.lanes, np.float32)
    ab[:2] = 1.5, 2.0
    loop(ab, iters)
    # every lane of every accumulator added a*b once per iteration, exactly (small integers)
    np.testing.assert_array_equal(ab, np.full(loop.lanes, peak.ACCUMULATORS * iters * 3.0, np.float32))
    assert loop.flops(iters) == 2 * loop.lanes * peak.ACCUMULATORS * iters


def test_bad_calls_are_errors():
    with pytest.raises(ValueError, match="no FMA loop for vector ISA 'sse'; allowed: avx512, avx2"):
        peak.fma_code("sse")
    if missing("avx2"):
        pytest.skip("this host has no AVX2")
    loop = peak.FMALoop("avx2")
    with pytest.raises(ValueError, match="contiguous float32 array of 8 floats, got float64"):
        loop(np.zeros(8), 1)
    with pytest.raises(ValueError, match="runs at least once, got iters=0"):
        loop(np.zeros(8, np.float32), 0)
    with pytest.raises(ValueError, match="at least one"):
        peak.measure("avx2", cores=0)


def test_device_peak_scales_with_its_cores():
    if missing("avx2"):
        pytest.skip("this host has no AVX2")
    from tg_cpu_x86.device import CPUDevice
    dev = CPUDevice("CPU", {"threads": 1})
    try:
        one = dev.fp32_peak_gflops()
        assert one is not None and one > 0
        dev.configure_threads(3)
        assert dev.fp32_peak_gflops() == pytest.approx(3 * one)  # one core's measurement, times the cores
    finally:
        dev.close()
