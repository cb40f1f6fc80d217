"""core's gated delta rule (tg_core/llm/delta.py, the Tensor fallback of `gated_delta_prefill`) against a numpy
recurrence: the gate per head and per value row, a reset through start_pos (an int or a bound variable), a state
that is a transposed view of its storage, half-precision inputs, and the argument checks."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core import Tensor, Variable
from tg_core.llm.delta import gated_delta_prefill
from tg_core.testing.delta import delta_args as make
from tg_core.testing.delta import np_gated_delta as np_delta


def run(device, q, k, v, beta, alpha, state, start_pos=None, dtype=None):
    st = Tensor(state, device=device).contiguous().realize()
    ts = [Tensor(x, device=device) for x in (q, k, v, beta, alpha)]
    if dtype is not None:  # v, beta, alpha in half precision
        ts[2:] = [t.cast(dtype) for t in ts[2:]]
    out = gated_delta_prefill(*ts, st, start_pos)
    return out.numpy(), st.numpy()


@pytest.mark.parametrize("alpha_shape", ["head", "one", "row"])
def test_gated_delta_matches_numpy(alpha_shape):
    args = make(alpha_shape=alpha_shape)
    got, st = run("CPU", *args)
    want, want_st = np_delta(*args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(st, want_st, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pos", [0, 5, "var0", "var5"])
def test_gated_delta_reset_by_start_pos(pos):
    args = make(seed=1)
    start = Variable("start_pos", 0, 64).bind(int(pos[3:])) if isinstance(pos, str) else pos
    got, st = run("CPU", *args, start_pos=start)
    want, want_st = np_delta(*args, reset=pos in (0, "var0"))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(st, want_st, rtol=1e-5, atol=1e-5)


def test_gated_delta_state_of_ones_reset():
    # q = k = ones over Kd = 32, v = 1, no decay, beta = 1: from zeros, o = v * (q . k) = 32 and S ends at ones
    B, H, T, Kd, Vd = 1, 1, 1, 32, 4
    ones = [np.ones(s, np.float32) for s in ((B, H, T, Kd), (B, H, T, Kd), (B, H, T, Vd), (B, H, T), (B, H, T))]
    got, st = run("CPU", *ones, np.ones((B, H, Vd, Kd), np.float32), start_pos=Variable("start_pos", 0, 8).bind(0))
    np.testing.assert_array_equal(got, np.full((B, H, T, Vd), 32, np.float32))
    np.testing.assert_array_equal(st, np.ones((B, H, Vd, Kd), np.float32))


def test_gated_delta_state_as_a_transposed_view():
    q, k, v, beta, alpha, state = make(seed=2)
    buf = Tensor(np.ascontiguousarray(state.transpose(0, 1, 3, 2))).contiguous().realize()  # (B, H, Kd, Vd)
    view = buf.permute(0, 1, 3, 2)
    out = gated_delta_prefill(*(Tensor(x) for x in (q, k, v, beta, alpha)), view)
    want, want_st = np_delta(q, k, v, beta, alpha, state)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(buf.numpy().transpose(0, 1, 3, 2), want_st, rtol=1e-5, atol=1e-5)


def test_gated_delta_half_inputs():
    args = make(seed=3)
    got, st = run("CPU", *args, dtype="float16")
    q, k, v, beta, alpha, state = args
    want, want_st = np_delta(q, k, *(x.astype(np.float16) for x in (v, beta, alpha)), state)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(st, want_st, rtol=1e-5, atol=1e-5)


def test_gated_delta_bad_shapes_are_clear_errors():
    q, k, v, beta, alpha, state = (Tensor(x) for x in make())
    with pytest.raises(ValueError, match=r"state must be \(B, H, Vd, Kd\)"):
        gated_delta_prefill(q, k, v, beta, alpha, state.permute(0, 1, 3, 2))
    with pytest.raises(ValueError, match="alpha must be"):
        gated_delta_prefill(q, k, v, beta, alpha[..., :3], state)
