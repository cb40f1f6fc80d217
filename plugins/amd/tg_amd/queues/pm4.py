"""PM4 type-3 packets for the gfx11 compute queue (amd.md 2), built as lists of command words.

A word is an int (a constant dword) or a uint32 UOp (a symbolic dword, patched at link or per run): the same
builders serve the `pm_encode` rules (rules.py), where addresses are UOps, and direct use with int addresses.
Opcodes and register offsets are data (`OPCODES`, `REGISTERS`), copied from amd.md's tables 2.2 and 10.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tg_core.plugin_api import Ops, UOp, dtypes

Word = int | UOp

# IT_OPCODE of each packet (amd.md 2.2)
OPCODES = {"NOP": 0x10, "DISPATCH_DIRECT": 0x15, "PRED_EXEC": 0x23, "WAIT_REG_MEM": 0x3C, "INDIRECT_BUFFER": 0x3F,
           "COPY_DATA": 0x40, "EVENT_WRITE": 0x46, "RELEASE_MEM": 0x49, "ACQUIRE_MEM": 0x58, "SET_SH_REG": 0x76,
           "SET_UCONFIG_REG": 0x79}
NAMES = {v: k for k, v in OPCODES.items()}

# gfx11 GC register segment bases and the registers the queues write: (segment, offset) (amd.md 10)
SEG_BASE = (0x1260, 0xA000, 0x1C000, 0x2402C00)
REGISTERS = {
    "COMPUTE_START_X": (0, 0x1BA4), "COMPUTE_NUM_THREAD_X": (0, 0x1BA7), "COMPUTE_PERFCOUNT_ENABLE": (0, 0x1BAB),
    "COMPUTE_PGM_LO": (0, 0x1BAC),
    "COMPUTE_DISPATCH_SCRATCH_BASE_LO": (0, 0x1BB0), "COMPUTE_PGM_RSRC1": (0, 0x1BB2),
    "COMPUTE_RESOURCE_LIMITS": (0, 0x1BB5), "COMPUTE_TMPRING_SIZE": (0, 0x1BB8), "COMPUTE_RESTART_X": (0, 0x1BBB),
    "COMPUTE_PGM_RSRC3": (0, 0x1BC8), "COMPUTE_USER_DATA_0": (0, 0x1BE0),
}
# NBIO 4.3 HDP flush request / done, absolute dword addresses (amd.md 2.3; WAIT_REG_MEM register mode only)
HDP_FLUSH_REQ, HDP_FLUSH_DONE = 0xE26, 0xE27
SH_REG_BASE = 0x2C00          # SET_SH_REG payload dword 1 = absolute register - this
MAX_USER_DATA = 16

# event types and indices (soc_11, amd.md 2.4/10)
CS_PARTIAL_FLUSH, CACHE_FLUSH_AND_INV_TS_EVENT = 7, 0x14
EVENT_INDEX_CS_PARTIAL_FLUSH, EVENT_INDEX_END_OF_PIPE = 4, 5
# ACQUIRE_MEM GCR_CNTL before a dispatch: GLM/GLK write-back + invalidate, GLV and GL1 invalidate (no I$, no L2)
GCR_DISPATCH = 0x3F0
GCR_FULL = 0xC3F1             # the barrier's: also I$ and L2 write-back + invalidate
# RELEASE_MEM dw1 cache bits for a signal: GLM_WB/INV, GLV_INV, GL1_INV, GL2_INV/WB, SEQ (amd.md 2.4 "0x70F514")
RELEASE_CACHE_FLUSH = 0x70F000
DATA_SEL_NONE, DATA_SEL_32, DATA_SEL_64, DATA_SEL_CLOCK = 0, 1, 2, 3
INT_SEL_NONE, INT_SEL_AFTER_CONFIRM = 0, 2
WAIT_GEQ, WAIT_EQ = 5, 3
WAIT_MEM_SPACE, WAIT_WRITE_THEN_WAIT = 1 << 4, 1 << 6
IB_VALID = 1 << 23
IB_MAX_DWORDS = (1 << 20) - 1
DISPATCH_INITIATOR_W32 = 0x8005  # COMPUTE_SHADER_EN | FORCE_START_AT_000 | CS_W32_EN
DISPATCH_INITIATOR_W64 = 0x0005


def header(opcode: int, payload_dwords: int) -> int:
    """Type-3 header: count = payload dwords - 1 (amd.md 2.1)."""
    if not 1 <= payload_dwords <= 0x4000:
        raise ValueError(f"a PM4 packet carries 1..16384 payload dwords, not {payload_dwords} "
                         f"(opcode {NAMES.get(opcode, hex(opcode))})")
    return (3 << 30) | ((payload_dwords - 1) << 16) | (opcode << 8)


def packet(name: str, *payload: Word) -> list[Word]:
    return [header(OPCODES[name], len(payload)), *payload]


def _const(x: Word) -> Word:
    """A constant UOp as its int: constant words go into the command buffer's blob, not into patches."""
    return int(x.arg) if isinstance(x, UOp) and x.op is Ops.CONST else x


def lo(x: Word) -> Word:
    x = _const(x)
    return x & 0xFFFFFFFF if isinstance(x, int) else (x.cast(dtypes.uint64) & 0xFFFFFFFF).cast(dtypes.uint32)


def hi(x: Word) -> Word:
    x = _const(x)
    return (x >> 32) & 0xFFFFFFFF if isinstance(x, int) else (x.cast(dtypes.uint64) >> 32).cast(dtypes.uint32)


def u32(x: Word) -> Word:
    """A value as the 32-bit word a packet holds (PM4 waits compare the low 32 bits, amd.md 5)."""
    x = _const(x)
    return x & 0xFFFFFFFF if isinstance(x, int) else x.cast(dtypes.uint32) if x.dtype != dtypes.uint32 else x


def sh_reg(name: str) -> int:
    """The SET_SH_REG offset of a register: absolute address - 0x2C00."""
    seg, off = REGISTERS[name]
    a = SEG_BASE[seg] + off
    if not SH_REG_BASE <= a < 0x3000:
        raise ValueError(f"register {name} (absolute {a:#x}) is outside the SET_SH_REG window [0x2C00, 0x3000)")
    return a - SH_REG_BASE


def set_sh_reg(name: str, *values: Word) -> list[Word]:
    """Consecutive values into consecutive registers starting at `name`."""
    return packet("SET_SH_REG", sh_reg(name), *values)


def acquire_mem(gcr: int = GCR_DISPATCH) -> list[Word]:
    return packet("ACQUIRE_MEM", 0, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0, 0, gcr)


def event_write(event: int, index: int) -> list[Word]:
    return packet("EVENT_WRITE", event | (index << 8))


def release_mem(address: Word, data: Word = 0, data_sel: int = DATA_SEL_64, int_sel: int = INT_SEL_NONE,
                cache_flush: bool = False) -> list[Word]:
    """An end-of-pipe write of `data` (DATA_SEL 1/2) or the GPU clock (3) at `address` once prior work is done."""
    dw1 = CACHE_FLUSH_AND_INV_TS_EVENT | (EVENT_INDEX_END_OF_PIPE << 8) | (RELEASE_CACHE_FLUSH if cache_flush else 0)
    return packet("RELEASE_MEM", dw1, (int_sel << 24) | (data_sel << 29), lo(address), hi(address), lo(data),
                  hi(data), 0)


def wait_reg_mem(address: Word, value: Word, function: int = WAIT_GEQ, mask: int = 0xFFFFFFFF) -> list[Word]:
    """Stall the queue until (the dword at `address` & mask) <function> value (low 32 bits)."""
    return packet("WAIT_REG_MEM", function | WAIT_MEM_SPACE, lo(address), hi(address), u32(value), mask, 4)


def hdp_flush() -> list[Word]:
    """Write the HDP flush request register, wait for its done register (amd.md 2.3 memory_barrier)."""
    return packet("WAIT_REG_MEM", WAIT_WRITE_THEN_WAIT | WAIT_GEQ, HDP_FLUSH_REQ, HDP_FLUSH_DONE, 0xFFFFFFFF,
                  0xFFFFFFFF, 0x20)


def indirect_buffer(address: Word, ndwords: int) -> list[Word]:
    if not 0 < ndwords <= IB_MAX_DWORDS:
        raise ValueError(f"an INDIRECT_BUFFER holds 1..{IB_MAX_DWORDS} dwords, not {ndwords}")
    if isinstance(address, int) and address & 3:
        raise ValueError(f"an INDIRECT_BUFFER's address must be dword aligned, not {address:#x}")
    return packet("INDIRECT_BUFFER", lo(address), hi(address), ndwords | IB_VALID)


def pred_exec(xcc_mask: int, body: list[Word], xccs: int) -> list[Word]:
    """`body` run only on the XCCs in `xcc_mask`; the dword count is the body's, known once it is built. A
    one-XCC part has nothing to select: the body as is."""
    if xccs <= 1:
        return body
    if not 0 < xcc_mask < (1 << xccs):
        raise ValueError(f"XCC mask {xcc_mask:#x} selects no XCC of the {xccs} this part has")
    return [*packet("PRED_EXEC", (xcc_mask << 24) | _dwords(body)), *body]


def _dwords(ws: Sequence[Word]) -> int:
    return sum(2 if isinstance(w, UOp) and w.dtype.itemsize == 8 else 1 for w in ws)


# ---- the kernel dispatch ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Dispatch:
    """What one kernel launch writes: the code address (256-byte aligned), the descriptor's RSRC words (RSRC2 with
    the LDS granules already in), scratch, the user SGPR values, and the grid (workgroups) x local size."""
    code: Word
    rsrc1: int
    rsrc2: int
    rsrc3: int
    tmpring_size: int
    scratch: Sequence[Word]        # per XCC: the scratch base address (>> 8 is written)
    user_data: Sequence[Word]
    grid: tuple[Word, Word, Word]
    local: tuple[int, int, int]
    wave32: bool = True
    resource_limits: int = 0
    perfcount: bool = False        # COMPUTE_PERFCOUNT_ENABLE: performance counters count this dispatch's waves


def tmpring_size(private_bytes: int, waves: int) -> int:
    """COMPUTE_TMPRING_SIZE: waves [11:0], per-wave size [26:12] in 256-byte units, a lane taking
    round_up(max(private, 128), 4) bytes of 64 lanes (hcq.md 10.5)."""
    per_lane = -(-max(private_bytes, 128) // 4) * 4
    wavesize = -(-(per_lane * 64) // 256)
    if wavesize >= 1 << 15 or not 0 < waves < 1 << 12:
        raise ValueError(f"scratch of {private_bytes} bytes per lane for {waves} waves does not fit TMPRING_SIZE")
    return waves | (wavesize << 12)


def lds_granules(group_segment_bytes: int) -> int:
    """RSRC2's LDS_SIZE field [23:15]: 512-byte granules (amd.md 2.5)."""
    return (-(-group_segment_bytes // 512)) << 15


def dispatch(d: Dispatch, xccs: int = 1, after_acquire: Sequence[Word] = (), after_dispatch: Sequence[Word] = ()) \
        -> list[Word]:
    """The dispatch sequence of amd.md 2.3; a profiler's words go right after the ACQUIRE_MEM (`after_acquire`: its
    start) and right after DISPATCH_DIRECT (`after_dispatch`: e.g. the thread-trace marker), as hcq.md 10.1 places
    them."""
    if len(d.user_data) > MAX_USER_DATA:
        raise ValueError(f"{len(d.user_data)} user SGPR values; COMPUTE_USER_DATA has {MAX_USER_DATA}")
    if len(d.scratch) != xccs:
        raise ValueError(f"{len(d.scratch)} scratch bases for a part with {xccs} XCCs: one per XCC")
    if isinstance(d.code, int) and d.code & 0xFF:
        raise ValueError(f"kernel code at {d.code:#x}: COMPUTE_PGM_LO takes 256-byte aligned addresses")
    code = d.code >> 8
    ws: list[Word] = acquire_mem()
    ws += after_acquire
    ws += set_sh_reg("COMPUTE_PGM_LO", lo(code), hi(code))
    ws += set_sh_reg("COMPUTE_PGM_RSRC1", d.rsrc1, d.rsrc2)
    ws += set_sh_reg("COMPUTE_PGM_RSRC3", d.rsrc3)
    ws += set_sh_reg("COMPUTE_TMPRING_SIZE", d.tmpring_size)
    for i, base in enumerate(d.scratch):  # each XCC its own scratch: predicated, or the last write would win
        sb = base >> 8
        ws += pred_exec(1 << i, set_sh_reg("COMPUTE_DISPATCH_SCRATCH_BASE_LO", lo(sb), hi(sb)), xccs)
    ws += set_sh_reg("COMPUTE_RESTART_X", 0, 0, 0)
    if d.user_data:
        ws += set_sh_reg("COMPUTE_USER_DATA_0", *d.user_data)
    ws += set_sh_reg("COMPUTE_RESOURCE_LIMITS", d.resource_limits)
    # START_X/Y/Z, NUM_THREAD_X/Y/Z, then PIPELINESTAT_ENABLE and PERFCOUNT_ENABLE (the next two registers)
    ws += set_sh_reg("COMPUTE_START_X", 0, 0, 0, *d.local, 0, int(d.perfcount))
    ws += packet("DISPATCH_DIRECT", *(u32(g) for g in d.grid),
                 DISPATCH_INITIATOR_W32 if d.wave32 else DISPATCH_INITIATOR_W64)
    ws += after_dispatch
    ws += event_write(CS_PARTIAL_FLUSH, EVENT_INDEX_CS_PARTIAL_FLUSH)
    return ws


def signal(address: Word, value: Word, xccs: int = 1) -> list[Word]:
    """The u64 `value` at `address` once prior work is done, caches flushed, an interrupt after the write (so a
    host sleeping on an event wakes); one XCC writes it."""
    return pred_exec(1, release_mem(address, value, DATA_SEL_64, INT_SEL_AFTER_CONFIRM, cache_flush=True), xccs)


def store(address: Word, value: Word, xccs: int = 1) -> list[Word]:
    return pred_exec(1, release_mem(address, value, DATA_SEL_64), xccs)


def timestamp(address: Word, xccs: int = 1) -> list[Word]:
    """The 64-bit GPU clock at `address` at end of pipe."""
    return pred_exec(1, release_mem(address, 0, DATA_SEL_CLOCK), xccs)


def wait(address: Word, value: Word) -> list[Word]:
    return wait_reg_mem(address, value, WAIT_GEQ)


def barrier() -> list[Word]:
    return hdp_flush() + acquire_mem(GCR_FULL)

