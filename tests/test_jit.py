"""TinyJit: captured kernels replayed with new inputs, checked against numpy and against eager runs; every
error a replay or a capture can raise. Runs on PYTHON, and on CPU when tg-cpu-x86 is installed."""
from __future__ import annotations

import importlib.util
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pytest

from tg_core.device import Device
from tg_core.dtype import dtypes
from tg_core.engine.jit import JitError, TinyJit
from tg_core.nn.optim import SGD
from tg_core.schedule import cache
from tg_core.tensor import Tensor
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

_NO_CPU = pytest.mark.skipif(importlib.util.find_spec("tg_cpu_x86") is None, reason="tg-cpu-x86 is not installed")
_NO_LLVM = pytest.mark.skipif(importlib.util.find_spec("llvmlite") is None, reason="llvmlite is not installed")
DEVICES = ["PYTHON", pytest.param("CPU:X86", marks=_NO_CPU), pytest.param("CPU:LLVM", marks=[_NO_CPU, _NO_LLVM])]
RNG = np.random.default_rng(7)


@pytest.fixture(params=DEVICES)
def dev(request) -> Iterator[str]:
    """A device name; CPU:X86 and CPU:LLVM are the CPU device with that renderer selected for the test."""
    base, _, renderer = request.param.partition(":")
    if not renderer:
        yield base
        return
    cpu = Device[base]
    before = cpu.renderer.name
    cpu.select_renderer(renderer)
    yield base
    cpu.select_renderer(before)


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


def _model_class(dev: str) -> type:
    """A new class whose __call__ is a TinyJit of its own (a class attribute: one capture shared by instances)."""
    class Model:
        def __init__(self):
            self.w = Tensor(rand(3), device=dev).realize()

        @TinyJit
        def __call__(self, x: Tensor) -> Tensor:
            return x * self.w
    return Model


def test_method_and_reset(dev):
    Model = _model_class(dev)
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


# ---- arguments inside containers, objects, outputs, threads ----------------------------------------------------

class Pair(NamedTuple):
    first: Tensor
    second: Tensor


def test_tensors_in_lists_are_inputs(dev):
    h = TinyJit(lambda xs: xs[0] * 10 + xs[1])
    for a, b in ((1, 2), (3, 4), (5, 6), (7, 8)):
        assert h([Tensor([a], device=dev), Tensor([b], device=dev)]).tolist() == [a * 10 + b]
    with pytest.raises(JitError, match=r"argument 0 is a list of 3 items but was a list of 2 at capture"):
        h([Tensor([1], device=dev), Tensor([2], device=dev), Tensor([3], device=dev)])


def test_tensors_nested_in_containers_and_keywords_are_inputs(dev):
    @TinyJit
    def f(batch: dict, *, extra: Pair, scale=(2, [3.5])) -> Tensor:
        (x, ys), w = batch["data"], batch["weights"]
        return (x * w["w"] + ys[0] - ys[1]) * scale[0] * scale[1][0] + extra.first * extra.second

    for _ in range(5):
        x, y0, y1, w, p, q = (rand(3) for _ in range(6))
        t = [Tensor(v, device=dev) for v in (x, y0, y1, w, p, q)]
        got = f({"data": (t[0], [t[1], t[2]]), "weights": {"w": t[3]}}, extra=Pair(t[4], t[5])).numpy()
        np.testing.assert_allclose(got, (x * w + y0 - y1) * 7 + p * q, rtol=1e-5, atol=1e-6)
    assert f.cnt == 2
    with pytest.raises(JitError, match=r"input keyword argument 'extra'.second is float \(2,\) on \w+, captured as"):
        f({"data": (t[0], [t[1], t[2]]), "weights": {"w": t[3]}}, extra=Pair(t[4], Tensor(rand(2), device=dev)))
    with pytest.raises(JitError, match=r"captured with argument 0, keyword argument 'extra' and is called with "
                                       r"argument 0, keyword argument 'extra', keyword argument 'scale'"):
        f({"data": (t[0], [t[1], t[2]]), "weights": {"w": t[3]}}, extra=Pair(t[4], t[5]), scale=(2, [3.5]))


@dataclass(frozen=True)
class Batch:
    x: Tensor
    scale: float


@dataclass
class MutableBatch:
    x: Tensor


def test_frozen_dataclasses_are_walked_mutable_ones_are_objects(dev):
    f = TinyJit(lambda b: b.x * b.scale)
    for _ in range(4):
        x = rand(3)
        np.testing.assert_allclose(f(Batch(Tensor(x, device=dev), 2.0)).numpy(), x * 2)
    with pytest.raises(JitError, match=r"argument 0.scale was 2.0 at capture and is 3.0 now"):
        f(Batch(Tensor(rand(3), device=dev), 3.0))
    g = _captured(lambda b: b.x + 1, MutableBatch(Tensor(rand(3), device=dev)))
    with pytest.raises(JitError, match=r"argument 0 is another MutableBatch object than at capture"):
        g(MutableBatch(Tensor(rand(3), device=dev)))  # it may have changed since: not a value


def test_changed_argument_structure_raises(dev):
    def args(n=2, kind=list, keys=("a", "b"), k=2):
        return kind(Tensor(rand(3), device=dev) for _ in range(n)), {key: k for key in keys}

    f = _captured(lambda xs, opts: xs[0] * opts["a"] + xs[1] * opts["b"], *args())
    np.testing.assert_allclose(f(*args()).numpy().shape, (3,))
    with pytest.raises(JitError, match=r"argument 0 is a list of 3 items but was a list of 2 at capture"):
        f(*args(n=3))
    with pytest.raises(JitError, match=r"argument 0 is a tuple but was a list at capture"):
        f(*args(kind=tuple))
    with pytest.raises(JitError, match=r"argument 1 has the keys \['b', 'a'\] but had \['a', 'b'\] at capture"):
        f(*args(keys=("b", "a")))  # the function may iterate them: their order is part of the structure
    with pytest.raises(JitError, match=r"argument 1\['a'\] was 2 at capture and is 3 now; Python values are frozen"):
        f(*args(k=3))
    with pytest.raises(JitError, match=r"argument 0\[1\] is a Python value but was a Tensor at capture"):
        f([Tensor(rand(3), device=dev), 1.0], {"a": 2, "b": 2})
    with pytest.raises(JitError, match=r"input argument 0\[1\] is float \(4,\) on \w+, captured as float \(3,\)"):
        f([Tensor(rand(3), device=dev), Tensor(rand(4), device=dev)], {"a": 2, "b": 2})


def test_python_values_are_compared_by_their_bits(dev):
    f = _captured(lambda x, k: x * k, Tensor(rand(3), device=dev), 0.0)
    with pytest.raises(JitError, match=r"argument 1 was 0.0 at capture and is -0.0 now"):
        f(Tensor(rand(3), device=dev), -0.0)  # equal as floats, but x * -0.0 has other signs
    with pytest.raises(JitError, match=r"argument 1 was 0.0 at capture and is False now"):
        f(Tensor(rand(3), device=dev), False)
    g = _captured(lambda x, k: x + k, Tensor(rand(3), device=dev), float("nan"))
    assert np.isnan(g(Tensor(rand(3), device=dev), float("nan")).numpy()).all()  # another nan object is the same value


def test_objects_must_be_the_same_object(dev):
    class Holder:
        def __init__(self, value: np.ndarray):
            self.w = Tensor(value, device=dev).realize()

    f = TinyJit(lambda x, holder: x * holder.w)
    holder = Holder(rand(3))
    for _ in range(3):
        x = rand(3)
        np.testing.assert_allclose(f(Tensor(x, device=dev), holder).numpy(), x * holder.w.numpy())
    with pytest.raises(JitError, match=r"argument 1 is another Holder object than at capture; a capture freezes"):
        f(Tensor(rand(3), device=dev), Holder(rand(3)))  # its w was never read: replaying would use holder.w
    g = _captured(lambda x, host: x + Tensor(host, device=dev), Tensor(rand(3), device=dev), rand(3))
    with pytest.raises(JitError, match=r"argument 1 is another ndarray object than at capture"):
        g(Tensor(rand(3), device=dev), rand(3))  # the captured upload would be replayed instead

    class Scale:
        def __init__(self, k: float):
            self.k = k

        def apply(self, x: Tensor) -> Tensor:
            return x * self.k

    s2, s3 = Scale(2.0), Scale(3.0)
    h = TinyJit(lambda x, fn: fn(x))
    for _ in range(3):  # a bound method is a new object on every access: it is compared by function and object
        x = rand(3)
        np.testing.assert_allclose(h(Tensor(x, device=dev), s2.apply).numpy(), x * 2)
    with pytest.raises(JitError, match=r"argument 1 is method .*Scale.apply of a Scale object at 0x[0-9a-f]+ but "
                                       r"was method .*Scale.apply of a Scale object at"):
        h(Tensor(rand(3), device=dev), s3.apply)
    items: list[int] = []
    k = _captured(lambda x, fn: x + 1, Tensor(rand(3), device=dev), items.append)
    np.testing.assert_allclose(k(Tensor(np.ones(3, np.float32), device=dev), items.append).numpy(), 2)  # a builtin's

    Model = _model_class(dev)
    m = Model()
    for _ in range(2):
        m(Tensor(rand(3), device=dev))
    with pytest.raises(JitError, match=r"argument 0 is another Model object than at capture"):
        Model()(Tensor(rand(3), device=dev))


def test_arguments_no_replay_could_take_raise(dev):
    f = TinyJit(lambda xs: sum(xs, Tensor.zeros(2, device=dev)))
    with pytest.raises(JitError, match=r"argument 0 is a set holding Tensors .* pass a list or tuple"):
        f({Tensor(rand(2), device=dev)})
    with pytest.raises(JitError, match=r"argument 0 is a frozenset holding Tensors"):
        f(frozenset({(1, Tensor(rand(2), device=dev))}))
    v = UOp.variable("jit_n", 0, 10, dtypes.int32)
    g = TinyJit(lambda x, a, b: x + Tensor(a, device=dev))
    with pytest.raises(JitError, match=r"argument 2\[0\] binds variable jit_n to 4, another argument binds it to 3"):
        g(Tensor(rand(2), device=dev), v.bind(3), [v.bind(4)])
    t = Tensor(rand(2, 2), device=dev).realize()
    with pytest.raises(JitError, match=r"argument 0\[0\] and argument 0\[1\] share one buffer"):
        TinyJit(lambda xs: xs[0] + xs[1])([t, t.T])  # a view of another input aliases it


def test_tensors_of_no_elements(dev):
    f = TinyJit(lambda x, empty: (x * 2, empty.sum(), empty + 1))
    for i in range(4):
        doubled, total, plus = f(Tensor(np.full(2, i, np.float32), device=dev), Tensor.zeros(0, 3, device=dev))
        np.testing.assert_array_equal(doubled.numpy(), [2 * i, 2 * i])
        assert total.item() == 0 and plus.shape == (0, 3)
    with pytest.raises(JitError, match=r"argument 1 is an empty float \(0, 4\) tensor on \w+, captured as an empty "
                                       r"float \(0, 3\) tensor"):
        f(Tensor(rand(2), device=dev), Tensor.zeros(0, 4, device=dev))
    with pytest.raises(JitError, match=r"argument 1 is a Tensor but was a Tensor of no elements at capture"):
        f(Tensor(rand(2), device=dev), Tensor.zeros(1, 3, device=dev))


def test_variables_inside_containers(dev):
    v = UOp.variable("jit_k", 0, 100, dtypes.int32)
    f = TinyJit(lambda x, opts: x + Tensor(opts["k"], device=dev))
    for i in (3, 4, 9, 50):
        x = rand(5)
        np.testing.assert_allclose(f(Tensor(x, device=dev), {"k": v.bind(i)}).numpy(), x + i)


def test_nested_outputs_and_inputs_returned_unchanged(dev):
    @TinyJit
    def f(x: Tensor, pair: Pair) -> dict:
        y = x + 1
        return OrderedDict(out=Pair(y, pair.second), same=[x, y, y], first=pair.first[1:])

    for _ in range(4):
        x, a, b = rand(3), rand(4), rand(2)
        out = f(Tensor(x, device=dev), Pair(Tensor(a, device=dev), Tensor(b, device=dev)))
        assert type(out) is OrderedDict and type(out["out"]) is Pair and list(out) == ["out", "same", "first"]
        np.testing.assert_allclose(out["out"].first.numpy(), x + 1)
        np.testing.assert_array_equal(out["out"].second.numpy(), b)  # an input returned unchanged: this call's
        np.testing.assert_array_equal(out["same"][0].numpy(), x)
        np.testing.assert_allclose(out["same"][2].numpy(), x + 1)
        np.testing.assert_array_equal(out["first"].numpy(), a[1:])  # a view of an input


def test_realized_and_unrealized_inputs(dev):
    f = TinyJit(lambda x: x * 2)
    for i in range(6):
        a = RNG.integers(-100, 100, 4).astype(np.float32)  # a - 1 + 1 is exact
        t = Tensor(a, device=dev) if i % 2 else (Tensor(a - 1, device=dev) + 1)  # lazy on every other call
        np.testing.assert_array_equal(f(t).numpy(), a * 2)


def test_an_output_passed_back_in(dev):
    f = TinyJit(lambda x: x.flip(0) * 2 + x.sum())  # in place, it would read elements it has overwritten
    x, ref = Tensor(np.arange(5, dtype=np.float32), device=dev), np.arange(5, dtype=np.float32)
    for _ in range(5):
        x = f(x)  # from call 2 on, x is the captured output buffer
        ref = ref[::-1] * 2 + ref.sum()  # small integers: exact
        np.testing.assert_array_equal(x.numpy(), ref)

    @TinyJit
    def g(x: Tensor) -> Tensor:
        x.assign(x + 1)
        return x * 2

    out = g(Tensor(np.ones(2, np.float32), device=dev))
    for _ in range(2):
        out = g(Tensor(np.ones(2, np.float32), device=dev))
    with pytest.raises(JitError, match=r"input argument 0 is held in memory this TinyJit writes .* pass a \.clone\(\)"):
        g(out)
    np.testing.assert_array_equal(g(out.clone()).numpy(), [10, 10])  # (4 + 1) * 2


def test_another_threads_work_during_a_capture_is_not_recorded(dev):
    inside, finished = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    @TinyJit
    def f(x: Tensor) -> Tensor:
        y = (x + 1).contiguous().realize()
        if f.cnt == 1:  # the capture: let the other thread realize meanwhile
            inside.set()
            assert finished.wait(30)
        return y * 2

    g = _captured(lambda x: x - 1, Tensor(rand(3), device=dev))

    def other():
        assert inside.wait(30)
        try:
            b = (Tensor(np.arange(3, dtype=np.float32), device=dev) * 7).realize()
            seen["realized"] = b.numpy()  # a host read in this thread is not the capture's
            seen["replayed"] = g(Tensor(np.ones(3, np.float32), device=dev)).numpy()  # nor a TinyJit call nested in it
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            seen["error"] = e
        finished.set()

    f(Tensor(rand(3), device=dev))
    worker = threading.Thread(target=other)
    worker.start()
    x = rand(3)
    np.testing.assert_allclose(f(Tensor(x, device=dev)).numpy(), (x + 1) * 2, rtol=1e-6)
    worker.join()
    assert "error" not in seen, seen.get("error")
    np.testing.assert_array_equal(seen["realized"], np.arange(3) * 7)
    np.testing.assert_array_equal(seen["replayed"], [0, 0, 0])
    assert len(f.jit_cache) == 2  # x + 1 and y * 2, not the other thread's multiply
    for _ in range(3):
        x = rand(3)
        np.testing.assert_allclose(f(Tensor(x, device=dev)).numpy(), (x + 1) * 2, rtol=1e-6)


def test_calls_from_threads_run_one_at_a_time(dev):
    inside, release = threading.Event(), threading.Event()
    held: list[bool] = []

    @TinyJit
    def f(x: Tensor) -> Tensor:
        if f.cnt == 1 and not held:  # the first capture waits until released
            held.append(True)
            inside.set()
            assert release.wait(30)
        return x + 1

    f(Tensor(rand(2), device=dev))
    results: dict[str, Tensor] = {}
    first = threading.Thread(target=lambda: results.update(first=f(Tensor(np.ones(2, np.float32), device=dev))))
    first.start()
    assert inside.wait(30)
    second = threading.Thread(target=lambda: results.update(second=f(Tensor(np.zeros(2, np.float32), device=dev))))
    second.start()
    second.join(0.3)
    assert second.is_alive()  # waiting for the first thread's capture, not capturing beside it
    release.set()
    first.join()
    second.join()
    assert len(f.jit_cache) == 1 and "first" in results
    np.testing.assert_array_equal(results["second"].numpy(), [1, 1])  # a replay of the first thread's capture


def test_nested_inputs_and_an_output_passed_back_in_on_amd():
    pytest.importorskip("tg_amd")
    h = TinyJit(lambda xs: xs[0] * 10 + xs[1][0])
    for a, b in ((1, 2), (3, 4), (5, 6)):
        assert h([Tensor([a], device="AMD"), (Tensor([b], device="AMD"),)]).tolist() == [a * 10 + b]
    f = TinyJit(lambda x: x.flip(0) * 2 + x.sum())
    x, ref = Tensor(np.arange(5, dtype=np.float32), device="AMD"), np.arange(5, dtype=np.float32)
    for _ in range(4):
        x = f(x)
        ref = ref[::-1] * 2 + ref.sum()
        np.testing.assert_array_equal(x.numpy(), ref)
