"""Hook implementations of tg-mockgpu: the mock GPU as an interface of tg-amd's AMD device."""
from __future__ import annotations

from typing import Any

from tg_core.plugins import hookimpl


@hookimpl
def amd_interfaces() -> list[Any]:
    """The mock interface class; tg-amd instantiates it when no real AMD GPU is present."""
    from tg_mockgpu.interface import MockInterface
    return [MockInterface]
