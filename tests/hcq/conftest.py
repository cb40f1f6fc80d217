"""The hcq tests run on the reference HCQ device HCQREF (tg_core/hcq/refdev.py), registered per test."""
from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tg_core.device import Device
from tg_core.hcq.testing import hcqref_registry


@pytest.fixture
def hcq() -> Iterator[Callable[..., None]]:
    """Use a registry with HCQREF (call it again with test plugins: hcq(extensions=[...], order=[...]))."""
    def use(**kwargs) -> None:
        Device.reset(hcqref_registry(**kwargs))
    use()
    yield use
    Device.reset()
