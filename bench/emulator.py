"""Speed of tg-mockgpu's RDNA3 emulator: lane-instructions per second on the mock AMD GPU.

A lane-instruction is one instruction executed by one lane slot of a wave (32 per wave per instruction, scalar
instructions included, like the count behind tinygrad's ~7.4 million per second for `a*b+1`). Cases:

  elementwise  Tensor a * b + 1 on 2**20 float32 (tg's AMD pipeline: render, compile, ELF, dispatch)
  tree-sum     2**20 float32 summed per 256-item workgroup through LDS with barriers (an LLVM IR kernel)
  row-sum      Tensor (1024, 1024).sum(axis=1) as tg generates it (few waves, long loops: per-instruction overhead)

Each case runs once to compile and load, then `--repeat` times; the best dispatch time counts. Results are checked
against numpy. Usage: python bench/emulator.py [--json] [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))



def amd_launcher():
    """The mock GPU behind Device["AMD"]: its EmulatorLauncher keeps the last DISPATCH_DIRECT's cost."""
    from tg_core.device import Device
    dev = Device["AMD"]
    return next(g for g in dev.system.os.gpus if g.gpu_id == dev.gpu.node.gpu_id).launcher


def best(fn, iface, repeat: int) -> dict:
    fn()                                   # compile, load, decode
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        wall = time.perf_counter() - t0
        runs.append((iface.last.seconds, iface.last.lane_instructions, iface.last.waves, wall, result))
    secs, lanes, waves, wall, result = min(runs, key=lambda r: r[0])
    return {"seconds": secs, "wall_seconds": wall, "lane_instructions": lanes, "waves": waves,
            "lane_instructions_per_second": lanes / secs, "result": result}


def elementwise(repeat: int) -> dict:
    from tg_core.tensor import Tensor
    n = 1 << 20
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, n)).astype(np.float32)
    ta, tb = Tensor(a, device="AMD").realize(), Tensor(b, device="AMD").realize()
    r = best(lambda: (ta * tb + 1).numpy(), amd_launcher(), repeat)
    r["correct"] = bool(np.array_equal(r.pop("result"), a * b + np.float32(1)))
    return r


def tree_sum(repeat: int) -> dict:
    from tg_amd.compiler import AMDCompiler
    from tg_amd.elf import load_code_object
    from tg_mockgpu.interface import MockInterface
    from tg_mockgpu.sample_kernels import TREE_SUM
    gpu = MockInterface()
    try:
        co = load_code_object(AMDCompiler("gfx1100").compile(TREE_SUM))
        n, groups = 1 << 20, (1 << 20) // 256
        x = np.random.default_rng(1).integers(-1000, 1000, n).astype(np.float32)
        src, dst = gpu.alloc(x.nbytes), gpu.alloc(4 * groups)
        gpu.copyin(src, memoryview(x.tobytes()))
        args = struct.pack("<QQ", dst.va, src.va)

        def run() -> np.ndarray:
            gpu.dispatch(co, "tree_sum", (groups, 1, 1), (256, 1, 1), args)
            out = bytearray(4 * groups)
            gpu.copyout(memoryview(out), dst)
            return np.frombuffer(bytes(out), np.float32)
        r = best(run, gpu, repeat)
        r["correct"] = bool(np.array_equal(r.pop("result"), x.reshape(groups, 256).sum(1)))
        return r
    finally:
        gpu.close()


def row_sum(repeat: int) -> dict:
    from tg_core.tensor import Tensor
    x = np.random.default_rng(2).integers(-100, 100, (1024, 1024)).astype(np.float32)
    tx = Tensor(x, device="AMD").realize()
    r = best(lambda: tx.sum(axis=1).numpy(), amd_launcher(), repeat)
    r["correct"] = bool(np.array_equal(r.pop("result"), x.sum(1)))
    return r


CASES = {"elementwise": elementwise, "tree-sum": tree_sum, "row-sum": row_sum}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per case (the best counts)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {', '.join(CASES)}")
    args = ap.parse_args()
    results = {name: CASES[name](args.repeat) for name in args.cases.split(",")}
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{'case':12} {'waves':>7} {'lane-instr':>11} {'dispatch s':>10} {'M lane-instr/s':>15}  correct")
    for name, r in results.items():
        print(f"{name:12} {r['waves']:7d} {r['lane_instructions']:11d} {r['seconds']:10.3f} "
              f"{r['lane_instructions_per_second'] / 1e6:15.1f}  {r['correct']}")


if __name__ == "__main__":
    main()
