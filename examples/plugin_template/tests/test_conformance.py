"""The template passes core's conformance suite: run `python -m pytest tests` after installing the plugin."""
import pytest

from tg_core.plugin_api import Buffer, Device, DeviceConformance


class TestTemplate(DeviceConformance):
    device = "TEMPLATE"


def test_out_of_memory_frees_the_cache_first() -> None:
    lru = Device["TEMPLATE"].allocator
    lru.free_cache()
    baseline = lru.in_use  # buffers of tensors other tests left alive
    big = (lru.max_bytes - baseline) // 8  # the cache holds at most max_bytes // 4: two freed buffers fit
    held = [lru.alloc(big) for _ in range(6)]
    for opaque in held[:2]:
        lru.free(opaque, big)
    assert lru.cached_count == 2
    # 6 are allocated (2 of them cached); 3 more fit only once the cached ones are really freed
    more = [lru.alloc(big + 1) for _ in range(3)]
    assert lru.cached_count == 0
    with pytest.raises(MemoryError):
        lru.alloc(big + 1)
    for opaque in held[2:]:
        lru.free(opaque, big)
    for opaque in more:
        lru.free(opaque, big + 1)
    lru.free_cache()
    assert lru.in_use == baseline


def test_options_reach_the_device() -> None:
    dev = Device["TEMPLATE"]
    assert dev.allocator.max_bytes == 1 << 30 and dev.allocator.zero is True
    assert Buffer("TEMPLATE", 4, "int32").numpy().tolist() == [0, 0, 0, 0]
