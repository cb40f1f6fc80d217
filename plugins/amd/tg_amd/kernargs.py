"""Packing the kernarg segment: the explicit arguments (buffer addresses, then int variables) and whatever
hidden arguments the kernel's metadata asks for (COV5 hidden kernargs: block counts, group sizes, ...).

Offsets come from the metadata's `.args` when the object has them (LLVM's own layout); without metadata the
explicit arguments sit at their natural alignment, as LLVM lays them out. The segment is exactly the
descriptor's `kernarg_size` bytes, zero where nothing is defined.
"""
from __future__ import annotations

from typing import Any

from tg_core.plugin_api import UOp, dtypes
from tg_amd.interface import KernelSymbol

Dims = tuple[int, int, int]


Word = int | UOp  # a constant, or a uint32/uint64 UOp patched at link or per run (hcq)


def _hidden(kind: str, grid: tuple[Word, Word, Word], local: Dims) -> Word:
    """The value of a hidden kernarg: tg-amd fills the dispatch-shape ones; pointers it does not provide are null.
    `hidden_grid_dims` of a run-time grid says 3 (tg's kernels never read it; the dims used are the block counts)."""
    axis = "xyz".index(kind[-1]) if kind[-2:] in ("_x", "_y", "_z") else -1
    if kind.startswith("hidden_block_count_"):
        return grid[axis]
    if kind.startswith("hidden_group_size_"):
        return local[axis]
    if kind.startswith("hidden_remainder_"):
        return 0  # the grid is a whole number of workgroups
    if kind == "hidden_grid_dims":
        if not all(isinstance(g, int) for g in grid[1:]):
            return 3
        return 3 if grid[2] > 1 else 2 if grid[1] > 1 else 1
    return 0  # global offsets, dynamic LDS size, and pointers to services tg does not run (printf, hostcall, ...)


def _slots(kernel: KernelSymbol, nexplicit: int, fallback_layout: list[tuple[int, int]]) -> list[tuple[int, int, Any]]:
    size = kernel.descriptor.kernarg_size
    args = kernel.metadata.get(".args")
    slots = [(off, sz, None) for off, sz in fallback_layout] if args is None else \
        [(a[".offset"], a[".size"], a[".value_kind"]) for a in args]
    explicit = [s for s in slots if s[2] is None or not s[2].startswith("hidden_")]
    if len(explicit) != nexplicit:
        raise ValueError(f"kernel {kernel.name} takes {len(explicit)} explicit kernargs, got {nexplicit}")
    for off, sz, _ in slots:
        if off + sz > size:
            raise ValueError(f"kernel {kernel.name}: kernarg at offset {off} ({sz} bytes) is past kernarg_size {size}")
    return slots


def kernarg_words(kernel: KernelSymbol, explicit: list[tuple[Word, int]], grid: tuple[Word, Word, Word],
                  local: Dims, fallback_layout: list[tuple[int, int]]) -> list[Word]:
    """The kernarg segment of one dispatch as dwords (`kernarg_size` bytes rounded up to dwords). `explicit` is
    (value, size) per argument in signature order: an int, or a UOp (a buffer address, a variable, a grid dim)
    whose bytes are patched; `fallback_layout` their (offset, size) when the object has no metadata. A symbolic
    value must fill whole dwords (4 or 8 bytes at a 4-aligned offset), as tg's addresses and int32 variables do."""
    slots = _slots(kernel, len(explicit), fallback_layout)
    out: list[Word] = [0] * ((kernel.descriptor.kernarg_size + 3) // 4)
    values = iter(explicit)
    for off, sz, kind in slots:
        if kind is not None and kind.startswith("hidden_"):
            value = _hidden(kind, grid, local)
        else:
            value, given = next(values)
            if given != sz:
                raise ValueError(f"kernel {kernel.name}: kernarg at offset {off} is {sz} bytes, the value is {given}")
        if isinstance(value, int):
            for i, b in enumerate((value & ((1 << 8 * sz) - 1)).to_bytes(sz, "little")):
                w = out[(off + i) // 4]
                assert isinstance(w, int), "a constant byte inside a symbolic dword"
                out[(off + i) // 4] = w | (b << 8 * ((off + i) % 4))
            continue
        if off % 4 or sz not in (4, 8):
            raise ValueError(f"kernel {kernel.name}: a run-time kernarg of {sz} bytes at offset {off}; run-time "
                             "values fill whole dwords")
        v = value.cast(dtypes.uint64)
        out[off // 4] = (v & 0xFFFFFFFF).cast(dtypes.uint32)
        if sz == 8:
            out[off // 4 + 1] = (v >> 32).cast(dtypes.uint32)
    return out


def pack_kernargs(kernel: KernelSymbol, explicit: list[tuple[int, int]], grid: Dims, local: Dims,
                  fallback_layout: list[tuple[int, int]]) -> bytes:
    """The kernarg segment of one dispatch with every value known: exactly `kernarg_size` bytes."""
    words = kernarg_words(kernel, list(explicit), grid, local, fallback_layout)
    data = b"".join(int(w).to_bytes(4, "little") for w in words)  # type: ignore[arg-type]  # all ints here
    return data[:kernel.descriptor.kernarg_size]
