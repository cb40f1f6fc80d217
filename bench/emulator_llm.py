"""Speed of tg-mockgpu's RDNA3 emulator on the instructions of the LLM kernels: lane-instructions per second of
a WMMA loop (v_wmma_f32_16x16x16_f16) and a sudot4 loop (v_dot4_i32_iu8), each as a ratio against bench/emulator.py's
elementwise case measured in the same run (the emulator's per-instruction speed on plain VALU code).

Both kernels are LLVM IR compiled by tg-amd's compiler (what the LLM kernels go through), each loop iteration four
dependent WMMAs / dot4s; a lane-instruction is one instruction of one lane slot (32 per wave, a WMMA counting once).
Results are checked against numpy. Usage: python bench/emulator_llm.py [--json] [--repeat N] [--iters N]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import struct
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
GROUPS, WAVES_PER_GROUP = 256, 4         # 1024 waves: batches as wide as a real LLM dispatch's

LOOP_IR = """target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
{decl}
define amdgpu_kernel void @{name}(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b, i32 %n) #0 {{
entry:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %lane = and i32 %t, 31
  %gbase = mul i32 %g, {group}
  %gid = add i32 %gbase, %t
  %pa = getelementptr {ty}, ptr addrspace(1) %a, i32 %lane
  %pb = getelementptr {ty}, ptr addrspace(1) %b, i32 %lane
  %va = load {ty}, ptr addrspace(1) %pa
  %vb = load {ty}, ptr addrspace(1) %pb
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%i2, %loop]
  %c0 = phi {acc} [{zero}, %entry], [%c4, %loop]
{body}  %i2 = add i32 %i, 1
  %more = icmp ult i32 %i2, %n
  br i1 %more, label %loop, label %end
end:
  %po = getelementptr {acc}, ptr addrspace(1) %out, i32 %gid
  store {acc} %c4, ptr addrspace(1) %po
  ret void
}}
attributes #0 = {{ "amdgpu-flat-work-group-size"="1,{group}" }}
"""
WMMA = dict(name="wmma_loop", ty="<16 x half>", acc="<8 x float>", zero="zeroinitializer",
            decl="declare <8 x float> @llvm.amdgcn.wmma.f32.16x16x16.f16(<16 x half>, <16 x half>, <8 x float>)",
            call="call <8 x float> @llvm.amdgcn.wmma.f32.16x16x16.f16(<16 x half> %va, <16 x half> %vb, <8 x float> ",
            tail="")
DOT4 = dict(name="dot4_loop", ty="i32", acc="i32", zero="0",
            decl="declare i32 @llvm.amdgcn.sudot4(i1, i32, i1, i32, i32, i1)",
            call="call i32 @llvm.amdgcn.sudot4(i1 true, i32 %va, i1 true, i32 %vb, i32 ", tail=", i1 false")


def _bench_emulator():
    spec = importlib.util.spec_from_file_location("bench_emulator", HERE / "emulator.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ir(case: dict) -> str:
    """The loop kernel: four dependent calls per iteration, each taking the previous result as accumulator."""
    body = "".join(f"  %c{k + 1} = {case['call']}%c{k}{case['tail']})\n" for k in range(4))
    return LOOP_IR.format(group=32 * WAVES_PER_GROUP, body=body, **case)


def _run_loop(case: dict, a: np.ndarray, b: np.ndarray, out_bytes: int, iters: int, repeat: int, best) -> dict:
    from tg_amd.compiler import AMDCompiler
    from tg_amd.elf import load_code_object
    from tg_mockgpu.interface import MockInterface
    from tg_mockgpu.rdna3.decode import decode_all
    gpu = MockInterface()
    try:
        co = load_code_object(AMDCompiler("gfx1100").compile(_ir(case)))
        sym = co.kernel(case["name"])
        names = [i.op for i in decode_all(co.image[sym.code_offset:sym.code_offset + sym.code_size])]
        bufs = [gpu.alloc(out_bytes), gpu.alloc(a.nbytes), gpu.alloc(b.nbytes)]
        gpu.copyin(bufs[1], memoryview(a.tobytes()))
        gpu.copyin(bufs[2], memoryview(b.tobytes()))
        args = struct.pack("<QQQI", *(x.va for x in bufs), iters)

        def run() -> bytes:
            gpu.dispatch(co, case["name"], (GROUPS, 1, 1), (32 * WAVES_PER_GROUP, 1, 1), args)
            out = bytearray(out_bytes)
            gpu.copyout(memoryview(out), bufs[0])
            return bytes(out)
        r = best(run, gpu, repeat)
        r["instructions"] = sorted({n for n in names if "wmma" in n or "dot" in n})
        return r
    finally:
        gpu.close()


def wmma(iters: int, repeat: int, best) -> dict:
    rng = np.random.default_rng(0)
    am, bm = rng.integers(-2, 3, (2, 16, 16)).astype(np.float16)
    a = np.concatenate([am, am])                          # lane l: row l % 16 of A (lanes 16..31 repeat 0..15)
    b = np.concatenate([bm.T, bm.T])                      # lane l: column l % 16 of B
    nlanes = GROUPS * WAVES_PER_GROUP * 32
    r = _run_loop(WMMA, np.ascontiguousarray(a), np.ascontiguousarray(b), nlanes * 32, iters, repeat, best)
    d = np.frombuffer(r.pop("result"), np.float32).reshape(-1, 32, 8)   # [wave][lane][VGPR i]
    got = d.transpose(0, 2, 1).reshape(-1, 8, 2, 16).reshape(-1, 16, 16)   # [2i + lane // 16][lane % 16]
    want = 4 * iters * (am.astype(np.float64) @ bm.astype(np.float64))
    r["correct"] = bool(np.array_equal(got, np.broadcast_to(want, got.shape)))
    return r


def dot4(iters: int, repeat: int, best) -> dict:
    rng = np.random.default_rng(1)
    a, b = (rng.integers(-128, 128, (32, 4)).astype(np.int8) for _ in range(2))
    nlanes = GROUPS * WAVES_PER_GROUP * 32
    r = _run_loop(DOT4, a.view(np.uint32).ravel(), b.view(np.uint32).ravel(), nlanes * 4, iters, repeat, best)
    got = np.frombuffer(r.pop("result"), np.int32).reshape(-1, 32)
    per = (a.astype(np.int64) * b.astype(np.int64)).sum(1) * 4 * iters
    r["correct"] = bool(np.array_equal(got, np.broadcast_to(((per + 2**31) % 2**32 - 2**31), got.shape)))
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per case (the best counts)")
    ap.add_argument("--iters", type=int, default=16, help="loop iterations (four WMMAs / dot4s each)")
    args = ap.parse_args()
    emu = _bench_emulator()
    results = {"elementwise": emu.elementwise(args.repeat), "wmma": wmma(args.iters, args.repeat, emu.best),
               "dot4": dot4(args.iters, args.repeat, emu.best)}
    base = results["elementwise"]["lane_instructions_per_second"]
    for r in results.values():
        r["ratio_vs_elementwise"] = r["lane_instructions_per_second"] / base
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{'case':12} {'waves':>6} {'lane-instr':>11} {'dispatch s':>10} {'M lane-instr/s':>15} {'ratio':>6}  correct")
    for name, r in results.items():
        print(f"{name:12} {r['waves']:6d} {r['lane_instructions']:11d} {r['seconds']:10.3f} "
              f"{r['lane_instructions_per_second'] / 1e6:15.2f} {r['ratio_vs_elementwise']:6.2f}  {r['correct']}")


if __name__ == "__main__":
    main()
