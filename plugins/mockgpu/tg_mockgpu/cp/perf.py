"""The GPU's performance monitor as the mock's command processors program it: GRBM_GFX_INDEX, the PMC counter
blocks (SQ, GRBM, GL2C) and the SQ thread trace of each shader engine (amd.md 9, 10).

One `PerfUnit` per XCC, held by the GPU's EmulatorLauncher (`perf_of`) and shared by every queue of the GPU:
SET_UCONFIG_REG and COPY_DATA (to a register) write its registers, COPY_DATA (SRC_SEL 0 or 4) and register
WAIT_REG_MEM read them, EVENT_WRITE passes it the thread-trace events, and the launcher reports each dispatch's
work (work.py) to XCC 0's (the mock runs every dispatch there: the other XCCs count nothing).

Registers (absolute dword addresses):
- GRBM_GFX_INDEX 0xC200 (reset 0xE0000000, broadcast): instance [7:0], sa [15:8], se [23:16], broadcast bits
  29/30/31. Per-SE registers (the SQ_THREAD_TRACE_* group) are written on the selected SE or, with se_broadcast,
  on all; a broadcast read reads SE 0 (index 0 of any broadcast field).
- CP_PERFMON_CNTL 0xD808: perfmon_state [3:0] (0 disable and reset the counters, 1 count, 2 stop: hold them),
  perfmon_sample_enable bit 10 (latch every counter into what its LO/HI registers read).
- SQ counter n (0..7): SELECT 0xD9C0 + 2n (perf_sel [8:0]), LO 0xD1C0 + 2n, one per WGP: GRBM se, sa and
  instance = wgp << 2 (sub-instances 1..3 read 0); no HI register (gfx11). They count dispatches whose
  COMPUTE_PERFCOUNT_ENABLE (SH 0x2E0B) bit 0 is set while SQ_PERFCOUNTER_CTRL (0xD9E0) cs_en (bit 6) is set.
- GRBM counters 0 and 1: SELECT 0xD840 / 0xD841 (perf_sel [5:0]), LO/HI 0xD040/0xD041 and 0xD043/0xD044 (the
  gfx11 register header's layout; amd.md 10 lists counter 0), one instance.
- GL2C counter n (0..3): SELECT 0xDB80, 0xDB82, 0xDB84, 0xDB85 (0 and 1 have a SELECT1 after them), LO/HI
  0xD380 + 2n / + 1, instances 0..31.
- SQ_THREAD_TRACE (per SE): BUF0_BASE 0xD9E8 (address >> 12), BUF0_SIZE 0xD9E9 (base_hi [3:0] = address >> 44,
  size [29:8] in 4 KiB), CTRL 0xD9EC (mode [1:0]: 1 traces, 0 stops), MASK 0xD9ED (simd_sel [1:0], wgp_sel
  [7:4], sa_sel 9, wtype_include [16:10]: bit 16 = compute waves), TOKEN_MASK 0xD9EE (token_exclude [10:0],
  reg_include [23:16]), WPTR 0xD9EF, STATUS 0xD9F4 (finish_pending [11:0] = 0, finish_done bit 12, busy bit
  25), DROPPED_CNTR 0xD9FA; SQ_THREAD_TRACE_USERDATA_0..7 0xC340.., SPI_CONFIG_CNTL 0xC440 (kept, not read:
  the mock always has the wave events).

Counters the mock models (perf_sel; executed instructions of the waves on that WGP, classes as work.py sorts
them): SQ 3 SQ_BUSY_CYCLES (cycles the WGP is busy), 4 SQ_WAVES (waves started), 57 SQ_INSTS_LDS and 72
SQ_INSTS_WAVE32_LDS (DS), 58 SQ_INSTS_SALU (SOP1/2/C/K), 59 SQ_INSTS_SMEM, 62 SQ_INSTS_VALU and 73
SQ_INSTS_WAVE32_VALU (every VALU encoding, VOPD as one), 66 SQ_INSTS_TEX_LOAD / 67 SQ_INSTS_TEX_STORE (vector
memory: GLOBAL, SCRATCH, FLAT, buffer; atomics count as stores), 70 SQ_INSTS_WAVE32 (every instruction but
s_delay_alu: all waves are wave32), 261 SQC_LDS_IDX_ACTIVE (DS instructions executed); GRBM 2 GRBM_GUI_ACTIVE
(cycles the GPU is busy: each dispatch's DISPATCH_LATENCY + span) and 0 GRBM_COUNT (the same: the mock's clock
runs only during dispatches). Every other selection counts nothing and reads 0: among them
SQC_LDS_BANK_CONFLICT (256; the emulator has no LDS bank model), GL2C_HIT / GL2C_MISS (42/43; no cache model),
waits and stalls (no memory latency model), and all other SQ, GRBM and GL2C events.

Thread trace: CTRL mode 1 starts an SE's trace (a LAYOUT_HEADER) in the window BUF0_BASE/BUF0_SIZE name;
dispatches with COMPUTE_THREAD_TRACE_ENABLE (SH 0x2E1E) bit 0 add their waves' packets (sqtt_enc.py);
USERDATA writes and THREAD_TRACE_MARKER / _FINISH events add REG packets; whole 32-byte units go to memory as
they fill, and FINISH (or mode 0) pads the last one. WPTR = (window address / 32 + units written) & 0x1FFFFFFF
(gfx11.0 counts from address 0, not from the window). A window holds at most size / 32 - 1 units (the pointer
stops at the last unit, as the hardware's does): what does not fit is dropped, counted in 32-byte units in
DROPPED_CNTR, and the reader sees bytes = window - 32, its sign of a full buffer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tg_mockgpu.cp import sqtt_enc as enc
from tg_mockgpu.cp.memory import Memory, write
from tg_mockgpu.cp.work import CLASSES, LDS_CLASSES, SALU_CLASSES, SAS, SES, VALU_CLASSES, WGPS, DispatchWork

GRBM_GFX_INDEX, GRBM_BROADCAST = 0xC200, 0xE0000000
SE_BROADCAST, SA_BROADCAST, INSTANCE_BROADCAST = 1 << 31, 1 << 29, 1 << 30
USERDATA = range(0xC340, 0xC348)
SPI_CONFIG_CNTL = 0xC440
CP_PERFMON_CNTL, SAMPLE_ENABLE = 0xD808, 1 << 10
STATE_RESET, STATE_COUNT = 0, 1
SQ_COUNTERS, GRBM_COUNTERS, GL2C_COUNTERS, GL2C_INSTANCES = 8, 2, 4, 32
SQ_SELECT, SQ_LO = 0xD9C0, 0xD1C0
GRBM_SELECT, GRBM_LO, GRBM_HI = (0xD840, 0xD841), (0xD040, 0xD043), (0xD041, 0xD044)
GL2C_SELECT, GL2C_LO = (0xDB80, 0xDB82, 0xDB84, 0xDB85), 0xD380
SQ_PERFCOUNTER_CTRL, SQ_PERFCOUNTER_CTRL2, CS_EN = 0xD9E0, 0xD9E2, 1 << 6
TT_BUF0_BASE, TT_BUF0_SIZE, TT_CTRL, TT_MASK, TT_TOKEN_MASK, TT_WPTR = 0xD9E8, 0xD9E9, 0xD9EC, 0xD9ED, 0xD9EE, 0xD9EF
TT_STATUS, TT_STATUS2, TT_DROPPED = 0xD9F4, 0xD9F5, 0xD9FA
PER_SE = frozenset({TT_BUF0_BASE, TT_BUF0_SIZE, TT_CTRL, TT_MASK, TT_TOKEN_MASK, TT_WPTR, TT_STATUS, TT_STATUS2,
                    TT_DROPPED})
FINISH_DONE, BUSY = 1 << 12, 1 << 25
WPTR_MASK = 0x1FFFFFFF
CS_WAVES = 1 << 16                       # MASK.wtype_include: compute shaders
PERFCOUNT_ENABLE, THREAD_TRACE_ENABLE = 0x2E0B, 0x2E1E   # SH registers of a dispatch
THREAD_TRACE_MARKER, THREAD_TRACE_FINISH = 0x35, 0x37
DISPATCH_LATENCY = 16                    # cycles from DISPATCH_DIRECT to the first wave (the model's)
# perf_sel values (amd.md 9's gfx11 list; SQ_WAVES 4 is gfx10's, which gfx11 keeps for its low selections)
SQ_BUSY_CYCLES, SQ_WAVES, SQ_INSTS_SALU, SQ_INSTS_VALU, SQC_LDS_IDX_ACTIVE = 3, 4, 58, 62, 261
SQ_INSTS_LDS, SQ_INSTS_SMEM, SQ_INSTS_TEX_LOAD, SQ_INSTS_TEX_STORE = 57, 59, 66, 67
SQ_INSTS_WAVE32, SQ_INSTS_WAVE32_LDS, SQ_INSTS_WAVE32_VALU = 70, 72, 73
GRBM_COUNT, GRBM_GUI_ACTIVE = 0, 2
ALL_ISSUED = frozenset(CLASSES) - {"NONE"}
# perf_sel -> the instruction classes it counts
SQ_INSTRUCTIONS = {SQ_INSTS_VALU: VALU_CLASSES, SQ_INSTS_WAVE32_VALU: VALU_CLASSES, SQ_INSTS_SALU: SALU_CLASSES,
                   SQ_INSTS_LDS: LDS_CLASSES, SQ_INSTS_WAVE32_LDS: LDS_CLASSES, SQC_LDS_IDX_ACTIVE: LDS_CLASSES,
                   SQ_INSTS_SMEM: frozenset({"SMEM"}), SQ_INSTS_TEX_LOAD: frozenset({"VMEM_RD", "FLAT_RD"}),
                   SQ_INSTS_TEX_STORE: frozenset({"VMEM_WR", "FLAT_WR"}), SQ_INSTS_WAVE32: ALL_ISSUED}

OWNED = frozenset({GRBM_GFX_INDEX, *USERDATA, SPI_CONFIG_CNTL, CP_PERFMON_CNTL, SQ_PERFCOUNTER_CTRL,
                   SQ_PERFCOUNTER_CTRL2, *PER_SE, *GRBM_SELECT, *GRBM_LO, *GRBM_HI,
                   *(SQ_SELECT + 2 * n for n in range(SQ_COUNTERS)), *(SQ_LO + 2 * n for n in range(SQ_COUNTERS)),
                   *GL2C_SELECT,
                   *(GL2C_LO + 2 * n + h for n in range(GL2C_COUNTERS) for h in (0, 1))})


@dataclass
class SETrace:
    """One SE's trace: its window, the stream and how much of it reached memory."""
    base: int
    size: int
    stream: enc.Stream
    written: int = 0          # 32-byte units in memory
    dropped: int = 0          # units that did not fit

    @property
    def capacity(self) -> int:
        return max(0, self.size // 32 - 1)


@dataclass
class PerfUnit:
    """The performance-monitor state of one GPU (module doc). `mem` is where trace windows are written."""
    mem: Memory
    regs: dict[int, int] = field(default_factory=dict)
    se_regs: list[dict[int, int]] = field(default_factory=lambda: [{} for _ in range(SES)])
    sq: np.ndarray = field(default_factory=lambda: np.zeros((SQ_COUNTERS, SES, SAS, WGPS), np.uint64))
    grbm: list[int] = field(default_factory=lambda: [0] * GRBM_COUNTERS)
    sampled_sq: np.ndarray = field(default_factory=lambda: np.zeros((SQ_COUNTERS, SES, SAS, WGPS), np.uint64))
    sampled_grbm: list[int] = field(default_factory=lambda: [0] * GRBM_COUNTERS)
    traces: dict[int, SETrace] = field(default_factory=dict)   # running SE traces
    clock: int = 0                                             # GPU cycles so far (the model's)
    waves: int = 0                                             # waves dispatched while tracing (wave ids)

    def __post_init__(self) -> None:
        self.regs[GRBM_GFX_INDEX] = GRBM_BROADCAST

    @staticmethod
    def owns(reg: int) -> bool:
        return reg in OWNED

    # ---- GRBM_GFX_INDEX ------------------------------------------------------------------------------------

    def _index(self) -> tuple[int, int, int, int]:
        """(se, sa, instance, GRBM_GFX_INDEX) a read addresses: broadcast fields read index 0."""
        g = self.regs[GRBM_GFX_INDEX]
        se = 0 if g & SE_BROADCAST else g >> 16 & 0xFF
        sa = 0 if g & SA_BROADCAST else g >> 8 & 0xFF
        inst = 0 if g & INSTANCE_BROADCAST else g & 0xFF
        return se, sa, inst, g

    def _ses(self) -> range:
        """The SEs a per-SE write goes to."""
        g = self.regs[GRBM_GFX_INDEX]
        if g & SE_BROADCAST:
            return range(SES)
        se = g >> 16 & 0xFF
        if se >= SES:
            raise ValueError(f"GRBM_GFX_INDEX {g:#x} selects SE {se}; the GPU has SEs 0..{SES - 1}")
        return range(se, se + 1)

    # ---- register access -----------------------------------------------------------------------------------

    def write(self, reg: int, value: int) -> None:
        value &= 0xFFFFFFFF
        if reg in PER_SE:
            for se in self._ses():
                self.se_regs[se][reg] = value
                if reg == TT_CTRL:
                    self._control(se, value & 3)
            return
        self.regs[reg] = value
        if reg == CP_PERFMON_CNTL:
            if value & 0xF == STATE_RESET:
                self.sq[:] = 0
                self.grbm = [0] * GRBM_COUNTERS
            if value & SAMPLE_ENABLE:
                self.sampled_sq[:] = self.sq
                self.sampled_grbm = list(self.grbm)
        elif reg in USERDATA:
            self._record_reg(reg, value)

    def read(self, reg: int) -> int:
        se, sa, inst, g = self._index()
        if reg in PER_SE:
            if se >= SES:
                raise ValueError(f"GRBM_GFX_INDEX {g:#x} selects SE {se}; the GPU has SEs 0..{SES - 1}")
            return self.se_regs[se].get(reg, 0)
        if SQ_LO <= reg < SQ_LO + 2 * SQ_COUNTERS and not (reg - SQ_LO) & 1:
            wgp, sub = inst >> 2, inst & 3
            if se >= SES or sa >= SAS or wgp >= WGPS or sub:
                return 0
            return int(self.sampled_sq[(reg - SQ_LO) // 2, se, sa, wgp]) & 0xFFFFFFFF
        if reg in GRBM_LO:
            return self.sampled_grbm[GRBM_LO.index(reg)] & 0xFFFFFFFF
        if reg in GRBM_HI:
            return self.sampled_grbm[GRBM_HI.index(reg)] >> 32 & 0xFFFFFFFF
        if GL2C_LO <= reg < GL2C_LO + 2 * GL2C_COUNTERS:
            return 0   # no cache model: every GL2C event reads 0
        return self.regs.get(reg, 0)

    # ---- the thread trace ----------------------------------------------------------------------------------

    def _control(self, se: int, mode: int) -> None:
        r = self.se_regs[se]
        if mode and se not in self.traces:
            size_reg = r.get(TT_BUF0_SIZE, 0)
            base = (size_reg & 0xF) << 44 | r.get(TT_BUF0_BASE, 0) << 12
            size = ((size_reg >> 8) & 0x3FFFFF) << 12
            s = enc.Stream(self.clock)
            name, fields = enc.header(r.get(TT_MASK, 0) & 3)
            s.put(name, self.clock, **fields)
            self.traces[se] = SETrace(base, size, s)
            r[TT_STATUS] = BUSY
            r[TT_DROPPED] = 0
            self._commit(se)
        elif not mode and se in self.traces:
            self._finish(se)
            del self.traces[se]
            r[TT_STATUS] = FINISH_DONE

    def _record_reg(self, reg: int, value: int, hi: int = enc.REG_UCONFIG) -> None:
        """A REG packet on every SE tracing (registers the trace records; events with hi_byte REG_EVENT)."""
        for se, t in self.traces.items():
            mask = self.se_regs[se].get(TT_TOKEN_MASK, 0)
            if mask >> 16 & 0xFF and not mask >> 6 & 1:
                t.stream.put("REG", self.clock, slot=enc.REG_SLOT, hi_byte=hi, subop=reg & 0xFFFF, value=value)

    def event(self, kind: int) -> None:
        """An EVENT_WRITE's event type."""
        if kind in (THREAD_TRACE_MARKER, THREAD_TRACE_FINISH):
            self._record_reg(enc.EVENT_SUBOP, kind, enc.REG_EVENT)
        if kind == THREAD_TRACE_FINISH:
            for se in list(self.traces):
                self._finish(se)
                self.se_regs[se][TT_STATUS] = FINISH_DONE | BUSY

    def _finish(self, se: int) -> None:
        self.traces[se].stream.pad()
        self._commit(se)

    def _commit(self, se: int) -> None:
        """Whole 32-byte units of SE `se`'s stream to its window (as far as it holds them); WPTR and DROPPED."""
        t = self.traces[se]
        units = len(t.stream.nibbles) // enc.UNIT_NIBBLES
        upto = min(units, t.capacity)
        if upto > t.written:
            write(self.mem, t.base + 32 * t.written,
                  t.stream.to_bytes(enc.UNIT_NIBBLES * t.written, enc.UNIT_NIBBLES * upto))
            t.written = upto
        t.dropped = units - upto
        r = self.se_regs[se]
        r[TT_WPTR] = ((t.base >> 5) + t.written) & WPTR_MASK
        r[TT_DROPPED] = t.dropped

    # ---- dispatches ----------------------------------------------------------------------------------------

    def _traced(self, regs: dict[int, int]) -> bool:
        return bool(self.traces) and bool(regs.get(THREAD_TRACE_ENABLE, 0) & 1)

    def watch(self, regs: dict[int, int]) -> frozenset[tuple[int, int, int, int]] | None:
        """None when a dispatch with these SH registers is neither counted nor traced; else the (se, sa, wgp,
        simd) units whose waves' instructions the trace follows."""
        counting = self.regs.get(CP_PERFMON_CNTL, 0) & 0xF == STATE_COUNT
        if not self._traced(regs):
            return frozenset() if counting else None
        units = set()
        for se in self.traces:
            r = self.se_regs[se]
            m, exclude = r.get(TT_MASK, 0), r.get(TT_TOKEN_MASK, 0)
            if any(not exclude >> enc.EXCLUDE_BIT[k] & 1 for k in ("VALUINST", "IMMEDIATE", "INST")):
                units.add((se, m >> 9 & 1, m >> 4 & 0xF, m & 3))   # this SE traces instructions
        return frozenset(units)

    def dispatched(self, work: DispatchWork, regs: dict[int, int]) -> None:
        """Count and trace a dispatch the launcher ran (after `watch` said it is watched)."""
        t0 = self.clock + DISPATCH_LATENCY
        if self.regs.get(CP_PERFMON_CNTL, 0) & 0xF == STATE_COUNT:
            self._count(work, regs)
        if self._traced(regs):
            for se, t in self.traces.items():
                r = self.se_regs[se]
                m = r.get(TT_MASK, 0)
                if not m & CS_WAVES:
                    continue
                t.stream.put_many(*enc.dispatch_packets(work, se, t0, (m >> 9 & 1, m >> 4 & 0xF, m & 3),
                                                        r.get(TT_TOKEN_MASK, 0) & 0x7FF, self.waves))
                self._commit(se)
            self.waves += work.waves
        self.clock = t0 + work.span

    def _count(self, work: DispatchWork, regs: dict[int, int]) -> None:
        for n, select in enumerate(GRBM_SELECT):
            if select in self.regs and self.regs[select] & 0x3F in (GRBM_COUNT, GRBM_GUI_ACTIVE):
                self.grbm[n] += DISPATCH_LATENCY + work.span
        if not (regs.get(PERFCOUNT_ENABLE, 0) & 1 and self.regs.get(SQ_PERFCOUNTER_CTRL, 0) & CS_EN):
            return
        for n in range(SQ_COUNTERS):
            sel = self.regs.get(SQ_SELECT + 2 * n)
            if sel is None:
                continue
            sel &= 0x1FF
            if sel == SQ_BUSY_CYCLES:
                v = work.busy()
            elif sel == SQ_WAVES:
                v = work.per_unit(np.ones(work.waves, np.int64))
            elif sel in SQ_INSTRUCTIONS:
                v = work.per_unit(work.count(SQ_INSTRUCTIONS[sel]))
            else:
                continue   # not modelled: reads 0
            self.sq[n] += v.astype(np.uint64)
