"""AQL packets (amd.md 3): 64-byte packets in a ring counted in packets; the doorbell is the index of the last
packet written (doorbell lag 1).

- a kernel is one `hsa_kernel_dispatch_packet_t` (grid in work-items, kernel_object = the 64-byte descriptor,
  kernarg address); the packet processor builds the wave state from the descriptor;
- every run of PM4 between dispatches (signals, waits, timestamps, barriers) is one vendor-specific packet
  (`amd_aql_pm4_ib_packet_t`, format 1) holding a PM4 INDIRECT_BUFFER to that run in the command buffer.

Header: type [7:0], barrier [8], acquire scope [10:9], release scope [12:11]; tg uses barrier + system scopes
(0x1500 | type), so every packet waits for the previous ones and sees and publishes all memory.
"""
from __future__ import annotations

from tg_core.plugin_api import dtypes
from tg_amd.interface import KernelSymbol
from tg_amd.queues import pm4
from tg_amd.queues.pm4 import Word, hi, lo

PACKET_BYTES, PACKET_DWORDS = 64, 16
TYPE_VENDOR, TYPE_INVALID, TYPE_KERNEL_DISPATCH = 0, 1, 2
HEADER = 0x1500                # barrier | system acquire | system release
FORMAT_PM4_IB = 1
DW_COUNT_REMAIN = 10           # dwords of the vendor packet after the embedded IB packet and this field
DIMENSIONS = 3


def pm4_ib(address: Word, ndwords: int) -> list[Word]:
    """A vendor packet running the `ndwords` PM4 dwords at `address`."""
    return [HEADER | TYPE_VENDOR | (FORMAT_PM4_IB << 16), *pm4.indirect_buffer(address, ndwords), DW_COUNT_REMAIN,
            *([0] * 8), 0, 0]


def kernel_dispatch(kernel: KernelSymbol, image_va: Word, kernarg: Word, grid: tuple[Word, Word, Word],
                    local: tuple[int, int, int]) -> list[Word]:
    """The dispatch packet of `kernel` (loaded with its code object at `image_va`) on `grid` workgroups (ints, or
    uint32 expressions evaluated per run: the packet holds grid x local work-items)."""
    if any(isinstance(g, int) and g < 1 for g in grid) or any(not 0 < x < 1 << 16 for x in local):
        raise ValueError(f"kernel {kernel.name}: a dispatch of {grid} workgroups of {local}: sizes must be >= 1 "
                         "(workgroup sizes are 16-bit fields)")
    items: list[Word] = [g * x if isinstance(g, int) else pm4.u32(g.cast(dtypes.uint32) * x) for g, x in zip(grid, local)]
    if any(isinstance(n, int) and n >= 1 << 32 for n in items):
        raise ValueError(f"kernel {kernel.name}: grid {items} work-items; an AQL grid size is a 32-bit field")
    kd = kernel.descriptor
    desc = image_va + kernel.descriptor_offset
    return [HEADER | TYPE_KERNEL_DISPATCH | (DIMENSIONS << 16), local[0] | (local[1] << 16), local[2], *items,
            kd.private_segment_fixed_size, kd.group_segment_fixed_size, lo(desc), hi(desc), lo(kernarg), hi(kernarg),
            0, 0, 0, 0]
