"""The profiler's environment variables, read and checked once (when the AMD device first asks for instrumenters).

    PMC=1                 count performance counters around every dispatch (PMC_COUNTERS=a,b,..., counters.py)
    SQTT=1                thread-trace every dispatch
    SQTT_BUFFER_SIZE=MiB  the trace memory of one SE over all slots (default 256: 8 MiB per slot with 32 slots)
    SQTT_ITRACE_SE_MASK   the SEs whose instructions are traced (bit per SE; default 0b11); other SEs trace waves
    SQTT_SIMD_SEL=0..3    the SIMD of WGP 0 (SA 0) whose instructions are traced
    PROF_SLOTS=n          dispatches profiled between two reads (synchronize) before older ones are overwritten
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from tg_profiler_sqtt.counters import parse_names

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def _flag(env: Mapping[str, str], key: str) -> bool:
    v = env.get(key, "").strip().lower()
    if v not in _TRUE + _FALSE:
        raise ValueError(f"{key}={env[key]!r}: allowed 1/true/yes/on or 0/false/no/off")
    return v in _TRUE


def _int(env: Mapping[str, str], key: str, default: int, lo: int, hi: int) -> int:
    text = env.get(key, "").strip()
    if not text:
        return default
    try:
        v = int(text, 0)
    except ValueError:
        raise ValueError(f"{key}={text!r} is not an integer (allowed {lo}..{hi})") from None
    if not lo <= v <= hi:
        raise ValueError(f"{key}={v} is out of range: allowed {lo}..{hi}")
    return v


@dataclass(frozen=True)
class Settings:
    pmc: bool = False
    counters: tuple[str, ...] = ()
    sqtt: bool = False
    buffer_mib: int = 256
    itrace_se_mask: int = 0b11
    simd_sel: int = 0
    slots: int = 32

    @property
    def enabled(self) -> bool:
        return self.pmc or self.sqtt

    def window(self) -> int:
        """The bytes of one SE's trace window in one slot: SQTT_BUFFER_SIZE over the slots, in whole 4 KiB pages
        (BUF0_SIZE counts pages)."""
        w = (self.buffer_mib << 20) // self.slots // 4096 * 4096
        if w < 4096:
            raise ValueError(f"SQTT_BUFFER_SIZE={self.buffer_mib} MiB over PROF_SLOTS={self.slots} slots leaves "
                             f"{(self.buffer_mib << 20) // self.slots} bytes per SE and slot; a trace window needs "
                             "at least 4096: raise SQTT_BUFFER_SIZE or lower PROF_SLOTS")
        return w

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        pmc, sqtt = _flag(env, "PMC"), _flag(env, "SQTT")
        s = Settings(pmc=pmc, counters=parse_names(env.get("PMC_COUNTERS")) if pmc else (), sqtt=sqtt,
                     buffer_mib=_int(env, "SQTT_BUFFER_SIZE", 256, 1, 1 << 16),
                     itrace_se_mask=_int(env, "SQTT_ITRACE_SE_MASK", 0b11, 0, 0xFFFFFFFF),
                     simd_sel=_int(env, "SQTT_SIMD_SEL", 0, 0, 3), slots=_int(env, "PROF_SLOTS", 32, 1, 1 << 16))
        if sqtt:
            s.window()
        return s
