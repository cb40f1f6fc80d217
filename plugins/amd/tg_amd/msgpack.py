"""A msgpack decoder, just enough for the AMDGPU metadata note (maps, arrays, strings, ints, floats, bools)."""
from __future__ import annotations

import struct
from typing import Any


class MsgpackError(ValueError):
    """Malformed msgpack."""


def unpackb(data: bytes) -> Any:
    """The single value encoded in `data`."""
    value, at = _value(bytes(data), 0)
    if at != len(data):
        raise MsgpackError(f"{len(data) - at} bytes left after the value")
    return value


# fixed-size formats: first byte -> (struct format, byte count)
_SCALARS = {0xCA: (">f", 4), 0xCB: (">d", 8), 0xCC: (">B", 1), 0xCD: (">H", 2), 0xCE: (">I", 4), 0xCF: (">Q", 8),
            0xD0: (">b", 1), 0xD1: (">h", 2), 0xD2: (">i", 4), 0xD3: (">q", 8)}
# length-prefixed formats: first byte -> (kind, bytes of the length)
_SIZED = {0xD9: ("str", 1), 0xDA: ("str", 2), 0xDB: ("str", 4), 0xC4: ("bin", 1), 0xC5: ("bin", 2), 0xC6: ("bin", 4),
          0xDC: ("array", 2), 0xDD: ("array", 4), 0xDE: ("map", 2), 0xDF: ("map", 4)}


def _value(d: bytes, at: int) -> tuple[Any, int]:
    if at >= len(d):
        raise MsgpackError(f"truncated at byte {at}")
    b = d[at]
    at += 1
    if b <= 0x7F:
        return b, at
    if b >= 0xE0:
        return b - 0x100, at
    if 0x80 <= b <= 0x8F:
        return _collection("map", b & 0xF, d, at)
    if 0x90 <= b <= 0x9F:
        return _collection("array", b & 0xF, d, at)
    if 0xA0 <= b <= 0xBF:
        return _bytes("str", b & 0x1F, d, at)
    if b in (0xC0, 0xC2, 0xC3):
        return {0xC0: None, 0xC2: False, 0xC3: True}[b], at
    if b in _SCALARS:
        fmt, n = _SCALARS[b]
        return struct.unpack_from(fmt, d, at)[0], at + n
    if b in _SIZED:
        kind, n = _SIZED[b]
        length = int.from_bytes(d[at:at + n], "big")
        at += n
        return _collection(kind, length, d, at) if kind in ("map", "array") else _bytes(kind, length, d, at)
    raise MsgpackError(f"unsupported msgpack type byte {b:#04x} at {at - 1}")


def _bytes(kind: str, n: int, d: bytes, at: int) -> tuple[Any, int]:
    if at + n > len(d):
        raise MsgpackError(f"a {n}-byte {kind} at {at} runs past the end")
    raw = d[at:at + n]
    return (raw.decode() if kind == "str" else raw), at + n


def _collection(kind: str, n: int, d: bytes, at: int) -> tuple[Any, int]:
    if kind == "array":
        out = []
        for _ in range(n):
            v, at = _value(d, at)
            out.append(v)
        return out, at
    m = {}
    for _ in range(n):
        k, at = _value(d, at)
        v, at = _value(d, at)
        m[k] = v
    return m, at
