"""Packing the kernarg segment: the explicit arguments (buffer addresses, then int variables) and whatever
hidden arguments the kernel's metadata asks for (COV5 hidden kernargs: block counts, group sizes, ...).

Offsets come from the metadata's `.args` when the object has them (LLVM's own layout); without metadata the
explicit arguments sit at their natural alignment, as LLVM lays them out. The segment is exactly the
descriptor's `kernarg_size` bytes, zero where nothing is defined.
"""
from __future__ import annotations

from tg_amd.interface import KernelSymbol

Dims = tuple[int, int, int]


def _hidden(kind: str, grid: Dims, local: Dims) -> int:
    """The value of a hidden kernarg: tg-amd fills the dispatch-shape ones; pointers it does not provide are null."""
    axis = "xyz".index(kind[-1]) if kind[-2:] in ("_x", "_y", "_z") else -1
    if kind.startswith("hidden_block_count_"):
        return grid[axis]
    if kind.startswith("hidden_group_size_"):
        return local[axis]
    if kind.startswith("hidden_remainder_"):
        return 0  # the grid is a whole number of workgroups
    if kind == "hidden_grid_dims":
        return 3 if grid[2] > 1 else 2 if grid[1] > 1 else 1
    return 0  # global offsets, dynamic LDS size, and pointers to services tg does not run (printf, hostcall, ...)


def pack_kernargs(kernel: KernelSymbol, explicit: list[tuple[int, int]], grid: Dims, local: Dims,
                  fallback_layout: list[tuple[int, int]]) -> bytes:
    """The kernarg segment of one dispatch. `explicit` is (value, size) per argument in signature order;
    `fallback_layout` their (offset, size) when the object has no metadata."""
    size = kernel.descriptor.kernarg_size
    out = bytearray(size)
    args = kernel.metadata.get(".args")
    if args is None:
        slots = [(off, sz, None) for off, sz in fallback_layout]
    else:
        slots = [(a[".offset"], a[".size"], a[".value_kind"]) for a in args]
    explicit_slots = [s for s in slots if s[2] is None or not s[2].startswith("hidden_")]
    if len(explicit_slots) != len(explicit):
        raise ValueError(f"kernel {kernel.name} takes {len(explicit_slots)} explicit kernargs, got {len(explicit)}")
    values = iter(explicit)
    for off, sz, kind in slots:
        if kind is not None and kind.startswith("hidden_"):
            value = _hidden(kind, grid, local)
        else:
            value, given = next(values)
            if given != sz:
                raise ValueError(f"kernel {kernel.name}: kernarg at offset {off} is {sz} bytes, the value is {given}")
        if off + sz > size:
            raise ValueError(f"kernel {kernel.name}: kernarg at offset {off} ({sz} bytes) is past kernarg_size {size}")
        out[off:off + sz] = (value & ((1 << 8 * sz) - 1)).to_bytes(sz, "little")
    return bytes(out)
