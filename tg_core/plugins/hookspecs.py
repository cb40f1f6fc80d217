"""The core hook specifications of the pluggy project "tg".

A plugin implements some of these in its hooks module (named by `HOOKS` in its manifest) with the
`tg_core.plugins.hookimpl` marker. Core calls each implementation itself, one plugin at a time, in
*plugin order*, so every result stays attributed to its plugin (errors name it) and the order is
configurable:

    plugin order for a device = the plugins named in the config's `plugins.order`, in that order; then the
    plugin that provides the device; then every other loaded plugin by name.

`device` arguments are canonical device names such as "AMD", "AMD:1" or "CPU:LLVM" (a device string's
renderer is part of the device; index 0 is written without its index); `device.split(":")[0]` is the
device type.
Implementations may leave out arguments they don't use (pluggy passes only the ones they name).
Wrappers (`hookimpl(wrapper=True)`) are not supported on these hooks: results combine as described on
each hook instead.
"""
from __future__ import annotations

from typing import Any

import pluggy

PROJECT = "tg"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec(historic=True)
def tg_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    """Called once when the plugin is registered (phase two), to add the plugin's own hook specs with
    `pluginmanager.add_hookspecs(module)`, for plugins that depend on it (tg-amd's `amd_interfaces`,
    filled by tg-mockgpu). Returns nothing."""


@hookspec
def tg_devices() -> list[Any]:
    """Called once right after the plugin is imported. Returns the `DeviceSpec`s of the devices this plugin
    provides; their names must be exactly the `DEVICES` of the plugin's manifest (the manifest is what
    discovery read before importing). Combination: a device name provided by two plugins is a clash, an
    error when the device is used unless the config's `devices.<NAME>.plugin` picks one."""


@hookspec
def tg_renderers(device: str) -> list[type]:
    """Called when `device` is opened. Returns renderer classes (each with a class attribute `name`, e.g.
    "LLVM") that can target this device, best first; any plugin may add renderers to any device.
    Combination: concatenated in plugin order, the first class of each name kept; then the config's
    `devices.<NAME>.renderers` (or the renderer part of `DEV=CPU:LLVM`) moves the named ones to the front.
    The first renderer of the result is the device's renderer."""


@hookspec
def tg_pm_encode(device: str) -> Any:
    """Called once per device when the hardware-queue machinery first encodes for it. Returns a
    `PatternMatcher` rewriting queue ops into command words, or None. Combination: matchers of all plugins
    are summed (`PatternMatcher.__add__`) in plugin order, so an earlier plugin's rule wins a tie."""


@hookspec
def tg_pm_lower(device: str) -> Any:
    """Called once per device. Returns a `PatternMatcher` turning the submit of a command buffer into the queue
    push (ring write, write pointer, doorbell), or None. Combination: summed in plugin order."""


@hookspec
def tg_pm_bufferize(device: str) -> Any:
    """Called once per device. Returns a `PatternMatcher` turning tagged placeholders (program, scratch, signals,
    profiler buffers) into device buffers, or None. Combination: summed in plugin order."""


@hookspec
def tg_pm_batch(device: str) -> Any:
    """Called once per device. Returns a `PatternMatcher` applied to a whole batch before linking, so a plugin can
    add its own work to a batch, or None. Combination: summed in plugin order."""


@hookspec
def tg_profilers(device: str) -> list[Any]:
    """Called when profiling starts on `device`. Returns profiler objects (with start/stop/collect) to run
    around each run on that device. Combination: concatenated in plugin order."""
