"""tg-amd's own hook specs, added to tg's plugin manager through core's `tg_addhooks`.

A plugin that provides a mock KFD driver (tg-mockgpu) declares `EXTENDS = ["AMD"]` in its manifest, so it is
loaded when the AMD device is opened, and implements `amd_kfd_os` in its hooks module with
`tg_core.plugin_api.hookimpl`; tg-amd collects the results with `tg_core.plugin_api.collect_named`
(tg_amd/kfd/select.py).
"""
# a spec's body is never run (pluggy calls the plugins' implementations): the docstring is the whole body
# mypy: disable-error-code="empty-body"
from __future__ import annotations

from tg_core.plugin_api import hookspec


@hookspec
def amd_kfd_os() -> list[type]:
    """Mock KFD drivers: OS layers (tg_amd/kfd/oslayer.py `OSLayer`) answering /dev/kfd, the render nodes and the
    KFD sysfs topology for emulated GPUs, used by the KFD interface where no /dev/kfd exists.

    :returns: classes with a str class attribute `name` and a constructor taking keyword arguments `gpus` and
        `xccs` (the `devices.AMD.mock_gpus` and `mock_xccs` options).

    Combination: concatenated in plugin order, the first class of each name kept; the first one offered is used.
    """


@hookspec
def amd_dispatch_instrumenters(device: str) -> list:
    """Instrumenters of the AMD compute queue (a profiler's PMC and SQTT programming around each dispatch), from
    plugins that EXTEND AMD (tg-profiler-sqtt). tg-amd asks each one, for every compute submit with kernels it
    encodes, for a `SubmitInstrumentation` and places its words before, right after and after each dispatch and
    its host statements at submit; after `synchronize` found the queues idle it calls `synchronized(device)`.
    The contract (DispatchSite, SubmitInstrumentation, Instrumenter) is tg_amd/queues/instrument.py.

    :param device: the canonical AMD device being encoded for.
    :returns: objects with a str attribute `name`, `submit(device, queue, batch) -> SubmitInstrumentation | None`
        and `synchronized(device) -> None`.

    Combination: concatenated in plugin order, the first object of each name kept; every one is applied.
    """
