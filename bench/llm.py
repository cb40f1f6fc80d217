"""LLM inference speed on the packaged SmolLM2-135M Q4_1 (issue 18's figures): decode and prefill tokens/s,
time to first token for a 16-token prompt once compiled, a cold first answer (a fresh process: imports, load,
compile, first token) and peak resident memory against the GGUF file's size.

The reference measured in the same run is the memory-bandwidth bound of decode: every token reads every weight
byte once, so `1 / (time numpy takes to read the file's tensor bytes from RAM)` is the fastest decode this
machine's memory allows; decode is reported as a share of it.

Usage: python bench/llm.py [--device CPU] [--tokens 64] [--repeat 3] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from timing import best_of  # noqa: E402  (bench/timing.py)

PROMPT = "Write a short poem about the sea, the wind and a small boat that sails home at night."


def load(device: str | None, max_context: int = 512):  # -> (Generator, Tokenizer, GGUFFile)
    from tg_core.llm.generate import Generator
    from tg_core.llm.gguf import GGUFFile
    from tg_core.llm.model import Transformer
    from tg_core.llm.packaged import packaged_model
    from tg_core.llm.tokenizer import Tokenizer
    f = GGUFFile(packaged_model("smollm2"))
    model = Transformer.from_gguf(f, max_context=max_context, device=device)
    tok = Tokenizer.from_gguf_metadata(f.metadata)
    return Generator(model, tok), tok, f


def prompt_ids(tok, n: int) -> list[int]:
    """The first n ids of the prompt text repeated (a fixed prompt of exactly n tokens)."""
    ids = tok.encode(PROMPT, add_bos=False)
    return (ids * (n // len(ids) + 1))[:n]


def cold_child(device: str | None) -> None:
    """In a fresh process: the time from start to the first token of a 16-token prompt, compile included."""
    t0 = time.perf_counter()
    gen, tok, _ = load(device)
    g = gen.generate(prompt_ids(tok, 16), max_new_tokens=2, stop_ids=[])
    next(g)
    first = time.perf_counter() - t0
    next(g)  # the decode step's first call: its capture and compile
    print(json.dumps({"cold_first_token_s": first, "cold_second_token_s": time.perf_counter() - t0}))


def bandwidth_bound(f) -> float:
    """Seconds numpy takes to read every tensor byte of the file once from RAM (best of 5)."""
    raw = [np.ascontiguousarray(f.raw(name)).reshape(-1).view(np.uint8) for name in f.tensors]
    words = [r[:r.size // 8 * 8].view(np.uint64) for r in raw]
    return best_of(lambda: [np.bitwise_or.reduce(w) for w in words], 5)


def rss_split() -> dict[str, float]:
    """Resident memory now, MB: file-backed pages (the memory-mapped weights, libraries) and anonymous ones (the
    heap: KV cache, intermediates, compiled code, Python objects). Linux keeps no peak of either."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile"):
                fields[name] = int(rest.split()[0]) / 1024
    return {"rss_mb": fields.get("VmRSS", 0.0), "rss_file_mb": fields.get("RssFile", 0.0),
            "rss_anon_mb": fields.get("RssAnon", 0.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--tokens", type=int, default=64, help="tokens decoded for the decode rate")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cold-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.cold_child:
        cold_child(a.device)
        return
    env = dict(os.environ, **({"DEV": a.device} if a.device else {}))
    child = subprocess.run([sys.executable, __file__, "--cold-child"], capture_output=True, text=True, env=env,
                           timeout=600)
    if child.returncode:
        raise SystemExit(f"the cold run failed:\n{child.stderr}")
    row = json.loads(child.stdout.strip().splitlines()[-1])

    gen, tok, f = load(a.device)
    file_bytes = os.path.getsize(f.path)
    short, long_ = prompt_ids(tok, 16), prompt_ids(tok, 128)

    def first_token(ids: list[int]) -> None:
        gen.cached = []  # no prefix reuse: the whole prompt runs
        next(gen.generate(ids, max_new_tokens=1, stop_ids=[]))

    first_token(short)  # compiles the prefill chunk of 16 and the head
    first_token(long_)  # and of 32 (the chunk)
    row["ttft_16_s"] = best_of(lambda: first_token(short), a.repeat)
    def prefill_only() -> None:
        gen.cached = []
        gen.prefill(long_).realize()
    prefill = best_of(prefill_only, a.repeat)
    row["prefill_tok_s"] = len(long_) / prefill

    def decode() -> float:
        gen.cached = []
        g = gen.generate(short, max_new_tokens=a.tokens + 2, stop_ids=[])
        next(g), next(g)  # the prompt and the first decode step (captured the first time)
        t0 = time.perf_counter()
        n = sum(1 for _ in g)
        return n / (time.perf_counter() - t0)
    decode()
    row["decode_tok_s"] = max(decode() for _ in range(a.repeat))
    row["bandwidth_bound_tok_s"] = 1 / bandwidth_bound(f)
    row["decode_share_of_bound"] = row["decode_tok_s"] / row["bandwidth_bound_tok_s"]
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    row.update(rss_split())
    row["gguf_mb"] = file_bytes / 2**20
    row["rss_over_file"] = row["peak_rss_mb"] / row["gguf_mb"]
    if a.json:
        print(json.dumps(row))
        return
    print(f"SmolLM2-135M Q4_1 on {a.device or 'the default device'}")
    print(f"  decode      {row['decode_tok_s']:7.1f} tok/s  ({row['decode_share_of_bound']:.0%} of the memory-bandwidth "
          f"bound, {row['bandwidth_bound_tok_s']:.0f} tok/s, measured in this run)")
    print(f"  prefill     {row['prefill_tok_s']:7.1f} tok/s  (128-token prompt)")
    print(f"  TTFT        {row['ttft_16_s'] * 1000:7.0f} ms     (16-token prompt, compiled)")
    print(f"  cold        {row['cold_first_token_s']:7.1f} s      to the first token of a fresh process "
          f"({row['cold_second_token_s']:.1f} s to the second, the decode step compiled)")
    print(f"  memory      {row['peak_rss_mb']:7.0f} MB     peak RSS ({row['rss_over_file']:.2f}x the "
          f"{row['gguf_mb']:.0f} MB file; at the end {row['rss_mb']:.0f} MB: {row['rss_file_mb']:.0f} file-backed, "
          f"{row['rss_anon_mb']:.0f} anonymous)")


if __name__ == "__main__":
    main()
