"""SDMA 6.0 packets for the gfx11 copy queue (amd.md 4), as lists of command words (ints or uint32 UOps).

The SDMA header dword is OP [7:0] | SUB_OP [15:8] | op-specific bits; unlike PM4 there is no count field: the
engine knows each packet's length from its opcode, so a zero dword is a one-dword NOP (the ring's filler).
"""
from __future__ import annotations

from tg_amd.queues.pm4 import Word, hi, lo, u32

OPCODES = {"NOP": 0, "COPY": 1, "WRITE": 2, "INDIRECT": 4, "FENCE": 5, "TRAP": 6, "POLL_REGMEM": 8,
           "ATOMIC": 10, "TIMESTAMP": 13, "GCR_REQ": 17, "DUMMY_TRAP": 32}
NAMES = {v: k for k, v in OPCODES.items()}
# dwords per packet of the opcodes the engine parses (the mock's processor shares this length table)
LENGTHS = {"NOP": 1, "COPY": 7, "FENCE": 4, "TRAP": 2, "POLL_REGMEM": 6, "TIMESTAMP": 3, "DUMMY_TRAP": 1}
SUB_COPY_LINEAR, SUB_TIMESTAMP_GET_GLOBAL = 0, 2
FENCE_MTYPE = 3               # MTYPE on gfx10+: uncached
POLL_MEM, POLL_FUNC_SHIFT = 1 << 31, 28
POLL_GEQ = 5
POLL_INTERVAL_RETRY = 0x0FFF0004  # interval 4, retry count 0xFFF (tinygrad's)
MAX_COPY_BYTES = 1 << 30          # 1 GiB per COPY_LINEAR on SDMA >= 5.2 (amd.md 4); 4 MiB on older engines
MAX_COPY_BYTES_OLD = 4 << 20


def max_copy_bytes(version: tuple[int, int, int]) -> int:
    """The largest COPY_LINEAR of an SDMA IP version (newer hcq2's rule, amd.md 4)."""
    return MAX_COPY_BYTES if (4, 4, 2) <= version < (5, 0, 0) or version >= (5, 2, 0) else MAX_COPY_BYTES_OLD


def copy_linear(dst: Word, src: Word, nbytes: int, max_bytes: int = MAX_COPY_BYTES) -> list[Word]:
    """`nbytes` from `src` to `dst`, one COPY_LINEAR per `max_bytes` chunk (byte_count - 1 is a 30-bit field)."""
    if nbytes <= 0:
        raise ValueError(f"an SDMA copy moves a positive number of bytes, not {nbytes}")
    if not 0 < max_bytes <= 1 << 30:
        raise ValueError(f"max_bytes {max_bytes}: COPY_LINEAR moves 1..2^30 bytes")
    ws: list[Word] = []
    for off in range(0, nbytes, max_bytes):
        n = min(max_bytes, nbytes - off)
        s, d = src + off, dst + off
        ws += [OPCODES["COPY"] | (SUB_COPY_LINEAR << 8), n - 1, 0, lo(s), hi(s), lo(d), hi(d)]
    return ws


def fence(address: Word, value: Word) -> list[Word]:
    """Write the 32-bit `value` at `address` once prior packets are done."""
    return [OPCODES["FENCE"] | (FENCE_MTYPE << 16), lo(address), hi(address), u32(value)]


def trap(context: int = 0) -> list[Word]:
    """An interrupt (event `context`) to the host."""
    return [OPCODES["TRAP"], context & 0x0FFFFFFF]


def poll_regmem(address: Word, value: Word, function: int = POLL_GEQ, mask: int = 0xFFFFFFFF) -> list[Word]:
    """Stall until (the dword at `address` & mask) <function> value."""
    return [OPCODES["POLL_REGMEM"] | (function << POLL_FUNC_SHIFT) | POLL_MEM, lo(address), hi(address), u32(value),
            mask, POLL_INTERVAL_RETRY]


def timestamp(address: Word) -> list[Word]:
    """The 64-bit global timestamp at `address` (8-byte aligned)."""
    if isinstance(address, int) and address & 7:
        raise ValueError(f"an SDMA timestamp goes to an 8-byte aligned address, not {address:#x}")
    return [OPCODES["TIMESTAMP"] | (SUB_TIMESTAMP_GET_GLOBAL << 8), lo(address), hi(address)]


def store(address: Word, value: Word) -> list[Word]:
    """The u64 `value` at `address` as two fences (an SDMA fence writes 32 bits; hcq's values are u64). Both
    follow all prior work, so a waiter released by either half is released after that work."""
    return fence(address + 4, hi(value)) + fence(address, lo(value))


def signal(address: Word, value: Word) -> list[Word]:
    """A store, then a trap so that a host sleeping on the queue's event wakes."""
    return store(address, value) + trap()
