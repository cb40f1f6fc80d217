"""Device strings on tensors: a named renderer is the one that renders (CPU:LLVM is the CPU rendering with LLVM,
whatever plain CPU uses), and an unknown renderer or a bad index is an error naming what is allowed."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core.device import Device
from tg_core.plugins import ConfigError, DeviceNotFoundError
from tg_core.plugins.manager import PluginRegistry
from tg_core.tensor import Tensor

# (device string, the renderer it must render with; None: the device's own choice)
CASES = [("PYTHON", None), ("CPU:X86", "X86"), ("CPU:LLVM", "LLVM"), ("AMD:LLVM", "LLVM")]


def _open(name: str):
    try:
        return Device[name]
    except DeviceNotFoundError as e:
        if "no renderer" in str(e):  # e.g. X86 on a host that is not x86-64
            pytest.skip(str(e))
        raise
    except Exception as e:  # e.g. no AMD interface here
        pytest.skip(f"{name} does not open: {type(e).__name__}: {e}")


@pytest.mark.parametrize("name,renderer", CASES, ids=[c[0] for c in CASES])
def test_tensor_uses_the_renderer_named(name, renderer):
    dev = _open(name)
    x = np.arange(-3, 5, dtype=np.float32)
    t = Tensor(x, device=name.lower()) * 2 + 1
    assert t.device == name
    np.testing.assert_array_equal(t.numpy(), x * 2 + 1)  # small integers: exact on every renderer
    assert Device[t.device] is dev
    if renderer is not None:
        assert dev.renderer.name == renderer and "named in the device string" in dev.renderer_reason


@pytest.mark.parametrize("renderer", ["LLVM", "X86"])
def test_named_renderer_beside_the_plain_device(renderer):
    """Plain CPU is open (with its own renderer) first: CPU:<renderer> still renders with <renderer>, and a tensor
    moves between the two like between any two devices."""
    plain = _open("CPU")
    named = _open(f"CPU:{renderer}")
    assert named is not plain and named.renderer.name == renderer
    x = np.arange(6, dtype=np.int32)
    t = Tensor(x, device="CPU").to(f"CPU:{renderer}") * 3
    assert t.device == f"CPU:{renderer}"
    np.testing.assert_array_equal(t.to("CPU").numpy(), x * 3)
    with pytest.raises(ValueError, match=f"different devices \\(CPU:{renderer} and CPU"):
        t + Tensor(x, device="CPU")


@pytest.mark.parametrize("name,offered", [("CPU:FOO", "LLVM"), ("AMD:foo", "LLVM"), ("PYTHON:FOO", "none")])
def test_unknown_renderer_is_an_error(name, offered):
    _open(name.split(":")[0])
    with pytest.raises(DeviceNotFoundError, match=f"no renderer 'FOO' for {name.split(':')[0]}; offered: .*{offered}"):
        Tensor([1.0, 2.0], device=name)


def test_unknown_renderer_in_dev_is_the_same_error():
    _open("CPU")
    reg = PluginRegistry.create(env={"DEV": "CPU:FOO"})
    with pytest.raises(ConfigError, match="environment variable DEV: renderer not offered.*offered for CPU: .*LLVM"):
        reg.choose_renderer("CPU")


@pytest.mark.parametrize("name", ["AMD:-1", "CPU:+2", "PYTHON:-0"])
def test_bad_index_is_an_error(name):
    with pytest.raises(ValueError, match=r"a device index is a whole number >= 0 \(AMD, AMD:1, \.\.\.\)"):
        Tensor([1.0], device=name)
