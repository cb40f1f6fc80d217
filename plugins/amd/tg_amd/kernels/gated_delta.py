"""`gated_delta_prefill` for AMD: the gated delta rule (tg_core/llm/delta.py) over T tokens, one 32-lane wave per
(batch x head, 4 value rows of the state), Kd spread over the lanes (lane l holds columns l, l + 32, ...).

The wave keeps its 4 rows of S in registers for the whole chunk; per token, S k, S q and q . k are butterfly sums,
then delta = (v - alpha * S k) * beta, o = alpha * S q + delta * (q . k), S <- alpha * S + delta k^T. The state is
read from and written back to its own buffer, so it must be a contiguous (row-major) view; q and k must be
float32, while v, beta and alpha may be half precision. With `start_pos` (an int or a bound variable) the state
starts from zeros when it is 0, decided in the kernel, so one compile serves every position."""
from __future__ import annotations

from typing import Any

from tg_core.plugin_api import AddrSpace, AxisType, Ops, Tensor, UOp, dtypes
from tg_amd.kernels.views import Strided, strided
from tg_amd.kernels.wave import WAVE, wave_reduce

ROWS = 4  # value rows of the state per wave


def _f32(x: float) -> UOp:
    return UOp.const(dtypes.float32, x)


def _sum(xs: list[UOp]) -> UOp:
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out


def delta_kernel(BH: int, T: int, Kd: int, Vd: int, per_row_alpha: bool, state: Strided, start_pos: Any):
    """out (BH, T, Vd) float32 from q, k (BH, T, Kd), v (BH, T, Vd), beta (BH, T), alpha (BH, T[, Vd]) contiguous,
    and the state's buffer at `state`'s offset, (BH, Vd, Kd) row-major."""
    f32, KV = dtypes.float32, Kd // WAVE
    zero = UOp.const(dtypes.weakint, 0)

    def gated_delta(out: UOp, st: UOp, q: UOp, k: UOp, v: UOp, beta: UOp, alpha: UOp) -> UOp:
        bh, rb = UOp.range(BH, 0, AxisType.GLOBAL), UOp.range(Vd // ROWS, 1, AxisType.GLOBAL)
        lane, t = UOp.range(WAVE, 2, AxisType.LOCAL), UOp.range(T, 3, AxisType.REDUCE)
        rows = [rb * ROWS + j for j in range(ROWS)]
        cols = [lane + WAVE * i for i in range(KV)]
        at = [[state.offset + (bh * Vd + row) * Kd + c for c in cols] for row in rows]
        reg = UOp(Ops.DEFINE_REG, f32.ptr(ROWS * KV, AddrSpace.REG), (), 0)
        if start_pos is None or (isinstance(start_pos, int) and start_pos != 0):
            first = [[st.index(a).load().cast(f32) for a in row] for row in at]
        elif isinstance(start_pos, int):
            first = [[_f32(0.0) for _ in row] for row in at]
        else:  # a new sequence (start_pos 0) starts from zeros
            fresh = start_pos < 1
            first = [[fresh.where(_f32(0.0), st.index(a).load().cast(f32)) for a in row] for row in at]
        init = UOp(Ops.GROUP, dtypes.void, tuple(reg.index(zero + j * KV + i).store(first[j][i])
                                                 for j in range(ROWS) for i in range(KV)))
        s = reg.after(init, t)
        qs = [q.index((bh * T + t) * Kd + c).load() for c in cols]
        ks = [k.index((bh * T + t) * Kd + c).load() for c in cols]
        qk = wave_reduce(_sum([a * b for a, b in zip(qs, ks)]), Ops.ADD)
        b_t = beta.index(bh * T + t).load().cast(f32)
        upd = []
        for j, row in enumerate(rows):
            a_t = alpha.index((bh * T + t) * Vd + row if per_row_alpha else bh * T + t).load().cast(f32)
            sr = [s.index(zero + j * KV + i) for i in range(KV)]
            old = [x.load() for x in sr]
            sk = wave_reduce(_sum([x * y for x, y in zip(old, ks)]), Ops.ADD)
            sq = wave_reduce(_sum([x * y for x, y in zip(old, qs)]), Ops.ADD)
            delta = (v.index((bh * T + t) * Vd + row).load().cast(f32) - a_t * sk) * b_t
            upd.append(out.index((bh * T + t) * Vd + row, lane < 1).store(a_t * sq + delta * qk))
            upd += [x.store(a_t * o + delta * kk) for x, o, kk in zip(sr, old, ks)]
        fin = reg.after(UOp(Ops.GROUP, dtypes.void, tuple(upd)).end(t))
        sdt = st.dtype.base
        stores = [st.index(at[j][i]).store(fin.index(zero + j * KV + i).load().cast(sdt))
                  for j in range(ROWS) for i in range(KV)]
        return UOp(Ops.GROUP, dtypes.void, tuple(stores)).end(bh, rb, lane).sink()
    return gated_delta


def _contiguous_state(state: Any) -> Strided | None:
    lay = strided(state.uop)
    if lay is None:
        return None
    _, s = lay
    B, H, Vd, Kd = s.shape
    want = (H * Vd * Kd, Vd * Kd, Kd, 1)
    # size-1 axes have stride 0 in the layout; any stride is fine for them
    ok = all(n == 1 or st == w for n, st, w in zip(s.shape, s.strides, want))
    return s if ok else None


def _problem(q: Any, k: Any, v: Any, beta: Any, alpha: Any, state: Any, start_pos: Any) -> str | None:
    """Why the kernel does not take these arguments, or None."""
    if q.ndim != 4 or v.ndim != 4 or tuple(k.shape) != tuple(q.shape) or not all(isinstance(n, int) for n in q.shape):
        return f"q and k must be (B, H, T, Kd) with static sizes, got {q.shape} and {k.shape}"
    B, H, T, Kd = q.shape
    Vd = v.shape[3]
    if tuple(v.shape[:3]) != (B, H, T) or tuple(beta.shape) != (B, H, T) or tuple(state.shape) != (B, H, Vd, Kd) or \
            tuple(alpha.shape) not in ((B, H, T), (B, H, T, 1), (B, H, T, Vd)):
        return (f"shapes do not fit: q {q.shape}, v {v.shape}, beta {beta.shape}, alpha {alpha.shape}, state "
                f"{state.shape} (see tg_core/llm/delta.py)")
    if q.dtype is not dtypes.float32 or k.dtype is not dtypes.float32:
        return f"recurrent Q/K must be float32, got {q.dtype} and {k.dtype}"
    if _contiguous_state(state) is None:
        return "recurrent state must be contiguous (a row-major (B, H, Vd, Kd) view of its buffer), got a strided view"
    if Kd % WAVE or Vd % ROWS:
        return f"gated_delta_prefill on AMD needs Kd a multiple of {WAVE} and Vd a multiple of {ROWS}, got {Kd} and {Vd}"
    if not all(dtypes.is_float(t.dtype) for t in (v, beta, alpha, state)):
        return "v, beta, alpha and the state must be floats"
    if start_pos is not None and not isinstance(start_pos, int) and not isinstance(start_pos, UOp):
        return f"start_pos must be an int or a bound variable, got {type(start_pos).__name__}"
    return None


class GatedDelta:
    """tg_core/llm/delta.py's `gated_delta_prefill(q, k, v, beta, alpha, state, start_pos=None)` on AMD."""
    name = "gated_delta_prefill"

    def supports(self, q: Any, k: Any, v: Any, beta: Any, alpha: Any, state: Any, start_pos: Any = None) -> bool:
        return _problem(q, k, v, beta, alpha, state, start_pos) is None

    def build(self, q: Any, k: Any, v: Any, beta: Any, alpha: Any, state: Any, start_pos: Any = None) -> Any:
        if (why := _problem(q, k, v, beta, alpha, state, start_pos)) is not None:
            raise ValueError(f"gated_delta_prefill: {why}")
        B, H, T, Kd = q.shape
        Vd = v.shape[3]
        lay = _contiguous_state(state)
        assert lay is not None
        per_row = alpha.ndim == 4 and alpha.shape[3] == Vd and Vd != 1
        a = alpha.reshape(B * H * T * (Vd if per_row else 1))
        out = Tensor.empty(B * H * T * Vd, device=q.device)
        flat = [t.reshape(-1).contiguous() for t in (q, k, v, beta, a)]
        Tensor.custom_kernel(out, state, *flat, fxn=delta_kernel(B * H, T, Kd, Vd, per_row, lay, start_pos))
        return out.reshape(B, H, T, Vd)
