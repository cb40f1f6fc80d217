"""tg-amd's own hook spec, added to tg's plugin manager through core's `tg_addhooks`.

A plugin that provides an AMD GPU interface (tg-mockgpu's emulator; later the KFD driver interface) declares
`EXTENDS = ["AMD"]` in its manifest, so it is loaded when the AMD device is opened, and implements
`amd_interfaces` in its hooks module with `tg_core.plugins.hookimpl`.
"""
from __future__ import annotations

from tg_core.plugins.hookspecs import hookspec


@hookspec
def amd_interfaces() -> list[type]:
    """Returns interface classes implementing `tg_amd.interface.AMDInterface` (each with class attributes `name`
    and `description`, a classmethod `available()` and a no-argument constructor). Combination: concatenated in
    plugin order, the first class of each name kept; `devices.AMD.interface` picks one by name."""
