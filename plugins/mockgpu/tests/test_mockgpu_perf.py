"""The mock GPU's performance counters and thread trace, programmed with PM4 packets built here from amd.md's
registers and read back as the hardware's are: counters through GRBM_GFX_INDEX + COPY_DATA, traces from each
SE's window up to its write pointer. tg-profiler-sqtt's decoders (tested on real gfx1100 captures) are the
independent check of what the mock writes; the expected counts come from the kernel's instructions, written
here."""
from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest
from mockgpu_helpers import asm_kernel, needs_llvm_mc

from tg_mockgpu.cp import PacketError
from tg_mockgpu.memory import GPUMemory

pytestmark = needs_llvm_mc

# ---- amd.md 2 and 10, written for the tests ----------------------------------------------------------------
SET_SH_REG, SET_UCONFIG_REG, COPY_DATA, EVENT_WRITE, WAIT_REG_MEM = 0x76, 0x79, 0x40, 0x46, 0x3C
GRBM_GFX_INDEX, BROADCAST = 0xC200, 0xE0000000
CP_PERFMON_CNTL, SQ_PERFCOUNTER_CTRL, SQ_PERFCOUNTER_CTRL2 = 0xD808, 0xD9E0, 0xD9E2
SQ_SELECT, SQ_LO, GL2C_SELECT, GL2C_LO = 0xD9C0, 0xD1C0, 0xDB80, 0xD380
GRBM_SELECT, GRBM_LO, GRBM_HI = (0xD840, 0xD841), (0xD040, 0xD043), (0xD041, 0xD044)
SPI_CONFIG_CNTL, TRACE_ON, TRACE_OFF = 0xC440, 0xC362C688, 0xC062C688
TT_BUF0_BASE, TT_BUF0_SIZE, TT_CTRL, TT_MASK, TT_TOKEN_MASK, TT_WPTR = 0xD9E8, 0xD9E9, 0xD9EC, 0xD9ED, 0xD9EE, 0xD9EF
TT_STATUS, TT_DROPPED, USERDATA_2 = 0xD9F4, 0xD9FA, 0xC342
THREAD_TRACE_ENABLE_SH = 0x21E            # COMPUTE_THREAD_TRACE_ENABLE, SET_SH_REG offset
MARKER, FINISH = 0x35, 0x37
SES, SAS, WGPS = 6, 2, 4
# gfx11 perf_sel values (amd.md 9; SQ_WAVES = 4)
COUNTERS = [("SQ_WAVES", "SQ", 4), ("SQ_INSTS_VALU", "SQ", 62), ("SQ_INSTS_SALU", "SQ", 58),
            ("SQC_LDS_IDX_ACTIVE", "SQ", 261), ("SQ_BUSY_CYCLES", "SQ", 3), ("SQC_LDS_BANK_CONFLICT", "SQ", 256),
            ("GRBM_GUI_ACTIVE", "GRBM", 2), ("GL2C_HIT", "GL2C", 42)]


def pkt(op: int, *payload: int) -> list[int]:
    return [(3 << 30) | ((len(payload) - 1) << 16) | (op << 8), *payload]


def uconfig(reg: int, *values: int) -> list[int]:
    return pkt(SET_UCONFIG_REG, reg - 0xC000, *values)


def copy_reg_to_mem(reg: int, va: int) -> list[int]:
    return pkt(COPY_DATA, 0x100204, reg, 0, va & 0xFFFFFFFF, va >> 32)   # SRC_SEL 4 perf, DST_SEL 2, confirm


def wait_reg(reg: int, ref: int, mask: int) -> list[int]:
    return pkt(WAIT_REG_MEM, 0x3, reg, 0, ref, mask, 4)                   # register, EQ


# ---- the kernel: two waves a workgroup, every executed instruction known -----------------------------------
LOOPS = 3
KERNEL = f"""
s_load_b64 s[4:5], s[0:1], 0x0
s_lshl_b32 s6, s2, 6
v_add_nc_u32 v1, s6, v0
v_lshlrev_b32 v2, 2, v1
v_lshlrev_b32 v4, 2, v0
s_mov_b32 s7, {LOOPS}
loop:
v_add_nc_u32 v1, 1, v1
s_add_i32 s7, s7, -1
s_cmp_lg_u32 s7, 0
s_cbranch_scc1 loop
ds_store_b32 v4, v1
s_waitcnt lgkmcnt(0)
ds_load_b32 v3, v4
s_waitcnt lgkmcnt(0)
global_store_b32 v2, v3, s[4:5]
"""
LOCAL = 64
# executed per wave, in order (the loop body LOOPS times; s_endpgm appended by asm_kernel)
BODY = ["v_add_nc_u32", "s_add_i32", "s_cmp_lg_u32", "s_cbranch_scc1"]
EXECUTED = ["s_load_b64", "s_lshl_b32", "v_add_nc_u32", "v_lshlrev_b32", "v_lshlrev_b32", "s_mov_b32",
            *BODY * LOOPS, "ds_store_b32", "s_waitcnt", "ds_load_b32", "s_waitcnt", "global_store_b32", "s_endpgm"]
VALU = sum(op.startswith("v_") for op in EXECUTED)
SALU = sum(op.startswith(("s_lshl", "s_mov", "s_add", "s_cmp")) for op in EXECUTED)
LDS = sum(op.startswith("ds_") for op in EXECUTED)
# the mock's cycle model (docs/architecture.md): issue cycles by class
COST = {"s_load_b64": 4, "ds_store_b32": 2, "ds_load_b32": 2, "global_store_b32": 4}
WAVE_CYCLES = sum(COST.get(op, 1) for op in EXECUTED)
DISPATCH_LATENCY = 16


class GPU:
    """A GPU memory, the emulator launcher and a PM4 queue; `submit(words)` runs them as one indirect buffer."""

    def __init__(self, xccs: int = 1) -> None:
        from tg_mockgpu.cp.launch import EmulatorLauncher
        from tg_mockgpu.cp.pm4 import PM4Queue
        self.mem = GPUMemory()
        self.launcher = EmulatorLauncher(self.mem)
        self.ring, rptr = self.mem.alloc(4096), self.mem.alloc(8)
        self.xccs = xccs
        self.cp = PM4Queue("AMD COMPUTE:0", self.mem, self.ring, 1024, rptr, launch=self.launcher, xccs=xccs)
        self.head = 0
        co = asm_kernel(KERNEL, vgprs=8, lds=4 * LOCAL)
        self.kernel = co.kernel("k")
        self.image = self.mem.alloc(len(co.image), 256)
        self.mem.write(self.image, co.image_at(self.image))
        self.code = co

    def buf(self, nbytes: int) -> int:
        va = self.mem.alloc(nbytes)
        self.mem.write(va, bytes(nbytes))
        return va

    def u32(self, va: int, n: int = 1) -> np.ndarray:
        return np.frombuffer(self.mem.read(va, 4 * n), np.uint32)

    def dispatch(self, groups: int, out: int, perfcount: bool = True) -> list[int]:
        from tg_amd.queues import pm4
        from tg_amd.queues.kernel import dispatch_of
        kernargs = self.buf(64)
        self.mem.write(kernargs, struct.pack("<Q", out))
        d = dispatch_of(self.kernel, self.image, {"kernarg_segment_ptr": kernargs}, (groups, 1, 1), (LOCAL, 1, 1),
                        [0] * self.xccs)
        return [int(w) for w in pm4.dispatch(dataclasses.replace(d, perfcount=perfcount), self.xccs)]

    def submit(self, words: list[int]) -> None:
        from tg_amd.queues import pm4
        ib = self.mem.alloc(4 * len(words))
        self.mem.write(ib, struct.pack(f"<{len(words)}I", *words))
        ring = [int(w) for w in pm4.indirect_buffer(ib, len(words))]
        self.mem.write(self.ring + 4 * self.head, struct.pack(f"<{len(ring)}I", *ring))
        self.head += len(ring)
        assert self.cp.run(self.head), "the queue stalled"

    def close(self) -> None:
        self.mem.close()


@pytest.fixture
def gpu():
    g = GPU()
    yield g
    g.close()


# ---- PMC ----------------------------------------------------------------------------------------------------

def pmc_start(sq_ctrl: int = 0x55, counters: list = COUNTERS) -> list[int]:
    """amd.md 9's start: broadcast, reset, SQ control, each block's next counter for each selection, count."""
    ws = uconfig(GRBM_GFX_INDEX, BROADCAST) + uconfig(CP_PERFMON_CNTL, 0) + uconfig(SQ_PERFCOUNTER_CTRL, sq_ctrl)
    ws += uconfig(SQ_PERFCOUNTER_CTRL2, 1 | 0xFFFF << 4)
    used = {"SQ": 0, "GRBM": 0, "GL2C": 0}
    for _, block, sel in counters:
        n = used[block]
        used[block] += 1
        ws += uconfig(SQ_SELECT + 2 * n if block == "SQ" else GRBM_SELECT[n] if block == "GRBM" else
                      GL2C_SELECT + 2 * n, sel)
    return ws + uconfig(CP_PERFMON_CNTL, 0) + uconfig(CP_PERFMON_CNTL, 1)


def pmc_read(buf: int, counters: list = COUNTERS) -> tuple[list[int], list[dict]]:
    """amd.md 9's readback: sample, then each counter's instances (SQ: se, sa, wgp; 8 bytes each) into buf, and
    the schedule tg-profiler-sqtt's decoder reads."""
    ws = uconfig(GRBM_GFX_INDEX, BROADCAST) + uconfig(CP_PERFMON_CNTL, 0x401)
    sched, off, used = [], 0, {"SQ": 0, "GRBM": 0, "GL2C": 0}
    for name, block, _ in counters:
        n = used[block]
        used[block] += 1
        if block == "SQ":
            shape = (1, 1, SES, SAS, WGPS)
            for se, sa, wgp in np.ndindex(SES, SAS, WGPS):
                at = off + 8 * ((se * SAS + sa) * WGPS + wgp)
                ws += uconfig(GRBM_GFX_INDEX, se << 16 | sa << 8 | wgp << 2) + copy_reg_to_mem(SQ_LO + 2 * n, buf + at)
        elif block == "GRBM":
            shape = (1, 1, 1, 1, 1)
            ws += uconfig(GRBM_GFX_INDEX, BROADCAST) + copy_reg_to_mem(GRBM_LO[n], buf + off)
            ws += copy_reg_to_mem(GRBM_HI[n], buf + off + 4)
        else:
            shape = (1, 32, 1, 1, 1)
            for i in range(32):
                ws += uconfig(GRBM_GFX_INDEX, 1 << 31 | 1 << 29 | i) + copy_reg_to_mem(GL2C_LO + 2 * n, buf + off + 8 * i)
                ws += copy_reg_to_mem(GL2C_LO + 2 * n + 1, buf + off + 8 * i + 4)
        size = 8 * int(np.prod(shape))
        sched.append(dict(name=name, block=block, **dict(zip(("xcc", "inst", "se", "sa", "wgp"), shape)),
                          off=off, size=size))
        off += size
    return ws + uconfig(GRBM_GFX_INDEX, BROADCAST), sched


def counted(gpu: GPU, groups: int, perfcount: bool = True, sq_ctrl: int = 0x55, counters: list = COUNTERS) -> dict:
    from tg_profiler_sqtt.pmc import decode_pmc
    out, buf = gpu.buf(4 * groups * LOCAL), gpu.buf(4096)
    read, sched = pmc_read(buf, counters)
    gpu.submit(pmc_start(sq_ctrl, counters) + gpu.dispatch(groups, out, perfcount) + read)
    np.testing.assert_array_equal(gpu.u32(out, groups * LOCAL), np.arange(groups * LOCAL) + LOOPS)
    return decode_pmc(gpu.mem.read(buf, 4096), sched)


@pytest.mark.parametrize("groups", [4, 50])
def test_counters_count_the_instructions_the_waves_executed(gpu, groups):
    c = counted(gpu, groups)
    waves = 2 * groups
    assert c["SQ_WAVES"].total == waves
    assert c["SQ_INSTS_VALU"].total == VALU * waves
    assert c["SQ_INSTS_SALU"].total == SALU * waves
    assert c["SQC_LDS_IDX_ACTIVE"].total == LDS * waves
    # the placement model: workgroup g on WGP unit g % 48 (se = u % 6, sa = u // 6 % 2, wgp = u // 12)
    want = np.zeros((SES, SAS, WGPS), np.uint64)
    for g in range(groups):
        u = g % 48
        want[u % 6, u // 6 % 2, u // 12] += 2
    np.testing.assert_array_equal(c["SQ_WAVES"].values[0, 0], want)
    np.testing.assert_array_equal(c["SQ_INSTS_VALU"].values[0, 0], want * VALU)
    # the cycle model: a workgroup's two waves run on two SIMDs at once, one WGP's workgroups one after another
    np.testing.assert_array_equal(c["SQ_BUSY_CYCLES"].values[0, 0], want // 2 * WAVE_CYCLES)
    assert c["GRBM_GUI_ACTIVE"].total == DISPATCH_LATENCY + int(want.max()) // 2 * WAVE_CYCLES
    # what the mock cannot model reads 0
    assert c["SQC_LDS_BANK_CONFLICT"].total == 0 and c["GL2C_HIT"].total == 0


def test_more_instruction_counters_and_a_second_grbm_counter(gpu):
    counters = [("SQ_INSTS_LDS", "SQ", 57), ("SQ_INSTS_SMEM", "SQ", 59), ("SQ_INSTS_TEX_LOAD", "SQ", 66),
                ("SQ_INSTS_TEX_STORE", "SQ", 67), ("SQ_INSTS_WAVE32", "SQ", 70), ("SQ_INSTS_WAVE32_LDS", "SQ", 72),
                ("SQ_INSTS_WAVE32_VALU", "SQ", 73), ("SQ_WAIT_ANY", "SQ", 35), ("GRBM_GUI_ACTIVE", "GRBM", 2),
                ("GRBM_COUNT", "GRBM", 0)]
    waves = 2 * 10
    c = counted(gpu, 10, counters=counters)
    per_wave = {"SQ_INSTS_LDS": LDS, "SQ_INSTS_SMEM": 1, "SQ_INSTS_TEX_LOAD": 0, "SQ_INSTS_TEX_STORE": 1,
                "SQ_INSTS_WAVE32": len(EXECUTED), "SQ_INSTS_WAVE32_LDS": LDS, "SQ_INSTS_WAVE32_VALU": VALU,
                "SQ_WAIT_ANY": 0}
    assert {k: c[k].total for k in per_wave} == {k: v * waves for k, v in per_wave.items()}
    assert c["GRBM_COUNT"].total == c["GRBM_GUI_ACTIVE"].total == DISPATCH_LATENCY + WAVE_CYCLES


def test_valu_doubles_when_the_grid_doubles(gpu):
    one, two = counted(gpu, 24), counted(gpu, 48)
    assert two["SQ_INSTS_VALU"].total == 2 * one["SQ_INSTS_VALU"].total == 2 * 48 * VALU
    assert two["SQ_WAVES"].total == 2 * one["SQ_WAVES"].total


def test_sq_counts_only_enabled_dispatches_and_resets(gpu):
    off = counted(gpu, 4, perfcount=False)
    assert off["SQ_INSTS_VALU"].total == 0 and off["SQ_WAVES"].total == 0
    assert off["GRBM_GUI_ACTIVE"].total > 0          # GRBM counts the GPU, not the dispatch's SQ enable
    no_cs = counted(gpu, 4, sq_ctrl=0x15)            # SQ_PERFCOUNTER_CTRL without cs_en
    assert no_cs["SQ_INSTS_VALU"].total == 0
    # perfmon_state 2 holds the counts: a dispatch after it adds nothing; state 0 resets
    buf, out = gpu.buf(4096), gpu.buf(4 * 4 * LOCAL)
    read, _ = pmc_read(buf)
    gpu.submit(pmc_start() + gpu.dispatch(4, out) + uconfig(CP_PERFMON_CNTL, 2) + gpu.dispatch(4, out) + read)
    assert gpu.u32(buf + 384)[0] == 2 * VALU             # SQ_INSTS_VALU, SE 0 SA 0 WGP 0: the first dispatch only
    gpu.submit(uconfig(CP_PERFMON_CNTL, 0) + read)
    assert not gpu.u32(buf, 1024 // 4).any()


# ---- SQTT ---------------------------------------------------------------------------------------------------

def sqtt_start(base: int, window: int, itrace: int = 0b11, simd: int = 0) -> list[int]:
    """amd.md 9's start sequence: one window per SE at base + se * window."""
    ws = uconfig(SPI_CONFIG_CNTL, TRACE_ON)
    for se in range(SES):
        va = base + se * window
        ws += uconfig(GRBM_GFX_INDEX, se << 16 | 1 << 30)
        ws += uconfig(TT_BUF0_SIZE, (va >> 44) & 0xF | (window >> 12) << 8)
        ws += uconfig(TT_BUF0_BASE, (va >> 12) & 0xFFFFFFFF)
        ws += uconfig(TT_MASK, 0x10000 | simd)
        ws += uconfig(TT_TOKEN_MASK, 0x1F1800 if itrace >> se & 1 else 0x1F1927)
        ws += uconfig(TT_CTRL, 0x80023C41)
    return ws + uconfig(GRBM_GFX_INDEX, BROADCAST) + pkt(SET_SH_REG, THREAD_TRACE_ENABLE_SH, 1)


def sqtt_stop(wptrs: int) -> list[int]:
    ws = uconfig(GRBM_GFX_INDEX, BROADCAST) + pkt(SET_SH_REG, THREAD_TRACE_ENABLE_SH, 0) + pkt(EVENT_WRITE, FINISH)
    for se in range(SES):
        ws += uconfig(GRBM_GFX_INDEX, se << 16 | 1 << 30) + wait_reg(TT_STATUS, 0, 0xFFF)
        ws += uconfig(TT_CTRL, 0x80023C40) + wait_reg(TT_STATUS, 0, 0x2000000)
        ws += pkt(EVENT_WRITE, 0x407) + copy_reg_to_mem(TT_WPTR, wptrs + 4 * se)
    return ws + uconfig(GRBM_GFX_INDEX, BROADCAST) + uconfig(SPI_CONFIG_CNTL, TRACE_OFF)


def traced(gpu: GPU, groups: int, window: int = 1 << 16, **kw) -> list[bytes]:
    """Each SE's trace bytes after one traced dispatch (readback as amd.md 9: gfx11.0 counts from address 0)."""
    base, wptrs, out = gpu.buf(SES * window), gpu.buf(4 * SES), gpu.buf(4 * groups * LOCAL)
    words = sqtt_start(base, window, **kw) + uconfig(USERDATA_2, 0x11, 0x22) + gpu.dispatch(groups, out)
    gpu.submit(words + pkt(EVENT_WRITE, MARKER) + sqtt_stop(wptrs))
    traces = []
    for se, w in enumerate(gpu.u32(wptrs, SES)):
        va = base + se * window
        nbytes = int(w & 0x1FFFFFFF) * 32 - ((va // 32) & 0x1FFFFFFF) * 32
        assert 0 <= nbytes <= window - 32
        traces.append(gpu.mem.read(va, nbytes))
    return traces


def test_sqtt_decodes_into_the_waves_and_instructions_that_ran(gpu):
    from tg_profiler_sqtt.mapper import KernelCode, map_instructions
    from tg_profiler_sqtt.sqtt import decode
    groups = 100
    traces = traced(gpu, groups)
    decoded = [decode(t) for t in traces]
    starts = sum(sum(p.kind == "WAVESTART" for p in d) for d in decoded)
    ends = sum(sum(p.kind == "WAVEEND" for p in d) for d in decoded)
    assert starts == ends == 2 * groups
    for se, d in enumerate(decoded):
        assert d[0].kind == "LAYOUT_HEADER" and d[0].layout == 3
        assert all(a.time <= b.time for a, b in zip(d, d[1:]))
        waves_here = sum(1 for g in range(groups) if g % 48 % 6 == se) * 2
        assert sum(p.kind == "WAVESTART" for p in d) == waves_here
        # the cycle model: every wave lasts the issue cycles of what it executed
        opened: dict[tuple[int, int, int, int], int] = {}
        for p in d:
            key = (p.sa, p.wgp, p.simd, p.wave) if p.kind in ("WAVESTART", "WAVEEND") else None
            if p.kind == "WAVESTART":
                opened[key] = p.time
            elif p.kind == "WAVEEND":
                assert p.time - opened.pop(key) == WAVE_CYCLES
        regs = [(p.subop, p.value) for p in d if p.kind == "REG"]
        assert (USERDATA_2, 0x11) in regs and (USERDATA_2 + 1, 0x22) in regs   # the RGP markers
        assert (0xFF, MARKER) in regs and (0xFF, FINISH) in regs
        # the instruction packets: on SEs 0 and 1 (SQTT_ITRACE_SE_MASK), for the waves of SA 0, WGP 0, SIMD 0
        traced_waves = sum(1 for g in range(groups) if g % 48 == se)   # wave 0 of each workgroup on that WGP
        if se < 2:
            mapped = list(map_instructions(d, KernelCode("k", gpu.code.image, 0)))
            names = [m.text.split()[0].removesuffix("_e32").removesuffix("_e64") for m in mapped]
            assert names == EXECUTED * traced_waves
            valu = sum(p.kind == "VALUINST" for p in d)
            assert valu == VALU * traced_waves
        else:
            assert not any(p.kind in ("INST", "VALUINST", "IMMEDIATE") for p in d)


def test_sqtt_simd_select_and_token_mask(gpu):
    from tg_profiler_sqtt.sqtt import decode
    d = [decode(t) for t in traced(gpu, 2, itrace=0b1, simd=1)]
    assert d[0][0].simd == 1
    # SIMD 1 holds wave 1 of workgroup 0: its VALUs are traced on SE 0; SE 1 is outside the itrace mask
    assert sum(p.kind == "VALUINST" for p in d[0]) == VALU
    assert sum(p.kind == "VALUINST" for p in d[1]) == 0 and sum(p.kind == "WAVESTART" for p in d[1]) == 2


def test_a_full_window_stops_at_its_last_unit_and_counts_what_it_dropped(gpu):
    from tg_profiler_sqtt.sqtt import decode
    window = 4096
    base, wptrs, out, dropped = gpu.buf(SES * window), gpu.buf(4 * SES), gpu.buf(4 * 2000 * LOCAL), gpu.buf(4)
    words = sqtt_start(base, window) + gpu.dispatch(2000, out) + sqtt_stop(wptrs)
    gpu.submit(words + uconfig(GRBM_GFX_INDEX, 1 << 30) + copy_reg_to_mem(TT_DROPPED, dropped))
    w = int(gpu.u32(wptrs)[0])
    nbytes = (w & 0x1FFFFFFF) * 32 - ((base // 32) & 0x1FFFFFFF) * 32
    assert nbytes == window - 32                  # the reader's sign of a full buffer
    assert gpu.u32(dropped)[0] > 0
    d = decode(gpu.mem.read(base, nbytes))
    assert d[0].kind == "LAYOUT_HEADER" and sum(p.kind == "WAVESTART" for p in d) > 0


def test_bad_grbm_index_is_named(gpu):
    with pytest.raises(PacketError, match="GRBM_GFX_INDEX 0x70000 selects SE 7"):
        gpu.submit(uconfig(GRBM_GFX_INDEX, 7 << 16) + uconfig(TT_CTRL, 1))


def test_other_xccs_count_nothing_and_trace_only_a_header():
    """Dispatches run on XCC 0: a readback predicated on XCC 1 reads its own, idle, counters and trace."""
    from tg_amd.queues import pm4
    from tg_profiler_sqtt.pmc import decode_pmc
    from tg_profiler_sqtt.sqtt import decode
    gpu = GPU(xccs=2)
    try:
        window = 1 << 14
        out, bufs, base, wptrs = gpu.buf(4 * 8 * LOCAL), [gpu.buf(4096) for _ in range(2)], gpu.buf(2 * window), \
            [gpu.buf(4 * SES) for _ in range(2)]
        start = pmc_start()
        for x in range(2):   # SE 0 of XCC x traces into base + x * window
            va = base + x * window
            body = uconfig(GRBM_GFX_INDEX, 1 << 30)          # SE 0
            body += uconfig(TT_BUF0_SIZE, (va >> 44) & 0xF | (window >> 12) << 8)
            body += uconfig(TT_BUF0_BASE, (va >> 12) & 0xFFFFFFFF) + uconfig(TT_MASK, 0x10000)
            body += uconfig(TT_TOKEN_MASK, 0x1F1800) + uconfig(TT_CTRL, 0x80023C41)
            start += [int(w) for w in pm4.pred_exec(1 << x, body, 2)]
        start += pkt(SET_SH_REG, THREAD_TRACE_ENABLE_SH, 1)
        words = start + gpu.dispatch(8, out) + pkt(EVENT_WRITE, FINISH)
        sched = None
        for x in range(2):
            read, sched = pmc_read(bufs[x])
            body = read + uconfig(GRBM_GFX_INDEX, 1 << 30) + copy_reg_to_mem(TT_WPTR, wptrs[x])
            words += [int(w) for w in pm4.pred_exec(1 << x, body, 2)]
        gpu.submit(words)
        c0, c1 = (decode_pmc(gpu.mem.read(b, 4096), sched) for b in bufs)
        assert c0["SQ_INSTS_VALU"].total == 16 * VALU and c0["GRBM_GUI_ACTIVE"].total > 0
        assert all(c.total == 0 for c in c1.values())
        for x, dw in ((0, True), (1, False)):
            va = base + x * window
            nbytes = int(gpu.u32(wptrs[x])[0] & 0x1FFFFFFF) * 32 - ((va // 32) & 0x1FFFFFFF) * 32
            d = decode(gpu.mem.read(va, nbytes))
            assert d[0].kind == "LAYOUT_HEADER"
            assert any(p.kind == "WAVESTART" for p in d) == dw
    finally:
        gpu.close()


def test_aql_dispatches_count_with_the_enable_their_vendor_packets_set(gpu):
    """An AQL queue's dispatches run with the SH registers its PM4 vendor packets programmed: with
    COMPUTE_PERFCOUNT_ENABLE set there, the counters of the GPU's shared PerfUnit count them."""
    from tg_amd.queues import aql
    from tg_mockgpu.cp.aql import AQLQueue
    from tg_profiler_sqtt.pmc import decode_pmc

    def ib(words: list[int]) -> list[int]:
        va = gpu.mem.alloc(4 * len(words))
        gpu.mem.write(va, struct.pack(f"<{len(words)}I", *words))
        return [int(w) for w in aql.pm4_ib(va, len(words))]
    groups, out, buf, kernargs = 6, gpu.buf(4 * 6 * LOCAL), gpu.buf(4096), gpu.buf(64)
    gpu.mem.write(kernargs, struct.pack("<Q", out))
    read, sched = pmc_read(buf)
    packets = [ib(pmc_start() + pkt(SET_SH_REG, 0x20B, 1)),
               [int(w) for w in aql.kernel_dispatch(gpu.kernel, gpu.image, kernargs, (groups, 1, 1), (LOCAL, 1, 1))],
               ib(read)]
    ring, rptr = gpu.mem.alloc(64 * 4), gpu.mem.alloc(256)
    for i, p in enumerate(packets):
        gpu.mem.write(ring + 64 * i, struct.pack("<16I", *p))
    q = AQLQueue("AMD COMPUTE:0", gpu.mem, ring, 4, rptr + 128, queue_va=rptr, launch=gpu.launcher)
    assert q.pm4.perf[0] is gpu.cp.perf[0]          # one performance monitor per GPU, whichever queue
    assert q.run(2) and q.read_pointer == 3
    np.testing.assert_array_equal(gpu.u32(out, groups * LOCAL), np.arange(groups * LOCAL) + LOOPS)
    c = decode_pmc(gpu.mem.read(buf, 4096), sched)
    assert c["SQ_INSTS_VALU"].total == 2 * groups * VALU and c["SQ_WAVES"].total == 2 * groups


def test_a_register_wait_polls_the_register_of_dword_2(gpu):
    """WAIT_REG_MEM in register space (operation 0) reads the register named in dword 2 (dword 3 is only the
    poll register of write-then-wait): a wait for a value the register does not hold stalls the queue."""
    ctrl = 0xD9E0  # SQ_PERFCOUNTER_CTRL: a plain register the queue can set
    gpu.submit(uconfig(ctrl, 0x40) + wait_reg(ctrl, 0x40, 0xFFFFFFFF))
    with pytest.raises(AssertionError, match="stalled"):
        gpu.submit(wait_reg(ctrl, 0x41, 0xFFFFFFFF))
