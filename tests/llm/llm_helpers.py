"""Helpers of the LLM tests: a tiny random llama GGUF, a canned generator, a server running on a thread."""
from __future__ import annotations

import pytest

# ---- a tiny random llama (2 layers, GQA, tied embeddings) with a byte-level vocabulary and ChatML tokens -----

TINY_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# K types gguf cannot quantize: (byte offset of an f16 scale in the block, its magnitude per unit of weight
# scale), chosen so a random block's values are of the weight's scale (Q4_K: d, dmin times 6-bit scales and
# 4-bit quants; Q6_K: d times int8 scales and 6-bit quants minus 32)
RANDOM_BYTE_SCALES = {12: ((0, 2e-3), (2, 2e-3)), 14: ((208, 5e-4),)}


def write_tiny_llama(path, seed: int = 0, dim: int = 64, n_layers: int = 2, n_heads: int = 4, n_kv_heads: int = 2,
                     ffn_dim: int = 128, context: int = 256, types: dict | None = None) -> str:
    """A random llama GGUF written with gguf.GGUFWriter: every byte is a token (GPT-2's byte characters, so any
    text encodes), then the ChatML special tokens; no chat template (tg falls back to ChatML); the output head
    tied to the embedding. `types` maps a weight name suffix (e.g. "attn_q") to a GGMLQuantizationType that
    weight is quantized to (default F32 everywhere)."""
    import numpy as np
    gguf = pytest.importorskip("gguf")
    from tg_core.llm.tokenizer import _byte_chars
    rng = np.random.default_rng(seed)
    tokens = [*_byte_chars(), *TINY_SPECIAL]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    w.add_context_length(context)
    w.add_embedding_length(dim)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(ffn_dim)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * 256 + [3] * len(TINY_SPECIAL))
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))

    def add(name: str, shape: tuple[int, ...], scale: float, ones: bool = False) -> None:
        data = (np.ones(shape) if ones else rng.standard_normal(shape) * scale).astype(np.float32)
        qtype = (types or {}).get(name.split(".")[-2] if name.count(".") > 1 else name, None)
        if qtype is None or qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, data)
        elif qtype in RANDOM_BYTE_SCALES:  # gguf cannot quantize K types: random bytes with small valid scales
            elems, nbytes = gguf.GGML_QUANT_SIZES[qtype]
            raw = rng.integers(0, 256, size=(shape[0], shape[1] // elems, nbytes), dtype=np.uint8)
            for off, mag in RANDOM_BYTE_SCALES[qtype]:
                raw[..., off:off + 2] = (rng.uniform(0.5, 1.0, size=raw.shape[:2] + (1,)) * mag * scale
                                         ).astype(np.float16).view(np.uint8)
            w.add_tensor(name, raw.reshape(shape[0], -1), raw_dtype=qtype)
        else:
            w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    hd = dim // n_heads
    add("token_embd.weight", (len(tokens), dim), 0.25)
    add("output_norm.weight", (dim,), 0, ones=True)
    for i in range(n_layers):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", (dim,), 0, ones=True)
        add(p + "ffn_norm.weight", (dim,), 0, ones=True)
        add(p + "attn_q.weight", (n_heads * hd, dim), dim ** -0.5)
        add(p + "attn_k.weight", (n_kv_heads * hd, dim), dim ** -0.5)
        add(p + "attn_v.weight", (n_kv_heads * hd, dim), dim ** -0.5)
        add(p + "attn_output.weight", (dim, n_heads * hd), dim ** -0.5)
        add(p + "ffn_gate.weight", (ffn_dim, dim), dim ** -0.5)
        add(p + "ffn_up.weight", (ffn_dim, dim), dim ** -0.5)
        add(p + "ffn_down.weight", (dim, ffn_dim), ffn_dim ** -0.5)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)




class CannedGenerator:
    """A stand-in for tg_core.llm.generate.Generator that answers every prompt with the same reply's tokens
    (one every `delay` seconds): the server's and the page's tests of text handling need known output."""

    def __init__(self, tokenizer, reply: str, delay: float = 0.0):
        self.tokenizer, self.reply, self.delay = tokenizer, reply, delay
        self.cached: list[int] = []
        self.prompts: list[list[int]] = []

    def generate(self, ids, max_new_tokens=256, params=None, stop_ids=None):
        import time
        self.prompts.append(list(ids))
        self.cached = list(ids)
        for t in self.tokenizer.encode(self.reply, add_bos=False)[:max_new_tokens]:
            time.sleep(self.delay)
            yield t


class running:
    """`with running(server) as url:` serves on a thread and, on exit, stops within a bounded time."""

    def __init__(self, server):
        import threading
        self.server = server
        self.thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return self.server.url

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
        assert not self.thread.is_alive(), "the server did not stop within 10 s"
