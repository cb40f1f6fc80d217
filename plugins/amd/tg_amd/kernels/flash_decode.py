"""`flash_attention_decode` for AMD: one query token's grouped attention, one wave per (batch x KV head, query head of
the group). Lane l scores keys l, l + 32, ... with an online softmax in registers (its running max m, sum l and the
weighted values acc[d]); then the lanes meet: M = max m, each lane's sum and values scaled by exp(m - M), added by
ds_swizzle butterflies, divided by the total. The running max starts at -1e30, not -inf, and a key past S adds
exactly 0 (not exp(-1e30 - (-1e30)) = 1), so a lane with no keys contributes nothing and gives no NaN.

The loops over the head dim are unrolled (UPCAST/UNROLL lanes), so acc's registers are indexed by constants (a
dynamic index would be v_movrels, which the mock GPU does not emulate). Static shapes only (a symbolic key count goes
to core's Tensor code); keys and values are read contiguous."""
from __future__ import annotations

import math
from typing import Any

from tg_core.plugin_api import AddrSpace, AxisType, Ops, Tensor, UOp, dtypes
from tg_amd.kernels.wave import WAVE, wave_reduce

MAX_DIM = 256
LOG2E = 1 / math.log(2)


def _exp(x: UOp) -> UOp:
    return UOp(Ops.EXP2, x.dtype, (x * LOG2E,))


def decode_kernel(BH: int, G: int, S: int, D: int, scale: float):
    f32 = dtypes.float32

    def fxn(out: UOp, q: UOp, k: UOp, v: UOp) -> UOp:
        bh, g = UOp.range(BH, 0, AxisType.GLOBAL), UOp.range(G, 1, AxisType.GLOBAL)
        lane, it = UOp.range(WAVE, 2, AxisType.LOCAL), UOp.range((S + WAVE - 1) // WAVE, 3, AxisType.REDUCE)
        s = it * WAVE + lane
        ok = s < S
        zero = UOp.const(dtypes.weakint, 0)
        state = UOp(Ops.DEFINE_REG, f32.ptr(2, AddrSpace.REG), (), 0)     # m, l
        acc = UOp(Ops.DEFINE_REG, f32.ptr(D, AddrSpace.REG), (), 1)       # the weighted values
        d0 = UOp.range(D, 4, AxisType.UPCAST)
        init = UOp(Ops.GROUP, dtypes.void, (state.index(zero).store(UOp.const(f32, -1e30)),
                                            state.index(zero + 1).store(UOp.const(f32, 0.0)),
                                            acc.index(d0).store(UOp.const(f32, 0.0)).end(d0)))
        d1 = UOp.range(D, 5, AxisType.UNROLL)
        qrow, krow = (bh * G + g) * D, (bh * S + s) * D
        dot = UOp(Ops.REDUCE, f32, (q.index(qrow + d1).load().cast(f32) * k.index(krow + d1, ok).load().cast(f32), d1),
                  Ops.ADD)
        st = state.after(init, it)
        m_old, l_old = st.index(zero).load(), st.index(zero + 1).load()
        score = ok.where(dot * scale, UOp.const(f32, -1e30))
        m_new = UOp(Ops.MAX, f32, (m_old, score))
        alpha, p = _exp(m_old - m_new), ok.where(_exp(score - m_new), UOp.const(f32, 0.0))
        d2 = UOp.range(D, 6, AxisType.UPCAST)
        a = acc.after(init, it, d2).index(d2)
        upd_acc = a.store(a.load() * alpha + p * v.index(krow + d2, ok).load().cast(f32)).end(d2)
        upd = UOp(Ops.GROUP, dtypes.void, (upd_acc, st.index(zero).store(m_new),
                                           st.index(zero + 1).store(l_old * alpha + p))).end(it)
        fin = state.after(upd)
        m, lsum = fin.index(zero).load(), fin.index(zero + 1).load()
        big = wave_reduce(m, Ops.MAX)
        w = _exp(m - big)
        total = wave_reduce(lsum * w, Ops.ADD)
        d3 = UOp.range(D, 7, AxisType.UPCAST)
        val = wave_reduce(acc.after(upd).index(d3).load() * w, Ops.ADD) / total
        return out.index(qrow + d3, lane < 1).store(val).end(d3).end(bh, g, lane).sink()
    return fxn


class FlashDecode:
    """tg_core/kernels.py's `flash_attention_decode(q, keys, values, scale)`: q (B, Hk, G, 1, d), keys and values
    (B, Hk, S, d) with static S and d <= 256."""
    name = "flash_attention_decode"

    def supports(self, q: Any, keys: Any, values: Any, scale: float) -> bool:
        shapes = (q.shape, keys.shape, values.shape)
        if not all(isinstance(n, int) for sh in shapes for n in sh) or q.ndim != 5 or keys.ndim != 4:
            return False
        B, Hk, G, T, D = q.shape
        return (T == 1 and tuple(keys.shape[:2]) == (B, Hk) and keys.shape[3] == D and tuple(values.shape) == tuple(keys.shape)
                and 1 <= D <= MAX_DIM and keys.shape[2] >= 1 and all(dtypes.is_float(t.dtype) for t in (q, keys, values)))

    def build(self, q: Any, keys: Any, values: Any, scale: float) -> Any:
        B, Hk, G, _, D = q.shape
        S = keys.shape[2]
        out = Tensor.zeros(B * Hk * G * D, device=q.device).contiguous()
        Tensor.custom_kernel(out, q.reshape(-1).contiguous(), keys.reshape(-1).contiguous(),
                             values.reshape(-1).contiguous(), fxn=decode_kernel(B * Hk, G, S, D, float(scale)))
        return out.reshape(B, Hk, G, 1, D).cast(q.dtype)
