"""C structs as patched byte buffers: the queue descriptors and packets a device's queues need in memory.

A `Struct` is a layout: a table of fields `(name, type, byte offset)` (or `Struct.c`, which places fields by
the C rules, as a compiler and ctypes do). A type is a scalar dtype, `Array(type, n)`, another `Struct`
(embedded by value) or `Pointer()` (an 8-byte address, e.g. of another patched struct). The layout is checked
once: natural alignment of every field (unless `packed`), no overlapping fields, everything inside `size`.

`layout.build(ref, values)` gives a `PatchedStruct`: the bytes of every constant field as one blob, and a
patch slot per symbolic field (a UOp: an address, a variable, a load; or a name, which is the variable of
that name). A pointer to another `PatchedStruct` is the address of its memory, a word known at link time,
and the pointed-to struct is written with the one pointing to it (nesting). Fields named in `per_run` are
the ones a replay patches: their value must change per run (a variable, an input's address, a load), and
every other symbolic field must be known once buffers exist (placeholder addresses and arithmetic on them),
so a struct cannot silently leave a per-run word in its link-time part or the other way round.

`stmts()` are the host statements (ops.py) that write the struct and its children: a blob and one store per
patch; the link (link.py) runs the link-time ones once and leaves the per-run ones to the host program.
"""
from __future__ import annotations

import math
import struct as pystruct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Union

from tg_core.dtype import DType, dtypes
from tg_core.hcq import ops as q
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp


@dataclass(frozen=True)
class Array:
    """`n` elements of `elem` in a row (a C array `elem name[n]`)."""
    elem: FieldType
    n: int

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n <= 0:
            raise ValueError(f"an Array needs a positive element count, got {self.n!r}")
        _check_type(self.elem, "an Array's element")


@dataclass(frozen=True)
class Pointer:
    """An 8-byte device address; `target` documents what it points to (a Struct) and is checked at build."""
    target: Struct | None = None


FieldType = Union[DType, Array, Pointer, "Struct"]
Value = Union[int, float, bool, str, UOp, None, "PatchedStruct", bytes, Sequence, Mapping]

_SCALARS = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
            dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64)


def _check_type(t: object, what: str) -> None:
    if isinstance(t, DType):
        if t not in _SCALARS:
            raise TypeError(f"{what} has type {t!r}, which has no C layout here; scalar types allowed: "
                            f"{', '.join(d.name for d in _SCALARS)}")
    elif not isinstance(t, (Array, Pointer, Struct)):
        raise TypeError(f"{what} has type {t!r}; a field type is a scalar dtype, Array(type, n), Pointer() or a Struct")


def sizeof(t: FieldType) -> int:
    if isinstance(t, DType):
        return t.itemsize
    if isinstance(t, Array):
        return sizeof(t.elem) * t.n
    if isinstance(t, Pointer):
        return 8
    return t.size


def alignof(t: FieldType) -> int:
    """The C alignment of `t` (natural alignment of scalars; the largest member's for arrays and structs)."""
    if isinstance(t, DType):
        return t.itemsize
    if isinstance(t, Array):
        return alignof(t.elem)
    if isinstance(t, Pointer):
        return 8
    return t.align


def _type_name(t: FieldType) -> str:
    if isinstance(t, DType):
        return t.name
    if isinstance(t, Array):
        return f"{_type_name(t.elem)}[{t.n}]"
    if isinstance(t, Pointer):
        return f"{t.target.name}*" if t.target is not None else "void*"
    return f"struct {t.name}"


@dataclass(frozen=True)
class Field:
    name: str
    type: FieldType
    offset: int

    @property
    def end(self) -> int:
        return self.offset + sizeof(self.type)


class Struct:
    """A C struct layout. `Struct(name, [(field, type, offset), ...], size=None, per_run=(), packed=False)`:
    `size` defaults to the end of the last field rounded up to the struct's alignment; `per_run` names the
    scalars and pointers patched at every run, by path (`count`, `grid[0]`, `inner.n`); `packed` drops the
    alignment requirements (alignment 1, like ctypes' `_pack_ = 1`)."""

    def __init__(self, name: str, fields: Sequence[tuple[str, FieldType, int]], size: int | None = None,
                 per_run: Sequence[str] = (), packed: bool = False):
        self.name, self.packed = name, packed
        rows: list[Field] = []
        for row in fields:
            if not isinstance(row, tuple) or len(row) != 3:
                raise TypeError(f"struct {name}: a field is (name, type, offset), got {row!r}")
            fname, ftype, off = row
            if not isinstance(fname, str) or not fname.isidentifier():
                raise ValueError(f"struct {name}: a field name is an identifier, got {fname!r}")
            _check_type(ftype, f"struct {name} field {fname}")
            if not isinstance(off, int) or isinstance(off, bool) or off < 0:
                raise ValueError(f"struct {name} field {fname}: the offset is a byte offset >= 0, got {off!r}")
            if not packed and off % alignof(ftype):
                raise ValueError(f"struct {name} field {fname} ({_type_name(ftype)}) at offset {off} is not aligned "
                                 f"to its {alignof(ftype)}-byte alignment (offsets allowed: multiples of "
                                 f"{alignof(ftype)}; or packed=True)")
            rows.append(Field(fname, ftype, off))
        names = [f.name for f in rows]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"struct {name}: field names {dup} appear more than once")
        by_offset = sorted(rows, key=lambda f: (f.offset, f.end))
        for a, b in zip(by_offset, by_offset[1:]):
            if b.offset < a.end:
                raise ValueError(f"struct {name}: field {b.name} [{b.offset}, {b.end}) overlaps field {a.name} "
                                 f"[{a.offset}, {a.end})")
        self.align = 1 if packed else max((alignof(f.type) for f in rows), default=1)
        end = max((f.end for f in rows), default=0)
        if size is None:
            size = -(-end // self.align) * self.align
        if not isinstance(size, int) or size < end:
            raise ValueError(f"struct {name}: size {size!r} does not hold its fields, which end at byte {end}")
        if size % self.align:
            raise ValueError(f"struct {name}: size {size} is not a multiple of its alignment {self.align} "
                             f"(allowed: {-(-size // self.align) * self.align} or another multiple; or packed=True)")
        if size == 0:
            raise ValueError(f"struct {name} has no bytes: give it a field or a size")
        self.size = size
        self.fields: dict[str, Field] = {f.name: f for f in rows}
        if isinstance(per_run, str):
            raise TypeError(f"struct {name}: per_run is a list of field paths, got the string {per_run!r}")
        for path in per_run:
            try:
                t = _resolve(self, path)[1]
            except KeyError as e:
                raise ValueError(f"struct {name}: per_run names {path!r}, which is not a field: {e.args[0]}") from None
            if not isinstance(t, (DType, Pointer)):
                raise ValueError(f"struct {name}: per_run names {path!r}, a {_type_name(t)}; only a scalar or a "
                                 f"pointer is patched per run (name its elements or fields, e.g. {path}[0])")
        self.per_run: tuple[str, ...] = tuple(per_run)

    @classmethod
    def c(cls, name: str, fields: Sequence[tuple[str, FieldType]], per_run: Sequence[str] = (),
          packed: bool = False) -> Struct:
        """The layout a C compiler gives `struct name { type field; ... }`: each field at the next offset
        aligned to its alignment, the size rounded up to the largest alignment."""
        rows, off = [], 0
        for row in fields:
            if not isinstance(row, tuple) or len(row) != 2:
                raise TypeError(f"struct {name}: a C field is (name, type), got {row!r}")
            fname, ftype = row
            _check_type(ftype, f"struct {name} field {fname}")
            a = 1 if packed else alignof(ftype)
            off = -(-off // a) * a
            rows.append((fname, ftype, off))
            off += sizeof(ftype)
        return cls(name, rows, per_run=per_run, packed=packed)

    def offset(self, path: str) -> int:
        """The byte offset of `path`: a field, `outer.inner` for embedded structs, `arr[3]` for elements."""
        return _resolve(self, path)[0]

    def placeholder(self, device: str, key: object = None, tag: str | None = None) -> UOp:
        """Memory for one instance: a placeholder the link turns into a zeroed host buffer of `device`."""
        return q.placeholder(tag or f"struct_{self.name}", self.size, device, key)

    def build(self, ref: UOp, values: Mapping[str, Value] | None = None) -> PatchedStruct:
        """This struct at `ref` (a placeholder or linked memory) with `values` per field; a missing field is zero
        (a missing per-run field is an error: a replay would have nothing to patch)."""
        b = _Builder(self, bytearray(self.size), [], [], set(self.per_run), set())
        b.fill(self, dict(values or {}), 0, "")
        missing = sorted(b.per_run - b.given)
        if missing:
            raise ValueError(f"struct {self.name}: {', '.join(missing)} patched per run but given no value (a variable, "
                             f"a name, or a run-time address)")
        return PatchedStruct(self, ref, bytes(b.blob), tuple(b.patches), tuple(b.children))

    def __repr__(self) -> str:
        body = ", ".join(f"{f.name}: {_type_name(f.type)} @{f.offset}" for f in self.fields.values())
        return f"Struct({self.name}, {self.size} bytes: {body})"


def _resolve(s: Struct, path: str) -> tuple[int, FieldType]:
    off, t = 0, s
    for part in path.split("."):
        name, _, idx = part.partition("[")
        if not isinstance(t, Struct) or name not in t.fields:
            where = t.name if isinstance(t, Struct) else _type_name(t)
            allowed = ", ".join(t.fields) if isinstance(t, Struct) else "none"
            raise KeyError(f"{path!r}: {where} has no field {name!r} (fields: {allowed})")
        f = t.fields[name]
        off, ft = off + f.offset, f.type
        while idx:
            i, _, idx = idx.partition("]")
            if not isinstance(ft, Array) or not i.isdigit() or int(i) >= ft.n:
                raise KeyError(f"{path!r}: [{i}] is not an element of {_type_name(ft)}")
            off, ft = off + int(i) * sizeof(ft.elem), ft.elem
            idx = idx.removeprefix("[")
        t = ft  # type: ignore[assignment]
    return off, t


@dataclass(frozen=True)
class Patch:
    """A symbolic field: `value` (of `dtype`) goes at byte `offset` of the struct; `field` is its path."""
    offset: int
    field: str
    dtype: DType
    value: UOp
    per_run: bool


@dataclass(frozen=True, eq=False)
class PatchedStruct:
    """A built struct: where it lives, its constant bytes, its patch slots and the structs it points to."""
    layout: Struct
    ref: UOp
    blob: bytes
    patches: tuple[Patch, ...]
    children: tuple[PatchedStruct, ...]

    @property
    def link_patches(self) -> tuple[Patch, ...]:
        return tuple(p for p in self.patches if not p.per_run)

    @property
    def run_patches(self) -> tuple[Patch, ...]:
        return tuple(p for p in self.patches if p.per_run)

    def tree(self) -> list[PatchedStruct]:
        """This struct and every struct it points to, directly or not, each once (pointed-to first)."""
        out: list[PatchedStruct] = []
        seen: set[int] = set()
        stack: list[tuple[PatchedStruct, bool]] = [(self, False)]
        while stack:
            s, expanded = stack.pop()
            if expanded:
                out.append(s)
            elif id(s) not in seen:
                seen.add(id(s))
                stack.append((s, True))
                stack.extend((c, False) for c in reversed(s.children))
        return out

    def stmts(self) -> list[UOp]:
        """Host statements writing this struct and every struct it points to: per struct its blob, then a store
        per patch (the link runs those known once; the per-run ones are the host program's)."""
        out: list[UOp] = []
        for s in self.tree():
            out.append(q.host_blob(s.ref, 0, s.blob))
            out += [q.host_store(s.ref, p.offset, p.value) for p in s.patches]
        return out


def _runtime_reason(u: UOp) -> str | None:
    """What makes `u` change per run (a variable, an input address, a load), None if it is known at link."""
    for x in u.toposort():
        if x.op is Ops.DEFINE_VAR:
            return f"the variable {x.arg[0]!r}"
        if x.op is Ops.PARAM and q.is_input(x):
            return f"the address of input {x.arg[1]}"
        if x.op is Ops.LOAD:
            return "a load at run time"
    return None


@dataclass
class _Builder:
    """One build: the blob being filled, the patches and children found, the per-run paths (absolute) and the
    leaf paths given a value."""
    top: Struct
    blob: bytearray
    patches: list[Patch]
    children: list[PatchedStruct]
    per_run: set[str]
    given: set[str]

    def fill(self, s: Struct, values: dict[str, Value], base: int, prefix: str) -> None:
        unknown = sorted(set(values) - set(s.fields))
        if unknown:
            raise KeyError(f"struct {s.name}: no field {', '.join(map(repr, unknown))} (fields: {', '.join(s.fields)})")
        if prefix:  # an embedded struct: its own per-run fields, under its path
            self.per_run |= {prefix + p for p in s.per_run}
        for f in s.fields.values():
            if f.name in values:
                self.put(f.type, values[f.name], base + f.offset, prefix + f.name)

    def put(self, t: FieldType, v: Value, off: int, path: str) -> None:
        where = f"struct {self.top.name} field {path} ({_type_name(t)})"
        if isinstance(t, Struct):
            if not isinstance(v, Mapping):
                raise TypeError(f"{where}: an embedded struct's value is a mapping of its fields, got {type(v).__name__}")
            self.fill(t, dict(v), off, path + ".")
            return
        if isinstance(t, Array):
            self.put_array(t, v, off, path, where)
            return
        self.given.add(path)
        per_run = path in self.per_run
        dt = dtypes.uint64 if isinstance(t, Pointer) else t
        if isinstance(t, Pointer) and isinstance(v, PatchedStruct):
            if t.target is not None and v.layout is not t.target:
                raise TypeError(f"{where}: points to a struct {t.target.name}, given a struct {v.layout.name}")
            self.children.append(v)
            v = q.addr(v.ref)
        elif isinstance(t, Pointer) and v is None:
            v = 0
        if isinstance(v, str):  # a name: the variable the host program reads from the run's variable values
            if not dtypes.is_int(dt) or dt is dtypes.bool:
                raise TypeError(f"{where}: a name stands for an integer variable; a {dt.name} field takes constants only")
            v = UOp.variable(v, dtypes.min(dt), dtypes.max(dt), dt)
        if isinstance(v, UOp) and v.op is Ops.CONST:
            v = v.arg
        if isinstance(v, UOp):
            self.patches.append(Patch(off, path, dt, _symbolic(v, dt, per_run, where), per_run))
            return
        if per_run:
            raise ValueError(f"{where} is patched per run, but its value {v!r} is known at link time (per-run fields "
                             f"take a variable, a name, or a run-time address; or drop it from per_run)")
        self.blob[off:off + dt.itemsize] = _pack(v, dt, where)

    def put_array(self, t: Array, v: Value, off: int, path: str, where: str) -> None:
        if isinstance(v, (bytes, bytearray)):
            if any(p.startswith(path + "[") for p in self.per_run):
                raise ValueError(f"{where} has elements patched per run; give it a list of elements, not bytes")
            if len(v) > sizeof(t):
                raise ValueError(f"{where}: {len(v)} bytes do not fit its {sizeof(t)} bytes")
            self.blob[off:off + len(v)] = v
            self.given |= {f"{path}[{i}]" for i in range(-(-len(v) // sizeof(t.elem)))}
            return
        if isinstance(v, (str, Mapping)) or not isinstance(v, Sequence):
            raise TypeError(f"{where}: an array's value is bytes or a sequence of elements, got {type(v).__name__}")
        if len(v) > t.n:
            raise ValueError(f"{where}: {len(v)} elements do not fit its {t.n}")
        for i, e in enumerate(v):
            self.put(t.elem, e, off + i * sizeof(t.elem), f"{path}[{i}]")


def _symbolic(v: UOp, dt: DType, per_run: bool, where: str) -> UOp:
    """`v` as the word of a `dt` field, checked: an integer that fits, run-time exactly when the field is per run."""
    if not dtypes.is_int(dt) or dt is dtypes.bool:
        raise TypeError(f"{where}: a symbolic value ({v.render()[:60]}) needs an integer field; the host program "
                        f"patches integers")
    if not dtypes.is_int(v.dtype) or v.dtype is dtypes.bool:
        raise TypeError(f"{where}: a symbolic value must be an integer, got {v.dtype!r} ({v.render()[:60]})")
    if v.dtype != dt:
        lo, hi = v.vmin, v.vmax
        if lo < dtypes.min(dt) or hi > dtypes.max(dt):
            raise ValueError(f"{where}: the value {v.render()[:60]} ranges over [{lo}, {hi}], which does not fit "
                             f"{dt.name} [{dtypes.min(dt)}, {dtypes.max(dt)}] (cast it explicitly to truncate)")
        v = v.cast(dt)
    reason = _runtime_reason(v)
    if reason is not None and not per_run:
        raise ValueError(f"{where} is patched once at link, but its value depends on {reason}, which changes per run "
                         f"(name the field in per_run)")
    if reason is None and per_run:
        raise ValueError(f"{where} is patched per run, but its value {v.render()[:60]} is known at link time "
                         f"(drop it from per_run)")
    return v


def _pack(v: Value, dt: DType, where: str) -> bytes:
    if dtypes.is_float(dt):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{where}: a {dt.name} field takes a number, got {type(v).__name__} {v!r}")
        try:
            packed = pystruct.pack("<" + str(dt.fmt), v)
        except OverflowError:
            packed = b""
        if not packed or (math.isfinite(v) and math.isinf(pystruct.unpack("<" + str(dt.fmt), packed)[0])):
            raise ValueError(f"{where}: {v!r} is out of {dt.name}'s range") from None
        return packed
    if isinstance(v, float) or not isinstance(v, int):
        raise TypeError(f"{where}: an integer field takes an int, a name, a UOp or (pointers) a PatchedStruct, "
                        f"got {type(v).__name__} {v!r}")
    lo, hi = dtypes.min(dt), dtypes.max(dt)
    if not lo <= v <= hi:
        raise ValueError(f"{where}: {v} does not fit {dt.name} (allowed: {lo}..{hi})")
    return pystruct.pack("<" + str(dt.fmt), v)
