"""gfx11 performance counters: their names, the counter registers of each block, and the readback schedule.

A counter is (block, perf_sel) (amd.md section 9; the table is the gfx11 part of AMD's counter list, without the
TA block, whose instances the readback does not know). Each block has a few physical counters; the n-th counter
of a block that a counter list asks for gets its n-th register pair: SQ on gfx11 programs the even SELECT
register 2n while sampling SQ_PERFCOUNTER<n>_LO (and has no _HI); GRBM and GL2C use SELECT n, LO/HI n.

The readback samples each counter on every instance of its block (GRBM 1, GL2C 32, SQ one per WGP: SEs x 2 SAs
x WGPs per SA, per XCC), 8 bytes each, counters back to back: that layout is the schedule, the same entries
`pmc.decode_pmc` reads.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tg_profiler_sqtt.pmc import CounterSample

SEG1 = 0xA000  # GC register segment 1: every register here is there (amd.md section 10)

# name -> (block, perf_sel), gfx11
COUNTERS: dict[str, tuple[str, int]] = {
    "GL2C_EA_RDREQ_128B": ("GL2C", 102), "GL2C_EA_RDREQ_32B": ("GL2C", 99), "GL2C_EA_RDREQ_64B": ("GL2C", 100),
    "GL2C_EA_RDREQ_96B": ("GL2C", 101), "GL2C_EA_WRREQ_64B": ("GL2C", 85), "GL2C_HIT": ("GL2C", 42),
    "GL2C_MC_RDREQ": ("GL2C", 96), "GL2C_MC_WRREQ": ("GL2C", 83), "GL2C_MC_WRREQ_STALL": ("GL2C", 88),
    "GL2C_MISS": ("GL2C", 43), "GRBM_COUNT": ("GRBM", 0), "GRBM_GUI_ACTIVE": ("GRBM", 2),
    "SQC_LDS_BANK_CONFLICT": ("SQ", 256), "SQC_LDS_IDX_ACTIVE": ("SQ", 261), "SQ_ACCUM_PREV": ("SQ", 1),
    "SQ_BUSY_CYCLES": ("SQ", 3), "SQ_INSTS_FLAT": ("SQ", 56), "SQ_INSTS_GDS": ("SQ", 54), "SQ_INSTS_LDS": ("SQ", 57),
    "SQ_INSTS_SALU": ("SQ", 58), "SQ_INSTS_SMEM": ("SQ", 59), "SQ_INSTS_TEX_LOAD": ("SQ", 66),
    "SQ_INSTS_TEX_STORE": ("SQ", 67), "SQ_INSTS_VALU": ("SQ", 62), "SQ_INSTS_WAVE32": ("SQ", 70),
    "SQ_INSTS_WAVE32_LDS": ("SQ", 72), "SQ_INSTS_WAVE32_VALU": ("SQ", 73), "SQ_INST_CYCLES_VMEM": ("SQ", 106),
    "SQ_INST_LEVEL_GDS": ("SQ", 87), "SQ_INST_LEVEL_LDS": ("SQ", 88), "SQ_WAIT_ANY": ("SQ", 35),
    "SQ_WAIT_INST_ANY": ("SQ", 26), "SQ_WAIT_INST_LDS": ("SQ", 29), "SQ_WAVE32_INSTS": ("SQ", 82),
    "SQ_WAVE64_INSTS": ("SQ", 83), "SQ_WAVES": ("SQ", 4), "SQ_WAVE_CYCLES": ("SQ", 24),
}
DEFAULT = ("SQ_BUSY_CYCLES", "SQ_INSTS_VALU", "SQ_INSTS_SALU", "SQC_LDS_IDX_ACTIVE", "SQC_LDS_BANK_CONFLICT",
           "GRBM_GUI_ACTIVE", "GL2C_HIT", "GL2C_MISS")


@dataclass(frozen=True)
class BlockRegs:
    """A block's physical counters: per counter index its SELECT, LO and HI register (absolute dword addresses;
    HI None where the block has none)."""
    select: tuple[int, ...]
    lo: tuple[int, ...]
    hi: tuple[int, ...] | None


BLOCKS: dict[str, BlockRegs] = {
    "SQ": BlockRegs(tuple(SEG1 + 0x39C0 + 2 * n for n in range(8)), tuple(SEG1 + 0x31C0 + 2 * n for n in range(8)),
                    None),
    "GRBM": BlockRegs((SEG1 + 0x3840, SEG1 + 0x3841), (SEG1 + 0x3040, SEG1 + 0x3043), (SEG1 + 0x3041, SEG1 + 0x3044)),
    "GL2C": BlockRegs((SEG1 + 0x3B80, SEG1 + 0x3B82, SEG1 + 0x3B84, SEG1 + 0x3B85),
                      tuple(SEG1 + 0x3380 + 2 * n for n in range(4)), tuple(SEG1 + 0x3381 + 2 * n for n in range(4))),
}
GL2C_INSTANCES = 32


@dataclass(frozen=True)
class Topology:
    """What the readback iterates: XCCs, shader engines per XCC, shader arrays per SE, WGPs per SA."""
    xccs: int
    ses: int
    sas: int
    wgps: int

    @staticmethod
    def of_properties(props: dict[str, int], xccs: int) -> Topology:
        """From a KFD node's properties: SEs = arrays / arrays per engine, a WGP is two CUs."""
        sas = props["simd_arrays_per_engine"]
        return Topology(xccs, props["array_count"] // sas, sas, max(1, props["cu_per_simd_array"] // 2))


@dataclass(frozen=True)
class ScheduledCounter(CounterSample):
    """One counter of a schedule: where its records are (CounterSample's `off`, `size`: 8 bytes per instance,
    instances in the order xcc, inst, se, sa, wgp), its selection and the registers that program and sample it."""
    perf_sel: int
    select: int
    lo: int
    hi: int | None


def instances(block: str, topo: Topology) -> tuple[int, int, int, int]:
    """(inst, se, sa, wgp) counts the readback samples for one XCC."""
    if block == "SQ":
        return 1, topo.ses, topo.sas, topo.wgps
    return (GL2C_INSTANCES if block == "GL2C" else 1), 1, 1, 1


def parse_names(text: str | None) -> tuple[str, ...]:
    """A PMC_COUNTERS value (comma-separated names; empty or None: the defaults), checked against the table."""
    names = tuple(n.strip() for n in (text or "").split(",") if n.strip()) or DEFAULT
    unknown = [n for n in names if n not in COUNTERS]
    if unknown:
        raise ValueError(f"PMC_COUNTERS: unknown counter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                         f"available on gfx11: {', '.join(sorted(COUNTERS))}")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"PMC_COUNTERS names {', '.join(dup)} more than once")
    return names


def schedule(names: Sequence[str], topo: Topology) -> list[ScheduledCounter]:
    """The readback schedule of `names` on a GPU of `topo`: each counter its block's next register pair."""
    out: list[ScheduledCounter] = []
    used: dict[str, int] = {}
    off = 0
    for name in parse_names(",".join(names)):
        block, sel = COUNTERS[name]
        regs = BLOCKS[block]
        n = used.get(block, 0)
        if n >= len(regs.select):
            asked = [x for x in names if COUNTERS[x][0] == block]
            raise ValueError(f"PMC_COUNTERS asks for {len(asked)} {block} counters ({', '.join(asked)}); the {block} "
                             f"block has {len(regs.select)}")
        used[block] = n + 1
        inst, se, sa, wgp = instances(block, topo)
        size = 8 * topo.xccs * inst * se * sa * wgp
        out.append(ScheduledCounter(name, block, topo.xccs, inst, se, sa, wgp, off, size, perf_sel=sel,
                                    select=regs.select[n], lo=regs.lo[n], hi=None if regs.hi is None else regs.hi[n]))
        off += size
    return out


def readback_bytes(sched: Sequence[ScheduledCounter]) -> int:
    """The bytes of one slot's readback."""
    return max((s.off + s.size for s in sched), default=0)
