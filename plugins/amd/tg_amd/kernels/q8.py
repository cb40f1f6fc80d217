"""`q8_quantize` for AMD: one wave per (token, group of 32) quantizes its 32 inputs (see tg_core/llm/q8.py for the
numbers): the group's absolute maximum and the two 16-sums by ds_swizzle butterflies, round half to even by the
1.5 * 2**23 trick (exact for |x / d| <= 127; the renderer keeps float math strict), int8 stores."""
from __future__ import annotations

from typing import Any

from tg_core.plugin_api import AxisType, Ops, Tensor, UOp, dtypes
from tg_amd.kernels.wave import WAVE, wave_reduce

GROUP = 32
_RINT_MAGIC = 12582912.0


def q8_kernel(rows: int):
    """The kernel over `rows` groups: q[r*32 + l], scale[r], xsum[r*2 + h] from x[r*32 + l]."""
    def fxn(q: UOp, scale: UOp, xsum: UOp, x: UOp) -> UOp:
        r, lane = UOp.range(rows, 0, AxisType.GLOBAL), UOp.range(WAVE, 1, AxisType.LOCAL)
        v = x.index(r * GROUP + lane).load().cast(dtypes.float32)
        mag = (v < 0).where(-v, v)
        amax = wave_reduce(mag, Ops.MAX)
        d = UOp(Ops.MAX, dtypes.float32, (amax / 127.0, UOp.const(dtypes.float32, 1e-8)))
        t = (v / d + _RINT_MAGIC) - _RINT_MAGIC
        t = (t > 127.0).where(UOp.const(dtypes.float32, 127.0), (t < -127.0).where(UOp.const(dtypes.float32, -127.0), t))
        qi = t.cast(dtypes.int32)
        half = wave_reduce(qi, Ops.ADD, 16)
        stores = (q.index(r * GROUP + lane).store(qi.cast(dtypes.int8)),
                  scale.index(r, lane < 1).store(d),
                  xsum.index(r * 2 + lane // 16, lane % 16 < 1).store(half.cast(dtypes.float32)))
        return UOp(Ops.GROUP, dtypes.void, stores).end(r, lane).sink()
    return fxn


class Q8Quantize:
    """tg_core/llm/q8.py's `q8_quantize(x)` on the GPU: float32/float16 activations with K a multiple of 32."""
    name = "q8_quantize"

    def supports(self, x: Any) -> bool:
        return (x.dtype in (dtypes.float32, dtypes.float16) and x.ndim >= 1 and isinstance(x.shape[-1], int)
                and x.shape[-1] % GROUP == 0 and all(isinstance(s, int) for s in x.shape))

    def build(self, x: Any) -> tuple[Any, Any, Any]:
        K = x.shape[-1]
        T, G = x.numel() // K, K // GROUP
        q = Tensor.zeros(T, G, GROUP, dtype=dtypes.int8, device=x.device).contiguous()
        scale = Tensor.zeros(T, G, device=x.device).contiguous()
        xsum = Tensor.zeros(T, G, 2, device=x.device).contiguous()
        Tensor.custom_kernel(q, scale, xsum, x.reshape(T * K).contiguous(), fxn=q8_kernel(T * G))
        return q, scale, xsum
