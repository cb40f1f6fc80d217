"""Speed of tg-mockgpu's RDNA3 emulator on the LLM kernels: lane-instructions per second of tg-amd's `quant_linear`
kernels, the WMMA path (16+ tokens) and the sudot4 path (fewer), for each quant type, and of two instruction loops
(four dependent v_wmma_f32_16x16x16_f16 / v_dot4_i32_iu8 per iteration, LLVM IR through tg-amd's compiler), each as
a ratio against bench/emulator.py's elementwise case (the emulator's speed on plain VALU code).

A lane-instruction is one instruction of one lane slot (32 per wave, a WMMA counting once). The cases run
alternately, one run of each per round (`--repeat` rounds after a warm-up that compiles and loads), so each sees the
same machine load; the best round counts. A quant_linear case times only the linear kernel's dispatch (the last one:
it reads what q8_quantize or the f16 cast wrote), its wave count checked against the launch shape. Every result is
checked against numpy. Usage: python bench/emulator_llm.py [--json] [--repeat N] [--iters N] [--cases a,b]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

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

# quant_linear shapes: (tokens, outputs, inputs). WMMA: 64 tokens (one wave's 4 token tiles) over 1024 outputs;
# sudot4: one token (decode) over 1024 outputs, a wave each
WMMA_SHAPE, DOT4_SHAPE = (64, 1024, 512), (1, 1024, 1024)
QUANT_TYPES = {"Q4_K": (12, 144, (0, 2)), "Q5_K": (13, 176, (0, 2)), "Q6_K": (14, 210, (208,)), "IQ4_XS": (23, 136, (0,))}


def _nothing() -> None:
    pass


class Case(NamedTuple):
    """A prepared benchmark case: `run` dispatches once and returns the output; `stats` is the emulator's record of
    the dispatch to time; `check` says whether an output is right; `waves` (when known) the launch's wave count.
    (A NamedTuple, not a dataclass: the tests load this file by path, outside sys.modules.)"""
    run: Callable[[], Any]
    stats: Callable[[], Any]
    check: Callable[[Any], bool]
    waves: int | None = None
    info: dict | None = None
    close: Callable[[], None] = _nothing


def _bench_emulator():
    spec = importlib.util.spec_from_file_location("bench_emulator", HERE / "emulator.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def elementwise_case() -> Case:
    """bench/emulator.py's elementwise case (a * b + 1 over 2^20 floats) on the AMD device."""
    from tg_core.tensor import Tensor
    launcher = _bench_emulator().amd_launcher()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 1 << 20)).astype(np.float32)
    ta, tb = Tensor(a, device="AMD").realize(), Tensor(b, device="AMD").realize()
    return Case(lambda: (ta * tb + 1).numpy(), lambda: launcher.last,
                lambda got: bool(np.array_equal(got, a * b + np.float32(1))))


def _ir(case: dict) -> str:
    """The loop kernel: four dependent calls per iteration, each taking the previous result as accumulator."""
    body = "".join(f"  %c{k + 1} = {case['call']}%c{k}{case['tail']})\n" for k in range(4))
    return LOOP_IR.format(group=32 * WAVES_PER_GROUP, body=body, **case)


def _loop_case(case: dict, a: np.ndarray, b: np.ndarray, out_bytes: int, iters: int, check) -> Case:
    from tg_amd.compiler import AMDCompiler
    from tg_amd.elf import load_code_object
    from tg_mockgpu.interface import MockInterface
    from tg_mockgpu.rdna3.decode import decode_all
    gpu = MockInterface()
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
    return Case(run, lambda: gpu.last, check, GROUPS * WAVES_PER_GROUP,
                {"instructions": sorted({n for n in names if "wmma" in n or "dot" in n})}, gpu.close)


def wmma_loop_case(iters: int) -> Case:
    rng = np.random.default_rng(0)
    am, bm = rng.integers(-2, 3, (2, 16, 16)).astype(np.float16)
    a = np.ascontiguousarray(np.concatenate([am, am]))        # lane l: row l % 16 of A (lanes 16..31 repeat 0..15)
    b = np.ascontiguousarray(np.concatenate([bm.T, bm.T]))    # lane l: column l % 16 of B
    want = 4 * iters * (am.astype(np.float64) @ bm.astype(np.float64))

    def check(out: bytes) -> bool:
        d = np.frombuffer(out, np.float32).reshape(-1, 32, 8)                  # [wave][lane][VGPR i]
        got = d.transpose(0, 2, 1).reshape(-1, 8, 2, 16).reshape(-1, 16, 16)  # [2i + lane // 16][lane % 16]
        return bool(np.array_equal(got, np.broadcast_to(want, got.shape)))
    return _loop_case(WMMA, a, b, GROUPS * WAVES_PER_GROUP * 32 * 32, iters, check)


def dot4_loop_case(iters: int) -> Case:
    rng = np.random.default_rng(1)
    a, b = (rng.integers(-128, 128, (32, 4)).astype(np.int8) for _ in range(2))
    per = (a.astype(np.int64) * b.astype(np.int64)).sum(1) * 4 * iters
    want = (per + 2**31) % 2**32 - 2**31

    def check(out: bytes) -> bool:
        got = np.frombuffer(out, np.int32).reshape(-1, 32)
        return bool(np.array_equal(got, np.broadcast_to(want, got.shape)))
    return _loop_case(DOT4, a.view(np.uint32).ravel(), b.view(np.uint32).ravel(), GROUPS * WAVES_PER_GROUP * 32 * 4,
                      iters, check)


def _raw_blocks(n_blocks: int, block_bytes: int, scale_at: tuple[int, ...], seed: int) -> np.ndarray:
    """Random blocks with small positive float16 scales at the type's scale offsets (other bytes are all valid)."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint8)
    for at in scale_at:
        raw[:, at:at + 2] = rng.uniform(0.001, 0.02, n_blocks).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw


def linear_case(type_name: str, shape: tuple[int, int, int]) -> Case:
    """tg-amd's quant_linear of `type_name` at (tokens, outputs, inputs): the WMMA kernel from 16 tokens, sudot4 below."""
    from tg_core.llm.dequant import dequantize
    from tg_core.llm.weights import remember
    from tg_core.tensor import Tensor
    from tg_amd.kernels.q4k import MAX_TOKENS, Q4KLinear
    from tg_amd.kernels.wmma import TILE, token_tiles
    T, N, K = shape
    ggml_type, nbytes, scale_at = QUANT_TYPES[type_name]
    raw = _raw_blocks(N * K // 256, nbytes, scale_at, ggml_type)
    x = np.random.default_rng(T).standard_normal((T, K)).astype(np.float16 if T > MAX_TOKENS else np.float32)
    rt = Tensor(raw, device="AMD").realize()
    w = dequantize(rt, ggml_type).reshape(N, K)
    remember(w, rt, ggml_type)
    W = dequantize(Tensor(raw, device="CPU"), ggml_type).reshape(N, K).numpy().astype(np.float64)
    if T > MAX_TOKENS:  # the WMMA reference: f16 inputs and f16-rounded weights
        want = x.astype(np.float64) @ W.astype(np.float32).astype(np.float16).astype(np.float64).T
        out_tiles = 2 if ggml_type == 23 and N % 32 == 0 else 1
        waves = -(-N // (TILE * out_tiles)) * -(-T // (TILE * token_tiles(T, out_tiles)))
    else:               # the sudot4 reference: Q8 activations
        g = x.reshape(T, K // 32, 32)
        d = np.maximum(np.abs(g).max(-1) / np.float32(127), np.float32(1e-8)).astype(np.float32)
        q8 = np.clip(np.rint(g / d[..., None]), -127, 127) * d[..., None].astype(np.float64)
        want, waves = q8.reshape(T, K) @ W.T, N * T
    kernel, tx = Q4KLinear(), Tensor(x, device="AMD").realize()
    launcher = _bench_emulator().amd_launcher()
    return Case(lambda: kernel.build(tx, w, (rt, ggml_type)).numpy(), lambda: launcher.last,
                lambda got: bool(np.allclose(got, want, rtol=3e-3, atol=2e-2)), waves,
                {"path": "wmma" if T > MAX_TOKENS else "sudot4", "shape": list(shape)})


def cases(iters: int) -> dict[str, Callable[[], Case]]:
    out: dict[str, Callable[[], Case]] = {"elementwise": elementwise_case, "wmma-loop": lambda: wmma_loop_case(iters),
                                          "dot4-loop": lambda: dot4_loop_case(iters)}
    for name in QUANT_TYPES:
        out[f"{name}-wmma"] = lambda name=name: linear_case(name, WMMA_SHAPE)
        out[f"{name}-sudot4"] = lambda name=name: linear_case(name, DOT4_SHAPE)
    return out


def measure(prepared: dict[str, Case], repeat: int) -> dict[str, dict]:
    """Warm every case up, then `repeat` rounds running each case once in turn; per case the round with the least
    dispatch time, its lane-instructions and waves (checked against the case's launch shape) and correctness."""
    best: dict[str, dict] = {}
    for c in prepared.values():
        c.run()
    for _ in range(repeat):
        for name, c in prepared.items():
            t0 = time.perf_counter()
            got = c.run()
            wall = time.perf_counter() - t0
            s = c.stats()
            if c.waves is not None and s.waves != c.waves:
                raise RuntimeError(f"{name}: the timed dispatch ran {s.waves} waves, the kernel launches {c.waves}")
            if name not in best or s.seconds < best[name]["seconds"]:
                best[name] = {"seconds": s.seconds, "wall_seconds": wall, "lane_instructions": s.lane_instructions,
                              "waves": s.waves, "lane_instructions_per_second": s.lane_instructions / s.seconds,
                              "correct": c.check(got), **(c.info or {})}
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--repeat", type=int, default=3, help="timed rounds (the best counts per case)")
    ap.add_argument("--iters", type=int, default=16, help="loop cases' iterations (four WMMAs / dot4s each)")
    every = cases(0)
    ap.add_argument("--cases", default=",".join(every), help=f"comma-separated subset of {', '.join(every)}")
    args = ap.parse_args()
    names = args.cases.split(",")
    if "elementwise" not in names:
        names.insert(0, "elementwise")  # the reference of the ratios
    unknown = [n for n in names if n not in every]
    if unknown:
        raise SystemExit(f"unknown case(s) {', '.join(unknown)}; the cases are {', '.join(every)}")
    make = cases(args.iters)
    prepared = {n: make[n]() for n in names}
    try:
        results = measure(prepared, args.repeat)
    finally:
        for c in prepared.values():
            c.close()
    base = results["elementwise"]["lane_instructions_per_second"]
    for r in results.values():
        r["ratio_vs_elementwise"] = r["lane_instructions_per_second"] / base
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{'case':13} {'waves':>6} {'lane-instr':>11} {'dispatch s':>10} {'M lane-instr/s':>15} {'ratio':>6}  correct")
    for name, r in results.items():
        print(f"{name:13} {r['waves']:6d} {r['lane_instructions']:11d} {r['seconds']:10.3f} "
              f"{r['lane_instructions_per_second'] / 1e6:15.2f} {r['ratio_vs_elementwise']:6.2f}  {r['correct']}")


if __name__ == "__main__":
    main()
