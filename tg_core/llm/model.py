"""Llama-family transformers (`llama` incl. SmolLM2, `qwen2`, `qwen3`) from GGUF files, on the Tensor API.

Weights are the lazy dequantizations of gguf.py: each matmul reads the packed bytes. RoPE follows the
file's layout instead of permuting weights: llama.cpp's converter reorders the Q/K rows of arch `llama` so
that ggml's "normal" RoPE rotates adjacent pairs (2i, 2i+1), and that is what we apply to the raw rows
(equivalent to undoing the permutation and rotating halves, which `rope_halves` does for the NeoX-style
qwen archs, stored unpermuted). Attention is grouped-query: the G = H / Hk query heads of a KV head are one
axis of the query, broadcast against that head's keys and values. The KV cache (kvcache.py) is written at
`start_pos` and read up to `start_pos + T`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tg_core.dtype import DType, dtypes
from tg_core.kernels import kernel_for
from tg_core.llm.gguf import GGUFFile
from tg_core.llm.kvcache import KVCache, Position, pos_slice, position_value
from tg_core.llm.weights import gguf_source
from tg_core.tensor import Tensor

ARCHS = ("llama", "qwen2", "qwen3")
NEOX_ROPE = frozenset({"qwen2", "qwen3"})  # rotate halves; `llama` rotates adjacent pairs of the raw GGUF rows


@dataclass(frozen=True)
class LlamaConfig:
    arch: str
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab: int
    norm_eps: float
    rope_base: float
    rope_dim: int
    max_context: int
    context_length: int

    @classmethod
    def from_gguf_metadata(cls, md: dict[str, Any], max_context: int | None = None) -> LlamaConfig:
        arch = md.get("general.architecture")
        if arch not in ARCHS:
            raise NotImplementedError(f"architecture {arch!r} is not supported (supported: {', '.join(ARCHS)})")

        def get(key: str, default: Any = None) -> Any:
            v = md.get(f"{arch}.{key}", default)
            if v is None:
                raise ValueError(f"the GGUF metadata has no {arch}.{key}, which a {arch} model needs")
            return v
        dim, heads = int(get("embedding_length")), int(get("attention.head_count"))
        head_dim = int(get("attention.key_length", dim // heads))
        if int(get("attention.value_length", head_dim)) != head_dim:
            raise NotImplementedError("key and value head dimensions differ: not supported")
        kv_heads = int(get("attention.head_count_kv", heads))
        if heads % kv_heads:
            raise ValueError(f"{heads} attention heads are not a multiple of {kv_heads} KV heads")
        ctx = int(get("context_length"))
        if max_context is not None and max_context < 1:
            raise ValueError(f"max_context must be at least 1, got {max_context}")
        vocab = len(md["tokenizer.ggml.tokens"]) if "tokenizer.ggml.tokens" in md else int(get("vocab_size"))
        rope_dim = int(get("rope.dimension_count", head_dim))
        if rope_dim % 2 or rope_dim > head_dim:
            raise ValueError(f"rope.dimension_count {rope_dim} must be even and at most the head dim {head_dim}")
        return cls(arch, dim, int(get("block_count")), heads, kv_heads, head_dim, int(get("feed_forward_length")),
                   vocab, float(get("attention.layer_norm_rms_epsilon")), float(get("rope.freq_base", 10000.0)),
                   rope_dim, min(max_context or 4096, ctx), ctx)


def rms_norm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    return x * ((x * x).mean(-1, keepdim=True) + eps).rsqrt() * w


def rope_tables(cfg: LlamaConfig, device: str | None) -> tuple[Tensor, Tensor]:
    """cos and sin of pos * base^(-2i/rope_dim), (max_context, rope_dim/2) float32 (angles in float64)."""
    inv = cfg.rope_base ** (-np.arange(0, cfg.rope_dim, 2, dtype=np.float64) / cfg.rope_dim)
    ang = np.arange(cfg.max_context, dtype=np.float64)[:, None] * inv[None, :]
    return (Tensor(np.cos(ang).astype(np.float32), device=device).realize(),
            Tensor(np.sin(ang).astype(np.float32), device=device).realize())


def rope_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """ggml's normal RoPE: rotate (x[2i], x[2i+1]) of the first rope_dim dims; x is (B, T, heads, d),
    cos/sin (T, rope_dim/2)."""
    B, T, H, d = x.shape
    r = cos.shape[-1] * 2
    rot = x[..., :r].reshape(B, T, H, r // 2, 2)
    c, s = cos.reshape(1, T, 1, r // 2), sin.reshape(1, T, 1, r // 2)
    x0, x1 = rot[..., 0], rot[..., 1]
    out = (x0 * c - x1 * s).unsqueeze(-1).cat((x1 * c + x0 * s).unsqueeze(-1), dim=-1).reshape(B, T, H, r)
    return out if r == d else out.cat(x[..., r:], dim=-1)


def rope_halves(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """NeoX RoPE: rotate (x[i], x[i + rope_dim/2]) of the first rope_dim dims."""
    B, T, H, d = x.shape
    r = cos.shape[-1] * 2
    x0, x1 = x[..., :r // 2], x[..., r // 2:r]
    c, s = cos.reshape(1, T, 1, r // 2), sin.reshape(1, T, 1, r // 2)
    out = (x0 * c - x1 * s).cat(x1 * c + x0 * s, dim=-1)
    return out if r == d else out.cat(x[..., r:], dim=-1)


def linear(x: Tensor, w: Tensor, bias: Tensor | None = None) -> Tensor:
    """`x @ w.T (+ bias)`, by a plugin's `quant_linear` kernel, or else its `f16_gemv` (a dense weight, few tokens),
    when one is offered for x's device and supports these."""
    k = kernel_for("quant_linear", x.device)
    if k is not None and k.supports(x, w, src := gguf_source(w)):
        out = k.build(x, w, src)
        return out if bias is None else out + bias
    g = kernel_for("f16_gemv", x.device)
    if g is not None and g.supports(x, w, bias):
        return g.build(x, w, bias)
    return x @ w.T if bias is None else x @ w.T + bias


def attention_decode(qg: Tensor, keys: Tensor, values: Tensor, scale: float) -> Tensor | None:
    """One query token's attention by a plugin's `flash_attention_decode` kernel, or None (none offered, or it
    does not support these shapes): qg (B, Hk, G, 1, d), keys and values (B, Hk, S, d)."""
    k = kernel_for("flash_attention_decode", qg.device)
    if k is not None and k.supports(qg, keys, values, scale):
        return k.build(qg, keys, values, scale)
    return None


def attention_prefill(qg: Tensor, keys: Tensor, values: Tensor, scale: float) -> Tensor | None:
    """Causal attention of T > 1 query tokens (the last T of the S keys) by a plugin's `flash_attention_prefill`
    kernel, or None (none offered, or it does not support these shapes): qg (B, Hk, G, T, d)."""
    k = kernel_for("flash_attention_prefill", qg.device)
    if k is not None and k.supports(qg, keys, values, scale):
        return k.build(qg, keys, values, scale)
    return None


class Block:
    def __init__(self, cfg: LlamaConfig, w: dict[str, Tensor], cache: KVCache):
        self.cfg, self.w, self.cache = cfg, w, cache

    def __call__(self, x: Tensor, start_pos: Position, cos: Tensor, sin: Tensor) -> Tensor:
        cfg, w = self.cfg, self.w
        B, T, _ = x.shape
        H, Hk, d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        # the matmuls' inputs are realized (contiguous): inlined, the norm (or the gate) would be recomputed
        # for every output column of the matmul that reads it
        # realized now, not at the cache write below: that write computes k and v (and so h) in a schedule of
        # its own, and a lazy h would be computed there and again for q
        h = rms_norm(x, w["attn_norm"], cfg.norm_eps).realize()
        q, k, v = (linear(h, w[f"attn_{n}"], w.get(f"attn_{n}.bias")) for n in "qkv")
        # realized: RoPE reads two rows of each projection per output and the cache write selects between k
        # and v, so inlined, every output element would compute two (or both) dot products
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        q, k, v = q.reshape(B, T, H, d), k.reshape(B, T, Hk, d), v.reshape(B, T, Hk, d)
        if "attn_q_norm" in w:  # qwen3: RMSNorm over each head before RoPE
            q, k = rms_norm(q, w["attn_q_norm"], cfg.norm_eps), rms_norm(k, w["attn_k_norm"], cfg.norm_eps)
        rope = rope_halves if cfg.arch in NEOX_ROPE else rope_pairs
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        keys, values = self.cache.update(k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3), start_pos)  # (B, Hk, S, d)
        G = H // Hk
        qg = q.reshape(B, T, Hk, G, d).permute(0, 2, 3, 1, 4)                    # (B, Hk, G, T, d)
        # a plugin's decode or prefill kernel when offered (tg_core/kernels.py), else the Tensor code below
        att = (attention_decode if T == 1 else attention_prefill)(qg, keys, values, 1 / math.sqrt(d))
        if att is None:
            att = self._attention(qg, keys, values)                                # (B, Hk, G, T, d)
        # realized: the FFN's norm (its reduction and its elementwise part) and the residual add each read x, and
        # inlined, each would recompute the output projection
        x = (x + linear(att.permute(0, 3, 1, 2, 4).reshape(B, T, H * d), w["attn_output"])).contiguous()
        h = rms_norm(x, w["ffn_norm"], cfg.norm_eps).contiguous()
        return x + linear((linear(h, w["ffn_gate"]).silu() * linear(h, w["ffn_up"])).contiguous(), w["ffn_down"])

    @staticmethod
    def _attention(qg: Tensor, keys: Tensor, values: Tensor) -> Tensor:
        """Grouped-query attention, causal for T > 1: qg (B, Hk, G, T, d), keys and values (B, Hk, S, d)."""
        T, d = qg.shape[-2], qg.shape[-1]
        # a float16 cache is widened once per step into a float32 copy of its valid prefix (transient: a JIT
        # intermediate) that the products read: they read each key G (decode) or T * G (prefill) times, and X86's
        # float16 loads are scalar. Measured on SmolLM2, X86: read in place, a prefill chunk's scores ran 5.7x
        # slower and a decode step 19.8 ms against 17.5 with a float32 cache; widened first, 17.7 ms
        if keys.dtype != qg.dtype:
            keys, values = keys.cast(qg.dtype).contiguous(), values.cast(qg.dtype).contiguous()
        scores = (qg @ keys.unsqueeze(2).transpose(-1, -2)) * (1 / math.sqrt(d))  # (B, Hk, G, T, S)
        if T > 1:  # causal, lower-right aligned: query t sees keys up to start_pos + t
            S = scores.shape[-1]
            allowed = Tensor.arange(S, device=qg.device).reshape(1, S) <= \
                (Tensor.arange(T, device=qg.device).reshape(T, 1) + (S - T))
            scores = allowed.where(scores, -math.inf)
        # realized in its own (B, Hk, G, T, d) layout: realized after the reshape to (B, T, H*d), its one output
        # axis would be a head and a dim at once, and the softmax of a head would be recomputed for each of its d
        return (scores.softmax(-1) @ values.unsqueeze(2)).contiguous()               # (B, Hk, G, T, d)


class Transformer:
    """`model(tokens, start_pos)` runs tokens (B, T) int32 at positions start_pos.. start_pos+T-1 (writing
    their keys and values into the cache) and returns the logits of the last position, (B, vocab)."""

    def __init__(self, cfg: LlamaConfig, weights: dict[str, Tensor], batch: int = 1, device: str | None = None,
                 kv_dtype: DType = dtypes.float16):
        self.cfg, self.device, self.batch = cfg, device, batch
        need = ["token_embd.weight", "output_norm.weight"]
        for i in range(cfg.n_layers):
            need += [f"blk.{i}.{n}.weight" for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                                       "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")]
        missing = [n for n in need if n not in weights]
        if missing:
            raise ValueError(f"the model lacks the tensors {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
        self.tok_embd = weights["token_embd.weight"]
        self.output = weights.get("output.weight", self.tok_embd)  # absent: tied to the embedding
        self.output_norm = weights["output_norm.weight"]
        self.cos, self.sin = rope_tables(cfg, device)
        self.caches = [KVCache(batch, cfg.n_kv_heads, cfg.max_context, cfg.head_dim, device, kv_dtype)
                       for _ in range(cfg.n_layers)]
        self.blocks = []
        for i in range(cfg.n_layers):
            pre = f"blk.{i}."
            w = {k[len(pre):].removesuffix(".weight"): t for k, t in weights.items() if k.startswith(pre)}
            self.blocks.append(Block(cfg, w, self.caches[i]))

    @classmethod
    def from_gguf(cls, source: str | Path | GGUFFile, max_context: int | None = None, batch: int = 1,
                  device: str | None = None, kv_dtype: DType = dtypes.float16) -> Transformer:
        f = source if isinstance(source, GGUFFile) else GGUFFile(source)
        cfg = LlamaConfig.from_gguf_metadata(f.metadata, max_context)
        if any(info.ggml_type != 0 and int(f.metadata.get("general.quantization_version", 2)) != 2
               for info in f.tensors.values()):
            raise NotImplementedError(f"{f.path}: general.quantization_version {f.metadata['general.quantization_version']}"
                                      " is not supported (2 is)")
        # each weight's bytes are uploaded here, once; the dequantization stays lazy
        weights = {name: f.tensor(name, device) for name in f.tensors if name != "rope_freqs.weight"}
        return cls(cfg, weights, batch, device, kv_dtype)

    def __call__(self, tokens: Tensor, start_pos: Position) -> Tensor:
        B, T = tokens.shape
        if B != self.batch:
            raise ValueError(f"the model's cache holds a batch of {self.batch}, got tokens of shape {tokens.shape}")
        self.check_positions(start_pos, T)
        x = self.tok_embd[tokens]
        cos, sin = pos_slice(self.cos, start_pos, T), pos_slice(self.sin, start_pos, T)
        for blk in self.blocks:
            # realized per layer: the next layer's cache write runs at once, and a lazy x would make it
            # recompute every layer before it
            x = blk(x, start_pos, cos, sin).realize()
        last = rms_norm(x[:, -1], self.output_norm, self.cfg.norm_eps).contiguous()
        # realized: sampling reads the logits several times (argmax alone would recompute the head twice)
        return linear(last, self.output).contiguous()

    def check_positions(self, start_pos: Position, T: int) -> None:
        end = position_value(start_pos) + T
        if T < 1 or end > self.cfg.max_context:
            raise ValueError(f"positions {start_pos}..{end - 1} do not fit the context of {self.cfg.max_context} tokens")

