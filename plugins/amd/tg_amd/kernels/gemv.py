"""`f16_gemv` for AMD: `x @ w.T (+ bias)` for a few tokens over a dense float16 weight, one wave per (token, output
row): each lane multiplies every 32nd input in float32 (x is not narrowed to f16: 65536 stays 65536), the 32
partial sums meet in a ds_swizzle butterfly, and lane 0 adds the row's bias. Weight loads are nontemporal: the
weight streams through once and should not evict activations from the caches."""
from __future__ import annotations

from typing import Any

from tg_core.plugin_api import AxisType, Ops, Tensor, UOp, dtypes
from tg_amd.kernels.wave import WAVE, wave_reduce

MAX_TOKENS = 15  # decode and short prompts; more tokens are a matmul's job


def gemv_kernel(T: int, N: int, K: int, bias: bool):
    def fxn(out: UOp, x: UOp, w: UOp, *b: UOp) -> UOp:
        n, t = UOp.range(N, 0, AxisType.GLOBAL), UOp.range(T, 1, AxisType.GLOBAL)
        lane, kk = UOp.range(WAVE, 2, AxisType.LOCAL), UOp.range(K // WAVE, 3, AxisType.REDUCE)
        k = kk * WAVE + lane
        wv = UOp(Ops.LOAD, dtypes.float16, (w.index(n * K + k),), "nontemporal")
        prod = x.index(t * K + k).load().cast(dtypes.float32) * wv.cast(dtypes.float32)
        total = wave_reduce(UOp(Ops.REDUCE, dtypes.float32, (prod, kk), Ops.ADD), Ops.ADD)
        if bias:
            total = total + b[0].index(n).load().cast(dtypes.float32)
        return out.index(t * N + n, lane < 1).store(total).end(n, t, lane).sink()
    return fxn


def f16_source(w: Any) -> bool:
    """Whether w's values are float16 ones: a float16 tensor, or an exact widening cast of one (a value-changing cast
    such as `.int().float()` is not, and goes to core's code)."""
    u = w.uop
    while u.op is Ops.CONTIGUOUS:
        u = u.src[0]
    return u.dtype is dtypes.float16 or (u.op is Ops.CAST and u.src[0].dtype is dtypes.float16)


class F16Gemv:
    """tg_core/kernels.py's `f16_gemv(x, w, bias)`: x (..., K) float, at most MAX_TOKENS rows; w (N, K) holding
    float16 values, K a multiple of 32; bias None or (N,)."""
    name = "f16_gemv"

    def supports(self, x: Any, w: Any, bias: Any = None) -> bool:
        if not (dtypes.is_float(x.dtype) and x.ndim >= 1 and w.ndim == 2 and all(isinstance(s, int) for s in x.shape)):
            return False
        N, K = w.shape
        if not (isinstance(N, int) and isinstance(K, int) and x.shape[-1] == K and K % WAVE == 0):
            return False
        if x.numel() // K > MAX_TOKENS or not f16_source(w) or x.dtype not in (dtypes.float32, dtypes.float16):
            return False
        return bias is None or (tuple(bias.shape) == (N,) and dtypes.is_float(bias.dtype))

    def build(self, x: Any, w: Any, bias: Any = None) -> Any:
        N, K = w.shape
        T = x.numel() // K
        w16 = (w if w.dtype is dtypes.float16 else w.cast(dtypes.float16)).contiguous()  # exact: f16 values
        out = Tensor.zeros(T, N, device=x.device).contiguous()
        args = [x.reshape(T * K).contiguous(), w16.reshape(N * K)]
        if bias is not None:
            args.append(bias.contiguous())
        Tensor.custom_kernel(out, *args, fxn=gemv_kernel(T, N, K, bias is not None))
        return out.reshape(*x.shape[:-1], N)
