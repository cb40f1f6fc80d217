"""Named kernels plugins offer (the `tg_kernels` hook) to core code, which keeps its own Tensor code as the fallback.

`kernel_for(name, device)` is the kernel of that name the plugins offer for `device`, or None. The caller
asks `supports(*args)` and uses `build(*args)` only when it says yes, else its own code: every device runs
core's code, and a plugin's kernel only replaces it where the plugin says it handles the arguments.

The names core asks for, and their arguments (each `build` returns what core's code computes, in shape and
dtype):
- `quant_linear(x, w, source)`: `x @ w.T` for activations x (..., K) and a weight w (N, K); `source` is
  (raw bytes tensor, ggml type) when w is exactly the dequantization of a GGUF tensor's bytes (llm/weights.py
  `gguf_source`), else None: a kernel reading the bytes takes them from there and declines without them;
- `f16_gemv(x, w, bias=None)`: `x @ w.T (+ bias)` for a few tokens over a dense weight w (N, K) (asked after
  `quant_linear` declines): the kernel must keep x's float32 range and give exact results for whatever w holds
  (its `supports` refuses a weight that is not float16 values, e.g. an `.int().float()` cast of one);
- `q8_quantize(x)`: x (..., K) float -> (q int8 (T, G, 32), scale float32 (T, G), xsum float32 (T, G, 2)), per group of
  32 inputs (tg_core/llm/q8.py, whose Tensor code is the fallback, defines the numbers);
- `flash_attention_decode(q, keys, values, scale)`: attention of one query token, q (B, Hk, G, 1, d) grouped by
  KV head, over keys and values (B, Hk, S, d) (S may be symbolic): `softmax(q @ k^T * scale) @ v`,
  (B, Hk, G, 1, d);
- `flash_attention_prefill(q, keys, values, scale)`: causal attention of T > 1 query tokens, q (B, Hk, G, T, d), the
  last T positions of the S keys (query t sees keys 0..S - T + t; S and T may be symbolic), (B, Hk, G, T, d);
- `gated_delta_prefill(q, k, v, beta, alpha, state, start_pos=None)`: the gated delta rule over T tokens
  (tg_core/llm/delta.py, whose Tensor code is the fallback, defines the numbers and shapes), updating `state` in
  place and returning the outputs.
"""
from __future__ import annotations

from typing import Any

from tg_core.device import Device
from tg_core.plugins.manager import get_registry

KERNEL_NAMES = ("quant_linear", "f16_gemv", "q8_quantize", "flash_attention_decode", "flash_attention_prefill",
                "gated_delta_prefill")


def kernel_for(name: str, device: str | None) -> Any | None:
    """The kernel called `name` offered by a plugin for `device` (None: the default device), or None."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"kernel_for takes a kernel name (str), got {name!r}")
    if isinstance(device, tuple):  # a sharded tensor: no single device's kernel applies
        return None
    dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
    return get_registry().kernels(dev).get(name)


__all__ = ["KERNEL_NAMES", "kernel_for"]
