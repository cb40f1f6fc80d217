"""Operand access, compiled once per instruction into small reader and writer closures.

A reader takes (machine, batch) and returns the operand's raw bits for the batch:
  vector operands  (waves, 32) arrays (views when the batch is a slice),
  scalar operands  (waves, 1) arrays in vector instructions, (waves,) in scalar ones,
  constants        numpy scalars.
The width is the operand's: 16 (uint16), 32 (uint32) or 64 (uint64, register pairs). Float inline constants
are given in the operand's float width (amd.md 8.2); integer inline constants are sign-extended.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tg_mockgpu.emu.machine import EXEC, NULL, VCC, Batch, EmulatorError, Machine

# An operand's value: an array with one entry per lane (or per wave), or one numpy scalar that broadcasts over
# them (a constant, an SGPR read by a scalar instruction). numpy's stubs give the union of the two no arithmetic
# (np.generic has no operators), so to the type checker a value is Any; the readers and writers are typed.
Value = Any
Reader = Callable[[Machine, Batch], Value]
Writer = Callable[[Machine, Batch, Value], None]

INLINE_FLOAT = {  # code -> bits as f16, f32, f64
    240: (0x3800, 0x3F000000, 0x3FE0000000000000), 241: (0xB800, 0xBF000000, 0xBFE0000000000000),
    242: (0x3C00, 0x3F800000, 0x3FF0000000000000), 243: (0xBC00, 0xBF800000, 0xBFF0000000000000),
    244: (0x4000, 0x40000000, 0x4000000000000000), 245: (0xC000, 0xC0000000, 0xC000000000000000),
    246: (0x4400, 0x40800000, 0x4010000000000000), 247: (0xC400, 0xC0800000, 0xC010000000000000),
    248: (0x3118, 0x3E22F983, 0x3FC45F306DC9C883),   # 1/(2*pi)
}
# the apertures FLAT addresses of LDS and scratch live in (64-bit bases; a 32-bit read gives the high half)
SHARED_BASE, PRIVATE_BASE = 0x1000_0000_0000_0000, 0x2000_0000_0000_0000
APERTURE_SIZE = 1 << 32
APERTURES = {235: SHARED_BASE, 236: SHARED_BASE + APERTURE_SIZE - 1, 237: PRIVATE_BASE,
             238: PRIVATE_BASE + APERTURE_SIZE - 1}
UTYPE: dict[int, type[np.unsignedinteger]] = {16: np.uint16, 32: np.uint32, 64: np.uint64}
MASK = {16: 0xFFFF, 32: 0xFFFFFFFF, 64: 0xFFFFFFFFFFFFFFFF}


def constant(code: int, width: int, is_float: bool, literal: int | None) -> int | None:
    """The bits of a constant operand, or None when the code names a register."""
    if 128 <= code <= 192:
        return code - 128
    if 193 <= code <= 208:
        return (-(code - 192)) & MASK[width]
    if code in INLINE_FLOAT:
        if not is_float:   # float constants in integer operands are the f32 pattern (zero-extended to 64 bits)
            return INLINE_FLOAT[code][1] & MASK[width]
        return INLINE_FLOAT[code][{16: 0, 32: 1, 64: 2}[width]]
    if code == 255:
        if literal is None:
            raise EmulatorError("operand 255 (literal) without a literal dword")
        if width == 64:
            return literal << 32 if is_float else literal   # f64 literals are the high half
        return literal & MASK[width]
    if code in APERTURES:
        return APERTURES[code] & MASK[width] if width == 64 else APERTURES[code] >> 32
    return None


def check_code(code: int, what: str) -> None:
    if code in (233, 234, 250):
        raise EmulatorError(f"DPP operands are not implemented ({what})")
    if code == 254:
        raise EmulatorError(f"LDS_DIRECT operands are not implemented ({what})")
    if 209 <= code <= 232 or code == 239 or code == 249:
        raise EmulatorError(f"reserved operand code {code} ({what})")


def scalar_reader(code: int, width: int, is_float: bool, literal: int | None, vector: bool) -> Reader:
    """A reader of a source that is not a VGPR (SGPR, special register, constant). vector: shape (waves, 1)."""
    check_code(code, "scalar source")
    c = constant(code, width, is_float, literal)
    if c is not None:
        k = UTYPE[width](c)
        return lambda m, bt: k
    if code == 251:     # VCCZ
        return _shape(lambda m, bt: (m.s[VCC][bt.idx] == 0).astype(UTYPE[width]), vector)
    if code == 252:     # EXECZ
        return _shape(lambda m, bt: (m.s[EXEC][bt.idx] == 0).astype(UTYPE[width]), vector)
    if code == 253:     # SCC
        return _shape(lambda m, bt: m.scc[bt.idx].astype(UTYPE[width]), vector)
    if code == NULL:
        z = UTYPE[width](0)
        return lambda m, bt: z
    if code >= 128:
        raise EmulatorError(f"operand code {code} is not a scalar source")
    if width == 64:
        if code & 1:
            raise EmulatorError(f"64-bit scalar operand s{code} must be an even register")
        return _shape(lambda m, bt: _pair(m.s[code][bt.idx], m.s[code + 1][bt.idx]), vector)
    if width == 16:
        return _shape(lambda m, bt: m.s[code][bt.idx].astype(np.uint16), vector)
    return _shape(lambda m, bt: m.s[code][bt.idx], vector)


def _pair(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """A 64-bit value from its two 32-bit registers."""
    return lo.astype(np.uint64) | (hi.astype(np.uint64) << np.uint64(32))


def _shape(f: Reader, vector: bool) -> Reader:
    if vector:
        return lambda m, bt: f(m, bt)[:, None]
    return f


def vgpr_reader(r: int, width: int, hi: int = 0) -> Reader:
    if width == 16:
        return lambda m, bt: m.vgpr16(r, hi)[bt.idx]
    if width == 64:
        return lambda m, bt: _pair(m.vgpr(r)[bt.idx], m.vgpr(r + 1)[bt.idx])
    return lambda m, bt: m.vgpr(r)[bt.idx]


def vsrc(code: int, width: int, is_float: bool, literal: int | None, hi: int = 0) -> Reader:
    """A 9-bit source of a vector instruction."""
    if code >= 256:
        return vgpr_reader(code - 256, width, hi)
    if width == 16 and hi:
        # the high half of a 32-bit scalar or constant
        full = scalar_reader(code, 32, False, literal, True)
        return lambda m, bt: (np.asarray(full(m, bt)) >> np.uint32(16)).astype(np.uint16)
    return scalar_reader(code, width, is_float, literal, True)


# ---- writers ----

def write_vgpr(m: Machine, bt: Batch, r: int, val: Value) -> None:
    dst = m.vgpr(r)
    mk = bt.mask()
    if mk is None:
        dst[bt.idx] = val
    elif isinstance(bt.idx, slice):
        np.copyto(dst[bt.idx], val, where=mk, casting="unsafe")
    else:
        dst[bt.idx] = np.where(mk, val, dst[bt.idx])


def vdst_writer(r: int, width: int, hi: int = 0) -> Writer:
    if width == 16:
        def w16(m: Machine, bt: Batch, val) -> None:
            dst = m.vgpr16(r, hi)
            mk = bt.mask()
            sub = dst[bt.idx]
            if isinstance(bt.idx, slice):
                np.copyto(sub, val, where=True if mk is None else mk, casting="unsafe")
            else:
                dst[bt.idx] = val if mk is None else np.where(mk, val, sub)
        return w16
    if width == 64:
        def w64(m: Machine, bt: Batch, val) -> None:
            val = np.asarray(val, np.uint64)
            write_vgpr(m, bt, r, (val & np.uint64(0xFFFFFFFF)).astype(np.uint32))
            write_vgpr(m, bt, r + 1, (val >> np.uint64(32)).astype(np.uint32))
        return w64
    return lambda m, bt, val: write_vgpr(m, bt, r, val)


def sdst_writer(code: int, width: int = 32) -> Writer:
    """A scalar destination (SGPR, VCC, M0, EXEC, NULL) written with one value per wave."""
    if code == NULL:
        return lambda m, bt, val: None
    if code > 127:
        raise EmulatorError(f"operand code {code} is not a scalar destination")
    if width == 64:
        if code & 1:
            raise EmulatorError(f"64-bit scalar destination s{code} must be an even register")

        def w64(m: Machine, bt: Batch, val) -> None:
            val = np.asarray(val, np.uint64)
            m.s[code][bt.idx] = val & np.uint64(0xFFFFFFFF)
            m.s[code + 1][bt.idx] = val >> np.uint64(32)
            if code == EXEC:
                bt.exec_written()
        return w64
    if code == EXEC:
        def wexec(m: Machine, bt: Batch, val) -> None:
            m.s[EXEC][bt.idx] = val
            bt.exec_written()
        return wexec
    if code == EXEC + 1:   # EXEC_HI: wave32 ignores it, but keep the value readable
        def wexec_hi(m: Machine, bt: Batch, val) -> None:
            m.s[code][bt.idx] = val
        return wexec_hi

    def w32(m: Machine, bt: Batch, val) -> None:
        m.s[code][bt.idx] = val
    return w32
