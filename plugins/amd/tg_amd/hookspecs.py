"""tg-amd's own hook spec, added to tg's plugin manager through core's `tg_addhooks`.

A plugin that provides an AMD GPU interface (tg-mockgpu's emulator; later the KFD driver interface) declares
`EXTENDS = ["AMD"]` in its manifest, so it is loaded when the AMD device is opened, and implements
`amd_interfaces` in its hooks module with `tg_core.plugin_api.hookimpl`. tg-amd collects the results with
`tg_core.plugin_api.collect_named` (tg_amd/select.py).
"""
# a spec's body is never run (pluggy calls the plugins' implementations): the docstring is the whole body
# mypy: disable-error-code="empty-body"
from __future__ import annotations

from typing import TYPE_CHECKING

from tg_core.plugin_api import hookspec

if TYPE_CHECKING:
    from tg_amd.interface import AMDInterface


@hookspec
def amd_interfaces() -> list[type[AMDInterface]]:
    """The AMD GPU interfaces this plugin offers.

    Called whenever the AMD device lists or opens interfaces (the `devices.AMD.interface` option's choices,
    opening the device).

    :returns: classes implementing `tg_amd.interface.AMDInterface`, each with str class attributes `name`
        ("mock", "kfd") and `description`, a classmethod `available()` returning None or why it cannot be
        opened here, and a no-argument constructor.

    Combination: concatenated in plugin order, the first class of each name kept; `devices.AMD.interface`
    picks one by name ("auto": "kfd" where /dev/kfd exists, else "mock").
    """


@hookspec
def amd_kfd_os() -> list[type]:
    """Mock KFD drivers: OS layers (tg_amd/kfd/oslayer.py `OSLayer`) answering /dev/kfd, the render nodes and the
    KFD sysfs topology for emulated GPUs, used by the KFD interface where no /dev/kfd exists.

    :returns: classes with a str class attribute `name` and a constructor taking keyword arguments `gpus` and
        `xccs` (the `devices.AMD.mock_gpus` and `mock_xccs` options).

    Combination: concatenated in plugin order, the first class of each name kept; the first one offered is used.
    """
