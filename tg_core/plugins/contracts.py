"""What core calls on the objects plugins hand it, where no core class names that contract.

A device is a `tg_core.device.Compiled`, a renderer a `tg_core.renderer.Renderer` subclass and a matcher a
`PatternMatcher`: those are real classes, and the hook specs name them. The objects below are plugin-defined
(any class will do), so each is a `typing.Protocol` stating the few members core uses. They are checked by
type checkers (mypy sees a plugin's hookimpl against the typed spec) and, being `runtime_checkable`, by
`isinstance` where core wants a clear error for a wrong result.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tg_core.device import Buffer, Compiled
    from tg_core.tensor import Tensor


@runtime_checkable
class Named(Protocol):
    """A class offered by name through a hook (renderers, tg-amd's GPU interfaces): `collect_named` keeps the
    first class of each `name` in plugin order."""
    name: str


@runtime_checkable
class DeviceFactory(Protocol):
    """`DeviceSpec.cls`: core opens a device as `cls(device, options)`, where `device` is the canonical name
    ("AMD", "AMD:1", "CPU:LLVM") and `options` the validated values of the options the spec declares. A
    `Compiled` subclass with that constructor is one; it may raise `DeviceUnavailable` when its hardware is
    absent."""

    def __call__(self, device: str, options: Mapping[str, Any]) -> Compiled: ...


@runtime_checkable
class Runner(Protocol):
    """What a device's `get_runner(ast)` returns and the engine calls once per kernel launch: `bufs` are the
    kernel's buffers in PARAM order (PARAM i is bufs[i]), `var_vals` the values of its variables by name.
    It returns when the kernel's effects are visible to a following runner on the same device (or after
    `synchronize()` for devices that queue work). `tg_core.device.RunnerFn` is this shape as a Callable
    alias, for annotating the pipeline's stages."""

    def __call__(self, bufs: list[Buffer], var_vals: Mapping[str, int]) -> None: ...


@runtime_checkable
class Profiler(Protocol):
    """A `tg_profilers` result: started and stopped around each run on the device while profiling is on;
    `collect()` returns what it measured since the last collect (plugin-defined records, in time order)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def collect(self) -> Sequence[Any]: ...


@runtime_checkable
class NamedKernel(Protocol):
    """A `tg_kernels` result: a kernel a plugin implements for core code that asks for it by name
    (tg_core/kernels.py lists the names and their arguments). `supports(*args)` says whether it handles these
    arguments; `build(*args)` returns what core's own Tensor code would (the same shape and dtype)."""
    name: str

    def supports(self, *args: Any) -> bool: ...

    def build(self, *args: Any) -> Any: ...


@runtime_checkable
class DataParallel(Protocol):
    """A `tg_data_parallel` result: this process's place in a group of processes training one model on parts of
    each batch (tg-mpi's world). `device` is the device this process trains on; `broadcast_parameters` gives
    every process rank 0's values of `params`; `distributed(opt)` is `opt` averaging the gradients over the
    processes before each step; `mean(x)` averages a host number over them (a loss to report) and
    `all_equal(params)` tells whether every process holds bit-identical values of `params`."""
    rank: int
    size: int
    device: str

    def broadcast_parameters(self, params: Sequence[Tensor]) -> None: ...

    def distributed(self, opt: Any) -> Any: ...

    def mean(self, x: float) -> float: ...

    def all_equal(self, params: Sequence[Tensor]) -> bool: ...


__all__ = ["DataParallel", "DeviceFactory", "Named", "NamedKernel", "Profiler", "Runner"]
