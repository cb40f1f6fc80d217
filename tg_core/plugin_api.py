"""The public API for tg plugins: everything a backend may import from core, in one module.

    from tg_core.plugin_api import Compiled, DeviceSpec, LRUAllocator, LLVMRenderer, hookimpl

A plugin's own modules import core only from here (tests/test_plugin_api.py checks tg's plugins and the
templates); its tests may use anything. The names are grouped by the job they do for a backend:

- plugin machinery: `hookimpl`/`hookspec` (markers of the pluggy project "tg"), `DeviceSpec` and `Option`
  (what `tg_devices` returns), `collect_named` (results of a hook a plugin defines), the contracts of
  plugin-defined objects (`DeviceFactory`, `Runner`, `Profiler`, `Named`, `NamedKernel`: a `tg_kernels`
  result), errors (`DeviceUnavailable` for
  absent hardware, `PluginError`, `PluginBrokenError`), and `API_VERSION`;
- devices and memory: `Compiled` with the types of its pipeline's stages (`Prepared`, `PreparedKernel`,
  `RunnerFn`, `KernelSequence`), `Compiler`, `Allocator`, `LRUAllocator`, `Buffer`, `BufferSpec`,
  `host_memory`, and `Device` (the registry, for a plugin's tests and tools);
- the IR: `UOp`, `Ops`, `GroupOp`, `AxisType`, `KernelInfo`, `UPat`, `PatternMatcher`, `graph_rewrite`,
  `substitute`, `gc_paused`, `RewriteError`, dtypes, `float_to_int_range`, and `trampoline`/`Call` for
  algorithms that must not recurse on deep graphs;
- codegen: `Program` and its parameter layout (`ParamLayout`, `BufferParam`, `VarParam`, `param_index`),
  `linearize_kernel`, `ast_program`, `Opt`/`OptOps`/`apply_opts`/`kernel_ranges`, and the libraries
  only some backends use (codegen/lib: threads, gpudims, heuristic, decomp, intpow, regalloc);
- renderers: `Renderer` and `UnsupportedDTypeError`, core's LLVM IR renderer (`LLVMRenderer`, its
  extension point `LLVMFunction`, `ltype`, `render_const`), and the ISA-neutral machine layer of native
  renderers (`MInst`, `MFunction`, `PReg`/`VReg`, `ArchContext`, ...);
- command-queue devices (tg_core/hcq): `HCQCompiled` (the base that makes a device's work run as batches of
  queue ops), `hcq_ops` (the queue-op nodes and helpers the `tg_pm_*` matchers build: `words`, `addr`, `mem`,
  `doorbell`, ...), and `Struct`/`Pointer`/`Array` (C structs as patched byte buffers, for drivers);
- kernels on the reference interpreter: `InterpretedKernels` (the pipeline's stages for a device whose kernels
  the interpreter runs, as the PYTHON device and the plugin template do);
- tensors (API 1.1): `Tensor`, for plugins that work on a user's tensors rather than provide a device (tg-mpi's
  collectives across processes), and `DataParallel` (what `tg_data_parallel` returns);
- profiling (API 1.2): `profile_events` (core's trace events: `record`, `events`, `collectors`) and
  `profile_state` (`on`), for plugins that add their results to the trace (tg-profiler-sqtt's counters and waves);
- checking a device: `run_kernel` (the reference interpreter) and `DeviceConformance` (the conformance
  suite; imported on first use, since it needs pytest).

Stability: this module's names are what `API_VERSION` (tg_core.plugins.version) covers, and a plugin's
manifest `API` range is a promise against them. Within one major version a name keeps working as
documented: its signature, the meaning of each argument and result, and the hook contracts in
tg_core/plugins/hookspecs.py. A minor bump adds names, arguments with defaults, or hooks; a major bump
removes or changes one (and discovery then refuses plugins whose range excludes it, before importing them).
Everything else in tg_core is internal and may change in any release. API 1.2 is exactly the list below (1.1 without `profile_events` and `profile_state`, 1.0 also without `Tensor`
and `DataParallel`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tg_core.codegen import Opt, OptOps, Program, apply_opts, linearize_kernel
from tg_core.codegen.lib.decomp import decomp
from tg_core.codegen.lib.gpudims import LaunchDims, add_gpudims
from tg_core.codegen.lib.heuristic import CPUTarget, core_axis, cpu_opts, tile_rows_for
from tg_core.codegen.lib.intpow import pm_int_pow
from tg_core.codegen.lib.regalloc import Allocation, RegallocError, allocate
from tg_core.codegen.lib.threads import CORE_ID, MIN_WORK, core_count, partial_reduction, split_cores
from tg_core.codegen.opts import kernel_ranges
from tg_core.codegen.pipeline import ast_program
from tg_core.codegen.program import BufferParam, ParamLayout, VarParam, param_index
from tg_core.device import (
    Allocator,
    Buffer,
    BufferSpec,
    Compiled,
    Compiler,
    Device,
    KernelSequence,
    LRUAllocator,
    Prepared,
    PreparedKernel,
    RunnerFn,
    host_memory,
)
from tg_core.devices.python.device import InterpretedKernels
from tg_core.devices.python.interpreter import run_kernel
from tg_core.dtype import AddrSpace, DType, PtrDType, dtypes, from_numpy_dtype, to_numpy_dtype
from tg_core.hcq import ops as hcq_ops
from tg_core.hcq.device import HCQCompiled
from tg_core.hcq.structs import Array, Pointer, Struct
from tg_core.helpers import DEBUG, Context
from tg_core.plugins.contracts import DataParallel, DeviceFactory, Named, NamedKernel, Profiler, Runner
from tg_core.plugins.errors import DeviceUnavailable, PluginBrokenError, PluginError
from tg_core.plugins.hookspecs import hookimpl, hookspec
from tg_core.plugins.specs import DeviceSpec, Option
from tg_core.plugins.version import API_VERSION, API_VERSION_STR
from tg_core.profile import events as profile_events
from tg_core.profile import state as profile_state
from tg_core.renderer import Renderer, UnsupportedDTypeError
from tg_core.renderer.isa import (
    CJUMP,
    JUMP,
    LABEL,
    MOVE,
    NORMAL,
    RET,
    ArchContext,
    Frame,
    FrameRef,
    Imm,
    Label,
    Mem,
    MFunction,
    MInst,
    Operand,
    PReg,
    View,
    VReg,
    label,
)
from tg_core.renderer.llvmir import LLVMFunction, LLVMRenderer, ltype, render_const
from tg_core.tensor import Tensor
from tg_core.trampoline import Call, trampoline
from tg_core.uop.alu import float_to_int_range
from tg_core.uop.ops import AxisType, GroupOp, KernelInfo, Ops
from tg_core.uop.rewrite import PatternMatcher, RewriteError, gc_paused, graph_rewrite, substitute
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat

if TYPE_CHECKING:
    from tg_core.testing import DeviceConformance


def collect_named(hook: str, device: str, fold: Callable[[str], str] | None = None) -> dict[str, Any]:
    """The objects that the plugins taking part in `device` return from `hook`, by name, for hooks whose
    results are lists of named things (classes with a str attribute `name`), such as a hook your plugin adds
    with `tg_addhooks`: each plugin's list in plugin order, the first object of each name kept. `fold`
    normalizes names before comparing (`str.upper`: case-insensitive); the keys are the folded names.

    Errors name the plugin at fault: a result that is not a list, or an object without a str `name`, is a
    `PluginBrokenError`; so is a failing call by the device's own plugin, while an extending plugin that fails
    is reported once (a `PluginWarning`) and skipped. An unknown hook is a ValueError listing the hooks."""
    from tg_core.plugins.manager import get_registry
    return get_registry().collect_named(hook, device, fold)


def __getattr__(name: str) -> Any:
    # the conformance suite is a set of pytest classes: importing it needs pytest, which a backend at run time
    # does not have, so it is imported only when asked for
    if name == "DeviceConformance":
        from tg_core.testing import DeviceConformance
        return DeviceConformance
    raise AttributeError(f"module 'tg_core.plugin_api' has no attribute {name!r}; the plugin API is: "
                         f"{', '.join(__all__)}")


__all__ = [
    # plugin machinery
    "API_VERSION", "API_VERSION_STR", "DeviceFactory", "DeviceSpec", "DeviceUnavailable", "Named", "Option",
    "NamedKernel", "PluginBrokenError", "PluginError", "Profiler", "Runner", "collect_named", "hookimpl", "hookspec",
    # tensors, for plugins that work on a user's tensors rather than provide a device (tg-mpi's collectives)
    "DataParallel", "Tensor",
    # profiling (API 1.2): the trace's event list and recorder, and whether PROFILE is on, for profiler plugins
    "profile_events", "profile_state",
    # devices, memory, and the stages of the pipeline from kernel AST to runner
    "Allocator", "Buffer", "BufferSpec", "Compiled", "Compiler", "Device", "InterpretedKernels", "KernelSequence",
    "LRUAllocator", "Prepared", "PreparedKernel", "RunnerFn", "host_memory",
    # the IR
    "AddrSpace", "AxisType", "Call", "DType", "GroupOp", "KernelInfo", "Ops", "PatternMatcher", "PtrDType",
    "RewriteError", "UOp", "UPat", "dtypes", "float_to_int_range", "from_numpy_dtype", "gc_paused", "graph_rewrite",
    "substitute", "to_numpy_dtype", "trampoline", "DEBUG", "Context",
    # codegen and its libraries
    "Allocation", "BufferParam", "CORE_ID", "CPUTarget", "LaunchDims", "MIN_WORK", "Opt", "OptOps", "ParamLayout",
    "Program", "RegallocError", "VarParam", "add_gpudims", "ast_program", "param_index", "allocate", "apply_opts", "core_axis", "core_count", "cpu_opts", "decomp", "kernel_ranges", "linearize_kernel",
    "partial_reduction", "pm_int_pow", "split_cores", "tile_rows_for",
    # renderers
    "ArchContext", "CJUMP", "Frame", "FrameRef", "Imm", "JUMP", "LABEL", "LLVMFunction", "LLVMRenderer", "Label",
    "MFunction", "MInst", "MOVE", "Mem", "NORMAL", "Operand", "PReg", "RET", "Renderer", "UnsupportedDTypeError",
    "VReg", "View", "label", "ltype", "render_const",
    # command-queue devices
    "Array", "HCQCompiled", "Pointer", "Struct", "hcq_ops",
    # checking a device
    "DeviceConformance", "run_kernel",
]
