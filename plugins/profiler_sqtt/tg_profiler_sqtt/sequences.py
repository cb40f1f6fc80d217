"""The PM4 words of PMC and SQTT around one dispatch (amd.md section 9, registers section 10), as lists of command
words (ints, or uint32 UOps for what depends on the slot a run takes).

Every register here is a UCONFIG register (SET_UCONFIG_REG, offset from 0xC000) but two SH ones
(COMPUTE_THREAD_TRACE_ENABLE, COMPUTE_PERFCOUNT_ENABLE: the dispatch's own flag). GRBM_GFX_INDEX chooses which
SE / SA / instance later register writes and reads reach; "broadcast" is every one of them.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from tg_amd.queues import pm4
from tg_amd.queues.pm4 import Word
from tg_profiler_sqtt.counters import ScheduledCounter, Topology

UCONFIG_BASE = 0xC000
GRBM_GFX_INDEX = 0xC200
SQ_THREAD_TRACE_USERDATA_2 = 0xC342
SPI_CONFIG_CNTL = 0xC440
CP_PERFMON_CNTL = 0xD808
SQ_PERFCOUNTER_CTRL, SQ_PERFCOUNTER_CTRL2 = 0xD9E0, 0xD9E2
SQ_THREAD_TRACE_BUF0_BASE, SQ_THREAD_TRACE_BUF0_SIZE = 0xD9E8, 0xD9E9
SQ_THREAD_TRACE_CTRL, SQ_THREAD_TRACE_MASK, SQ_THREAD_TRACE_TOKEN_MASK = 0xD9EC, 0xD9ED, 0xD9EE
SQ_THREAD_TRACE_WPTR, SQ_THREAD_TRACE_STATUS = 0xD9EF, 0xD9F4
COMPUTE_THREAD_TRACE_ENABLE = 0x2E1E

BROADCAST = (1 << 31) | (1 << 30) | (1 << 29)   # se, instance and sa broadcast writes
PERFMON_STOP, PERFMON_START, PERFMON_SAMPLE = 0, 1, 0x401  # CP_PERFMON_CNTL: state 0 / 1, state 1 + sample enable
SQ_CTRL_ENABLE = 0x55           # ps_en | gs_en | hs_en | cs_en
SQ_CTRL2_ENABLE = 1 | (0xFFFF << 1)  # force_en, vmid_en every VMID
SPI_TRACE_ON, SPI_TRACE_OFF = 0xC362C688, 0xC062C688  # + / - enable_sqg_top_events and enable_sqg_bop_events
TT_CTRL_ON, TT_CTRL_OFF = 0x80023C41, 0x80023C40      # mode 1 / 0, hiwater 1, reg_at_hwm 2, stalls, rt_freq 4096 clk
TT_MASK_CS = 0x10000            # wtype_include: compute waves
TT_TOKENS = 0x1F1800            # reg_include 0x1F, bop events, PERF excluded
TT_NO_INSTRUCTIONS = 0x127      # + VMEMEXEC, ALUEXEC, VALUINST, IMMEDIATE, INST excluded (SEs not instruction-traced)
STATUS_FINISH_PENDING, STATUS_BUSY = 0xFFF, 1 << 25
THREAD_TRACE_MARKER, THREAD_TRACE_FINISH = 53, 55
COPY_PERF_TO_MEM = 4 | (2 << 8)  # COPY_DATA SRC_SEL 4 (perf counter registers), DST_SEL 2 (memory)
WR_CONFIRM = 1 << 20
RGP_BIND_PIPELINE, RGP_BIND_POINT_COMPUTE = 12, 1 << 7  # pipeline-bind marker: identifier, bind_point bit
RGP_HAS_THREAD_DIMS = 1 << 31   # event marker: identifier 0 (event), has_thread_dims


def set_uconfig(reg: int, *values: Word) -> list[Word]:
    return pm4.packet("SET_UCONFIG_REG", reg - UCONFIG_BASE, *values)


def set_sh(reg: int, *values: Word) -> list[Word]:
    return pm4.packet("SET_SH_REG", reg - pm4.SH_REG_BASE, *values)


def grbm_index(se: int | None = None, sa: int | None = None, instance: int | None = None) -> int:
    """GRBM_GFX_INDEX: the SE / SA / instance given, broadcast to every one of what is None."""
    return ((1 << 30) if instance is None else instance) | ((1 << 29) if sa is None else sa << 8) | \
        ((1 << 31) if se is None else se << 16)


def grbm(se: int | None = None, sa: int | None = None, instance: int | None = None) -> list[Word]:
    return set_uconfig(GRBM_GFX_INDEX, grbm_index(se, sa, instance))


def copy_perf(reg: int, dst: Word, confirm: bool = False) -> list[Word]:
    """COPY_DATA of a counter / trace register to memory."""
    return pm4.packet("COPY_DATA", COPY_PERF_TO_MEM | (WR_CONFIRM if confirm else 0), reg, 0, pm4.lo(dst), pm4.hi(dst))


def wait_reg_zero(reg: int, mask: int) -> list[Word]:
    """WAIT_REG_MEM in register space: until (reg & mask) == 0."""
    return pm4.packet("WAIT_REG_MEM", pm4.WAIT_EQ, reg, 0, 0, mask, 4)


def memory_barrier() -> list[Word]:
    return pm4.barrier()


# ---- PMC ---------------------------------------------------------------------------------------------------

def perfmon(start: bool) -> list[Word]:
    """Counters stopped and reset (state 0), and started again (state 1) when `start`."""
    ws = grbm() + set_uconfig(CP_PERFMON_CNTL, PERFMON_STOP)
    return ws + set_uconfig(CP_PERFMON_CNTL, PERFMON_START) if start else ws


def pmc_start(sched: Sequence[ScheduledCounter]) -> list[Word]:
    """Program every counter's SELECT and start counting from 0 (the dispatch sets COMPUTE_PERFCOUNT_ENABLE)."""
    ws = perfmon(start=False)
    ws += set_uconfig(SQ_PERFCOUNTER_CTRL, SQ_CTRL_ENABLE) + set_uconfig(SQ_PERFCOUNTER_CTRL2, SQ_CTRL2_ENABLE)
    for s in sched:
        ws += set_uconfig(s.select, s.perf_sel)
    return ws + perfmon(start=True)


def pmc_read(sched: Sequence[ScheduledCounter], base: Word, topo: Topology,
             active: Callable[[int, int, int, int], bool] | None = None) -> list[Word]:
    """Sample every counter on every instance into `base` + its schedule offset (LO, then HI where it exists);
    inactive WGPs (`active(xcc, se, sa, wgp)` false) are skipped and keep their zero record."""
    ws = grbm() + set_uconfig(CP_PERFMON_CNTL, PERFMON_SAMPLE)
    for s in sched:
        off = s.off
        for xcc in range(s.xcc):
            body: list[Word] = []
            for inst in range(s.inst):
                for se in range(s.se):
                    for sa in range(s.sa):
                        for wgp in range(s.wgp):
                            here, off = off, off + 8
                            if s.wgp > 1 and active is not None and not active(xcc, se, sa, wgp):
                                continue
                            body += grbm(instance=inst) if s.inst > 1 else grbm(se, sa, wgp << 2)
                            body += copy_perf(s.lo, base + here if here else base)
                            if s.hi is not None:
                                body += copy_perf(s.hi, base + here + 4)
            ws += pm4.pred_exec(1 << xcc, body, topo.xccs) if body else []
    return ws + perfmon(start=True)


# ---- SQTT --------------------------------------------------------------------------------------------------

def sqtt_start(windows: Sequence[Word], window_bytes: int, topo: Topology, itrace_se_mask: int,
               simd_sel: int) -> list[Word]:
    """Start tracing: SE i (of all XCCs, XCC-major) writes into `windows[i]` (4 KiB aligned, `window_bytes`)."""
    if window_bytes % 4096 or not 0 < window_bytes >> 12 < 1 << 22:
        raise ValueError(f"a trace window of {window_bytes} bytes: BUF0_SIZE takes 1..2^22-1 pages of 4 KiB")
    ws = memory_barrier() + set_uconfig(SPI_CONFIG_CNTL, SPI_TRACE_ON)
    for i, va in enumerate(windows):
        page = va >> 12
        body = grbm(se=i % topo.ses, sa=0)
        body += set_uconfig(SQ_THREAD_TRACE_BUF0_SIZE, (pm4.hi(page) & 0xF) | ((window_bytes >> 12) << 8))
        body += set_uconfig(SQ_THREAD_TRACE_BUF0_BASE, pm4.lo(page))
        body += set_uconfig(SQ_THREAD_TRACE_MASK, TT_MASK_CS | simd_sel)
        tokens = TT_TOKENS if itrace_se_mask >> i & 1 else TT_TOKENS | TT_NO_INSTRUCTIONS
        body += set_uconfig(SQ_THREAD_TRACE_TOKEN_MASK, tokens) + set_uconfig(SQ_THREAD_TRACE_CTRL, TT_CTRL_ON)
        ws += pm4.pred_exec(1 << (i // topo.ses), body, topo.xccs)
    return ws + grbm() + set_sh(COMPUTE_THREAD_TRACE_ENABLE, 1) + memory_barrier()


def rgp_markers(code_hash: int, cmd_id: int, grid: Sequence[Word]) -> list[Word]:
    """The RGP "pipeline bind" marker (the code's hash) and "event" marker (command id, grid in workgroups),
    two dwords per write to SQ_THREAD_TRACE_USERDATA_2/3: the trace records them as REG packets."""
    bind = [RGP_BIND_PIPELINE | RGP_BIND_POINT_COMPUTE, code_hash & 0xFFFFFFFF, code_hash >> 32 & 0xFFFFFFFF]
    event = [RGP_HAS_THREAD_DIMS, 0, cmd_id & 0xFFFFFFFF, *grid]
    ws: list[Word] = []
    for marker in (bind, event):
        for i in range(0, len(marker), 2):
            ws += set_uconfig(SQ_THREAD_TRACE_USERDATA_2, *marker[i:i + 2])
    return ws


def sqtt_marker() -> list[Word]:
    """Right after DISPATCH_DIRECT: the trace marks where the dispatch began."""
    return pm4.event_write(THREAD_TRACE_MARKER, 0)


def sqtt_stop(wptrs: Sequence[Word], topo: Topology) -> list[Word]:
    """Stop tracing, wait until every SE flushed its trace, and store SE i's SQ_THREAD_TRACE_WPTR at `wptrs[i]`."""
    ws = memory_barrier() + grbm() + set_sh(COMPUTE_THREAD_TRACE_ENABLE, 0) + pm4.event_write(THREAD_TRACE_FINISH, 0)
    for i, dst in enumerate(wptrs):
        body = grbm(se=i % topo.ses, sa=0) + wait_reg_zero(SQ_THREAD_TRACE_STATUS, STATUS_FINISH_PENDING)
        body += set_uconfig(SQ_THREAD_TRACE_CTRL, TT_CTRL_OFF) + wait_reg_zero(SQ_THREAD_TRACE_STATUS, STATUS_BUSY)
        body += pm4.event_write(pm4.CS_PARTIAL_FLUSH, pm4.EVENT_INDEX_CS_PARTIAL_FLUSH)
        body += copy_perf(SQ_THREAD_TRACE_WPTR, dst, confirm=True)
        ws += pm4.pred_exec(1 << (i // topo.ses), body, topo.xccs)
    return ws + grbm() + set_uconfig(SPI_CONFIG_CNTL, SPI_TRACE_OFF) + memory_barrier()
