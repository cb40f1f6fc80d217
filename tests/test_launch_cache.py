"""The eager launch path's caches: the schedule cache's identity layer (the same hash-consed targets realized
again skip renaming the graph), checked for values and for hitting or missing exactly when it must."""
import gc
import weakref

import numpy as np
import pytest

from tg_core import Variable
from tg_core.engine.jit import TinyJit
from tg_core.engine.realize import buffer_of
from tg_core.helpers import Context
from tg_core.schedule import cache
from tg_core.tensor import Tensor
from tg_core.uop.ops import Ops

rng = np.random.default_rng(7)


def randn(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def hits() -> tuple[int, int, int]:
    return cache.stats["identity_hits"], cache.stats["hits"], cache.stats["misses"]


def delta(before: tuple[int, int, int]) -> tuple[int, int, int]:
    return tuple(a - b for a, b in zip(hits(), before))  # type: ignore[return-value]


def test_the_same_targets_hit_by_identity_and_get_fresh_outputs():
    a = randn(16)
    x = Tensor(a).realize()
    results = [(x + 1).realize()]  # the first builds the entry (a miss or a normalized hit)
    before = hits()
    results += [(x + 1).realize() for _ in range(3)]
    assert delta(before) == (3, 3, 0)
    # every realize wrote a buffer of its own: the earlier results still hold their values
    assert len({id(buffer_of(r.uop.src[0] if r.uop.op is Ops.RESHAPE else r.uop)) for r in results}) == 4
    for r in results:
        np.testing.assert_allclose(r.numpy(), a + 1, rtol=1e-6)


def test_different_shapes_dtypes_and_devices_miss_the_identity_layer():
    x16, x8 = Tensor(randn(16)).realize(), Tensor(randn(8)).realize()
    xi = Tensor(np.arange(16, dtype=np.int32)).realize()
    xp = Tensor(x16.numpy(), device="PYTHON").realize()
    # the first results stay alive: their graphs (kept for gradients) hold the targets, so the entries live
    firsts = [(t * 3).realize() for t in (x16, x8, xi, xp)]
    before = hits()
    outs = [(t * 3).realize() for t in (x16, x8, xi, xp)]
    assert delta(before) == (4, 4, 0)  # each its own entry
    for t, o, f in zip((x16, x8, xi, xp), outs, firsts):
        np.testing.assert_array_equal(o.numpy(), t.numpy() * 3)
        np.testing.assert_array_equal(f.numpy(), t.numpy() * 3)
    assert outs[2].dtype == xi.dtype and outs[3].device == "PYTHON"


def test_a_new_input_buffer_misses_the_identity_layer_but_hits_the_normalized_cache():
    x, y = Tensor(randn(16)).realize(), Tensor(randn(16)).realize()
    keep = (x - 2).realize()
    before = hits()
    got = (y - 2).realize()  # equal graph up to the input: the normalized cache's hit, not the identity layer's
    assert delta(before) == (0, 1, 0)
    np.testing.assert_allclose(got.numpy(), y.numpy() - 2, rtol=1e-6)
    np.testing.assert_allclose(keep.numpy(), x.numpy() - 2, rtol=1e-6)


def test_an_entry_keeps_no_buffer_alive_and_goes_with_its_targets():
    x = Tensor(randn(16)).realize()
    node = x.uop.src[0] if x.uop.op is Ops.RESHAPE else x.uop
    dead_buf = weakref.ref(buffer_of(node))
    dead_node = weakref.ref(node)
    r1 = (x * 5).realize()
    (x * 5).realize()
    entries = len(cache._known)
    del x, node, r1
    gc.collect()
    assert dead_node() is None and dead_buf() is None  # the device memory went back to the allocator
    assert len(cache._known) < entries


def test_a_buffer_freed_and_reallocated_gets_its_own_values():
    # the same size and dtype: the allocator hands the freed memory (often the very address) to the new buffer,
    # and the new nodes may reuse the old ones' addresses; the identity layer must not take one for the other
    for i in range(6):
        a = randn(16) + i
        x = Tensor(a).realize()
        r = (x * 2 + 1).realize()
        r = (x * 2 + 1).realize()
        np.testing.assert_allclose(r.numpy(), a * 2 + 1, rtol=1e-6)
        del x, r
        gc.collect()


def test_a_changed_symbolic_bind_misses_the_identity_layer():
    x = Tensor(randn(8, 4)).realize()
    v = Variable("n_launch", 1, 8)
    want = {n: x.numpy()[:n].sum(0) for n in (3, 5)}
    outs = {n: x[:v.bind(n)].sum(0).realize() for n in (3, 5)}  # one schedule for both values
    before = hits()
    again = {n: x[:v.bind(n)].sum(0).realize() for n in (3, 5, 3)}
    identity, normalized, missed = delta(before)
    assert (identity, normalized, missed) == (3, 3, 0)  # the earlier results' graphs keep both entries
    for n in (3, 5):
        np.testing.assert_allclose(outs[n].numpy(), want[n], rtol=1e-5)
        np.testing.assert_allclose(again[n].numpy(), want[n], rtol=1e-5)


def test_repeated_assign_through_the_identity_layer_writes_each_time():
    x = Tensor(np.zeros(16, np.float32)).realize()
    for _ in range(5):
        x.assign(x + 1)
    np.testing.assert_array_equal(x.numpy(), np.full(16, 5, np.float32))


def test_jit_capture_after_identity_hits_records_and_replays_the_kernel():
    a = randn(16)
    x = Tensor(a).realize()
    eager = [(x + 4).realize() for _ in range(3)]  # an identity entry for x + 4 exists before the capture
    step = TinyJit(lambda t: t + 4)
    outs = [step(x).numpy() for _ in range(4)]
    assert len(step.jit_cache) == 1
    for o in outs:
        np.testing.assert_allclose(o, a + 4, rtol=1e-6)
    np.testing.assert_allclose(eager[-1].numpy(), a + 4, rtol=1e-6)
    x2 = Tensor(a * 3).realize()
    np.testing.assert_allclose(step(x2).numpy(), a * 3 + 4, rtol=1e-6)


def test_clear_and_scache_off_bypass_the_identity_layer():
    x = Tensor(randn(16)).realize()
    first = (x - 7).realize()
    cache.clear()
    before = hits()
    r = (x - 7).realize()
    assert delta(before) == (0, 0, 1)
    with Context(SCACHE=0):
        before = hits()
        r2 = (x - 7).realize()
        assert delta(before) == (0, 0, 0)
    np.testing.assert_allclose(r.numpy(), x.numpy() - 7, rtol=1e-6)
    np.testing.assert_allclose(r2.numpy(), x.numpy() - 7, rtol=1e-6)
    np.testing.assert_allclose(first.numpy(), x.numpy() - 7, rtol=1e-6)


@pytest.mark.parametrize("renderer", ["X86", "LLVM"])
def test_a_renderer_switch_between_identity_hits_uses_the_new_runner(renderer: str):
    from typing import Any

    from tg_core.device import Device
    dev: Any = Device["CPU"]  # the CPU device's select_renderer
    if renderer not in {c.name.upper() for c in dev.renderers}:
        pytest.skip(f"{renderer} is not offered here")
    old = dev.renderer.name.upper() if dev.renderer is not None else renderer
    x = Tensor(randn(16), device="CPU").realize()
    first = (x * 0.5).realize()  # alive: its graph holds the target, and with it the entry
    try:
        dev.select_renderer(renderer)
        before = hits()
        r = (x * 0.5).realize()
        assert delta(before)[0] == 1
        assert {type(run).__name__ for run in dev._runners.values()}  # built anew under this renderer
        np.testing.assert_allclose(r.numpy(), x.numpy() * 0.5, rtol=1e-6)
        np.testing.assert_allclose(first.numpy(), x.numpy() * 0.5, rtol=1e-6)
    finally:
        dev.select_renderer(old)


def test_an_entry_found_at_reused_ids_is_not_taken_for_other_targets():
    # what a target dying and another being made at its address looks like to the layer: an entry under the
    # new targets' ids whose weak references are not to them
    x, y = Tensor(randn(16)).realize(), Tensor(randn(16)).realize()
    keep = (x * 9).realize()
    other = y * 9
    entry = next(e for e in cache._known.values() if e.refs[0]() is keep_target(keep))
    ident = (id(other.uop), (other.device,))
    cache._known[ident] = entry
    before = hits()
    other.realize()
    assert delta(before)[0] == 0
    np.testing.assert_allclose(other.numpy(), y.numpy() * 9, rtol=1e-6)
    np.testing.assert_allclose(keep.numpy(), x.numpy() * 9, rtol=1e-6)


def keep_target(t: Tensor):
    """The graph a realized tensor was computed from (the target its realize scheduled)."""
    from tg_core.tensor.storage import origin_of
    return origin_of(t.uop)


def test_a_live_contiguous_inside_a_repeated_realize_is_kept_each_time():
    # the walk that finds realize points inside the targets is remembered per root: a new live tensor at one of
    # them must still be found (the scan of live tensors runs every time), and get the buffer the schedule wrote
    x = Tensor(randn(16)).realize()
    for i in range(3):
        c = (x * (i + 2)).contiguous()
        y = (c + 1).realize()
        assert c._is_realized()
        np.testing.assert_allclose(c.numpy(), x.numpy() * (i + 2), rtol=1e-6)
        np.testing.assert_allclose(y.numpy(), x.numpy() * (i + 2) + 1, rtol=1e-6)
    c1 = (x * 5).contiguous()
    first = (c1 + 1).realize()
    c2 = (x * 5).contiguous()  # the same node: the remembered walk, a different live tensor
    again = (c2 + 1).realize()
    assert c2._is_realized()
    np.testing.assert_allclose(again.numpy(), first.numpy(), rtol=1e-6)


def test_gradients_flow_through_results_of_identity_hits():
    a = randn(8)
    w = Tensor(a, requires_grad=True)
    outs = [(w * 3).realize() for _ in range(3)]  # later ones through the identity layer
    for o in outs:
        w.grad = None
        (o * o).sum().backward()
        assert w.grad is not None
        np.testing.assert_allclose(w.grad.numpy(), 18 * a, rtol=1e-5)


def test_remembered_scalar_constants_keep_value_dtype_and_shape_apart():
    x = Tensor(np.array([1.0, -2.0, 3.0, -4.0], np.float32)).realize()
    xi = Tensor(np.array([1, 2, 3, 4], np.int32)).realize()
    x2 = Tensor(np.ones((2, 3), np.float32)).realize()
    for _ in range(2):  # the second round takes the remembered constants
        np.testing.assert_array_equal(np.signbit((x * 0.0).numpy()), np.signbit(x.numpy() * np.float32(0.0)))
        np.testing.assert_array_equal(np.signbit((x * -0.0).numpy()), np.signbit(x.numpy() * np.float32(-0.0)))
        assert np.isnan((x + float("nan")).numpy()).all()
        np.testing.assert_array_equal((xi + True).numpy(), xi.numpy() + 1)
        assert (xi + True).dtype == xi.dtype and (xi + 1.5).dtype != xi.dtype
        np.testing.assert_allclose((xi + 1.5).numpy(), xi.numpy() + 1.5)
        np.testing.assert_array_equal((x2 + 1).numpy(), np.full((2, 3), 2, np.float32))
        np.testing.assert_array_equal((1 - x).numpy(), 1 - x.numpy())
        np.testing.assert_array_equal((2 * xi).numpy(), 2 * xi.numpy())
        with pytest.raises(OverflowError):
            Tensor(np.array([1], np.uint8)) + 300


# ---- the engine's fast path (issue 16): what it skips must not change what a realize means ----------------------

def test_lru_reuses_memory_only_for_equal_options():
    from tg_core.device import _DEFAULT_SPEC as default
    from tg_core.device import BufferSpec, LRUAllocator

    class Counting(LRUAllocator):
        def __init__(self) -> None:
            super().__init__()
            self.made = 0

        def _alloc(self, size, options):
            self.made += 1
            return bytearray(size)

        def _free(self, opaque, size, options):
            pass

    lru = Counting()
    a = lru.alloc(64)
    lru.free(a, 64)
    assert lru.alloc(64, BufferSpec()) is a  # an equal spec made anew is the default's key
    lru.free(a, 64, BufferSpec())
    assert lru.alloc(64, default) is a and lru.made == 1
    host = lru.alloc(64, BufferSpec(host=True))  # other options: other memory, and not handed to a default alloc
    lru.free(host, 64, BufferSpec(host=True))
    assert lru.alloc(64) is not host and lru.made == 3
    assert lru.alloc(32, BufferSpec(host=True)) is not host  # another size: another key
    assert lru.alloc(64, BufferSpec(host=True)) is host
    lru.free(host, 64, BufferSpec(nolru=True))  # never cached
    assert lru.cached_count == 0 and lru.cached_bytes == 0


def test_lru_cache_limit_evicts_the_oldest_of_either_key():
    from tg_core.device import BufferSpec, LRUAllocator

    class Plain(LRUAllocator):
        freed: list = []

        def _alloc(self, size, options):
            return bytearray(size)

        def _free(self, opaque, size, options):
            self.freed.append((size, options))

    lru = Plain(cache_limit=100)
    a, b = lru.alloc(60), lru.alloc(60, BufferSpec(host=True))
    lru.free(a, 60)
    lru.free(b, 60, BufferSpec(host=True))  # 120 bytes cached > 100: the older (the default's) goes
    assert lru.freed == [(60, BufferSpec())] and lru.cached_count == 1 and lru.cached_bytes == 60
    assert lru.alloc(60, BufferSpec(host=True)) is b


def test_unchecked_buffer_matches_a_checked_one():
    from tg_core.device import Buffer
    from tg_core.dtype import dtypes
    a, b = Buffer("CPU", 16, dtypes.float32), Buffer.unchecked("CPU", 16, dtypes.float32)
    for name in ("device", "size", "dtype", "offset", "options", "nbytes", "is_view"):
        assert getattr(a, name) == getattr(b, name), name
    data = randn(16)
    b.copyin(data)
    np.testing.assert_array_equal(b.numpy(), data)
    view = b.view(4, dtypes.float32, 8)
    np.testing.assert_array_equal(view.numpy(), data[2:6])


def test_scheduled_buffer_of_a_non_canonical_device_name_is_canonical():
    from tg_core.dtype import dtypes
    node = Tensor(randn(4)).uop  # its device node is canonical; a hand-made lower-case one is named canonically
    u = node.new_buffer("cpu", 4, dtypes.float32)
    assert buffer_of(u).device == "CPU"


def test_a_device_side_check_still_runs_through_the_realize_path():
    x = Tensor(randn(8)).realize()
    idx = Tensor(np.array([0, 3, 9], np.int32)).realize()  # 9 is out of range
    loop = [(x * 2).realize() for _ in range(2)]  # identity hits around it take the fast path
    got = x[idx + 0]  # an index only the device knows: a check waits, so realize takes prepare's path
    got.realize()
    with pytest.raises(IndexError):
        got.numpy()
    for r in loop + [(x * 2).realize()]:
        np.testing.assert_allclose(r.numpy(), x.numpy() * 2, rtol=1e-6)


def test_jit_replay_reads_each_calls_input_and_keeps_no_dead_input_alive():
    step = TinyJit(lambda t: t * 2 + 1)
    refs = []
    for i in range(6):
        a = randn(16) + i
        x = Tensor(a).realize()
        np.testing.assert_allclose(step(x).numpy(), a * 2 + 1, rtol=1e-6)
        refs.append(weakref.ref(buffer_of(x.uop.src[0] if x.uop.op is Ops.RESHAPE else x.uop)))
        del x
    gc.collect()
    assert len(step.jit_cache) == 1
    assert sum(r() is not None for r in refs) <= 1  # the capture's own input is the only one it may hold
