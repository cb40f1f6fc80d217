"""CPU:LLVM: core's LLVM IR renderer aimed at this host, optimized and JIT-compiled in process by llvmlite.

The target is the host's triple, CPU name and feature set (AVX2/AVX-512/FMA when present), and every
function prefers the full vector width of its ISA, so LLVM vectorizes for the machine it runs on. The ISA is
`TG_X86_ISA` as for the X86 renderer (auto: the host's widest; avx2 turns AVX-512 off in the function's target
features, so AVX2 code can be measured and tested on an AVX-512 host). Each module is optimized by the new pass manager at `OPT_LEVEL`
and loaded by MCJIT, which resolves calls LLVM emits for intrinsics (sinf, exp2f, ...) in the process;
no C compiler or linker is involved.
"""
from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tg_core.plugin_api import (
    CPUTarget,
    LLVMRenderer,
    Opt,
    UOp,
    core_axis,
    cpu_opts,
    decomp,
    pm_int_pow,
    tile_rows_for,
)
from tg_cpu_x86 import objcache
from tg_cpu_x86.caches import host_caches
from tg_cpu_x86.x86 import isa as _isa

# the new pass manager's speed level. -O2 already runs the loop and SLP vectorizers; -O3 took twice as long to
# compile the MLP forward's kernels (0.34 s against 0.15 s here) and ran them no faster
OPT_LEVEL = 2



class _LazyLLVM:
    """llvmlite.binding, imported when first used: loading LLVM costs 40 MB of resident memory and 50 ms, and a
    process whose CPU device renders with X86 only registers this renderer, never runs it."""

    def __getattr__(self, name: str) -> Any:
        import llvmlite.binding as binding
        globals()["llvm"] = binding
        return getattr(binding, name)


llvm: Any = _LazyLLVM()
_init_lock = threading.Lock()
_initialized = False


def _init_llvm() -> None:
    global _initialized
    with _init_lock:
        if not _initialized:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialized = True


@dataclass(frozen=True)
class HostTarget:
    """What LLVM is told about the machine it compiles for."""
    triple: str
    cpu: str
    features: str

    @staticmethod
    def detect() -> HostTarget:
        _init_llvm()
        return HostTarget(llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())

    @property
    def vector_isa(self) -> str:
        """The widest x86 vector ISA the host has: "avx512" (512-bit float vectors), "avx2" or "sse"."""
        flags = set(self.features.split(","))
        if "+avx512f" in flags:
            return "avx512"
        return "avx2" if "+avx2" in flags else "sse"

    @property
    def vector_bytes(self) -> int:
        """The width of the host's widest float vector register."""
        return {"avx512": 64, "avx2": 32}.get(self.vector_isa, 16)

    @property
    def x86(self) -> bool:
        return self.triple.split("-")[0] in ("x86_64", "amd64", "i386", "i686")

    def for_isa(self, isa: str) -> HostTarget:
        """This target limited to vector ISA `isa` ("avx2" or "avx512"): avx2 turns every AVX-512 (and AVX10,
        which implies it) feature off, so LLVM emits no EVEX code and no zmm register. An ISA the host lacks is an
        isa.UnsupportedISAError: LLVM would emit instructions this CPU faults on."""
        if isa not in _isa.ISAS:
            raise ValueError(f"vector ISA {isa!r} is not one of {', '.join(_isa.ISAS)}")
        if self.vector_isa == "sse" or isa == "avx512" and self.vector_isa != "avx512":
            raise _isa.UnsupportedISAError(
                f"CPU:LLVM's vector ISA {isa} ({_isa.ENV}) needs CPU features this host lacks (it has "
                f"{self.vector_isa}); use {_isa.ENV}=auto")
        if isa == "avx512":
            return self
        flags = [f"-{f[1:]}" if f.startswith("+") and f[1:].startswith(_NOT_AVX2) else f
                 for f in self.features.split(",")]
        return HostTarget(self.triple, self.cpu, ",".join(flags))

    def target_machine(self) -> Any:
        # a fresh one per engine: an MCJIT engine takes ownership of its target machine
        return llvm.Target.from_triple(self.triple).create_target_machine(cpu=self.cpu, features=self.features,
                                                                          opt=3, codemodel="jitdefault")


# the feature-name prefixes AVX2 code must not use (AMX's avx512 flavour starts "amx-" and needs avx512f)
_NOT_AVX2 = ("avx512", "avx10", "evex512", "amx-avx512")


def host() -> HostTarget:
    """The host's target (`HOST`), detected by LLVM when first asked for."""
    target = globals().get("HOST")
    if target is None:
        target = globals()["HOST"] = HostTarget.detect()
    return target


def __getattr__(name: str) -> Any:  # `HOST` is detected on first access: importing this module loads no LLVM
    if name == "HOST":
        return host()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def isa_target(isa: str | None = None) -> HostTarget:
    """The target CPU:LLVM compiles for: HOST limited to `isa` (default TG_X86_ISA; auto: HOST as it is). Off
    x86 the variable means nothing (HOST)."""
    if not host().x86:
        return host()
    value = (os.environ.get(_isa.ENV, "") if isa is None else isa).strip().lower() or "auto"
    if value not in _isa.CHOICES:
        source = f"{_isa.ENV}={os.environ.get(_isa.ENV)!r}" if isa is None else f"isa={isa!r}"
        raise ValueError(f"{source} is not a vector ISA of CPU:LLVM; allowed: {', '.join(_isa.CHOICES)}")
    return host() if value == "auto" else host().for_isa(value)


class _VectorISA:
    """CPULLVMRenderer.vector_isa: the instance's, or on the class the one a renderer built now would use."""

    def __get__(self, obj: CPULLVMRenderer | None, cls: type | None = None) -> str:
        return obj.target.vector_isa if obj is not None else isa_target().vector_isa


class _HostAttribute:
    """A class attribute of CPULLVMRenderer computed from the host's target when first read."""

    def __init__(self, compute: Any):
        self.compute, self.value = compute, ""

    def __get__(self, obj: object, cls: type | None = None) -> str:
        if not self.value:
            self.value = str(self.compute(host()))
        return self.value


class CPULLVMRenderer(LLVMRenderer):
    """Core's LLVM IR renderer for the host: its triple and data layout in every module; the CPU opts
    heuristic (register tiles), FMA contraction and reassociable reductions (see docs/architecture.md)."""
    name = "LLVM"
    device = "CPU"
    target_triple = _HostAttribute(lambda t: t.triple)
    data_layout = _HostAttribute(lambda t: str(t.target_machine().target_data))
    float_flags = "contract"
    reduce_flags = "reassoc"
    # exp2/log2/sin/pow as arithmetic: it vectorizes, where a libm call per element does not (softmax 4x faster);
    # integer pow as multiplies (LLVM has no intrinsic for it)
    extra_matcher = decomp + pm_int_pow
    vector_isa = _VectorISA()
    # variables' bounds on their parameters: a core's share of a split kernel (core_id in [0, cores)) offsets a
    # column-split tile's lanes, which the SLP vectorizer only packs when it knows the offset cannot wrap
    variable_ranges = True

    def __init__(self, isa: str | None = None):
        self.target = isa_target(isa)
        # LLVM's tuning for AVX-512 Xeons (prefer-256-bit) keeps its vectorizers at ymm width unless the function
        # asks for more: without this attribute no kernel used a zmm register on a Sapphire/Emerald Rapids host.
        # The CPU and features ride on the function, so the device's one compiler (a host target machine)
        # compiles each kernel for the ISA it was rendered for, and equal IR is equal code
        self.function_attributes = (f'nounwind "prefer-vector-width"="{self.target.vector_bytes * 8}" '
                                    f'"target-cpu"="{self.target.cpu}" "target-features"="{self.target.features}"')

    def _cpu_target(self) -> CPUTarget:
        width, caches = self.target.vector_bytes, host_caches()
        return CPUTarget(vector_bytes=width, tile_rows=tile_rows_for(width), l2_bytes=caches.l2, l1_bytes=caches.l1,
                         l1_ways=caches.l1_ways, blocks_first=False)

    def opts_for(self, ast: UOp) -> list[Opt]:
        """The heuristic's opts at the host's vector width, with the register tile X86 uses at that width, K
        blocks (a deep K) sized from the host's L2 and tile rows limited by its L1's sets."""
        return cpu_opts(ast, self._cpu_target())

    def core_axis(self, ast: UOp, cores: int) -> UOp | None:
        """As X86's: a packed matmul is split across cores by its columns when every core gets whole panels, so
        each packs only its own panels of B (heuristic.core_axis). Measured (2 cores, 256x1024 @ 1024x1024, both
        cores' CPU time): 5.55-5.62 ms by rows, 5.19-5.21 by columns, which without `variable_ranges` took 106 ms
        (the SLP vectorizer left the tile's lanes scalar)."""
        return core_axis(ast, self._cpu_target(), cores)


class LLVMKernel:
    """A loaded kernel: its machine-code address, valid while this object (which owns the engine) lives."""
    __slots__ = ("address", "_engine", "name")

    def __init__(self, address: int, engine: Any, name: str):
        self.address, self._engine, self.name = address, engine, name


class LLVMCompiler:
    """Optimizes LLVM IR text for the host and loads it; `assembly(src)` shows what would run."""

    def __init__(self, target: HostTarget | None = None, opt_level: int = OPT_LEVEL):
        _init_llvm()
        self.target, self.opt_level = target or host(), opt_level
        self._lock = threading.Lock()  # LLVM contexts are not safe to use from two threads at once
        self._config: str | None = None
        self._contexts = threading.local()  # load(own_context=True): each thread's LLVM context

    def optimize(self, src: str, context: Any = None) -> Any:
        """The verified module of `src` (in `context`, default LLVM's global one), optimized at `opt_level`."""
        try:
            mod = llvm.parse_assembly(src) if context is None else llvm.parse_assembly(src, context=context)
            mod.verify()
        except RuntimeError as e:
            raise RuntimeError(f"LLVM rejected the rendered kernel: {e}\n{src}") from e
        tm = self.target.target_machine()
        pto = llvm.create_pipeline_tuning_options(speed_level=self.opt_level)
        pto.slp_vectorization = True  # off by default in llvmlite; it packs register tiles' lanes into vectors
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        return mod

    def load(self, src: str, function: str, cache: bool = False, own_context: bool = False) -> LLVMKernel:
        """Compile `src` and return the kernel named `function` in it. With `cache` and `TG_LLVM_CACHE` set, the
        object code comes from that directory when an earlier process stored it (objcache.py), and is stored
        there otherwise. With `own_context` the module lives in an LLVM context of the calling thread's, so
        threads compile at once (LLVM's threading rule: one context per thread); otherwise in the global
        context, one load at a time."""
        directory = objcache.cache_dir() if cache else None
        key = objcache.entry_key(src, self._cache_config()) if directory is not None else ""
        context = None
        if own_context:
            context = getattr(self._contexts, "context", None)
            if context is None:
                context = self._contexts.context = llvm.create_context()
        with self._lock if context is None else contextlib.nullcontext():
            obj = objcache.read(directory, key) if directory is not None else None
            if obj is not None:
                # MCJIT asks the object cache for each module it compiles: an empty module's request gets the
                # stored object, whose symbols the engine then resolves (nothing is optimized or compiled)
                stub = f'target triple = "{self.target.triple}"\n'
                mod = llvm.parse_assembly(stub) if context is None else llvm.parse_assembly(stub, context=context)
            else:
                mod = self.optimize(src, context)
            engine = llvm.create_mcjit_compiler(mod, self.target.target_machine())
            if directory is not None:
                def stored(_module: Any) -> bytes | None:
                    return obj

                def compiled(_module: Any, data: bytes) -> None:
                    if obj is None:
                        objcache.write(directory, key, data)
                engine.set_object_cache(compiled, stored)
            engine.finalize_object()
            address = engine.get_function_address(function)
        if not address:
            raise RuntimeError(f"the compiled module has no function {function!r}")
        return LLVMKernel(address, engine, function)

    def _cache_config(self) -> str:
        """What the object code depends on besides the IR (objcache.entry_key): versions, target, pipeline."""
        if self._config is None:
            import hashlib  # here: it loads OpenSSL (~3.5 MB resident), and the X86 path imports this module too

            import llvmlite
            # this file's own text stands for how it compiles (the pass pipeline, the target machine's options):
            # editing it makes every key new
            code = hashlib.sha256(Path(__file__).read_bytes() + Path(objcache.__file__).read_bytes()).hexdigest()
            self._config = (f"llvmlite {llvmlite.__version__} llvm {'.'.join(map(str, llvm.llvm_version_info))} "
                            f"{self.target.triple} {self.target.cpu} {self.target.features} O{self.opt_level} {code}")
        return self._config

    def assembly(self, src: str) -> str:
        """The host assembly LLVM generates for `src` (for reading and benchmarks)."""
        with self._lock:
            return self.target.target_machine().emit_assembly(self.optimize(src))
