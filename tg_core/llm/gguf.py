"""GGUF files: header, metadata, tensor infos and the tensor data, read from a memory map.

Layout (version 2 and 3, little-endian): magic `GGUF`, u32 version, u64 tensor count, u64 metadata count; the
metadata pairs (gguf-string key, u32 value type, value); the tensor infos (name, u32 n_dims, u64 ne[n_dims],
u32 ggml type, u64 offset relative to the data start); zero padding to `general.alignment` (default 32); the
data. `ne[0]` is the contiguous axis, so a tensor's row-major shape is `reversed(ne)`.

Nothing is read until asked for: parsing touches the header pages of the map only, and `GGUFFile.tensor`
uploads one tensor's raw bytes (still quantized) and returns its lazy dequantization (tg_core/llm/dequant.py).
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np

from tg_core.dtype import from_numpy_dtype
from tg_core.llm.dequant import GGMLType, block_layout, dequantize, storage_dtype
from tg_core.llm.weights import remember

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4


class GGUFValueType(IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# struct format of every fixed-size value type (STRING and ARRAY are read by hand)
_SCALAR = {GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b", GGUFValueType.UINT16: "H", GGUFValueType.INT16: "h",
           GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i", GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "?",
           GGUFValueType.UINT64: "Q", GGUFValueType.INT64: "q", GGUFValueType.FLOAT64: "d"}


class GGUFError(ValueError):
    """A file that is not a well-formed GGUF file (the message names the file and what is wrong)."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ne: tuple[int, ...]          # GGUF order: ne[0] is the contiguous axis
    ggml_type: int
    offset: int                  # absolute byte offset in the file
    n_bytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The row-major (numpy) shape: reversed(ne)."""
        return tuple(reversed(self.ne))

    @property
    def type_name(self) -> str:
        try:
            return GGMLType(self.ggml_type).name
        except ValueError:
            return f"ggml type {self.ggml_type}"


class _Cursor:
    """Reads little-endian values from the map, naming the file and the position when it runs out."""

    def __init__(self, buf: mmap.mmap | bytes, path: str):
        self.buf, self.pos, self.path = buf, 0, path

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError(f"{self.path}: truncated while reading {what} at byte {self.pos} "
                            f"(needs {n} bytes, the file has {len(self.buf)})")
        view = memoryview(self.buf)[self.pos:self.pos + n]
        self.pos += n
        return view

    def scalar(self, fmt: str, what: str) -> Any:
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self.take(size, what))[0]

    def string(self, what: str) -> str:
        n = self.scalar("Q", what + " length")
        raw = self.take(n, what)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as e:
            raise GGUFError(f"{self.path}: {what} at byte {self.pos - n} is not UTF-8 ({e})") from None

    def value(self, vtype: int, what: str) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string(what)
        if vtype == GGUFValueType.ARRAY:
            etype = self._type(self.scalar("I", what + " element type"), what)
            count = self.scalar("Q", what + " element count")
            if etype in _SCALAR:
                fmt = _SCALAR[GGUFValueType(etype)]
                raw = self.take(count * struct.calcsize(fmt), what)
                return np.frombuffer(raw, dtype=np.dtype("<" + fmt)).tolist()  # one copy, not count unpacks
            return [self.value(etype, f"{what}[{i}]") for i in range(count)]
        return self.scalar(_SCALAR[GGUFValueType(self._type(vtype, what))], what)

    def _type(self, vtype: int, what: str) -> int:
        if vtype not in GGUFValueType._value2member_map_:
            allowed = ", ".join(f"{t.value} {t.name}" for t in GGUFValueType)
            raise GGUFError(f"{self.path}: {what} has value type {vtype}, which GGUF does not define (allowed: {allowed})")
        return vtype


class GGUFFile:
    """A parsed GGUF file. `metadata` maps keys to Python values (arrays are lists), `value_types` to their
    GGUFValueType (arrays: (ARRAY, element type)); `tensors` maps names to TensorInfo in file order."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        with open(self.path, "rb") as f:
            size = f.seek(0, 2)
            if size == 0:
                raise GGUFError(f"{self.path}: empty file, not a GGUF file")
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        cur = _Cursor(self._map, self.path)
        magic = bytes(cur.take(4, "the magic"))
        if magic != MAGIC:
            raise GGUFError(f"{self.path}: magic {magic!r} is not {MAGIC!r}: not a GGUF file")
        self.version: int = cur.scalar("I", "the version")
        if self.version not in (2, 3):
            raise GGUFError(f"{self.path}: GGUF version {self.version} is not supported (2 and 3 are)")
        n_tensors, n_kv = cur.scalar("Q", "the tensor count"), cur.scalar("Q", "the metadata count")
        self.metadata: dict[str, Any] = {}
        self.value_types: dict[str, GGUFValueType | tuple[GGUFValueType, GGUFValueType]] = {}
        for i in range(n_kv):
            key = cur.string(f"metadata key {i}")
            vtype = cur._type(cur.scalar("I", f"the value type of {key!r}"), repr(key))
            if vtype == GGUFValueType.ARRAY:
                etype = int.from_bytes(cur.buf[cur.pos:cur.pos + 4], "little")
                self.value_types[key] = (GGUFValueType.ARRAY, GGUFValueType(cur._type(etype, repr(key))))
            else:
                self.value_types[key] = GGUFValueType(vtype)
            self.metadata[key] = cur.value(vtype, repr(key))
        align = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise GGUFError(f"{self.path}: general.alignment {align!r} is not a positive power of two")
        self.alignment: int = align
        infos = []
        for i in range(n_tensors):
            name = cur.string(f"tensor name {i}")
            n_dims = cur.scalar("I", f"n_dims of {name!r}")
            if not 1 <= n_dims <= MAX_DIMS:
                raise GGUFError(f"{self.path}: tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
            ne = tuple(cur.scalar("Q", f"ne of {name!r}") for _ in range(n_dims))
            infos.append((name, ne, cur.scalar("I", f"type of {name!r}"), cur.scalar("Q", f"offset of {name!r}")))
        self.data_start: int = -(-cur.pos // align) * align
        self.tensors: dict[str, TensorInfo] = {}
        for name, ne, gtype, rel in infos:
            if name in self.tensors:
                raise GGUFError(f"{self.path}: tensor {name!r} appears twice")
            if rel % align:
                raise GGUFError(f"{self.path}: tensor {name!r} starts at data offset {rel}, not a multiple of the "
                                f"alignment {align}")
            n_bytes = _n_bytes(ne, gtype)
            start = self.data_start + rel
            if n_bytes is not None and start + n_bytes > size:
                raise GGUFError(f"{self.path}: tensor {name!r} ({n_bytes} bytes at {start}) runs past the end of "
                                f"the file ({size} bytes)")
            self.tensors[name] = TensorInfo(name, ne, gtype, start, -1 if n_bytes is None else n_bytes)

    # ---- data --------------------------------------------------------------------------------------------

    def raw(self, name: str) -> np.ndarray:
        """A tensor's bytes as a read-only numpy view of the map (no copy): for a block type (n_blocks,
        block_bytes) uint8, for F32/F16/BF16 the elements in their storage dtype, flat."""
        info = self._info(name)
        dt, block_elems, block_bytes = self._layout(info)
        view = np.frombuffer(self._map, dtype=np.uint8, count=info.n_bytes, offset=info.offset)
        view.flags.writeable = False  # the map is private (copy on write), but the file's bytes are not ours to change
        return view.reshape(-1, block_bytes) if block_elems > 1 else view.view(dt)

    def tensor(self, name: str, device: str | None = None) -> Any:
        """The tensor `name` as a lazy float32 Tensor of its row-major shape: its raw bytes are uploaded to
        `device` as they are (quantized) and dequantized by the kernels that read it."""
        info = self._info(name)
        self._layout(info)
        raw = self.raw_tensor(name, device)
        value = dequantize(raw, info.ggml_type).reshape(info.shape)
        remember(value, raw, info.ggml_type)  # quantized kernels may read the bytes instead (llm/weights.py)
        return value

    def raw_tensor(self, name: str, device: str | None = None) -> Any:
        """The tensor's bytes (as `raw` shapes them) on `device`: on a device that adopts host memory (CPU)
        the map itself, so the file's pages are the weights' memory and no copy is made; elsewhere a copy."""
        from tg_core.device import Buffer, Device
        from tg_core.engine.realize import attach
        from tg_core.tensor import Tensor
        from tg_core.uop import UOp
        arr = self.raw(name)
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        node = UOp.new_buffer(dev, arr.size, from_numpy_dtype(arr.dtype))
        attach(node, Buffer.from_host(arr.reshape(-1), dev))
        return Tensor(node.reshape(arr.shape), device=dev)

    def _info(self, name: str) -> TensorInfo:
        if name not in self.tensors:
            raise KeyError(f"{self.path}: no tensor named {name!r}")
        return self.tensors[name]

    def _layout(self, info: TensorInfo) -> tuple[np.dtype, int, int]:
        layout = block_layout(info.ggml_type)
        if layout is None:
            from tg_core.llm.dequant import SUPPORTED
            raise NotImplementedError(f"{self.path}: tensor {info.name!r} has type {info.type_name}, which tg "
                                      f"cannot dequantize (supported: {', '.join(t.name for t in SUPPORTED)})")
        block_elems, block_bytes = layout
        if info.ne[0] % block_elems:
            raise GGUFError(f"{self.path}: tensor {info.name!r} of type {info.type_name} has ne[0] = {info.ne[0]}, "
                            f"not a multiple of its block of {block_elems} elements")
        return storage_dtype(info.ggml_type), block_elems, block_bytes

    def close(self) -> None:
        self._map.close()

    def __repr__(self) -> str:
        return f"GGUFFile({self.path!r}, version {self.version}, {len(self.metadata)} keys, {len(self.tensors)} tensors)"


def _n_bytes(ne: tuple[int, ...], ggml_type: int) -> int | None:
    """Bytes of a tensor, or None for a type tg does not know (its size is checked when it is read)."""
    layout = block_layout(ggml_type)
    if layout is None:
        return None
    n = int(np.prod(ne, dtype=np.int64))
    return n // layout[0] * layout[1]
