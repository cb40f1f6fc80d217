"""The gated delta rule in numpy (float64, token by token) and random arguments for it: the reference core's
(tests/llm/test_delta.py) and tg-amd's (plugins/amd/tests/test_amd_gated_delta.py) tests check
`gated_delta_prefill` against."""
from __future__ import annotations

import numpy as np


def np_gated_delta(q, k, v, beta, alpha, state, reset: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """o (B, H, T, Vd) and the final state (B, H, Vd, Kd); alpha (B, H, T) or (B, H, T, 1 | Vd)."""
    q, k, v, beta, s = (np.asarray(x, np.float64) for x in (q, k, v, beta, state))
    a = np.asarray(alpha, np.float64)
    a = a if a.ndim == 4 else a[..., None]
    s = np.zeros_like(s) if reset else s
    out = np.zeros(v.shape)
    for t in range(q.shape[2]):
        s = s * a[:, :, t][..., None]
        delta = (v[:, :, t] - np.einsum("bhvk,bhk->bhv", s, k[:, :, t])) * beta[:, :, t][..., None]
        s = s + delta[..., None] * k[:, :, t][:, :, None, :]
        out[:, :, t] = np.einsum("bhvk,bhk->bhv", s, q[:, :, t])
    return out, s


def delta_args(B: int = 1, H: int = 2, T: int = 6, Kd: int = 32, Vd: int = 8, alpha_shape: str = "row",
               seed: int = 0) -> tuple[np.ndarray, ...]:
    """float32 (q, k, v, beta, alpha, state): q and k scaled by Kd^-0.5 (as the model's L2 norm and scale leave them),
    beta in (0, 1), alpha in (0.5, 1) per head ("head": (B, H, T); "one": (B, H, T, 1)) or per value row ("row")."""
    rng = np.random.default_rng(seed)
    q, k = ((rng.standard_normal((B, H, T, Kd)) / np.sqrt(Kd)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((B, H, T, Vd)).astype(np.float32)
    beta = rng.uniform(0, 1, (B, H, T)).astype(np.float32)
    shapes = {"head": (B, H, T), "one": (B, H, T, 1), "row": (B, H, T, Vd)}
    if alpha_shape not in shapes:
        raise ValueError(f"alpha_shape must be one of {sorted(shapes)}, got {alpha_shape!r}")
    alpha = rng.uniform(0.5, 1, shapes[alpha_shape]).astype(np.float32)
    state = rng.standard_normal((B, H, Vd, Kd)).astype(np.float32)
    return q, k, v, beta, alpha, state
