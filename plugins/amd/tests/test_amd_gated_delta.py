"""tg-amd's gated_delta_prefill (tg_amd/kernels/gated_delta.py) on the mock AMD GPU against numpy, and the same
call on CPU (core's Tensor recurrence, tg_core/llm/delta.py) agreeing: gates per head and per value row, the reset
through start_pos decided in the kernel, half-precision v/beta/alpha, a state that is a view of its buffer at an
offset; what the kernel refuses (a transposed state, half Q/K) is a clear error from the kernel and goes to core's
code through gated_delta_prefill."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core import Tensor, Variable
from tg_core.kernels import kernel_for
from tg_core.llm.delta import gated_delta_prefill
from tg_core.testing.delta import delta_args as make
from tg_core.testing.delta import np_gated_delta as np_delta


def run(device, q, k, v, beta, alpha, state, start_pos=None, dtype=None):
    st = Tensor(state, device=device).contiguous().realize()
    ts = [Tensor(x, device=device) for x in (q, k, v, beta, alpha)]
    if dtype is not None:  # v, beta, alpha in half precision
        ts[2:] = [t.cast(dtype) for t in ts[2:]]
    return gated_delta_prefill(*ts, st, start_pos).numpy(), st.numpy()


@pytest.mark.parametrize("alpha_shape, Kd, Vd", [("row", 64, 8), ("head", 32, 4)])
def test_gated_delta_matches_numpy_and_cpu(alpha_shape, Kd, Vd):
    args = make(H=3, T=7, Kd=Kd, Vd=Vd, alpha_shape=alpha_shape, seed=Kd)
    assert kernel_for("gated_delta_prefill", "AMD").supports(*(Tensor(x, device="AMD") for x in args))
    got, st = run("AMD", *args)
    want, want_st = np_delta(*args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(st, want_st, rtol=1e-5, atol=1e-5)
    cpu, cpu_st = run("CPU", *args)
    np.testing.assert_allclose(got, cpu, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(st, cpu_st, rtol=1e-5, atol=1e-5)


def test_gated_delta_reset_in_the_kernel():
    # one compile for both positions: a state of ones from start_pos 0 gives o = 32 and ends at ones; at 3 it is kept
    B, H, T, Kd, Vd = 1, 1, 1, 32, 4
    ones = [np.ones(s, np.float32) for s in ((B, H, T, Kd), (B, H, T, Kd), (B, H, T, Vd), (B, H, T), (B, H, T))]
    state = np.ones((B, H, Vd, Kd), np.float32)
    for pos in (0, 3):
        got, st = run("AMD", *ones, state, start_pos=Variable("start_pos", 0, 8).bind(pos))
        want, want_st = np_delta(*ones, state, reset=pos == 0)
        np.testing.assert_array_equal(got, want.astype(np.float32))
        np.testing.assert_array_equal(st, want_st.astype(np.float32))
    np.testing.assert_array_equal(got, np.full((B, H, T, Vd), -960, np.float32))  # 32 + (1 - 32) * 32, not reset


def test_gated_delta_half_inputs():
    args = make(T=5, Kd=32, Vd=8, seed=4)
    got, st = run("AMD", *args, dtype="float16")
    q, k, v, beta, alpha, state = args
    want, want_st = np_delta(q, k, *(x.astype(np.float16) for x in (v, beta, alpha)), state)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(st, want_st, rtol=1e-5, atol=1e-5)
    cpu, cpu_st = run("CPU", *args, dtype="float16")
    np.testing.assert_allclose(got, cpu, rtol=1e-5, atol=1e-5)


def test_gated_delta_state_view_at_an_offset():
    # the state of layer 1 in a stacked (layers, B, H, Vd, Kd) buffer: contiguous, written in place at its offset
    q, k, v, beta, alpha, state = make(T=4, Kd=32, Vd=4, seed=5)
    stack = np.stack([np.full_like(state, 7), state, np.full_like(state, 9)])
    buf = Tensor(stack, device="AMD").contiguous().realize()
    kern = kernel_for("gated_delta_prefill", "AMD")
    ts = [Tensor(x, device="AMD") for x in (q, k, v, beta, alpha)]
    assert kern.supports(*ts, buf[1])
    out = gated_delta_prefill(*ts, buf[1])
    want, want_st = np_delta(q, k, v, beta, alpha, state)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    after = buf.numpy()
    np.testing.assert_allclose(after[1], want_st, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(after[0], stack[0])
    np.testing.assert_array_equal(after[2], stack[2])


def test_gated_delta_refusals_are_clear_and_fall_back():
    q, k, v, beta, alpha, state = make(T=3, Kd=32, Vd=4, seed=6)
    kern = kernel_for("gated_delta_prefill", "AMD")
    ts = [Tensor(x, device="AMD") for x in (q, k, v, beta, alpha)]
    want, want_st = np_delta(q, k, v, beta, alpha, state)
    # a transposed view of the state: the kernel refuses, core's recurrence writes through the view
    buf = Tensor(np.ascontiguousarray(state.transpose(0, 1, 3, 2)), device="AMD").contiguous().realize()
    assert not kern.supports(*ts, buf.permute(0, 1, 3, 2))
    with pytest.raises(ValueError, match="recurrent state must be contiguous"):
        kern.build(*ts, buf.permute(0, 1, 3, 2))
    np.testing.assert_allclose(gated_delta_prefill(*ts, buf.permute(0, 1, 3, 2)).numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(buf.numpy().transpose(0, 1, 3, 2), want_st, rtol=1e-5, atol=1e-5)
    # half Q/K
    st = Tensor(state, device="AMD").contiguous().realize()
    half = [ts[0].cast("float16"), ts[1].cast("float16"), *ts[2:]]
    with pytest.raises(ValueError, match="recurrent Q/K must be float32"):
        kern.build(*half, st)
    want_h, _ = np_delta(q.astype(np.float16), k.astype(np.float16), v, beta, alpha, state)
    np.testing.assert_allclose(gated_delta_prefill(*half, st).numpy(), want_h, rtol=1e-5, atol=1e-5)
