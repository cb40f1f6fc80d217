"""The gated delta rule (Gated DeltaNet linear attention, qwen35-style hybrids) over a chunk of tokens: a recurrent
state S (B, H, Vd, Kd) per head, updated token by token with a decay gate alpha and a delta-rule write of strength
beta. Per token t, with q, k (Kd) and v (Vd) of that token:

    S <- alpha * S                 (alpha per head, or per value row)
    delta = (v - S k) * beta
    S <- S + delta k^T
    o = S q                        (= alpha * S_old q + delta * (q . k))

`gated_delta_prefill` asks a plugin for its `gated_delta_prefill` kernel (tg_core/kernels.py) and runs the Tensor
code here otherwise; both write the final state into `state` and return o (B, H, T, Vd) float32."""
from __future__ import annotations

from tg_core.kernels import kernel_for
from tg_core.llm.kvcache import Position
from tg_core.tensor import Tensor


def check_args(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, alpha: Tensor, state: Tensor) -> tuple[int, ...]:
    """(B, H, T, Kd, Vd) of the arguments, or a ValueError naming the one that does not fit."""
    if q.ndim != 4 or tuple(k.shape) != tuple(q.shape):
        raise ValueError(f"gated_delta_prefill: q and k must both be (B, H, T, Kd), got {q.shape} and {k.shape}")
    B, H, T, Kd = q.shape
    if v.ndim != 4 or tuple(v.shape[:3]) != (B, H, T):
        raise ValueError(f"gated_delta_prefill: v must be (B, H, T, Vd) with (B, H, T) = {(B, H, T)}, got {v.shape}")
    Vd = v.shape[3]
    if tuple(beta.shape) != (B, H, T):
        raise ValueError(f"gated_delta_prefill: beta must be (B, H, T) = {(B, H, T)}, got {beta.shape}")
    if tuple(alpha.shape) not in ((B, H, T), (B, H, T, 1), (B, H, T, Vd)):
        raise ValueError(f"gated_delta_prefill: alpha must be (B, H, T), (B, H, T, 1) or (B, H, T, Vd) with "
                         f"(B, H, T, Vd) = {(B, H, T, Vd)}, got {alpha.shape}")
    if tuple(state.shape) != (B, H, Vd, Kd):
        raise ValueError(f"gated_delta_prefill: state must be (B, H, Vd, Kd) = {(B, H, Vd, Kd)}, got {state.shape}")
    if not all(isinstance(n, int) for n in (B, H, T, Kd, Vd)):
        raise ValueError(f"gated_delta_prefill takes static shapes (pad a symbolic chunk with beta = 0, alpha = 1), "
                         f"got q {q.shape}, v {v.shape}")
    return B, H, T, Kd, Vd


def reset_state(state: Tensor, start_pos: Position | None) -> Tensor:
    """The state to start from: zeros when start_pos is 0 (a new sequence), else the state's contents."""
    if start_pos is None:
        return state.float()
    if isinstance(start_pos, int):
        return state.float().zeros_like() if start_pos == 0 else state.float()
    keep = Tensor(start_pos, device=state.device).cast("int32") != 0
    return keep.where(state.float(), 0.0)


def gated_delta_reference(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, alpha: Tensor, state: Tensor,
                          start_pos: Position | None = None) -> Tensor:
    """The Tensor code: one step per token, the state realized between steps (each step reads it three times)."""
    B, H, T, Kd, Vd = check_args(q, k, v, beta, alpha, state)
    a = (alpha if alpha.ndim == 4 else alpha.unsqueeze(-1)).float()                  # (B, H, T, 1 | Vd)
    q, k, v, beta = q.float(), k.float(), v.float(), beta.float()
    s = reset_state(state, start_pos).contiguous()
    outs = []
    for t in range(T):
        kt, qt = k[:, :, t].unsqueeze(2), q[:, :, t].unsqueeze(2)                    # (B, H, 1, Kd)
        s = s * a[:, :, t].unsqueeze(-1)
        delta = (v[:, :, t] - (s * kt).sum(-1)) * beta[:, :, t].unsqueeze(-1)       # (B, H, Vd)
        s = (s + delta.unsqueeze(-1) * kt).contiguous()
        outs.append((s * qt).sum(-1))
    state.assign(s.cast(state.dtype))
    return outs[0].stack(*outs[1:], dim=2).contiguous()


def gated_delta_prefill(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, alpha: Tensor, state: Tensor,
                        start_pos: Position | None = None) -> Tensor:
    """The gated delta rule over T tokens (see the module docstring): o (B, H, T, Vd) float32; `state` (B, H, Vd, Kd)
    ends holding the state after the last token, and starts from zeros when start_pos is 0."""
    check_args(q, k, v, beta, alpha, state)
    kern = kernel_for("gated_delta_prefill", q.device)
    if kern is not None and kern.supports(q, k, v, beta, alpha, state, start_pos):
        return kern.build(q, k, v, beta, alpha, state, start_pos)
    return gated_delta_reference(q, k, v, beta, alpha, state, start_pos)
