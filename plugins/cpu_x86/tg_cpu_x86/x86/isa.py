"""Which vector ISA the X86 renderer emits: `TG_X86_ISA` (auto, avx2, avx512) against what the host CPU has.

auto (the default) takes AVX-512 where the host has every feature the renderer's EVEX code uses, else AVX2.
The host's features come from LLVM's host detection (CPUID, and XGETBV for whether the OS saves the zmm
and opmask state), read when first needed, never assumed. A renderer for an ISA the host lacks may still be
built to emit code only (tests on AVX2 hosts check the AVX-512 encodings that way); running its code here
would fault with SIGILL, so building one to run raises UnsupportedISAError instead.
"""
from __future__ import annotations

import functools
import os

ENV = "TG_X86_ISA"
ISAS = ("avx2", "avx512")
CHOICES = ("auto", *ISAS)
# what each ISA's code uses: AVX2 code has FMA and F16C too (float16 loads and stores); the EVEX code uses
# AVX-512 F (zmm, opmasks), VL (EVEX xmm/ymm forms), DQ (vxorps/vandps on zmm, vextractf32x8) and BW
# (16-bit opmask moves are F, but byte/word lanes are BW): the set every AVX-512 CPU since Skylake-SP has
REQUIRED: dict[str, tuple[str, ...]] = {
    "avx2": ("avx2", "fma", "f16c"),
    "avx512": ("avx2", "fma", "f16c", "avx512f", "avx512vl", "avx512dq", "avx512bw"),
}
VECTOR_BYTES = {"avx2": 32, "avx512": 64}


class UnsupportedISAError(RuntimeError):
    """The X86 renderer was asked for vector instructions this host's CPU cannot run."""


@functools.cache
def host_features() -> frozenset[str]:
    """The CPU features of this host that are usable (avx2, avx512f, ...): Linux's /proc/cpuinfo flags, which
    the kernel lists only when it also saves their register state (it clears the AVX-512 flags otherwise),
    else LLVM's host detection. Not LLVM first: loading it costs 40 MB of resident memory and 50 ms, which a
    process rendering with X86 alone never needs."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    import llvmlite.binding as llvm
    return frozenset(name for name, on in llvm.get_host_cpu_features().items() if on)


def missing(isa: str, features: frozenset[str] | None = None) -> tuple[str, ...]:
    """The features `isa` needs that the host (or `features`) lacks."""
    have = host_features() if features is None else features
    return tuple(f for f in REQUIRED[isa] if f not in have)


def resolve(isa: str | None = None, features: frozenset[str] | None = None) -> str:
    """"avx2" or "avx512": `isa` (default: the TG_X86_ISA variable, else auto), auto meaning the widest the host
    runs. A name not in CHOICES is a ValueError naming where it came from and what is allowed."""
    source = f"{ENV}={os.environ.get(ENV)!r}" if isa is None else f"isa={isa!r}"
    value = (os.environ.get(ENV, "") if isa is None else isa).strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"{source} is not a vector ISA of the X86 renderer; allowed: {', '.join(CHOICES)}")
    if value == "auto":
        return "avx512" if not missing("avx512", features) else "avx2"
    return value


def check_runnable(isa: str, features: frozenset[str] | None = None) -> None:
    """Raise UnsupportedISAError naming what the host lacks when it cannot run `isa` code."""
    lacking = missing(isa, features)
    if lacking:
        best = resolve("auto", features)
        raise UnsupportedISAError(
            f"the X86 renderer's vector ISA {isa} ({ENV}) needs CPU features this host lacks: {', '.join(lacking)}; "
            f"use {ENV}=auto (here: {best}) or {ENV}={best}, or build X86Renderer(isa={isa!r}, emit_only=True) "
            f"to emit code without running it")
