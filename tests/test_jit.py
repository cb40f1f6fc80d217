"""TinyJit: captured kernels replayed with new inputs, checked against numpy and against eager runs; every
error a replay or a capture can raise. Runs on PYTHON, and on CPU when tg-cpu-x86 is installed."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from tg_core.dtype import dtypes
from tg_core.engine.jit import JitError, TinyJit
from tg_core.nn.optim import SGD
from tg_core.schedule import cache
from tg_core.tensor import Tensor
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

DEVICES = ["PYTHON", pytest.param("CPU", marks=pytest.mark.skipif(importlib.util.find_spec("tg_cpu_x86") is None,
                                                                  reason="tg-cpu-x86 is not installed"))]
RNG = np.random.default_rng(7)


@pytest.fixture(params=DEVICES)
def dev(request) -> str:
    return request.param


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def test_values_and_replay_with_new_data(dev):
    @TinyJit
    def f(a: Tensor, b: Tensor) -> Tensor:
        return (a * b + 1).relu().sum(axis=1)

    for i in range(5):
        a, b = rand(4, 8), rand(4, 8)
        before = dict(cache.stats)
        got = f(Tensor(a, device=dev), Tensor(b, device=dev)).numpy()
        np.testing.assert_allclose(got, np.maximum(a * b + 1, 0).sum(1), rtol=1e-5, atol=1e-5)
        if i >= 2:  # replays: nothing is scheduled, not even a schedule-cache lookup
            assert cache.stats == before
    assert f.cnt == 2 and len(f.jit_cache) >= 1


def test_outputs_are_overwritten_by_the_next_call(dev):
    f = TinyJit(lambda x: x * 2)
    for _ in range(2):
        f(Tensor(rand(3), device=dev))
    a, b = rand(3), rand(3)
    out_a = f(Tensor(a, device=dev))
    np.testing.assert_allclose(out_a.numpy(), a * 2)
    out_b = f(Tensor(b, device=dev))
    # one output buffer: the earlier result now shows the later call's value, as in tinygrad
    np.testing.assert_allclose(out_a.numpy(), b * 2)
    np.testing.assert_allclose(out_b.numpy(), b * 2)


def test_several_outputs_keywords_and_an_output_viewing_an_input(dev):
    @TinyJit
    def f(x: Tensor, *, scale: Tensor) -> dict:
        return {"sum": (x * scale).sum(), "pair": (x.exp(), x.T)}

    for _ in range(4):
        x, s = rand(2, 3), rand(1)
        out = f(Tensor(x, device=dev), scale=Tensor(s, device=dev))
        np.testing.assert_allclose(out["sum"].numpy(), (x * s).sum(), rtol=1e-5)
        np.testing.assert_allclose(out["pair"][0].numpy(), np.exp(x), rtol=1e-5)
        np.testing.assert_allclose(out["pair"][1].numpy(), x.T)  # a view of this call's input


def test_view_inputs(dev):
    f = TinyJit(lambda x: x + 1)
    for _ in range(3):
        x = rand(3, 5)
        t = Tensor(x, device=dev).realize().T  # a permuted view of a realized buffer
        np.testing.assert_allclose(f(t).numpy(), x.T + 1)
    view = r"\(a view of 15 elements: reshape\(3, 5\), permute\(1, 0\)\)"
    with pytest.raises(JitError, match=rf"argument 0 is float \(5, 3\) on \w+, captured as .* on \w+ {view}"):
        f(Tensor(rand(5, 3), device=dev))  # same shape, but a plain buffer instead of a transposed view


def test_intermediates_share_memory(dev):
    @TinyJit
    def f(x: Tensor) -> Tensor:
        for _ in range(6):
            x = (x * 2).contiguous().realize()  # six intermediates of one size
        return x + 1

    for _ in range(3):
        x = rand(16)
        np.testing.assert_allclose(f(Tensor(x, device=dev)).numpy(), x * 64 + 1)
    bufs = {id(b) for it in f.jit_cache for b in it.bufs if b is not None}
    assert len(f.jit_cache) == 7
    assert len(bufs) <= 3  # output + two alternating intermediates, not seven buffers


def test_training_step_matches_eager(dev):
    x, y = rand(16, 4), rand(16, 1)

    w0, b0 = rand(4, 1), rand(1)

    def make():
        w, b = Tensor(w0, device=dev, requires_grad=True), Tensor(b0, device=dev, requires_grad=True)
        return (w, b), SGD([w, b], lr=0.1)

    def step(params, opt, xt, yt):
        opt.zero_grad()
        loss = ((xt @ params[0] + params[1] - yt) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    layer_e, opt_e = make()
    eager = [step(layer_e, opt_e, Tensor(x, device=dev), Tensor(y, device=dev)).item() for _ in range(6)]
    layer_j, opt_j = make()
    jitted = TinyJit(lambda xt, yt: step(layer_j, opt_j, xt, yt))
    losses = [jitted(Tensor(x, device=dev), Tensor(y, device=dev)).item() for _ in range(6)]
    np.testing.assert_allclose(losses, eager, rtol=1e-5)
    assert losses[-1] < losses[0] * 0.9
    np.testing.assert_allclose(layer_j[0].numpy(), layer_e[0].numpy(), rtol=1e-5)


def test_variables_passed_as_arguments(dev):
    v = UOp.variable("jit_offset", 0, 100, dtypes.int32)
    f = TinyJit(lambda x, n: x + Tensor(n, device=dev))
    for i in (3, 4, 9, 50):
        x = rand(5)
        np.testing.assert_allclose(f(Tensor(x, device=dev), v.bind(i)).numpy(), x + i)
    assert "jit_offset" in f.jit_cache[0].var_names
    w = UOp.variable("other", 0, 100, dtypes.int32)
    with pytest.raises(JitError, match="binds variable"):
        f(Tensor(rand(5), device=dev), w.bind(1))


def test_random_numbers_follow_the_eager_sequence(dev):
    f = TinyJit(lambda x: x + Tensor.rand(4, device=dev))
    Tensor.manual_seed(5)
    eager = [(Tensor(np.zeros(4, np.float32), device=dev) + Tensor.rand(4, device=dev)).numpy() for _ in range(4)]
    Tensor.manual_seed(5)
    jitted = [f(Tensor(np.zeros(4, np.float32), device=dev)).numpy() for _ in range(4)]
    np.testing.assert_array_equal(np.stack(jitted), np.stack(eager))
    assert len({r.tobytes() for r in jitted}) == 4


def test_method_and_reset(dev):
    class Model:
        def __init__(self):
            self.w = Tensor(rand(3), device=dev).realize()

        @TinyJit
        def __call__(self, x: Tensor) -> Tensor:
            return x * self.w

    m = Model()
    for _ in range(3):
        x = rand(3)
        np.testing.assert_allclose(m(Tensor(x, device=dev)).numpy(), x * m.w.numpy())
    with pytest.raises(JitError, match=r"float \(4,\) on .*captured as float \(3,\)"):
        m(Tensor(rand(4), device=dev))
    Model.__call__.reset()
    m.w = Tensor(rand(4), device=dev).realize()
    for _ in range(3):
        x = rand(4)
        np.testing.assert_allclose(m(Tensor(x, device=dev)).numpy(), x * m.w.numpy())


# ---- errors ----------------------------------------------------------------------------------------------

def _captured(fn, *args):
    jit = TinyJit(fn)
    for _ in range(2):
        jit(*args)
    return jit


def test_shape_dtype_and_device_changes_raise(dev):
    f = _captured(lambda x: x + 1, Tensor(rand(4), device=dev))
    with pytest.raises(JitError, match=r"input argument 0 is float \(5,\) on \w+, captured as float \(4,\)"):
        f(Tensor(rand(5), device=dev))
    with pytest.raises(JitError, match=r"is int \(4,\) on \w+, captured as float \(4,\)"):
        f(Tensor(np.arange(4, dtype=np.int32), device=dev))
    other = "PYTHON:1" if dev == "PYTHON" else "PYTHON"
    with pytest.raises(JitError, match=rf"on {other}, captured as float \(4,\) on {dev}"):
        f(Tensor(rand(4), device=other))


def test_argument_structure_changes_raise(dev):
    f = _captured(lambda x, k=2: x * k, Tensor(rand(4), device=dev), 3)
    with pytest.raises(JitError, match="argument 1 was 3 at capture and is 4 now"):
        f(Tensor(rand(4), device=dev), 4)
    with pytest.raises(JitError, match="captured with argument 0, argument 1 and is called with argument 0"):
        f(Tensor(rand(4), device=dev))
    with pytest.raises(JitError, match="argument 1 is a Tensor but was a Python value"):
        f(Tensor(rand(4), device=dev), Tensor(rand(4), device=dev))
    np.testing.assert_allclose(f(Tensor(np.ones(4, np.float32), device=dev), 3).numpy(), 3.0)


def test_host_reads_during_capture_raise(dev):
    for read in (lambda t: t.item(), lambda t: t.numpy(), lambda t: float(t)):
        f = TinyJit(lambda x, read=read: x + read(x.sum()))
        f(Tensor(rand(2), device=dev))  # call 0 is eager: reading is fine
        with pytest.raises(JitError, match="on the host .* while TinyJit"):
            f(Tensor(rand(2), device=dev))
        # a failed capture leaves nothing half-recorded: the engine runs eagerly again
        np.testing.assert_allclose((Tensor(np.ones(2, np.float32), device=dev) + 1).numpy(), 2.0)


def test_nested_jit_raises(dev):
    inner = TinyJit(lambda x: x + 1)
    outer = TinyJit(lambda x: inner(x) * 2)
    outer(Tensor(rand(2), device=dev))
    with pytest.raises(JitError, match="nested JITs"):
        outer(Tensor(rand(2), device=dev))


def test_bad_returns_and_inputs_raise(dev):
    f = TinyJit(lambda x: 3)
    with pytest.raises(JitError, match="returned a int"):
        f(Tensor(rand(2), device=dev))
    g = TinyJit(lambda x, y: x + y)
    t = Tensor(rand(2), device=dev).realize()
    with pytest.raises(JitError, match="argument 0 and argument 1 share one buffer"):
        g(t, t)
    h = TinyJit(lambda x, n: x)
    with pytest.raises(JitError, match="unbound DEFINE_VAR"):
        h(t, UOp.variable("n", 0, 4))
    with pytest.raises(TypeError, match="wraps a function"):
        TinyJit(3)


def test_copies_between_devices_are_captured(dev):
    other = "PYTHON:1" if dev == "PYTHON" else "PYTHON"
    f = TinyJit(lambda x: x.to(other) * 2)
    for _ in range(4):
        a = rand(5)
        out = f(Tensor(a, device=dev))
        assert out.device == other
        np.testing.assert_allclose(out.numpy(), a * 2)
    assert [it.ast.op for it in f.jit_cache][0] is Ops.COPY


def test_assigning_into_an_input_and_no_inputs(dev):
    @TinyJit
    def bump(x: Tensor) -> Tensor:
        x.assign(x * 2 + 1)
        return x

    for _ in range(4):
        a = rand(3)
        t = Tensor(a, device=dev).realize()
        out = bump(t)
        np.testing.assert_allclose(t.numpy(), a * 2 + 1, rtol=1e-6)  # the write went into this call's input
        np.testing.assert_allclose(out.numpy(), a * 2 + 1, rtol=1e-6)

    noise = TinyJit(lambda: Tensor.rand(3, device=dev) * 1)
    draws = [noise().numpy() for _ in range(4)]
    assert len({d.tobytes() for d in draws}) == 4 and all(((0 <= d) & (d < 1)).all() for d in draws)


def test_replays_count_in_the_engine_stats(dev):
    from tg_core.engine.realize import stats
    f = TinyJit(lambda x: (x + 1).contiguous().realize() * 2)
    for _ in range(2):
        f(Tensor(rand(3), device=dev))
    before = dict(stats)
    f(Tensor(rand(3), device=dev))
    assert stats["kernels"] - before["kernels"] == len(f.jit_cache) == 2
