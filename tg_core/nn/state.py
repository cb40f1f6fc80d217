"""State dicts and the safetensors format.

A state dict maps dotted names to the Tensors an object holds: attributes, list/tuple items and dict values,
recursively (`model.layers.0.weight`). safetensors files are: an 8-byte little-endian header length n, n bytes
of JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}}, plus an optional "__metadata__" of strings),
padded with spaces to a multiple of 8, then the tensors' raw little-endian bytes, offsets relative to the
end of the header.
"""
from __future__ import annotations

import json
import math
import os
import struct
import types
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from tg_core.dtype import DType, dtypes, from_numpy_dtype, to_numpy_dtype
from tg_core.tensor import Tensor
from tg_core.tensor.storage import storage_of, write

_SAFE_DTYPES: dict[str, DType] = {
    "F64": dtypes.float64, "F32": dtypes.float32, "F16": dtypes.float16, "I64": dtypes.int64, "I32": dtypes.int32,
    "I16": dtypes.int16, "I8": dtypes.int8, "U64": dtypes.uint64, "U32": dtypes.uint32, "U16": dtypes.uint16,
    "U8": dtypes.uint8, "BOOL": dtypes.bool,
}
_SAFE_NAMES = {dt: name for name, dt in _SAFE_DTYPES.items()}


def get_state_dict(obj: Any, prefix: str = "", tensor_type: type[Tensor] = Tensor) -> dict[str, Tensor]:
    """Every Tensor reachable from `obj` through attributes, sequences and mappings, by dotted name."""
    out: dict[str, Tensor] = {}
    _collect(obj, prefix, tensor_type, out, set())
    return out


def _collect(obj: Any, prefix: str, tensor_type: type[Tensor], out: dict[str, Tensor], active: set[int]) -> None:
    if isinstance(obj, tensor_type):
        out[prefix.strip(".")] = obj
        return
    if id(obj) in active:  # an object that (indirectly) holds itself
        return
    if hasattr(obj, "_asdict"):  # a namedtuple: by field name
        items = obj._asdict().items()
    elif isinstance(obj, Mapping):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    elif hasattr(obj, "__dict__") and not isinstance(obj, (type, types.ModuleType)):
        items = vars(obj).items()
    else:
        return
    active.add(id(obj))
    for k, v in items:
        _collect(v, f"{prefix}{k}.", tensor_type, out, active)
    active.discard(id(obj))


def get_parameters(obj: Any) -> list[Tensor]:
    """The tensors of `obj`'s state dict, each once."""
    out: list[Tensor] = []
    for t in get_state_dict(obj).values():
        if all(t is not u for u in out):
            out.append(t)
    return out


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = True,
                    consume: bool = False, realize: bool = True) -> None:
    """Copy `state_dict`'s tensors into `model`'s (cast to their dtypes; shapes must match). With `strict`, a
    key of the model missing from `state_dict` or a key of `state_dict` the model does not have is an error;
    otherwise a missing key is skipped (with a warning when `verbose`). `consume` removes loaded entries."""
    own = get_state_dict(model)
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    if strict and (missing or unexpected):
        raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
    if verbose and missing:
        warnings.warn(f"load_state_dict: not loaded (not in the state dict): {missing}", stacklevel=2)
    stored: list[tuple[Tensor, Any]] = []
    for k, v in own.items():
        if k not in state_dict:
            continue
        src = state_dict[k]
        if v.shape != src.shape:
            raise ValueError(f"Shape mismatch in layer `{k}`: Expected shape {v.shape}, "
                             f"but found {src.shape} in state dict.")
        src = src.to(v.device)
        if storage_of(v.uop) is not None and v.numel():
            stored.append((v, src._cast_to(v.dtype).uop))
        else:
            v.assign(src)
        if consume:
            del state_dict[k]
    if stored:
        write(stored)  # one schedule for every tensor that already has storage
    if realize:
        Tensor.realize_all(*own.values())


def safe_save(tensors: dict[str, Tensor], fn: str, metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` to the safetensors file `fn`."""
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs: list[bytes] = []
    offset = 0
    for name, t in tensors.items():
        if t.dtype not in _SAFE_NAMES:
            raise TypeError(f"safe_save: {name} has dtype {t.dtype!r}, which this writer does not support")
        data = np.ascontiguousarray(t.numpy()).astype(to_numpy_dtype(t.dtype).newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _SAFE_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(fn, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def safe_load_metadata(fn: str) -> tuple[dict[str, Any], int]:
    """The JSON header of the safetensors file `fn` and the offset of its data. The header is checked against
    the format and the file (ValueError saying what is wrong), so that no garbage reaches an allocation."""
    with open(fn, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{fn} is not a safetensors file: it is shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)
        if n > size - 8:  # checked before reading: a garbage length would be a huge allocation
            raise ValueError(f"{fn} is not a safetensors file: header length {n} exceeds file size {size}")
        text = f.read(n)
    try:
        header = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{fn} is not a safetensors file: its {n}-byte header is not JSON ({e})") from None
    _check_header(fn, header, size - 8 - n)
    return header, 8 + n


def _check_header(fn: str, header: Any, data_size: int) -> None:
    """Raise ValueError (TypeError for a dtype this reader lacks) unless `header` describes tensors that lie
    within the `data_size` bytes after it, each with as many bytes as its shape and dtype take."""
    def bad(why: str) -> ValueError:
        return ValueError(f"{fn} is not a safetensors file: {why}")
    if not isinstance(header, dict):
        raise bad(f"the header is a JSON {type(header).__name__}, not an object of tensors")
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise bad("__metadata__ must be an object of strings")
            continue
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise bad(f"tensor {name!r} must have exactly the keys dtype, shape and data_offsets, got {info!r:.200}")
        dt_name, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dt_name not in _SAFE_DTYPES:
            raise TypeError(f"safe_load: {fn}: tensor {name!r} has dtype {dt_name!r}, which this reader does not "
                            f"support; supported: {', '.join(_SAFE_DTYPES)}")
        if not isinstance(shape, list) or not all(_is_count(s) for s in shape):
            raise bad(f"tensor {name!r} has shape {shape!r:.200}; a shape is a list of integers >= 0")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets):
            raise bad(f"tensor {name!r} has data_offsets {offsets!r:.200}; they are [begin, end], integers >= 0")
        begin, end = offsets
        if not begin <= end <= data_size:
            raise bad(f"tensor {name!r} has data_offsets [{begin}, {end}] outside the {data_size} bytes of data")
        want = math.prod(shape) * _SAFE_DTYPES[dt_name].itemsize
        if end - begin != want:
            raise bad(f"tensor {name!r} of shape {shape} and dtype {dt_name} takes {want} bytes, but its "
                      f"data_offsets [{begin}, {end}] hold {end - begin}")


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def safe_load(fn: str, device: str | None = None) -> dict[str, Tensor]:
    """The tensors of the safetensors file `fn` (realized, in the file's order)."""
    header, start = safe_load_metadata(fn)
    with open(fn, "rb") as f:
        f.seek(start)
        data = f.read()
    out: dict[str, Tensor] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = _SAFE_DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        npdt = to_numpy_dtype(dt).newbyteorder("<")
        arr = np.frombuffer(data[begin:end], dtype=npdt).astype(npdt.newbyteorder("="))
        out[name] = Tensor(arr.reshape(info["shape"]), device=device, dtype=from_numpy_dtype(arr.dtype))
    return out


__all__ = ["get_parameters", "get_state_dict", "load_state_dict", "safe_load", "safe_load_metadata", "safe_save"]
