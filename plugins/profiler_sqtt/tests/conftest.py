"""Fixtures of tg-profiler-sqtt's tests on the mock GPU."""
from __future__ import annotations

import pytest

from tg_core.device import Device
from tg_profiler_sqtt import results


@pytest.fixture
def amd():
    """The AMD device, idle, with no profile results left from an earlier test."""
    dev = Device["AMD"]
    dev.synchronize()
    results.take(dev.device)
    return dev
