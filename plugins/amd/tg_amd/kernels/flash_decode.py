"""`flash_attention_decode` for AMD: one query token's grouped attention, split over the keys (split-K).

The keys are cut into chunks of 64. A workgroup per (batch x KV head, slot) for PARTIALS = min(48, chunks of the
capacity) slots scans chunks slot, slot + PARTIALS, ... (rounds of an online softmax, so any length works: more
than 256 chunks, a ragged last chunk, a chunk count from a symbolic valid length); its W waves share each chunk,
64 / W keys a wave, and all G query heads of the KV head share one K/V stream. Lanes spread the head dim (lane l
holds dims l, l + 32, ...), so a score is a ds_swizzle butterfly sum and the q, acc registers are indexed by
constants. Each wave keeps a running max m, sum l and values acc per head, from m = -1e30, not -inf: a wave whose
keys are all masked computes exp(-1e30 - (-1e30)) = 1 times p = 0, not exp(-inf + inf) = NaN. The waves meet in
LDS in float16, acc divided by max(l, 1) first (5500 summed over thousands of keys overflows float16), and the
merge re-weights by max(l, 1) and exp(m - M); W starts at the 8 waves of a 256-lane workgroup and halves until
W * G * ((D + 4) * 2 + 8) bytes fit the 64 KiB of LDS. A second step (Tensor code) merges the slots' (acc, m, l)
with exp(m_s - M) weights.

Keys and values are read where they are (views of the KV cache's buffer, tg_amd/kernels/views.py), the valid
length `S` taken from the keys' shape: an int or a bound variable the kernel takes at run time."""
from __future__ import annotations

import math
from typing import Any

from tg_core.plugin_api import AddrSpace, AxisType, Ops, Tensor, UOp, dtypes
from tg_amd.kernels.views import Strided, strided
from tg_amd.kernels.wave import WAVE, wave_reduce
from tg_amd.renderer import MAX_LOCAL

CHUNK, PARTIALS, LDS_BYTES, MAX_GROUP, MAX_DIM = 64, 48, 65536, 8, 512
LOG2E = 1 / math.log(2)
MASKED = -1e30  # finite: see the module docstring


def _exp(x: UOp) -> UOp:
    return UOp(Ops.EXP2, x.dtype, (x * LOG2E,))


def _max(a: UOp, b: UOp) -> UOp:
    return UOp(Ops.MAX, a.dtype, (a, b))


def _f32(x: float) -> UOp:
    return UOp.const(dtypes.float32, x)


def _dot(a: list[UOp], b: list[UOp]) -> UOp:
    out = a[0] * b[0]
    for x, y in zip(a[1:], b[1:]):
        out = out + x * y
    return out


def decode_waves(G: int, D: int) -> int:
    """The waves of a workgroup: 8 (256 lanes), halved until their LDS exchange of G heads of dim D fits 64 KiB."""
    per_wave = G * ((D + 4) * 2 + 8)  # float16 acc (padded by 4) + float32 m and l per head
    waves = MAX_LOCAL // WAVE
    while waves >= 1:
        if waves * per_wave <= LDS_BYTES:
            return waves
        waves //= 2
    raise ValueError(f"attention head group exceeds shared memory capacity: {G} query heads of dim {D} need "
                     f"{per_wave} bytes of LDS for one wave, a workgroup has {LDS_BYTES}")


def partials_for(capacity: int) -> int:
    """Workgroups per (batch x KV head): one per 64-key chunk of the capacity, at most PARTIALS."""
    return max(1, min(PARTIALS, -(-capacity // CHUNK)))


def decode_kernel(BHk: int, Hk: int, G: int, D: int, S: Any, P: int, W: int, kv: tuple[Strided, Strided],
                  scale: float):
    """The partial step: writes each slot's unnormalized acc (BHk, P, G, D) and its (m, l) (BHk, P, G, 2)."""
    f32, f16, DV, KPW = dtypes.float32, dtypes.float16, D // WAVE, CHUNK // W
    zero = UOp.const(dtypes.weakint, 0)

    def flash_decode_partial(acc_out: UOp, ml_out: UOp, q: UOp, kbuf: UOp, vbuf: UOp | None = None) -> UOp:
        vbuf = kbuf if vbuf is None else vbuf
        bh, slot = UOp.range(BHk, 0, AxisType.GLOBAL), UOp.range(P, 1, AxisType.GLOBAL)
        lane, wave = UOp.range(WAVE, 2, AxisType.LOCAL), UOp.range(W, 3, AxisType.LOCAL)
        rounds = ((S + CHUNK - 1) // CHUNK + P - 1) // P
        r = UOp.range(rounds, 4, AxisType.REDUCE)
        b, h = bh // Hk, bh % Hk
        dims = [lane + WAVE * i for i in range(DV)]
        keys = [(slot + r * P) * CHUNK + wave * KPW + j for j in range(KPW)]
        valid = [key < S for key in keys]
        kvals = [[kbuf.index(kv[0].at(b, h, key, d), ok).load().cast(f32) for d in dims] for key, ok in zip(keys, valid)]
        vvals = [[vbuf.index(kv[1].at(b, h, key, d), ok).load().cast(f32) for d in dims] for key, ok in zip(keys, valid)]
        # registers: per head g, m at 2g, l at 2g + 1, acc[i] at 2G + g * DV + i
        reg = UOp(Ops.DEFINE_REG, f32.ptr(2 * G + G * DV, AddrSpace.REG), (), 0)
        init = UOp(Ops.GROUP, dtypes.void, tuple(reg.index(zero + i).store(_f32(MASKED if i < 2 * G and i % 2 == 0 else 0.0))
                                                 for i in range(2 * G + G * DV)))
        st = reg.after(init, r)
        upd = []
        for g in range(G):
            qv = [q.index((bh * G + g) * D + d).load().cast(f32) * scale for d in dims]
            scores = [ok.where(wave_reduce(_dot(qv, ks), Ops.ADD), _f32(MASKED)) for ks, ok in zip(kvals, valid)]
            m_old, l_old = st.index(zero + 2 * g).load(), st.index(zero + 2 * g + 1).load()
            m_new = m_old
            for s in scores:
                m_new = _max(m_new, s)
            alpha = _exp(m_old - m_new)
            ps = [ok.where(_exp(s - m_new), _f32(0.0)) for s, ok in zip(scores, valid)]
            lsum = ps[0]
            for p in ps[1:]:
                lsum = lsum + p
            upd += [st.index(zero + 2 * g).store(m_new), st.index(zero + 2 * g + 1).store(l_old * alpha + lsum)]
            for i in range(DV):
                a = st.index(zero + 2 * G + g * DV + i)
                pv = ps[0] * vvals[0][i]
                for p, vs in zip(ps[1:], vvals[1:]):
                    pv = pv + p * vs[i]
                upd.append(a.store(a.load() * alpha + pv))
        fin = reg.after(UOp(Ops.GROUP, dtypes.void, tuple(upd)).end(r))
        # the waves' exchange: acc / max(l, 1) in float16, m and l in float32
        lh = UOp(Ops.DEFINE_LOCAL, f16.ptr(W * G * (D + 4), AddrSpace.LOCAL), (), "fd_acc")
        lf = UOp(Ops.DEFINE_LOCAL, f32.ptr(W * G * 2, AddrSpace.LOCAL), (), "fd_ml")
        first = lane < 1
        put = []
        for g in range(G):
            m, lsum = fin.index(zero + 2 * g).load(), fin.index(zero + 2 * g + 1).load()
            inv = _f32(1.0) / _max(lsum, _f32(1.0))
            row = (wave * G + g) * (D + 4)
            put += [lh.index(row + d).store((fin.index(zero + 2 * G + g * DV + i).load() * inv).cast(f16))
                    for i, d in enumerate(dims)]
            put += [lf.index((wave * G + g) * 2, first).store(m), lf.index((wave * G + g) * 2 + 1, first).store(lsum)]
        bar = UOp(Ops.BARRIER, dtypes.void, (UOp(Ops.GROUP, dtypes.void, tuple(put)),))
        lh, lf = lh.after(bar), lf.after(bar)
        out = []
        for t in range(-(-G // W)):  # wave w merges heads w, w + W, ...
            hd = wave + W * t
            ok = hd < G if W * (t + 1) > G else None
            ms = [lf.index((w * G + hd) * 2, ok).load() for w in range(W)]
            ls = [lf.index((w * G + hd) * 2 + 1, ok).load() for w in range(W)]
            big = ms[0]
            for m in ms[1:]:
                big = _max(big, m)
            wts = [_exp(m - big) for m in ms]
            total = ls[0] * wts[0]
            for lw, wt in zip(ls[1:], wts[1:]):
                total = total + lw * wt
            back = [_max(lw, _f32(1.0)) * wt for lw, wt in zip(ls, wts)]
            at = ((bh * P + slot) * G + hd)
            for d in dims:
                val = lh.index((0 * G + hd) * (D + 4) + d, ok).load().cast(f32) * back[0]
                for w in range(1, W):
                    val = val + lh.index((w * G + hd) * (D + 4) + d, ok).load().cast(f32) * back[w]
                out.append(acc_out.index(at * D + d, ok).store(val))
            gate = first if ok is None else first & ok
            out += [ml_out.index(at * 2, gate).store(big), ml_out.index(at * 2 + 1, gate).store(total)]
        return UOp(Ops.GROUP, dtypes.void, tuple(out)).end(bh, slot, lane, wave).sink()
    return flash_decode_partial


def _layout(t: Any) -> tuple[UOp, Strided] | None:
    return strided(t.uop) if t.ndim == 4 else None


class FlashDecode:
    """tg_core/kernels.py's `flash_attention_decode(q, keys, values, scale)`: q (B, Hk, G, 1, D), keys and values
    (B, Hk, S, D) views of storage (a KV cache's prefix; S an int or symbolic), D a multiple of 32 up to 512,
    G up to 8 and the waves' LDS exchange within 64 KiB."""
    name = "flash_attention_decode"

    def supports(self, q: Any, keys: Any, values: Any, scale: float) -> bool:
        if q.ndim != 5 or keys.ndim != 4 or values.ndim != 4 or not all(isinstance(n, int) for n in q.shape):
            return False
        B, Hk, G, T, D = q.shape
        if T != 1 or tuple(keys.shape) != tuple(values.shape) or tuple(keys.shape[:2]) != (B, Hk) or keys.shape[3] != D:
            return False
        if not (D % WAVE == 0 and D <= MAX_DIM and 1 <= G <= MAX_GROUP) or \
                not all(dtypes.is_float(t.dtype) for t in (q, keys, values)):
            return False
        if G * ((D + 4) * 2 + 8) > LDS_BYTES:  # decode_waves' bound at one wave
            return False
        # the kernel reads keys and values where they are; a view that is not strided is copied, if its shape is static
        return all(_layout(t) is not None or isinstance(t.shape[2], int) for t in (keys, values))

    def build(self, q: Any, keys: Any, values: Any, scale: float) -> Any:
        B, Hk, G, _, D = q.shape
        S = keys.shape[2]
        capacity = S if isinstance(S, int) else int(S.vmax)
        P, W = partials_for(capacity), decode_waves(G, D)
        views = []
        for t in (keys, values):
            lay = _layout(t)
            if lay is None:
                t = t.contiguous()
                t.realize()
                lay = _layout(t)
                assert lay is not None, "a realized contiguous tensor is a strided view"
            views.append((t, *lay))
        acc = Tensor.empty(B * Hk, P, G, D, device=q.device)
        ml = Tensor.empty(B * Hk, P, G, 2, device=q.device)
        tensors = [acc, ml, q.reshape(-1).contiguous(), views[0][0]]
        if views[1][1] is not views[0][1]:  # keys and values in one buffer (the KV cache) are one param
            tensors.append(views[1][0])
        kernel = decode_kernel(B * Hk, Hk, G, D, S, P, W, (views[0][2], views[1][2]), float(scale))
        Tensor.custom_kernel(*tensors, fxn=kernel)
        m, lsum = ml[..., 0], ml[..., 1]
        w = ((m - m.max(axis=1, keepdim=True)) * LOG2E).exp2()
        out = (acc * w.unsqueeze(-1)).sum(1) / (lsum * w).sum(1).unsqueeze(-1)
        return out.reshape(B, Hk, G, 1, D).cast(q.dtype)
