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

Parameter and result types are core's real classes, imported for type checkers only (as pytest's hookspec.py
does), so importing the specs imports no codegen; results that are plugin-defined objects (profilers, device
factories) follow the Protocols of `tg_core.plugins.contracts`. Plugins import all of these names from
`tg_core.plugin_api`.
"""
# a spec's body is never run (pluggy calls the plugins' implementations): the docstring is the whole body
# mypy: disable-error-code="empty-body"
from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from tg_core.plugins.contracts import DataParallel, NamedKernel, Profiler
    from tg_core.plugins.specs import DeviceSpec
    from tg_core.renderer import Renderer
    from tg_core.uop.rewrite import PatternMatcher

PROJECT = "tg"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec(historic=True)
def tg_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    """Add the plugin's own hook specs, for plugins that other plugins extend (tg-amd's `amd_kfd_os`,
    filled by tg-mockgpu).

    Called once per plugin when it is registered (phase two); historic, so a plugin registered later still
    sees it.

    :param pluginmanager: tg's pluggy manager; call `pluginmanager.add_hookspecs(module)` with the module of
        your `hookspec`-marked functions. Collect their results with
        `tg_core.plugin_api.collect_named`, which keeps plugin order and names the plugin in errors.
    :returns: nothing.
    """


@hookspec
def tg_devices() -> list[DeviceSpec]:
    """The devices this plugin provides.

    Called once, right after the plugin's hooks module is imported (phase two).

    :returns: one `DeviceSpec` per device; the names must be exactly the `DEVICES` of the plugin's manifest
        (the manifest is what discovery read before importing). A `DeviceSpec.cls` is a
        `tg_core.plugins.contracts.DeviceFactory`, in practice a `Compiled` subclass.

    Combination: a device name provided by two plugins is a clash, an error when the device is used unless
    the config's `devices.<NAME>.plugin` picks one.
    """


@hookspec
def tg_renderers(device: str) -> list[type[Renderer]]:
    """The renderer classes that can target `device`, best first; any plugin may add renderers to any device.

    Called when `device` is opened (before its class is constructed).

    :param device: the canonical device being opened.
    :returns: `Renderer` subclasses, each with a str class attribute `name` ("LLVM", "X86"); the device
        instantiates the one it renders with.

    Combination: concatenated in plugin order, the first class of each name (case-insensitive) kept; then the
    config's `devices.<NAME>.renderers` (or the renderer part of `DEV=CPU:LLVM`) moves the named ones to the
    front. The first renderer of the result is the device's `renderer`.
    """


@hookspec
def tg_pm_encode(device: str) -> PatternMatcher | None:
    """Rules rewriting hardware-queue ops into command words.

    Called once per device when the hardware-queue machinery first encodes for it.

    :param device: the canonical device the queue belongs to.
    :returns: a `PatternMatcher`, or None to add nothing.

    Combination: the matchers of all plugins are summed (`PatternMatcher.__add__`) in plugin order, so an
    earlier plugin's rule wins a tie.
    """


@hookspec
def tg_pm_lower(device: str) -> PatternMatcher | None:
    """Rules turning the submit of a command buffer into the queue push (ring write, write pointer, doorbell).

    Called once per device.

    :param device: the canonical device the queue belongs to.
    :returns: a `PatternMatcher`, or None.

    Combination: summed in plugin order.
    """


@hookspec
def tg_pm_bufferize(device: str) -> PatternMatcher | None:
    """Rules turning tagged placeholders (program, scratch, signals, profiler buffers) into device buffers.

    Called once per device.

    :param device: the canonical device the buffers live on.
    :returns: a `PatternMatcher`, or None.

    Combination: summed in plugin order.
    """


@hookspec
def tg_pm_batch(device: str) -> PatternMatcher | None:
    """Rules applied to a whole batch of queue ops before linking, so a plugin can add its own work to a batch.

    Called once per device.

    :param device: the canonical device the batch runs on.
    :returns: a `PatternMatcher`, or None.

    Combination: summed in plugin order.
    """


@hookspec
def tg_profilers(device: str) -> list[Profiler]:
    """Profilers to run around each run on `device`.

    Called when profiling starts on `device`.

    :param device: the canonical device being profiled.
    :returns: objects following `tg_core.plugins.contracts.Profiler` (`start()`, `stop()`, `collect()`).

    Combination: concatenated in plugin order.
    """


@hookspec
def tg_kernels(device: str) -> list[NamedKernel]:
    """Named kernels this plugin implements for `device`, which core code uses instead of its own Tensor code
    (core's LLM code asks for `quant_linear`, its weight matmuls `x @ w.T`, and `flash_attention_decode`,
    attention of one query token over the KV cache).

    Called through `tg_core.kernels.kernel_for(name, device)` (once per device and registry; the result is
    remembered), by `collect_named`: each plugin's list in plugin order, the first kernel of each name kept.

    :param device: the canonical device the kernel would run on.
    :returns: objects following `tg_core.plugins.contracts.NamedKernel`: a str `name`, `supports(*args)`
        saying whether it handles these arguments (shapes, dtypes), and `build(*args)` returning the result
        tensor (typically through `Tensor.custom_kernel`). The arguments of each name are documented by the
        core code that asks for it (tg_core/kernels.py). Core uses its own Tensor code when no plugin offers
        the name or `supports` returns False.

    Combination: by name, first in plugin order.
    """


@hookspec
def tg_data_parallel() -> DataParallel | None:
    """This process's data-parallel group, for plugins that run one training over several processes (tg-mpi).

    Called by `tg demo --data-parallel` (through `PluginRegistry.data_parallel`), once per process.

    :returns: an object following `tg_core.plugins.contracts.DataParallel` (rank, size, device, gradient
        averaging), or None when the plugin has no group to offer.

    Combination: the first result that is not None, in plugin order.
    """
