"""Q8 activations (the int8 inputs of quantized dot-product kernels), by a plugin's `q8_quantize` kernel when one is
offered for the device, else with core's Tensor code; both give the same numbers.

Per group of 32 consecutive inputs: `d = max(amax / 127, 1e-8)`, `q = clip(rint(x / d), -127, 127)` rounded half to
even (a tie such as 2.5 goes to 2, -14.5 to -14: not ggml's Q8_0, which rounds half away from zero), and the two
sums of q over each half of 16 (quantized kernels subtract a block minimum or an offset with them).
"""
from __future__ import annotations

from tg_core.dtype import dtypes
from tg_core.kernels import kernel_for
from tg_core.tensor import Tensor

GROUP = 32
# adding and subtracting 1.5 * 2**23 rounds a float32 of magnitude below 2**22 to an integer, half to even (the
# float32 grid there is the integers); |x / d| <= 127 (plus rounding) is well inside
_RINT_MAGIC = 12582912.0


def q8_quantize(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(q int8 (T, G, 32), scale float32 (T, G), xsum float32 (T, G, 2)) of x (..., K) with T the product of the leading
    dims and G = K / 32 groups."""
    if x.ndim < 1 or x.shape[-1] % GROUP or not dtypes.is_float(x.dtype):
        raise ValueError(f"q8_quantize takes float activations (..., K) with K a multiple of {GROUP}, got {x.dtype} "
                         f"{tuple(x.shape)}")
    k = kernel_for("q8_quantize", x.device)
    if k is not None and k.supports(x):
        return k.build(x)
    return q8_quantize_tensor(x)


def q8_quantize_tensor(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Core's Tensor code for `q8_quantize` (the fallback on every device)."""
    K = x.shape[-1]
    groups = x.float().reshape(-1, K // GROUP, GROUP)
    d = (groups.abs().max(-1) / 127).maximum(1e-8)
    r = groups / d.unsqueeze(-1)
    r = (r + _RINT_MAGIC) - _RINT_MAGIC
    q = r.clip(-127, 127).cast(dtypes.int8)
    xsum = q.cast(dtypes.int32).reshape(*q.shape[:2], 2, GROUP // 2).sum(-1).cast(dtypes.float32)
    return q, d, xsum


__all__ = ["GROUP", "q8_quantize", "q8_quantize_tensor"]
