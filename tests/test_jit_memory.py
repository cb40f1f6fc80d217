"""TinyJit capture-time memory reuse (engine/jit_memory.py): an intermediate that died during the capture lends
its buffer to a later one, so the capture allocates about what a replay holds; what must keep its memory (host
data, RNG keys, live tensors, views) keeps it, checked by replay values against numpy."""
from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import numpy as np
import pytest

from tg_core.device import Device
from tg_core.engine.jit import TinyJit
from tg_core.engine.jit_memory import written_params
from tg_core.helpers import Context
from tg_core.tensor import Tensor

_NO_CPU = pytest.mark.skipif(importlib.util.find_spec("tg_cpu_x86") is None, reason="tg-cpu-x86 is not installed")
DEVICES = ["PYTHON", pytest.param("CPU", marks=_NO_CPU)]
RNG = np.random.default_rng(11)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture(params=DEVICES)
def dev(request) -> str:
    return request.param


@pytest.fixture
def allocations(dev: str) -> Iterator[list[int]]:
    """The sizes of the device's real allocations while the test runs (the LRU cache off: every buffer the
    engine makes is an allocation)."""
    alloc = Device[dev].allocator
    sizes: list[int] = []
    orig = type(alloc).alloc

    def counting(self, size, options=None):
        sizes.append(size)
        return orig(self, size, options)
    alloc.alloc = counting.__get__(alloc)  # type: ignore[method-assign]
    with Context(LRU=0):
        yield sizes
    del alloc.alloc


def chain(x: Tensor, n: int) -> Tensor:
    for _ in range(n):
        x = (x * 2 + 1).contiguous().realize()  # each realize's input dies when x is rebound
    return x


@Tensor.test()  # inference: a realized tensor keeps no graph (with one, each x would keep the one before alive)
def test_capture_reuses_dead_intermediates(dev, allocations):
    f = TinyJit(lambda x: chain(x, 12))
    x = rand(256)
    inp = Tensor(x, device=dev).realize()
    f(inp).realize()                      # call 0: eager
    allocations.clear()
    out = f(inp)                          # call 1: the capture
    capture_allocs = len(allocations)
    want = x.copy()
    for _ in range(12):
        want = want * 2 + 1
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    # without reuse the capture would allocate 12 buffers of 1 KB (the record holds each); with it two alternate
    assert capture_allocs <= 3, allocations
    for _ in range(3):  # replays with new data
        x = rand(256)
        want = x.copy()
        for _ in range(12):
            want = want * 2 + 1
        np.testing.assert_allclose(f(Tensor(x, device=dev)).numpy(), want, rtol=1e-6)


def test_host_data_made_inside_keeps_its_memory(dev):
    c = rand(64)

    def step(x: Tensor) -> Tensor:
        k = Tensor(c, device=dev)             # host data: its first use reads it, a replay needs it unchanged
        y = (x + k).contiguous().realize()
        del k
        for _ in range(4):                    # later intermediates of the same size must not take its memory
            y = (y * 3).contiguous().realize()
        return y

    f = TinyJit(Tensor.test()(step))
    for _ in range(4):
        x = rand(64)
        np.testing.assert_allclose(f(Tensor(x, device=dev)).numpy(), (x + c) * 81, rtol=1e-5)


def test_live_tensors_and_rng_keys_keep_their_memory(dev):
    kept: list[Tensor] = []

    def step(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        kept.clear()
        r = Tensor.rand(128, device=dev).realize()
        first = (x + 1).contiguous().realize()
        kept.append(first)                    # held outside the function: it lives on, so it is never lent
        y = chain(first, 5)
        return y, (x + r).contiguous(), r

    f = TinyJit(Tensor.test()(step))
    seen = []
    for _ in range(4):
        x = rand(128)
        y, xr, r = f(Tensor(x, device=dev))
        rv = r.numpy()
        seen.append(rv.copy())
        want = x + 1
        for _ in range(5):
            want = want * 2 + 1
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-5)
        np.testing.assert_allclose(xr.numpy(), x + rv, rtol=1e-6)
        assert ((rv >= 0) & (rv < 1)).all()
    assert not np.array_equal(seen[-1], seen[-2])  # each replay draws new numbers


def test_a_buffer_viewed_by_a_live_tensor_is_not_lent(dev):
    def step(x: Tensor) -> tuple[Tensor, Tensor]:
        a = (x * 2).contiguous().realize()
        head = a[:32]                         # a view of a's memory that outlives a
        del a
        y = chain(x, 4)
        return y, head.contiguous()

    f = TinyJit(Tensor.test()(step))
    for _ in range(4):
        x = rand(64)
        y, head = f(Tensor(x, device=dev))
        want = x.copy()
        for _ in range(4):
            want = want * 2 + 1
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-5)
        np.testing.assert_allclose(head.numpy(), x[:32] * 2, rtol=1e-6)


def test_written_params_of_a_kernel(dev):
    from tg_core.engine.realize import build
    a = Tensor(rand(8), device=dev).realize()
    items, *_ = build([(a + 1).uop])
    ast, _ = items[-1]
    assert written_params(ast) == {0}
