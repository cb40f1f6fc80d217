"""What counting and tracing cost tg-mockgpu's emulator: the same dispatch run plain, with PMC counters counting
and with SQTT tracing every SE (instructions on SEs 0 and 1), on the mock's PM4 processor, in the same run.

Cases (LLVM IR kernels compiled by tg-amd's compiler, 256 work-items a workgroup):

  elementwise  y = x * 2 + 1 over 2**20 float32 (many short waves)
  loop         a 256-iteration multiply-add loop per work-item over 2**16 work-items (long waves)

Each configuration runs once to warm up, then `--repeat` times; the best time counts. Reported: seconds and the
ratio to the plain dispatch. Usage: python bench/mock_profiling.py [--json] [--repeat N]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HEAD = """target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
"""
ELEMENTWISE = HEAD + """define amdgpu_kernel void @k(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in) #0 {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %b = mul i32 %g, 256
  %i = add i32 %b, %t
  %p = getelementptr float, ptr addrspace(1) %in, i32 %i
  %v = load float, ptr addrspace(1) %p
  %w = fmul float %v, 2.0
  %y = fadd float %w, 1.0
  %q = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %y, ptr addrspace(1) %q
  ret void
}
attributes #0 = { "amdgpu-flat-work-group-size"="256,256" }
"""
LOOP = HEAD + """define amdgpu_kernel void @k(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in) #0 {
entry:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %b = mul i32 %g, 256
  %i = add i32 %b, %t
  %p = getelementptr float, ptr addrspace(1) %in, i32 %i
  %v = load float, ptr addrspace(1) %p
  br label %loop
loop:
  %n = phi i32 [0, %entry], [%n2, %loop]
  %acc = phi float [0.0, %entry], [%acc2, %loop]
  %m = fmul float %acc, 0.5
  %acc2 = fadd float %m, %v
  %n2 = add i32 %n, 1
  %more = icmp ne i32 %n2, 256
  br i1 %more, label %loop, label %done
done:
  %q = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %acc2, ptr addrspace(1) %q
  ret void
}
attributes #0 = { "amdgpu-flat-work-group-size"="256,256" }
"""
CASES = {"elementwise": (ELEMENTWISE, 1 << 20), "loop": (LOOP, 1 << 16)}

# amd.md 2 and 10 (written here: the bench drives the mock as a profiler would)
GRBM_GFX_INDEX, BROADCAST, CP_PERFMON_CNTL, SQ_PERFCOUNTER_CTRL = 0xC200, 0xE0000000, 0xD808, 0xD9E0
SQ_SELECT, GRBM_SELECT, SPI_CONFIG_CNTL = 0xD9C0, 0xD840, 0xC440
TT_BUF0_BASE, TT_BUF0_SIZE, TT_CTRL, TT_MASK, TT_TOKEN_MASK = 0xD9E8, 0xD9E9, 0xD9EC, 0xD9ED, 0xD9EE
SES, WINDOW = 6, 8 << 20


def pkt(op: int, *payload: int) -> list[int]:
    return [(3 << 30) | ((len(payload) - 1) << 16) | (op << 8), *payload]


def uconfig(reg: int, *values: int) -> list[int]:
    return pkt(0x79, reg - 0xC000, *values)


def pmc_on() -> list[int]:
    ws = uconfig(GRBM_GFX_INDEX, BROADCAST) + uconfig(CP_PERFMON_CNTL, 0) + uconfig(SQ_PERFCOUNTER_CTRL, 0x55)
    for n, sel in enumerate((3, 62, 58, 261, 256)):
        ws += uconfig(SQ_SELECT + 2 * n, sel)
    return ws + uconfig(GRBM_SELECT, 2) + uconfig(CP_PERFMON_CNTL, 1)


def sqtt_on(base: int) -> list[int]:
    ws = uconfig(SPI_CONFIG_CNTL, 0xC362C688)
    for se in range(SES):
        va = base + se * WINDOW
        ws += uconfig(GRBM_GFX_INDEX, se << 16 | 1 << 30) + uconfig(TT_BUF0_SIZE, (va >> 44) | (WINDOW >> 12) << 8)
        ws += uconfig(TT_BUF0_BASE, (va >> 12) & 0xFFFFFFFF) + uconfig(TT_MASK, 0x10000)
        ws += uconfig(TT_TOKEN_MASK, 0x1F1800 if se < 2 else 0x1F1927) + uconfig(TT_CTRL, 0x80023C41)
    return ws + uconfig(GRBM_GFX_INDEX, BROADCAST) + pkt(0x76, 0x21E, 1)


def sqtt_off() -> list[int]:
    ws = pkt(0x76, 0x21E, 0) + pkt(0x46, 0x37)
    for se in range(SES):
        ws += uconfig(GRBM_GFX_INDEX, se << 16 | 1 << 30) + uconfig(TT_CTRL, 0x80023C40)
    return ws + uconfig(GRBM_GFX_INDEX, BROADCAST)


def bench(name: str, repeat: int) -> dict:
    from tg_amd.compiler import AMDCompiler
    from tg_amd.elf import load_code_object
    from tg_amd.queues import pm4
    from tg_amd.queues.kernel import dispatch_of
    from tg_mockgpu.cp.launch import EmulatorLauncher
    from tg_mockgpu.cp.pm4 import PM4Queue
    from tg_mockgpu.memory import GPUMemory
    ir, n = CASES[name]
    co = load_code_object(AMDCompiler("gfx1100").compile(ir))
    mem = GPUMemory()
    try:
        image = mem.alloc(len(co.image), 256)
        mem.write(image, co.image_at(image))
        x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        src, dst, kernargs = mem.alloc(4 * n), mem.alloc(4 * n), mem.alloc(64)
        mem.write(src, x.tobytes())
        mem.write(kernargs, struct.pack("<QQ", dst, src))
        trace = mem.alloc(SES * WINDOW)
        d = dispatch_of(co.kernel("k"), image, {"kernarg_segment_ptr": kernargs}, (n // 256, 1, 1), (256, 1, 1))
        launch = [int(w) for w in pm4.dispatch(dataclasses.replace(d, perfcount=True), 1)]
        configs = {"plain": ([], []), "pmc": (pmc_on(), uconfig(CP_PERFMON_CNTL, 0)),
                   "sqtt": (sqtt_on(trace), sqtt_off())}
        out = {}
        for cfg, (before, after) in configs.items():
            ring, rptr = mem.alloc(1 << 16), mem.alloc(8)
            cp = PM4Queue("bench", mem, ring, 1 << 14, rptr, launch=EmulatorLauncher(mem))
            head, best = 0, float("inf")
            for i in range(repeat + 1):
                words = before + launch + after
                ib = mem.alloc(4 * len(words))
                mem.write(ib, struct.pack(f"<{len(words)}I", *words))
                mem.write(ring + 4 * head, struct.pack("<4I", *pm4.indirect_buffer(ib, len(words))))
                head += 4
                t0 = time.perf_counter()
                assert cp.run(head)
                if i:
                    best = min(best, time.perf_counter() - t0)
            out[cfg] = best
        got = np.frombuffer(mem.read(dst, 4 * n), np.float32)
        if name == "elementwise":
            np.testing.assert_allclose(got, x * 2 + 1, rtol=1e-6)
        return {"case": name, **{f"{k}_s": round(v, 4) for k, v in out.items()},
                "pmc_ratio": round(out["pmc"] / out["plain"], 3), "sqtt_ratio": round(out["sqtt"] / out["plain"], 3)}
    finally:
        mem.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = [bench(name, args.repeat) for name in CASES]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    for r in rows:
        print(f"{r['case']:12s} plain {r['plain_s']:.3f} s   PMC {r['pmc_s']:.3f} s ({r['pmc_ratio']:.2f}x)   "
              f"SQTT {r['sqtt_s']:.3f} s ({r['sqtt_ratio']:.2f}x)")


if __name__ == "__main__":
    main()
