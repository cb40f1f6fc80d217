"""Memory instructions: SMEM (scalar loads), GLOBAL/FLAT/SCRATCH (per-lane loads, stores, atomics) and DS (LDS).

Memory is synchronous: a load's data is in its registers when the instruction is done, so s_waitcnt has nothing
to wait for. Only active lanes touch memory. A lane whose address is unmapped (global), outside the workgroup's
LDS allocation or outside its private segment raises GPUFault naming the address, the wave and the lane.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tg_mockgpu.emu.machine import NULL, WAVE, Batch, EmulatorError, GPUFault, Machine
from tg_mockgpu.emu.operands import APERTURE_SIZE, PRIVATE_BASE, SHARED_BASE, scalar_reader
from tg_mockgpu.memory import PageFault

u8, u16, u32, u64 = np.uint8, np.uint16, np.uint32, np.uint64

# load/store data shapes: suffix -> (bytes, how the loaded bytes land in the destination)
#   "dw"   whole dwords;  "u"/"i" zero/sign-extended to 32 bits;  "lo"/"hi" 16-bit half of the register (d16),
#   "lo8u"/"lo8i"/"hi8u"/"hi8i" a byte extended to 16 bits into one half
LOAD_KIND = {"u8": (1, "u"), "i8": (1, "i"), "u16": (2, "u"), "i16": (2, "i"), "b32": (4, "dw"), "b64": (8, "dw"),
             "b96": (12, "dw"), "b128": (16, "dw"), "d16_b16": (2, "lo"), "d16_hi_b16": (2, "hi"),
             "d16_u8": (1, "lo8u"), "d16_i8": (1, "lo8i"), "d16_hi_u8": (1, "hi8u"), "d16_hi_i8": (1, "hi8i")}
STORE_KIND = {"b8": (1, 0), "b16": (2, 0), "b32": (4, 0), "b64": (8, 0), "b96": (12, 0), "b128": (16, 0),
              "d16_hi_b8": (1, 16), "d16_hi_b16": (2, 16)}


def fault(bt: Batch, where: np.ndarray | None, i: int, address: int, what: str,
          page_write: bool | None = None) -> GPUFault:
    """GPUFault for element i of the active-lane list `where` (flat wave*32+lane positions; None: every lane);
    `page_write` given: a page fault (a read or a write of unmapped memory) at `address`."""
    pos = int(where[i]) if where is not None else i
    wave, lane = int(bt.waves[pos // WAVE]), pos % WAVE
    return GPUFault(f"{what} at address {address:#x}, {bt.m.wave_name(wave)} lane {lane}",
                    address if page_write is not None else None, page_write)


def _active(bt: Batch) -> np.ndarray | None:
    """Flat positions (wave-in-batch * 32 + lane) of the active lanes; None when all are."""
    mk = bt.mask()
    return None if mk is None else np.flatnonzero(mk)


def _pick(x: np.ndarray, where: np.ndarray | None) -> np.ndarray:
    """Per-lane values (waves, 32) (or broadcastable) of the active lanes, as a flat array."""
    return x.reshape(-1) if where is None else x.reshape(-1)[where]


def _vreg_rows(m: Machine, bt: Batch, r: int, count: int, where: np.ndarray | None) -> np.ndarray:
    """(active lanes, count) uint32 of VGPRs r..r+count-1."""
    return np.stack([_pick(m.vgpr(r + j)[bt.idx], where) for j in range(count)], axis=1)


def _write_rows(m: Machine, bt: Batch, r: int, data: np.ndarray, where: np.ndarray | None) -> None:
    """Write (active lanes, k) uint32 into VGPRs r..r+k-1 of the active lanes."""
    for j in range(data.shape[1]):
        dst = m.vgpr(r + j)
        if where is None:
            dst[bt.idx] = data[:, j].reshape(bt.n, WAVE)
        else:
            sub = dst[bt.idx]
            sub.reshape(-1)[where] = data[:, j]
            if not isinstance(bt.idx, slice):
                dst[bt.idx] = sub


def _write_half(m: Machine, bt: Batch, r: int, hi: int, data: np.ndarray, where: np.ndarray | None) -> None:
    dst = m.vgpr16(r, hi)
    sub = dst[bt.idx]
    if where is None:
        sub[...] = data.reshape(bt.n, WAVE)
    else:
        flat = sub.copy().reshape(-1)
        flat[where] = data
        sub[...] = flat.reshape(bt.n, WAVE)
    if not isinstance(bt.idx, slice):
        dst[bt.idx] = sub


def land(m: Machine, bt: Batch, vdst: int, kind: str, raw: np.ndarray, where: np.ndarray | None) -> None:
    """Put loaded bytes (active lanes, n) uint8 or dwords (active lanes, k) uint32 into the destination VGPRs."""
    if kind == "dw":
        _write_rows(m, bt, vdst, raw, where)
        return
    b = raw.view(u8).reshape(len(raw), -1)
    n = b.shape[1]
    val = b[:, 0].astype(u32) if n == 1 else b.view(u16)[:, 0].astype(u32)
    if kind in ("u", "i"):
        if kind == "i":
            val = val.astype(np.int8 if n == 1 else np.int16).astype(np.int32).view(u32)
        _write_rows(m, bt, vdst, val[:, None], where)
        return
    if kind in ("lo", "hi"):
        _write_half(m, bt, vdst, kind == "hi", val.astype(u16), where)
        return
    signed = kind.endswith("i")
    half = val.astype(np.int8).astype(np.int16).view(u16) if signed else val.astype(u16)
    _write_half(m, bt, vdst, kind.startswith("hi"), half, where)


def store_bytes(m: Machine, bt: Batch, data_reg: int, nbytes: int, shift: int, where: np.ndarray | None) -> np.ndarray:
    """The bytes a store writes: (active lanes, k) uint32 for whole dwords, else (active lanes, nbytes) uint8."""
    if nbytes >= 4:
        return _vreg_rows(m, bt, data_reg, nbytes // 4, where)
    v = _pick(m.vgpr(data_reg)[bt.idx], where) >> u32(shift)
    return v.astype(u32).view(u8).reshape(-1, 4)[:, :nbytes]


# ---- SMEM ----

def compile_smem(inst) -> Callable:
    name, f = inst.op, inst.fields
    if name in ("s_dcache_inv", "s_gl1_inv"):
        return lambda m, bt: None
    if not name.startswith("s_load_"):
        raise KeyError(name)
    count = int(name[len("s_load_b"):]) // 32
    base = scalar_reader(f["sbase"], 64, False, None, False)
    soff = None if f["soffset"] == NULL else scalar_reader(f["soffset"], 32, False, None, False)
    offset = np.int64(f["offset"])
    sdata = f["sdata"]
    if sdata + count > 106 and sdata < 106:
        raise EmulatorError(f"{name} s{sdata}: destination runs past s105")

    def run(m: Machine, bt: Batch) -> None:
        addr = np.asarray(base(m, bt), u64).astype(np.int64) + offset
        if soff is not None:
            addr = addr + np.asarray(soff(m, bt), np.int64)
        addr = (addr & ~np.int64(3)).astype(u64)           # the scalar unit ignores the low two address bits
        try:
            data = m.mem.gather(np.broadcast_to(addr, (bt.n,)), 4 * count)
        except PageFault as e:
            wave = int(bt.waves[e.index])
            raise GPUFault(f"GPU page fault: scalar read of unmapped memory at address {e.address:#x}, "
                           f"{m.wave_name(wave)}", e.address, False) from None
        for j in range(count):
            m.s[sdata + j][bt.idx] = data[:, j]
    return run


# ---- GLOBAL / FLAT / SCRATCH ----

def _global_address(inst) -> Callable:
    f = inst.fields
    off = np.int64(f["offset"])
    a = f["addr"]
    if inst.enc == "GLOBAL" and f["saddr"] != NULL:
        sb = scalar_reader(f["saddr"], 64, False, None, True)
        return lambda m, bt: (np.asarray(sb(m, bt), u64) + m.vgpr(a)[bt.idx].astype(u64)
                              + off.astype(u64))
    return lambda m, bt: ((m.vgpr(a)[bt.idx].astype(u64) | (m.vgpr(a + 1)[bt.idx].astype(u64) << u64(32)))
                          + off.astype(u64))


def _scratch_address(inst) -> Callable:
    f = inst.fields
    off = np.int64(f["offset"])
    parts: list[Callable] = []
    if f["saddr"] != NULL:
        sb = scalar_reader(f["saddr"], 32, False, None, True)
        parts.append(lambda m, bt: np.asarray(sb(m, bt), np.int64))
    if f.get("sve", 0):
        a = f["addr"]
        parts.append(lambda m, bt: m.vgpr(a)[bt.idx].astype(np.int64))

    def addr(m: Machine, bt: Batch) -> np.ndarray:
        out = np.full((bt.n, WAVE), off, np.int64)
        for p in parts:
            out = out + p(m, bt)
        return out
    return addr


def _private_rows(bt: Batch, where: np.ndarray | None) -> np.ndarray:
    lanes = np.arange(WAVE)
    rows = (np.asarray(bt.waves)[:, None] * WAVE + lanes).reshape(-1)
    return rows if where is None else rows[where]


def _scratch_index(m: Machine, bt: Batch, offs: np.ndarray, nbytes: int, where: np.ndarray | None,
                   what: str) -> tuple[np.ndarray, np.ndarray]:
    """(row, byte offset) of each active lane's private access, checked against the private segment size."""
    offs = _pick(offs, where).astype(np.int64)
    bad = (offs < 0) | (offs + nbytes > m.scratch_bytes)
    if bad.any():
        i = int(np.argmax(bad))
        raise fault(bt, where, i, int(offs[i]), f"{what} outside the {m.scratch_bytes}-byte private segment (scratch)")
    return _private_rows(bt, where), offs


def _mem_kind(name: str) -> tuple[str, str]:
    seg, rest = name.split("_", 1)
    return seg, rest


def compile_vmem(inst) -> Callable:
    """GLOBAL, FLAT and SCRATCH loads, stores and atomics."""
    name, f = inst.op, inst.fields
    seg, rest = _mem_kind(name)
    if rest.startswith("atomic_"):
        return compile_atomic(inst, rest[len("atomic_"):])
    if rest.startswith(("load_addtid", "store_addtid")):
        raise KeyError(name)
    is_load = rest.startswith("load_")
    kind = rest[5:] if is_load else rest[6:]
    if inst.enc == "SCRATCH":
        addr = _scratch_address(inst)
    else:
        addr = _global_address(inst)
    flat = inst.enc == "FLAT"
    if is_load:
        nbytes, how = LOAD_KIND[kind]
        vdst = f["vdst"]

        def load(m: Machine, bt: Batch) -> None:
            where = _active(bt)
            if inst.enc == "SCRATCH":
                rows, offs = _scratch_index(m, bt, addr(m, bt), nbytes, where, "private read")
                raw = m.scratch[rows[:, None], offs[:, None] + np.arange(nbytes)]
                land(m, bt, vdst, how, raw.view(u32) if how == "dw" else raw, where)
                return
            a = _pick(addr(m, bt), where)
            raw = _flat_read(m, bt, a, nbytes, where) if flat else _global_read(m, bt, a, nbytes, where)
            land(m, bt, vdst, how, raw, where)
        return load
    nbytes, shift = STORE_KIND[kind]
    data = f["data"]

    def store(m: Machine, bt: Batch) -> None:
        where = _active(bt)
        payload = store_bytes(m, bt, data, nbytes, shift, where)
        if inst.enc == "SCRATCH":
            rows, offs = _scratch_index(m, bt, addr(m, bt), nbytes, where, "private write")
            raw = np.ascontiguousarray(payload).view(u8).reshape(len(rows), nbytes)
            m.scratch[rows[:, None], offs[:, None] + np.arange(nbytes)] = raw
            return
        a = _pick(addr(m, bt), where)
        if flat:
            _flat_write(m, bt, a, payload, where)
        else:
            _global_write(m, bt, a, payload, where)
    return store


def _global_read(m: Machine, bt: Batch, a: np.ndarray, nbytes: int, where: np.ndarray | None) -> np.ndarray:
    try:
        return m.mem.gather(a, nbytes)
    except PageFault as e:
        raise fault(bt, where, e.index, e.address, "GPU page fault: read of unmapped memory", False) from None


def _global_write(m: Machine, bt: Batch, a: np.ndarray, payload: np.ndarray, where: np.ndarray | None) -> None:
    try:
        m.mem.scatter(a, payload)
    except PageFault as e:
        raise fault(bt, where, e.index, e.address, "GPU page fault: write of unmapped memory", True) from None


def _aperture(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    shared = (a >= u64(SHARED_BASE)) & (a < u64(SHARED_BASE + APERTURE_SIZE))
    private = (a >= u64(PRIVATE_BASE)) & (a < u64(PRIVATE_BASE + APERTURE_SIZE))
    return shared, private


def _flat_read(m: Machine, bt: Batch, a: np.ndarray, nbytes: int, where: np.ndarray | None) -> np.ndarray:
    shared, private = _aperture(a)
    if not (shared.any() or private.any()):
        return _global_read(m, bt, a, nbytes, where)
    if shared.all():
        return lds_read(m, bt, (a - u64(SHARED_BASE)).astype(np.int64), nbytes, where)
    raise EmulatorError("FLAT accesses mixing apertures (global, LDS, scratch) in one instruction are not implemented")


def _flat_write(m: Machine, bt: Batch, a: np.ndarray, payload: np.ndarray, where: np.ndarray | None) -> None:
    shared, private = _aperture(a)
    if not (shared.any() or private.any()):
        _global_write(m, bt, a, payload, where)
        return
    if shared.all():
        lds_write(m, bt, (a - u64(SHARED_BASE)).astype(np.int64), payload, where)
        return
    raise EmulatorError("FLAT accesses mixing apertures (global, LDS, scratch) in one instruction are not implemented")


# ---- atomics (global and LDS) ----

ATOMIC: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": lambda old, v: old + v, "sub": lambda old, v: old - v, "and": lambda old, v: old & v,
    "or": lambda old, v: old | v, "xor": lambda old, v: old ^ v, "swap": lambda old, v: v,
    "min": np.minimum, "max": np.maximum,
}


def _atomic_apply(op: str, typ: str, old: np.ndarray, val: np.ndarray, cmp: np.ndarray | None) -> np.ndarray:
    types: dict[str, type[Any]] = {"u32": u32, "b32": u32, "i32": np.int32, "f32": np.float32, "u64": u64, "b64": u64,
                                   "i64": np.int64}
    t = types[typ]
    o, v = old.view(t), val.view(t)
    if op == "cmpswap":
        assert cmp is not None, "cmpswap takes the compare value"
        return np.where(o == cmp.view(t), v, o).view(old.dtype)
    if op == "inc":
        return np.where(o >= v, t(0), o + t(1)).view(old.dtype)
    if op == "dec":
        return np.where((o == 0) | (o > v), v, o - t(1)).view(old.dtype)
    if op == "csub":
        return np.where(o >= v, o - v, t(0)).view(old.dtype)
    fn = ATOMIC[op]
    if typ == "f32" and op in ("min", "max"):
        fn = np.fmin if op == "min" else np.fmax
    return np.asarray(fn(o, v), t).view(old.dtype)


def _serial_atomic(read: Callable, write: Callable, keys: np.ndarray, op: str, typ: str, val: np.ndarray,
                   cmp: np.ndarray | None) -> np.ndarray:
    """Apply lane by lane, in lane order, when lanes share an address; returns the values each lane saw."""
    if len(np.unique(keys)) == len(keys):
        old = read()
        write(_atomic_apply(op, typ, old, val, cmp))
        return old
    old_all = read()
    seen = old_all.copy()
    current: dict[int, np.ndarray] = {}
    for i, k in enumerate(keys.tolist()):
        cur = current.get(k, old_all[i])
        seen[i] = cur
        current[k] = _atomic_apply(op, typ, cur[None], val[i][None], None if cmp is None else cmp[i][None])[0]
    final = old_all.copy()
    for i, k in enumerate(keys.tolist()):
        final[i] = current[k]
    write(final)
    return seen


def _dwords(x: np.ndarray, nd: int) -> np.ndarray:
    """(n,) 32- or 64-bit values as (n, nd) dwords."""
    return np.ascontiguousarray(x).view(u32).reshape(len(x), nd)


def _split_atomic(rest: str) -> tuple[str, str, int]:
    op, typ = rest.rsplit("_", 1)
    bits = int(typ[1:])
    return op, typ, bits


def compile_atomic(inst, rest: str) -> Callable:
    f = inst.fields
    op, typ, bits = _split_atomic(rest)
    if op not in ATOMIC and op not in ("cmpswap", "inc", "dec", "csub"):
        raise KeyError(inst.op)
    nd = bits // 32
    addr = _global_address(inst)
    flat = inst.enc == "FLAT"
    returns = bool(f.get("glc", 0))
    data, vdst = f["data"], f["vdst"]

    def run(m: Machine, bt: Batch) -> None:
        where = _active(bt)
        a = _pick(addr(m, bt), where)
        if flat and any(x.any() for x in _aperture(a)):
            raise EmulatorError("FLAT atomics on LDS or scratch apertures are not implemented")
        vals = _vreg_rows(m, bt, data, nd, where)
        cmp = None
        if op == "cmpswap":
            cmp = _vreg_rows(m, bt, data + nd, nd, where)
        val = vals.view(u64 if nd == 2 else u32)[:, 0]
        cmpv = None if cmp is None else cmp.view(u64 if nd == 2 else u32)[:, 0]
        read = lambda: _global_read(m, bt, a, 4 * nd, where).view(u64 if nd == 2 else u32)[:, 0]  # noqa: E731
        write = lambda new: _global_write(m, bt, a, _dwords(new, nd), where)  # noqa: E731
        old = _serial_atomic(read, write, a, op, typ, val, cmpv)
        if returns:
            _write_rows(m, bt, vdst, np.ascontiguousarray(old).view(u32).reshape(len(a), nd), where)
    return run


# ---- DS (LDS) ----

def _lds_check(m: Machine, bt: Batch, offs: np.ndarray, nbytes: int, where: np.ndarray | None, what: str) -> np.ndarray:
    bad = (offs < 0) | (offs + nbytes > m.lds_bytes)
    if bad.any():
        i = int(np.argmax(bad))
        raise fault(bt, where, i, int(offs[i]), f"LDS {what} outside the workgroup's {m.lds_bytes}-byte allocation")
    groups = m.group_of[np.asarray(bt.waves)]
    g = np.repeat(groups, WAVE) if where is None else groups[where // WAVE]
    return g.astype(np.int64) * max(m.lds_bytes, 4) + offs


def lds_read(m: Machine, bt: Batch, offs: np.ndarray, nbytes: int, where: np.ndarray | None) -> np.ndarray:
    """Bytes (n, nbytes) uint8, or dwords (n, k) uint32 when nbytes is a multiple of 4 (active lanes' offsets)."""
    p = _lds_check(m, bt, offs, nbytes, where, "read")
    if nbytes % 4 == 0 and not (p & 3).any():
        return m.lds.view(u32)[(p >> 2)[:, None] + np.arange(nbytes // 4)]
    raw = m.lds[p[:, None] + np.arange(nbytes)]
    return raw.view(u32) if nbytes % 4 == 0 else raw


def lds_write(m: Machine, bt: Batch, offs: np.ndarray, payload: np.ndarray, where: np.ndarray | None) -> None:
    nbytes = payload.shape[1] * payload.itemsize
    p = _lds_check(m, bt, offs, nbytes, where, "write")
    if payload.dtype == u32 and not (p & 3).any():
        m.lds.view(u32)[(p >> 2)[:, None] + np.arange(payload.shape[1])] = payload
    else:
        m.lds[p[:, None] + np.arange(nbytes)] = np.ascontiguousarray(payload).view(u8).reshape(len(p), nbytes)


DS_LOAD = {"b32": (4, "dw"), "b64": (8, "dw"), "b96": (12, "dw"), "b128": (16, "dw"), "u8": (1, "u"), "i8": (1, "i"),
           "u16": (2, "u"), "i16": (2, "i"), "u8_d16": (1, "lo8u"), "i8_d16": (1, "lo8i"), "u8_d16_hi": (1, "hi8u"),
           "i8_d16_hi": (1, "hi8i"), "u16_d16": (2, "lo"), "u16_d16_hi": (2, "hi")}
DS_STORE = {"b8": (1, 0), "b16": (2, 0), "b32": (4, 0), "b64": (8, 0), "b96": (12, 0), "b128": (16, 0),
            "b8_d16_hi": (1, 16), "b16_d16_hi": (2, 16)}


def compile_ds(inst) -> Callable:
    name, f = inst.op, inst.fields
    if f.get("gds", 0):
        raise EmulatorError(f"{name}: GDS is not implemented")
    rest = name[3:]
    a = f["addr"]
    off = f["offset0"] | (f["offset1"] << 8)
    if rest in ("permute_b32", "bpermute_b32"):
        return _compile_permute(inst, rest == "bpermute_b32")
    if rest == "swizzle_b32":
        return _compile_swizzle(inst)
    if rest == "nop":
        return lambda m, bt: None

    def lane_offs(m: Machine, bt: Batch, where: np.ndarray | None, extra: int) -> np.ndarray:
        return _pick(m.vgpr(a)[bt.idx], where).astype(np.int64) + extra

    if rest.startswith(("load_2addr", "store_2addr")):
        is_load = rest.startswith("load")
        stride = 64 if "stride64" in rest else 1
        size = 8 if rest.endswith("b64") else 4
        o0, o1 = f["offset0"] * size * stride, f["offset1"] * size * stride
        nd = size // 4
        if is_load:
            vdst = f["vdst"]

            def load2(m: Machine, bt: Batch) -> None:
                where = _active(bt)
                x = lds_read(m, bt, lane_offs(m, bt, where, o0), size, where)
                y = lds_read(m, bt, lane_offs(m, bt, where, o1), size, where)
                _write_rows(m, bt, vdst, np.concatenate([x, y], axis=1), where)
            return load2
        d0, d1 = f["data0"], f["data1"]

        def store2(m: Machine, bt: Batch) -> None:
            where = _active(bt)
            lds_write(m, bt, lane_offs(m, bt, where, o0), _vreg_rows(m, bt, d0, nd, where), where)
            lds_write(m, bt, lane_offs(m, bt, where, o1), _vreg_rows(m, bt, d1, nd, where), where)
        return store2
    if rest.startswith("load_"):
        nbytes, how = DS_LOAD[rest[5:]]
        vdst = f["vdst"]

        def load(m: Machine, bt: Batch) -> None:
            where = _active(bt)
            land(m, bt, vdst, how, lds_read(m, bt, lane_offs(m, bt, where, off), nbytes, where), where)
        return load
    if rest.startswith("store_"):
        nbytes, shift = DS_STORE[rest[6:]]
        d0 = f["data0"]

        def store(m: Machine, bt: Batch) -> None:
            where = _active(bt)
            lds_write(m, bt, lane_offs(m, bt, where, off), store_bytes(m, bt, d0, nbytes, shift, where), where)
        return store
    # atomics: ds_<op>[_rtn]_<type>
    returns = "_rtn_" in rest
    op, typ, bits = _split_atomic(rest.replace("_rtn", ""))
    if op == "cmpstore":
        op = "cmpswap"
    if op == "storexchg":
        op = "swap"
    if op not in ATOMIC and op not in ("cmpswap", "inc", "dec"):
        raise KeyError(name)
    nd = bits // 32
    d0, d1, vdst = f["data0"], f["data1"], f["vdst"]
    ut = u64 if nd == 2 else u32

    def atomic(m: Machine, bt: Batch) -> None:
        where = _active(bt)
        offs = lane_offs(m, bt, where, off)
        p = _lds_check(m, bt, offs, 4 * nd, where, "atomic")
        val = _vreg_rows(m, bt, d0, nd, where).view(ut)[:, 0]
        # ds_cmpstore: data0 is the compare value... on gfx11 data1 is the new value (LLVM's operand order: cmp, new)
        cmp = None
        if op == "cmpswap":
            cmp, val = val, _vreg_rows(m, bt, d1, nd, where).view(ut)[:, 0]
        read = lambda: lds_read(m, bt, offs, 4 * nd, where).view(ut)[:, 0]  # noqa: E731
        write = lambda new: lds_write(m, bt, offs, _dwords(new, nd), where)  # noqa: E731
        old = _serial_atomic(read, write, p, op, typ, val, cmp)
        if returns:
            _write_rows(m, bt, vdst, np.ascontiguousarray(old).view(u32).reshape(len(offs), nd), where)
    return atomic


def _compile_permute(inst, backward: bool) -> Callable:
    """ds_bpermute_b32: lane i reads data0 of lane addr[i]/4; ds_permute_b32: lane i writes its data0 to lane addr[i]/4.
    Lanes are within the wave; inactive source lanes read as 0 (bpermute)."""
    f = inst.fields
    a, d0, vdst = f["addr"], f["data0"], f["vdst"]
    off = f["offset0"] | (f["offset1"] << 8)

    def run(m: Machine, bt: Batch) -> None:
        active = bt.active_lanes()
        lane = ((m.vgpr(a)[bt.idx].astype(np.int64) + off) >> 2) & 31
        src = np.where(active, m.vgpr(d0)[bt.idx], u32(0))
        rows = np.arange(bt.n)[:, None]
        if backward:
            out = src[rows, lane]
        else:
            out = np.zeros((bt.n, WAVE), u32)
            rr, ll = np.nonzero(active)
            out[rr, lane[rr, ll]] = src[rr, ll]
        where = _active(bt)
        _write_rows(m, bt, vdst, _pick(out, where)[:, None], where)
    return run


def swizzle_sources(offset: int) -> np.ndarray:
    """The lane each of the 32 lanes reads for ds_swizzle_b32 with this 16-bit offset. offset[15] set (QDMode):
    within each group of 4 lanes, lane i reads lane offset[2i+1:2i] of the group (bits 14:8 unused); clear (bitmask
    mode): lane i reads ((i & and_mask) | or_mask) ^ xor_mask, the masks being offset[4:0], [9:5] and [14:10]."""
    i = np.arange(WAVE)
    if offset & 0x8000:
        return (i & ~3) | ((offset >> (2 * (i & 3))) & 3)
    and_m, or_m, xor_m = offset & 31, (offset >> 5) & 31, (offset >> 10) & 31
    return ((i & and_m) | or_m) ^ xor_m


def _compile_swizzle(inst) -> Callable:
    """ds_swizzle_b32 vdst, addr offset:...: a lane exchange within the wave (no LDS access). The data is the ADDR
    register; a lane whose source lane is inactive reads 0, and only active lanes are written."""
    f = inst.fields
    src_lane, a, vdst = swizzle_sources(f["offset0"] | (f["offset1"] << 8)), f["addr"], f["vdst"]

    def run(m: Machine, bt: Batch) -> None:
        mk = bt.mask()
        data = m.vgpr(a)[bt.idx]
        out = data[:, src_lane] if mk is None else np.where(mk, data, u32(0))[:, src_lane]
        where = _active(bt)
        _write_rows(m, bt, vdst, _pick(out, where)[:, None], where)
    return run
