"""`flash_attention_prefill` for AMD: causal grouped attention of T query tokens, the last T of S keys (queries at
positions S - T .. S - 1, so the start need not be tile aligned), with WMMA 16x16x16 (f16 in, f32 accumulation)
for both Q K^T and P V.

One wave per (batch x KV head x query head of the group, 16 queries), looping over 16-key tiles with an online
softmax. In the WMMA result layout lane l holds, for key (or dim) column l % 16, the rows 2r + l // 16 (r < 8), so
a row's max and sum are butterflies over the 16 lanes of a half-wave; P goes through LDS (16 x 16 halves) to
become the row operand of the P V product. Keys past the valid length S, and past each query's position, score
-1e30 (finite: a tile a row sees nothing of leaves it unchanged) and weigh exactly 0; their K and V loads are gated
off, so a cache tail holding NaN or inf never reaches a product (0 * NaN would be NaN). T may be symbolic: the
queries are padded to the static maximum, the rows past T are neither loaded nor stored, and sliced off.

Keys and values are read where they are (views of the KV cache's buffer, tg_amd/kernels/views.py)."""
from __future__ import annotations

from typing import Any

from tg_core.plugin_api import AddrSpace, AxisType, Ops, Tensor, UOp, dtypes
from tg_amd.kernels.flash_decode import MASKED, _exp, _f32, _max
from tg_amd.kernels.views import Strided, strided
from tg_amd.kernels.wave import WAVE, intrinsic, wave_reduce

TILE, MIN_DIM, MAX_DIM = 16, 64, 256


def _bound(n: Any) -> int:
    return n if isinstance(n, int) else int(n.vmax)


def prefill_kernel(BHkG: int, Hk: int, G: int, D: int, T: Any, S: Any, kv: tuple[Strided, Strided], scale: float):
    """out (ceil(T / 16) * 16, BHkG, D) float32 from q (T, BHkG, D) float16 and the keys and values of kv."""
    f32, f16, DT = dtypes.float32, dtypes.float16, D // TILE
    zero = UOp.const(dtypes.weakint, 0)
    q_tiles = -(-_bound(T) // TILE)

    def flash_prefill(out: UOp, q: UOp, kbuf: UOp, vbuf: UOp | None = None) -> UOp:
        vbuf = kbuf if vbuf is None else vbuf
        bhg, qt = UOp.range(BHkG, 0, AxisType.GLOBAL), UOp.range(q_tiles, 1, AxisType.GLOBAL)
        # causal: query tile qt sees keys up to position S - T + 16 qt + 15, so its loop stops there (or at S)
        k_tiles = ((S - T + qt * TILE + 2 * TILE - 1) // TILE).minimum((S + TILE - 1) // TILE)
        lane, kt = UOp.range(WAVE, 2, AxisType.LOCAL), UOp.range(k_tiles, 3, AxisType.REDUCE)
        b, h = bhg // (Hk * G), (bhg // G) % Hk
        col, hi = lane % TILE, lane // TILE
        # Q K^T: A = 16 query rows (lane's row col), B = 16 key rows as columns
        t = qt * TILE + col
        key = kt * TILE + col
        key_ok = key < S
        scores = UOp(Ops.VECTORIZE, f32.vec(8), tuple(_f32(0.0) for _ in range(8)))
        for kk in range(DT):
            a = UOp(Ops.LOAD, f16.vec(TILE), (q.index((t * BHkG + bhg) * D + kk * TILE, t < T),))
            bk = UOp(Ops.VECTORIZE, f16.vec(TILE), tuple(kbuf.index(kv[0].at(b, h, key, kk * TILE + e), key_ok).load()
                                                       .cast(f16) for e in range(TILE)))
            scores = intrinsic("wmma_f32_16x16x16_f16", f32.vec(8), a, bk, scores)
        # registers: m[r] at r, l[r] at 8 + r, O[dt][r] at 16 + dt * 8 + r (rows 2r + hi of the query tile)
        reg = UOp(Ops.DEFINE_REG, f32.ptr(16 + DT * 8, AddrSpace.REG), (), 0)
        init = UOp(Ops.GROUP, dtypes.void, tuple(reg.index(zero + i).store(_f32(MASKED if i < 8 else 0.0))
                                                 for i in range(16 + DT * 8)))
        st = reg.after(init, kt)
        plds = UOp(Ops.DEFINE_LOCAL, f16.ptr(TILE * TILE, AddrSpace.LOCAL), (), "fp_p")
        upd, alphas, put = [], [], []
        for r in range(8):
            row = 2 * r + hi
            pos = S - T + qt * TILE + row  # the query's position: it sees keys 0..pos
            ok = key_ok & (key < pos + 1)
            s = ok.where(UOp(Ops.GEP, f32, (scores,), (r,)) * scale, _f32(MASKED))
            m_old, l_old = st.index(zero + r).load(), st.index(zero + 8 + r).load()
            m_new = _max(m_old, wave_reduce(s, Ops.MAX, TILE))
            alpha = _exp(m_old - m_new)
            p = ok.where(_exp(s - m_new), _f32(0.0))
            upd += [st.index(zero + r).store(m_new), st.index(zero + 8 + r).store(l_old * alpha + wave_reduce(p, Ops.ADD, TILE))]
            alphas.append(alpha)
            put.append(plds.index(row * TILE + col).store(p.cast(f16)))
        staged = plds.after(UOp(Ops.BARRIER, dtypes.void, (UOp(Ops.GROUP, dtypes.void, tuple(put)),)))
        pa = UOp(Ops.LOAD, f16.vec(TILE), (staged.index(col * TILE),))
        for dt in range(DT):
            vk = [kt * TILE + e for e in range(TILE)]
            bv = UOp(Ops.VECTORIZE, f16.vec(TILE), tuple(vbuf.index(kv[1].at(b, h, k, dt * TILE + col), k < S).load().cast(f16)
                                                       for k in vk))
            o = [st.index(zero + 16 + dt * 8 + r) for r in range(8)]
            c = UOp(Ops.VECTORIZE, f32.vec(8), tuple(o[r].load() * alphas[r] for r in range(8)))
            d = intrinsic("wmma_f32_16x16x16_f16", f32.vec(8), pa, bv, c)
            upd += [o[r].store(UOp(Ops.GEP, f32, (d,), (r,))) for r in range(8)]
        # the barrier orders this tile's LDS reads before the next tile's writes
        fin = reg.after(UOp(Ops.BARRIER, dtypes.void, (UOp(Ops.GROUP, dtypes.void, tuple(upd)),)).end(kt))
        stores = []
        for r in range(8):
            row_t = qt * TILE + 2 * r + hi
            inv = _f32(1.0) / fin.index(zero + 8 + r).load()
            stores += [out.index((row_t * BHkG + bhg) * D + dt * TILE + col, row_t < T)
                       .store(fin.index(zero + 16 + dt * 8 + r).load() * inv) for dt in range(DT)]
        return UOp(Ops.GROUP, dtypes.void, tuple(stores)).end(bhg, qt, lane).sink()
    return flash_prefill


def _layout(t: Any) -> tuple[UOp, Strided] | None:
    return strided(t.uop) if t.ndim == 4 else None


class FlashPrefill:
    """tg_core/kernels.py's `flash_attention_prefill(q, keys, values, scale)`: q (B, Hk, G, T, D) (T may be
    symbolic), keys and values (B, Hk, S, D) views of storage (S an int or symbolic, S >= T), D a multiple of 32
    from 64 to 256."""
    name = "flash_attention_prefill"

    def supports(self, q: Any, keys: Any, values: Any, scale: float) -> bool:
        if q.ndim != 5 or keys.ndim != 4 or values.ndim != 4:
            return False
        B, Hk, G, T, D = q.shape
        if not all(isinstance(n, int) for n in (B, Hk, G, D)) or tuple(keys.shape) != tuple(values.shape) or \
                tuple(keys.shape[:2]) != (B, Hk) or keys.shape[3] != D:
            return False
        if not (D % 32 == 0 and MIN_DIM <= D <= MAX_DIM) or not all(dtypes.is_float(t.dtype) for t in (q, keys, values)):
            return False
        return all(_layout(t) is not None or isinstance(t.shape[2], int) for t in (keys, values))

    def build(self, q: Any, keys: Any, values: Any, scale: float) -> Any:
        B, Hk, G, T, D = q.shape
        S = keys.shape[2]
        views = []
        for t in (keys, values):
            lay = _layout(t)
            if lay is None:
                t = t.contiguous()
                t.realize()
                lay = _layout(t)
                assert lay is not None, "a realized contiguous tensor is a strided view"
            views.append((t, *lay))
        BHkG = B * Hk * G
        # queries first: their count may be symbolic, and no other stride then depends on it
        qh = q.permute(3, 0, 1, 2, 4).cast(dtypes.float16).contiguous()
        out = Tensor.empty(-(-_bound(T) // TILE) * TILE, BHkG, D, device=q.device)
        tensors = [out, qh, views[0][0]]
        if views[1][1] is not views[0][1]:
            tensors.append(views[1][0])
        Tensor.custom_kernel(*tensors, fxn=prefill_kernel(BHkG, Hk, G, D, T, S, (views[0][2], views[1][2]), float(scale)))
        return out[:T].reshape(T, B, Hk, G, D).permute(1, 2, 3, 0, 4).cast(q.dtype)
