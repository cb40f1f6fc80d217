"""Vector ALU instructions (VOP1, VOP2, VOP3, VOP3SD, VOPC, VOPD, VOP3P), compiled into executors.

Most ops are one row of `OPS`: mnemonic -> (destination type, source types, function over typed numpy arrays).
The compiler reads each source in its type (16-bit halves, 32-bit words or 64-bit pairs; float input modifiers
abs/neg applied to the bits), calls the function on the whole batch (waves x 32 lanes) and writes the result to
the active lanes. Ops that read or write lane masks (carries, compares, cndmask, readlane) have their own
compilers in `SPECIAL`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tg_mockgpu.emu import fp
from tg_mockgpu.emu.machine import EXEC, LANES, VCC, Batch, EmulatorError, Machine
from tg_mockgpu.emu.operands import Writer, scalar_reader, sdst_writer, vdst_writer, vsrc
from tg_mockgpu.emu.vop3p import dot2acc_value

u16, u32, u64, i16, i32, i64 = np.uint16, np.uint32, np.uint64, np.int16, np.int32, np.int64
f16, f32, f64 = np.float16, np.float32, np.float64
# type name -> (bits, numpy type, is float)
TYPES: dict[str, tuple[int, type[Any], bool]] = {"f16": (16, f16, True), "i16": (16, i16, False), "u16": (16, u16, False), "b16": (16, u16, False),
         "f32": (32, f32, True), "i32": (32, i32, False), "u32": (32, u32, False), "b32": (32, u32, False),
         "f64": (64, f64, True), "i64": (64, i64, False), "u64": (64, u64, False), "b64": (64, u64, False)}
UINT: dict[int, type[np.unsignedinteger]] = {16: u16, 32: u32, 64: u64}
SIGN: dict[int, np.unsignedinteger] = {16: u16(0x8000), 32: u32(0x80000000), 64: u64(1 << 63)}
E32 = ("VOP1", "VOP2", "VOPC")
Exec = Callable[[Machine, Batch], None]


def _popcount(x: np.ndarray) -> np.ndarray:
    return np.bitwise_count(x).astype(u32)


def _clz(x: np.ndarray, bits: int = 32) -> np.ndarray:
    x = np.asarray(x, u64)
    n = np.where(x == 0, -1, bits - 1 - np.floor(np.log2(np.maximum(x, 1).astype(f64))).astype(i64))
    # log2 is exact for the powers of two that decide the leading bit up to 2**53
    return n.astype(i32)


def _ctz(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, u64)
    low = x & (~x + u64(1))
    return np.where(x == 0, -1, np.log2(np.maximum(low, 1).astype(f64)).astype(i64)).astype(i32)


def _bfe_signed(x: np.ndarray, off: np.ndarray, w: np.ndarray, bits: int) -> np.ndarray:
    off = np.asarray(off, i64) & (bits - 1)
    w = np.asarray(w, i64) & (bits - 1)
    v = np.asarray(x).astype(u64 if bits == 64 else i64) >> off.astype(u64 if bits == 64 else i64)
    sh = (64 - w).astype(u64)
    out = (np.asarray(v, u64) << sh).view(i64) >> sh.astype(i64)
    return np.where(w == 0, 0, out)


def _bfe_unsigned(x: np.ndarray, off: np.ndarray, w: np.ndarray, bits: int) -> np.ndarray:
    t = UINT[bits]
    off = np.asarray(off).astype(t) & t(bits - 1)
    w = np.asarray(w).astype(t) & t(bits - 1)
    return (np.asarray(x).astype(t) >> off) & ((t(1) << w) - t(1))


_ROW_STARTS: dict[int, np.ndarray] = {}  # lane count -> each lane's first entry in a flat (lanes, 16) byte table


def _perm(s0: np.ndarray, s1: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """V_PERM_B32: each result byte picks a byte of {s0, s1} (s1 the low word), a sign fill, 0 or 0xff.

    Per lane a 16-byte table (selector 0..7 the bytes, 8..11 the sign fills of bytes 1, 3, 5, 7, 12 zero, 13 and
    up 0xff) gathered at the four selector bytes clipped to 13: a handful of numpy passes over bytes instead of four
    rounds of 64-bit shifts and selects (the IQ4 kernels' kvalue lookups are two perms per four weights)."""
    shape = np.broadcast_shapes(np.shape(s0), np.shape(s1), np.shape(sel))
    n = int(np.prod(shape))
    table = np.empty((n, 16), np.uint8)
    words = table[:, :8].view(u32)
    words[:, 0] = np.broadcast_to(np.asarray(s1, u32), shape).reshape(n)
    words[:, 1] = np.broadcast_to(np.asarray(s0, u32), shape).reshape(n)
    table[:, 8:12] = table[:, 1:8:2].view(np.int8) >> 7
    table[:, 12] = 0
    table[:, 13:] = 0xFF
    rows = _ROW_STARTS.get(n)
    if rows is None:
        rows = _ROW_STARTS[n] = np.arange(0, 16 * n, 16, dtype=np.intp).reshape(n, 1)
    picks = np.ascontiguousarray(np.broadcast_to(np.asarray(sel, u32), shape)).reshape(n).view(np.uint8).reshape(n, 4)
    return table.reshape(-1)[np.minimum(picks, np.uint8(13)) + rows].view(u32).reshape(shape)


def _bitrev32(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, u32)
    b = x.view(np.uint8).reshape(*np.shape(x), 4) if np.ndim(x) else np.asarray([x]).view(np.uint8)
    r = np.unpackbits(b, axis=-1, bitorder="little")[..., ::-1]
    return np.packbits(r, axis=-1, bitorder="little").view(u32).reshape(np.shape(x))


def _med3(a, b, c):
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def _fmed3(a, b, c):
    nan = np.isnan(a) | np.isnan(b) | np.isnan(c)
    return np.where(nan, fp.fmin(fp.fmin(a, b), c), fp.fmax(fp.fmin(a, b), fp.fmin(fp.fmax(a, b), c)))


def _lane_ids() -> np.ndarray:
    return LANES[None, :]


OPS: dict[str, tuple[str, tuple[str, ...], Callable]] = {}


def op(names: str, dst: str, srcs: str, fn: Callable) -> None:
    for n in names.split():
        OPS[n] = (dst, tuple(srcs.split()), fn)


# moves and bit ops
op("v_mov_b32", "b32", "b32", lambda a: a)
op("v_mov_b16", "b16", "b16", lambda a: a)
op("v_not_b32", "b32", "b32", lambda a: ~a)
op("v_not_b16", "b16", "b16", lambda a: ~a)
op("v_bfrev_b32", "b32", "b32", _bitrev32)
op("v_and_b32", "b32", "b32 b32", lambda a, b: a & b)
op("v_or_b32", "b32", "b32 b32", lambda a, b: a | b)
op("v_xor_b32", "b32", "b32 b32", lambda a, b: a ^ b)
op("v_xnor_b32", "b32", "b32 b32", lambda a, b: ~(a ^ b))
op("v_and_b16", "b16", "b16 b16", lambda a, b: a & b)
op("v_or_b16", "b16", "b16 b16", lambda a, b: a | b)
op("v_xor_b16", "b16", "b16 b16", lambda a, b: a ^ b)
op("v_lshlrev_b32", "b32", "u32 b32", lambda a, b: b << (a & u32(31)))
op("v_lshrrev_b32", "b32", "u32 b32", lambda a, b: b >> (a & u32(31)))
op("v_ashrrev_i32", "i32", "u32 i32", lambda a, b: b >> (a & u32(31)).astype(i32))
op("v_lshlrev_b16", "b16", "u16 b16", lambda a, b: b << (a & u16(15)))
op("v_lshrrev_b16", "b16", "u16 b16", lambda a, b: b >> (a & u16(15)))
op("v_ashrrev_i16", "i16", "u16 i16", lambda a, b: b >> (a & u16(15)).astype(i16))
op("v_lshlrev_b64", "b64", "u32 b64", lambda a, b: b << (np.asarray(a, u64) & u64(63)))
op("v_lshrrev_b64", "b64", "u32 b64", lambda a, b: b >> (np.asarray(a, u64) & u64(63)))
op("v_ashrrev_i64", "i64", "u32 i64", lambda a, b: b >> (np.asarray(a, i64) & i64(63)))
op("v_lshl_add_u32", "u32", "u32 u32 u32", lambda a, b, c: (a << (b & u32(31))) + c)
op("v_add_lshl_u32", "u32", "u32 u32 u32", lambda a, b, c: (a + b) << (c & u32(31)))
op("v_lshl_or_b32", "b32", "b32 u32 b32", lambda a, b, c: (a << (b & u32(31))) | c)
op("v_and_or_b32", "b32", "b32 b32 b32", lambda a, b, c: (a & b) | c)
op("v_or3_b32", "b32", "b32 b32 b32", lambda a, b, c: a | b | c)
op("v_xor3_b32", "b32", "b32 b32 b32", lambda a, b, c: a ^ b ^ c)
op("v_xad_u32", "u32", "u32 u32 u32", lambda a, b, c: (a ^ b) + c)
op("v_bfe_u32", "u32", "u32 u32 u32", lambda a, b, c: _bfe_unsigned(a, b, c, 32))
op("v_bfe_i32", "i32", "i32 u32 u32", lambda a, b, c: _bfe_signed(a, b, c, 32))
op("v_bfi_b32", "b32", "b32 b32 b32", lambda a, b, c: (a & b) | (~a & c))
op("v_bfm_b32", "b32", "u32 u32", lambda a, b: ((u32(1) << (a & u32(31))) - u32(1)) << (b & u32(31)))
op("v_alignbit_b32", "b32", "b32 b32 u32",
   lambda a, b, c: ((np.asarray(a, u64) << u64(32) | np.asarray(b, u64)) >> np.asarray(c & u32(31), u64)).astype(u32))
op("v_alignbyte_b32", "b32", "b32 b32 u32",
   lambda a, b, c: ((np.asarray(a, u64) << u64(32) | np.asarray(b, u64))
                    >> (u64(8) * np.asarray(c & u32(3), u64))).astype(u32))
op("v_perm_b32", "b32", "b32 b32 b32", _perm)
op("v_bcnt_u32_b32", "u32", "b32 u32", lambda a, b: _popcount(a) + b)
op("v_clz_i32_u32", "i32", "u32", _clz)
op("v_ctz_i32_b32", "i32", "b32", _ctz)
op("v_cls_i32", "i32", "i32", lambda a: _clz(np.where(a < 0, ~a, a).astype(u32)))
op("v_mbcnt_lo_u32_b32", "u32", "b32 u32", lambda a, b: _popcount(a & ((u32(1) << _lane_ids()) - u32(1))) + b)
op("v_mbcnt_hi_u32_b32", "u32", "b32 u32", lambda a, b: b + np.zeros_like(a))   # wave32: lanes 32..63 do not exist
# integer arithmetic
op("v_add_nc_u32", "u32", "u32 u32", lambda a, b: a + b)
op("v_sub_nc_u32", "u32", "u32 u32", lambda a, b: a - b)
op("v_subrev_nc_u32", "u32", "u32 u32", lambda a, b: b - a)
op("v_add_nc_u16", "u16", "u16 u16", lambda a, b: a + b)
op("v_sub_nc_u16", "u16", "u16 u16", lambda a, b: a - b)
op("v_add_nc_i16", "i16", "i16 i16", lambda a, b: a + b)
op("v_sub_nc_i16", "i16", "i16 i16", lambda a, b: a - b)
op("v_add_nc_i32", "i32", "i32 i32", lambda a, b: a + b)
op("v_sub_nc_i32", "i32", "i32 i32", lambda a, b: a - b)
op("v_mad_i16", "i16", "i16 i16 i16", lambda a, b, c: a * b + c)
op("v_mad_i32_i16", "i32", "i16 i16 i32", lambda a, b, c: np.asarray(a, i32) * np.asarray(b, i32) + c)
op("v_add3_u32", "u32", "u32 u32 u32", lambda a, b, c: a + b + c)
op("v_mul_lo_u32", "u32", "u32 u32", lambda a, b: a * b)
op("v_mul_lo_u16", "u16", "u16 u16", lambda a, b: a * b)
op("v_mul_hi_u32", "u32", "u32 u32", lambda a, b: ((np.asarray(a, u64) * np.asarray(b, u64)) >> u64(32)).astype(u32))
op("v_mul_hi_i32", "i32", "i32 i32", lambda a, b: ((np.asarray(a, i64) * np.asarray(b, i64)) >> i64(32)).astype(i32))
op("v_mul_u32_u24", "u32", "u32 u32", lambda a, b: (a & u32(0xFFFFFF)) * (b & u32(0xFFFFFF)))
op("v_mul_hi_u32_u24", "u32", "u32 u32",
   lambda a, b: ((np.asarray(a & u32(0xFFFFFF), u64) * np.asarray(b & u32(0xFFFFFF), u64)) >> u64(32)).astype(u32))
op("v_mul_i32_i24", "i32", "i32 i32", lambda a, b: ((a << i32(8)) >> i32(8)) * ((b << i32(8)) >> i32(8)))
op("v_mul_hi_i32_i24", "i32", "i32 i32",
   lambda a, b: ((np.asarray((a << i32(8)) >> i32(8), i64) * np.asarray((b << i32(8)) >> i32(8), i64))
                 >> i64(32)).astype(i32))
op("v_mad_u32_u24", "u32", "u32 u32 u32", lambda a, b, c: (a & u32(0xFFFFFF)) * (b & u32(0xFFFFFF)) + c)
op("v_mad_i32_i24", "i32", "i32 i32 i32", lambda a, b, c: ((a << i32(8)) >> i32(8)) * ((b << i32(8)) >> i32(8)) + c)
op("v_mad_u16", "u16", "u16 u16 u16", lambda a, b, c: a * b + c)
op("v_mad_u32_u16", "u32", "u16 u16 u32", lambda a, b, c: np.asarray(a, u32) * np.asarray(b, u32) + c)
op("v_min_i32", "i32", "i32 i32", np.minimum)
op("v_max_i32", "i32", "i32 i32", np.maximum)
op("v_min_u32", "u32", "u32 u32", np.minimum)
op("v_max_u32", "u32", "u32 u32", np.maximum)
op("v_min_i16", "i16", "i16 i16", np.minimum)
op("v_max_i16", "i16", "i16 i16", np.maximum)
op("v_min_u16", "u16", "u16 u16", np.minimum)
op("v_max_u16", "u16", "u16 u16", np.maximum)
op("v_min3_i32", "i32", "i32 i32 i32", lambda a, b, c: np.minimum(np.minimum(a, b), c))
op("v_max3_i32", "i32", "i32 i32 i32", lambda a, b, c: np.maximum(np.maximum(a, b), c))
op("v_min3_u32", "u32", "u32 u32 u32", lambda a, b, c: np.minimum(np.minimum(a, b), c))
op("v_max3_u32", "u32", "u32 u32 u32", lambda a, b, c: np.maximum(np.maximum(a, b), c))
op("v_med3_i32", "i32", "i32 i32 i32", _med3)
for _t in ("i16", "u16"):
    op(f"v_min3_{_t}", _t, f"{_t} {_t} {_t}", lambda a, b, c: np.minimum(np.minimum(a, b), c))
    op(f"v_max3_{_t}", _t, f"{_t} {_t} {_t}", lambda a, b, c: np.maximum(np.maximum(a, b), c))
    op(f"v_med3_{_t}", _t, f"{_t} {_t} {_t}", _med3)
op("v_med3_u32", "u32", "u32 u32 u32", _med3)
op("v_maxmin_i32", "i32", "i32 i32 i32", lambda a, b, c: np.minimum(np.maximum(a, b), c))
op("v_minmax_i32", "i32", "i32 i32 i32", lambda a, b, c: np.maximum(np.minimum(a, b), c))
op("v_maxmin_u32", "u32", "u32 u32 u32", lambda a, b, c: np.minimum(np.maximum(a, b), c))
op("v_minmax_u32", "u32", "u32 u32 u32", lambda a, b, c: np.maximum(np.minimum(a, b), c))
op("v_sad_u32", "u32", "u32 u32 u32", lambda a, b, c: np.where(a > b, a - b, b - a) + c)
# conversions
op("v_cvt_f32_i32", "f32", "i32", lambda a: np.asarray(a, f32))
op("v_cvt_f32_u32", "f32", "u32", lambda a: np.asarray(a, f32))
op("v_cvt_i32_f32", "i32", "f32", lambda a: fp.to_int(a, i32))
op("v_cvt_u32_f32", "u32", "f32", lambda a: fp.to_int(a, u32))
op("v_cvt_floor_i32_f32", "i32", "f32", lambda a: fp.to_int(np.floor(a), i32))
op("v_cvt_nearest_i32_f32", "i32", "f32", lambda a: fp.to_int(np.floor(np.asarray(a, f64) + 0.5), i32))
op("v_cvt_f16_f32", "f16", "f32", lambda a: np.asarray(a, f16))
op("v_cvt_f32_f16", "f32", "f16", lambda a: np.asarray(a, f32))
op("v_cvt_f64_f32", "f64", "f32", lambda a: np.asarray(a, f64))
op("v_cvt_f32_f64", "f32", "f64", lambda a: np.asarray(a, f32))
op("v_cvt_f64_i32", "f64", "i32", lambda a: np.asarray(a, f64))
op("v_cvt_f64_u32", "f64", "u32", lambda a: np.asarray(a, f64))
op("v_cvt_i32_f64", "i32", "f64", lambda a: fp.to_int(a, i32))
op("v_cvt_u32_f64", "u32", "f64", lambda a: fp.to_int(a, u32))
op("v_cvt_f16_i16", "f16", "i16", lambda a: np.asarray(a, f16))
op("v_cvt_f16_u16", "f16", "u16", lambda a: np.asarray(a, f16))
op("v_cvt_i16_f16", "i16", "f16", lambda a: fp.to_int(a, i16))
op("v_cvt_u16_f16", "u16", "f16", lambda a: fp.to_int(a, u16))
op("v_cvt_i32_i16", "i32", "i16", lambda a: np.asarray(a, i32))
op("v_cvt_u32_u16", "u32", "u16", lambda a: np.asarray(a, u32))
op("v_cvt_f32_ubyte0", "f32", "u32", lambda a: np.asarray(a & u32(0xFF), f32))
op("v_cvt_f32_ubyte1", "f32", "u32", lambda a: np.asarray((a >> u32(8)) & u32(0xFF), f32))
op("v_cvt_f32_ubyte2", "f32", "u32", lambda a: np.asarray((a >> u32(16)) & u32(0xFF), f32))
op("v_cvt_f32_ubyte3", "f32", "u32", lambda a: np.asarray(a >> u32(24), f32))
op("v_cvt_pk_i16_i32", "b32", "i32 i32",
   lambda a, b: ((np.clip(a, -32768, 32767).astype(u32) & u32(0xFFFF))
                 | (np.clip(b, -32768, 32767).astype(u32) << u32(16))))
op("v_cvt_pk_u16_u32", "b32", "u32 u32",
   lambda a, b: np.minimum(a, u32(0xFFFF)) | (np.minimum(b, u32(0xFFFF)) << u32(16)))
op("v_cvt_pk_u8_f32", "b32", "f32 u32 u32",
   lambda a, b, c: ((c & ~(u32(0xFF) << (u32(8) * (b & u32(3)))))
                    | (np.asarray(fp.to_int(np.rint(a), np.uint8), u32) << (u32(8) * (b & u32(3))))))
op("v_pack_b32_f16", "b32", "b16 b16", lambda a, b: np.asarray(a, u32) | (np.asarray(b, u32) << u32(16)))
# float arithmetic, per float type
for _t, _ty in (("f16", f16), ("f32", f32), ("f64", f64)):
    _3 = f"{_t} {_t} {_t}"
    op(f"v_add_{_t}", _t, f"{_t} {_t}", lambda a, b: a + b)
    op(f"v_sub_{_t}", _t, f"{_t} {_t}", lambda a, b: a - b)
    op(f"v_subrev_{_t}", _t, f"{_t} {_t}", lambda a, b: b - a)
    op(f"v_mul_{_t}", _t, f"{_t} {_t}", lambda a, b: a * b)
    op(f"v_min_{_t}", _t, f"{_t} {_t}", fp.fmin)
    op(f"v_max_{_t}", _t, f"{_t} {_t}", fp.fmax)
    op(f"v_fma_{_t}", _t, _3, fp.fma)
    op(f"v_fmac_{_t}", _t, _3, fp.fma)            # the third source is the destination (see ACCUMULATE)
    op(f"v_ldexp_{_t}", _t, f"{_t} i32", fp.ldexp)
    op(f"v_trunc_{_t}", _t, _t, np.trunc)
    op(f"v_floor_{_t}", _t, _t, np.floor)
    op(f"v_ceil_{_t}", _t, _t, np.ceil)
    op(f"v_rndne_{_t}", _t, _t, np.rint)
    op(f"v_fract_{_t}", _t, _t, fp.fract)
    op(f"v_sqrt_{_t}", _t, _t, lambda a: fp.trans(np.sqrt, a))
    op(f"v_rcp_{_t}", _t, _t, lambda a: fp.trans(lambda x: 1.0 / x, a))
    op(f"v_rsq_{_t}", _t, _t, lambda a: fp.trans(lambda x: 1.0 / np.sqrt(x), a))
    op(f"v_frexp_mant_{_t}", _t, _t, fp.frexp_mant)
    op(f"v_frexp_exp_i32_{_t}", "i32", _t, lambda a: np.where(np.isfinite(a), np.frexp(a)[1], 0))
    op(f"v_div_fixup_{_t}", _t, _3, fp.div_fixup)
    op(f"v_min3_{_t}", _t, _3, lambda a, b, c: fp.fmin(fp.fmin(a, b), c))
    op(f"v_max3_{_t}", _t, _3, lambda a, b, c: fp.fmax(fp.fmax(a, b), c))
    op(f"v_med3_{_t}", _t, _3, _fmed3)
    op(f"v_maxmin_{_t}", _t, _3, lambda a, b, c: fp.fmin(fp.fmax(a, b), c))
    op(f"v_minmax_{_t}", _t, _3, lambda a, b, c: fp.fmax(fp.fmin(a, b), c))
for _t in ("f16", "f32"):
    op(f"v_exp_{_t}", _t, _t, lambda a: fp.trans(np.exp2, a))
    op(f"v_log_{_t}", _t, _t, lambda a: fp.trans(np.log2, a))
    op(f"v_sin_{_t}", _t, _t, fp.sin_rev)
    op(f"v_cos_{_t}", _t, _t, fp.cos_rev)
op("v_rcp_iflag_f32", "f32", "f32", lambda a: (1.0 / np.asarray(a, f64)).astype(f32))
op("v_frexp_exp_i16_f16", "i16", "f16", lambda a: np.where(np.isfinite(a), np.frexp(a)[1], 0))
op("v_mul_dx9_zero_f32", "f32", "f32 f32", lambda a, b: np.where((a == 0) | (b == 0), f32(0), a * b))
op("v_fma_dx9_zero_f32", "f32", "f32 f32 f32", lambda a, b, c: np.where((a == 0) | (b == 0), c, fp.fma(a, b, c)))
op("v_cvt_pk_rtz_f16_f32", "b32", "f32 f32",
   lambda a, b: np.asarray(_f16_rtz(a), u32) | (np.asarray(_f16_rtz(b), u32) << u32(16)))
op("v_cvt_pk_norm_i16_f32", "b32", "f32 f32",
   lambda a, b: (fp.to_int(np.rint(np.clip(a, -1, 1) * 32767), i16).view(u16).astype(u32)
                 | (fp.to_int(np.rint(np.clip(b, -1, 1) * 32767), i16).view(u16).astype(u32) << u32(16))))


def _f16_rtz(x: np.ndarray) -> np.ndarray:
    """f32 -> f16 bits rounding toward zero."""
    r = np.asarray(x, f16)
    over = np.abs(r.astype(f64)) > np.abs(np.asarray(x, f64))
    r = np.where(over & np.isfinite(x), np.nextafter(r, f16(0)), r)
    return np.asarray(r, f16).view(u16)


# ops whose last source is their destination (D = f(S0, S1, D))
ACCUMULATE = {"v_fmac_f16", "v_fmac_f32", "v_fmac_f64", "v_fmac_dx9_zero_f32"}
OPS["v_fmac_dx9_zero_f32"] = OPS["v_fma_dx9_zero_f32"]


# ---- compiling ----

def _src_codes(inst) -> list[int]:
    f = inst.fields
    if inst.enc in ("VOP2", "VOPC"):
        return [f["src0"], 256 + f["vsrc1"]]
    if inst.enc == "VOP1":
        return [f["src0"]]
    return [f.get("src0", 0), f.get("src1", 0), f.get("src2", 0)]


def _bit(v: int, i: int) -> int:
    return (v >> i) & 1


def typed_source(inst, i: int, code: int, typ: str) -> Callable:
    """Reader of source i (9-bit code) as numpy values of type `typ`, input modifiers applied."""
    bits, ty, is_float = TYPES[typ]
    f = inst.fields
    hi = 0
    if bits == 16:
        if inst.enc in E32 and code >= 256:
            code, hi = 256 + ((code - 256) & 127), (code - 256) >> 7
        elif inst.enc not in E32:
            hi = _bit(f.get("opsel", 0), i)
    raw = vsrc(code, bits, is_float, inst.literal, hi)
    ab, ng = (_bit(f.get("abs", 0), i), _bit(f.get("neg", 0), i)) if inst.enc in ("VOP3", "VOP3SD") else (0, 0)
    if (ab or ng) and not is_float and typ[0] != "b":   # untyped bits (cndmask, mov) take them as float sign ops
        raise EmulatorError(f"{inst.op}: abs/neg modifiers on the {typ} source {i}")
    sign = SIGN[bits]
    if ab and ng:
        return lambda m, bt: (raw(m, bt) | sign).view(ty)
    if ab:
        return lambda m, bt: (raw(m, bt) & ~sign).view(ty)
    if ng:
        return lambda m, bt: (raw(m, bt) ^ sign).view(ty)
    if ty is UINT[bits]:
        return raw
    return lambda m, bt: raw(m, bt).view(ty)


def typed_dest(inst, typ: str, vdst: int | None = None) -> Writer:
    """Writer of a typed result to the instruction's VGPR destination, with clamp and output modifier."""
    bits, ty, is_float = TYPES[typ]
    f = inst.fields
    r = f["vdst"] if vdst is None else vdst
    hi = 0
    if bits == 16:
        if inst.enc in E32:
            r, hi = r & 127, r >> 7
        else:
            hi = _bit(f.get("opsel", 0), 3)
    w = vdst_writer(r, bits, hi)
    clamp, omod = f.get("clamp", 0), f.get("omod", 0)
    if omod and not is_float:
        raise EmulatorError(f"{inst.op}: output modifier on an integer result")
    if clamp and not is_float and bits == 64:
        raise EmulatorError(f"{inst.op}: 64-bit integer clamping is not implemented")
    scale = {0: None, 1: 2.0, 2: 4.0, 3: 0.5}[omod]
    ut = UINT[bits]
    if scale is None and not clamp:
        if ty is ut:
            return w            # raw bits: the register assignment converts
        return lambda m, bt, val: w(m, bt, np.asarray(val, ty).view(ut))
    low, high = (0, 1) if is_float else (np.iinfo(ty).min, np.iinfo(ty).max)

    def store(m: Machine, bt: Batch, val) -> None:
        v = np.asarray(val)
        if scale is not None:
            v = v * ty(scale)
        if clamp:   # floats to [0, 1] (NaN to 0); integers saturate (their sources were widened, see compile_generic)
            v = np.where(np.isnan(v), 0, np.clip(v, low, high)) if is_float else np.clip(v, low, high)
        w(m, bt, v.astype(ty, copy=False).view(ut) if v.dtype != ut else v)
    return store


def compile_generic(inst, sig, vdst_field: int | None = None) -> Exec:
    dst_t, src_ts, fn = sig
    codes = _src_codes(inst)
    if inst.op in ACCUMULATE:
        codes = codes[:2] + [256 + inst.fields["vdst"]]
    elif inst.op in ("v_fmamk_f32", "v_fmamk_f16"):
        codes = [codes[0], 255, codes[1]]
    elif inst.op in ("v_fmaak_f32", "v_fmaak_f16"):
        codes = [codes[0], codes[1], 255]
    srcs = [typed_source(inst, i, codes[i], t) for i, t in enumerate(src_ts)]
    out = typed_dest(inst, dst_t, vdst_field)
    if inst.fields.get("clamp", 0) and not TYPES[dst_t][2]:
        # integer clamp saturates: compute from sources widened to 64 bits, so the exact result gets clipped
        srcs = [lambda m, bt, s=s: np.asarray(s(m, bt)).astype(i64) for s in srcs]
    if len(srcs) == 1:
        s0 = srcs[0]
        return lambda m, bt: out(m, bt, fn(s0(m, bt)))
    if len(srcs) == 2:
        s0, s1 = srcs
        return lambda m, bt: out(m, bt, fn(s0(m, bt), s1(m, bt)))
    s0, s1, s2 = srcs
    return lambda m, bt: out(m, bt, fn(s0(m, bt), s1(m, bt), s2(m, bt)))


for _t in ("f16", "f32"):
    OPS[f"v_fmamk_{_t}"] = OPS[f"v_fma_{_t}"]
    OPS[f"v_fmaak_{_t}"] = OPS[f"v_fma_{_t}"]


def mask_bits(bits: np.ndarray) -> np.ndarray:
    """(waves, 32) bool -> (waves,) uint32 lane mask."""
    return np.packbits(bits, axis=1, bitorder="little").view(u32)[:, 0]


def lane_bits(mask: np.ndarray | np.generic) -> np.ndarray:
    """(waves,) or (waves, 1) uint32 lane masks -> (waves, 32) bool (a constant gives (1, 32))."""
    b = np.ascontiguousarray(mask, u32).reshape(-1).view(np.uint8).reshape(-1, 4)
    return np.unpackbits(b, axis=1, bitorder="little").view(bool)


def mask_source(inst, code: int) -> Callable:
    """A lane-mask source (VCC or an SGPR / constant in VOP3 form) as (waves, 32) bool."""
    rd = scalar_reader(code, 32, False, inst.literal, False)
    return lambda m, bt: lane_bits(rd(m, bt))


def mask_dest(code: int) -> Callable[[Machine, Batch, np.ndarray], None]:
    """Write (waves, 32) bool lane results as a mask; inactive lanes write 0."""
    w = sdst_writer(code)

    def store(m: Machine, bt: Batch, bits: np.ndarray) -> None:
        mk = bt.mask()
        if np.shape(bits) != (bt.n, 32):
            bits = np.broadcast_to(bits, (bt.n, 32))
        w(m, bt, mask_bits(bits if mk is None else bits & mk))
    return store


# ---- compares ----

Compare = Callable[[Any, Any], np.ndarray]  # operands: lane arrays or numpy scalars (see operands.Value)
CMP_FLOAT: dict[str, Compare] = {
    "f": lambda a, b: np.zeros(np.broadcast_shapes(np.shape(a), np.shape(b)), bool),
    "t": lambda a, b: np.ones(np.broadcast_shapes(np.shape(a), np.shape(b)), bool),
    "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "lg": lambda a, b: (a < b) | (a > b), "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)),
    "u": lambda a, b: np.isnan(a) | np.isnan(b), "nge": lambda a, b: ~(a >= b),
    "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b), "nle": lambda a, b: ~(a <= b),
    "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
}
CMP_INT: dict[str, Compare] = {"f": CMP_FLOAT["f"], "t": CMP_FLOAT["t"], "lt": np.less, "eq": np.equal, "le": np.less_equal,
           "gt": np.greater, "ne": np.not_equal, "ge": np.greater_equal}


def compile_cmp(inst) -> Exec:
    parts = inst.op.split("_")          # v_cmp[x]_<cond>_<type>
    x = parts[1] == "cmpx"
    cond, typ = "_".join(parts[2:-1]), parts[-1]
    if typ not in TYPES:
        raise EmulatorError(f"unknown compare type in {inst.op}")
    fn: Compare
    if cond == "class":
        fn = fp.fp_class
        types = (typ, "u32")
    else:
        table = CMP_FLOAT if TYPES[typ][2] else CMP_INT
        if cond not in table:
            raise EmulatorError(f"unknown compare {inst.op}")
        fn, types = table[cond], (typ, typ)
    codes = _src_codes(inst)
    srcs = [typed_source(inst, i, codes[i], t) for i, t in enumerate(types)]
    if x:
        dest = EXEC
    elif inst.enc == "VOPC":
        dest = VCC
    else:
        dest = inst.fields.get("sdst", inst.fields.get("vdst"))
    out = mask_dest(dest)
    s0, s1 = srcs
    return lambda m, bt: out(m, bt, fn(s0(m, bt), s1(m, bt)))


# ---- special ops ----

def _carry_io(inst, carry_in: bool) -> tuple[Callable | None, Callable]:
    """(carry-in mask reader or None, carry-out mask writer): VCC in the e32 forms, src2 / sdst in VOP3SD."""
    if inst.enc == "VOP2":
        return (mask_source(inst, VCC) if carry_in else None), mask_dest(VCC)
    f = inst.fields
    return (mask_source(inst, f["src2"]) if carry_in else None), mask_dest(f["sdst"])


def compile_add_co(inst) -> Exec:
    name = inst.op
    carry_in = "_ci_" in name
    sub, rev = "sub" in name, "subrev" in name
    codes = _src_codes(inst)
    a_r, b_r = typed_source(inst, 0, codes[0], "u32"), typed_source(inst, 1, codes[1], "u32")
    cin, cout = _carry_io(inst, carry_in)
    out = typed_dest(inst, "u32")

    def run(m: Machine, bt: Batch) -> None:
        a, b = a_r(m, bt), b_r(m, bt)
        if rev:
            a, b = b, a
        # 32-bit arithmetic with the carry (borrow) found by comparison: cheaper than widening to 64 bits
        if sub:
            r = a - b
            carry = a < b
            if cin:
                c = cin(m, bt)
                carry = carry | (r < c)
                r = r - c.astype(u32)
        else:
            r = a + b
            carry = r < a
            if cin:
                c = cin(m, bt)
                r = r + c.astype(u32)
                carry = carry | (r < c)
        out(m, bt, r)
        cout(m, bt, carry)
    return run


def compile_cndmask(inst) -> Exec:
    typ = "b16" if inst.op.endswith("b16") else "b32"
    codes = _src_codes(inst)
    a_r, b_r = typed_source(inst, 0, codes[0], typ), typed_source(inst, 1, codes[1], typ)
    sel = mask_source(inst, VCC if inst.enc == "VOP2" else inst.fields["src2"])
    out = typed_dest(inst, typ)
    return lambda m, bt: out(m, bt, np.where(sel(m, bt), b_r(m, bt), a_r(m, bt)))


def compile_readlane(inst) -> Exec:
    f = inst.fields
    code, sd = f["src0"], f["vdst"]          # the scalar destination sits in the vdst field
    if code < 256:
        raise EmulatorError(f"{inst.op} reads a VGPR, got operand code {code}")
    r = code - 256
    w = sdst_writer(sd)
    if inst.op == "v_readfirstlane_b32":
        def first(m: Machine, bt: Batch) -> None:
            e = m.s[EXEC][bt.idx]
            low = e & (~e + u32(1))
            lane = np.where(e == 0, 0, np.log2(np.maximum(low, 1).astype(f64)).astype(np.intp))
            w(m, bt, m.vgpr(r)[bt.idx][np.arange(bt.n), lane])
        return first
    lane_r = scalar_reader(f["src1"], 32, False, inst.literal, False)

    def readlane(m: Machine, bt: Batch) -> None:
        lane = np.broadcast_to(np.asarray(lane_r(m, bt)) & u32(31), (bt.n,)).astype(np.intp)
        w(m, bt, m.vgpr(r)[bt.idx][np.arange(bt.n), lane])
    return readlane


def compile_writelane(inst) -> Exec:
    f = inst.fields
    val = scalar_reader(f["src0"], 32, False, inst.literal, False)
    lane_r = scalar_reader(f["src1"], 32, False, inst.literal, False)
    r = f["vdst"]

    def run(m: Machine, bt: Batch) -> None:    # ignores EXEC, as the hardware does
        lane = np.broadcast_to(np.asarray(lane_r(m, bt)) & u32(31), (bt.n,)).astype(np.intp)
        sub = m.vgpr(r)[bt.idx]
        sub[np.arange(bt.n), lane] = np.broadcast_to(val(m, bt), (bt.n,))
        m.vgpr(r)[bt.idx] = sub
    return run


def compile_div_scale(inst) -> Exec:
    typ = inst.op[-3:]
    codes = _src_codes(inst)
    srcs = [typed_source(inst, i, codes[i], typ) for i in range(3)]
    out = typed_dest(inst, typ)
    vcc = mask_dest(inst.fields["sdst"])

    def run(m: Machine, bt: Batch) -> None:
        d, flag = fp.div_scale(*(np.asarray(s(m, bt)) for s in srcs))
        out(m, bt, d)
        vcc(m, bt, flag)
    return run


def compile_div_fmas(inst) -> Exec:
    typ = inst.op[-3:]
    codes = _src_codes(inst)
    srcs = [typed_source(inst, i, codes[i], typ) for i in range(3)]
    out = typed_dest(inst, typ)
    vcc = mask_source(inst, VCC)

    def run(m: Machine, bt: Batch) -> None:
        a, b, c = (np.asarray(s(m, bt)) for s in srcs)
        out(m, bt, fp.div_fmas(a, b, c, vcc(m, bt)))
    return run


def compile_mad64(inst) -> Exec:
    signed = inst.op == "v_mad_i64_i32"
    codes = _src_codes(inst)
    t32, t64 = ("i32", "i64") if signed else ("u32", "u64")
    a_r, b_r, c_r = (typed_source(inst, 0, codes[0], t32), typed_source(inst, 1, codes[1], t32),
                     typed_source(inst, 2, codes[2], t64))
    out = typed_dest(inst, t64)
    cout = mask_dest(inst.fields["sdst"])

    def run(m: Machine, bt: Batch) -> None:
        a, b, c = a_r(m, bt), b_r(m, bt), c_r(m, bt)
        p: np.ndarray
        r: np.ndarray
        if signed:
            p = np.asarray(a, i64) * np.asarray(b, i64)       # exact in 64 bits
            r = p + np.asarray(c, i64)
            carry = ((p >= 0) == (np.asarray(c, i64) >= 0)) & ((r >= 0) != (p >= 0))   # signed overflow
        else:
            p = np.asarray(a, u64) * np.asarray(b, u64)
            r = p + np.asarray(c, u64)
            carry = r < p
        out(m, bt, r)
        cout(m, bt, carry)
    return run


def compile_swap(inst) -> Exec:
    f = inst.fields
    a, b = f["vdst"], f["src0"] - 256

    wa, wb = vdst_writer(a, 32), vdst_writer(b, 32)

    def run(m: Machine, bt: Batch) -> None:
        va, vb = m.vgpr(a)[bt.idx].copy(), m.vgpr(b)[bt.idx].copy()
        wa(m, bt, vb)
        wb(m, bt, va)
    return run


SPECIAL: dict[str, Callable] = {
    "v_readfirstlane_b32": compile_readlane, "v_readlane_b32": compile_readlane, "v_writelane_b32": compile_writelane,
    "v_cndmask_b32": compile_cndmask, "v_cndmask_b16": compile_cndmask,
    "v_div_scale_f32": compile_div_scale, "v_div_scale_f64": compile_div_scale,
    "v_div_fmas_f32": compile_div_fmas, "v_div_fmas_f64": compile_div_fmas,
    "v_mad_u64_u32": compile_mad64, "v_mad_i64_i32": compile_mad64, "v_swap_b32": compile_swap,
}
for _n in ("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_add_co_ci_u32", "v_sub_co_ci_u32",
           "v_subrev_co_ci_u32"):
    SPECIAL[_n] = compile_add_co
NOPS = {"v_nop", "v_pipeflush"}


def compile_valu(inst) -> Exec:
    """The executor of one VOP1/VOP2/VOP3/VOP3SD/VOPC instruction."""
    name = inst.op
    if name in NOPS:
        return lambda m, bt: None
    if name in SPECIAL:
        return SPECIAL[name](inst)
    if name.startswith(("v_cmp_", "v_cmpx_")):
        return compile_cmp(inst)
    if name in OPS:
        return compile_generic(inst, OPS[name])
    raise KeyError(name)


# ---- VOPD: two independent VOP2-like ops issued together ----

VOPD_OPS = {"v_dual_fmac_f32": "v_fmac_f32", "v_dual_fmaak_f32": "v_fmaak_f32", "v_dual_fmamk_f32": "v_fmamk_f32",
            "v_dual_mul_f32": "v_mul_f32", "v_dual_add_f32": "v_add_f32", "v_dual_sub_f32": "v_sub_f32",
            "v_dual_subrev_f32": "v_subrev_f32", "v_dual_mul_dx9_zero_f32": "v_mul_dx9_zero_f32",
            "v_dual_mov_b32": "v_mov_b32", "v_dual_cndmask_b32": "v_cndmask_b32", "v_dual_max_f32": "v_max_f32",
            "v_dual_min_f32": "v_min_f32", "v_dual_add_nc_u32": "v_add_nc_u32", "v_dual_lshlrev_b32": "v_lshlrev_b32",
            "v_dual_and_b32": "v_and_b32"}


class _Half:
    """One half of a VOPD pair, shaped like a VOP2 instruction for the compilers above."""

    def __init__(self, inst, op: str, vdst: int, src0: int, vsrc1: int):
        self.op, self.literal, self.addr = op, inst.literal, inst.addr
        self.enc = "VOP1" if op == "v_mov_b32" else "VOP2"
        self.fields = {"vdst": vdst, "src0": src0, "vsrc1": vsrc1}


def compile_vopd(inst, opx: str, opy: str) -> Exec:
    """Both halves read their sources before either writes its destination."""
    f = inst.fields
    compute, writers = [], []
    for name, d, s0, s1 in ((opx, f["vdstx"], f["srcx0"], f["vsrcx1"]), (opy, f["vdsty"], f["srcy0"], f["vsrcy1"])):
        if name == "v_dual_dot2acc_f32_f16":   # packed f16 sources: VOP2's dot2acc, not a typed OPS row
            compute.append(dot2acc_value(inst, s0, s1, d))
            writers.append(vdst_writer(d, 32))
            continue
        if name not in VOPD_OPS:
            raise KeyError(name)
        h = _Half(inst, VOPD_OPS[name], d, s0, s1)
        compute.append(_compute_only(h))
        writers.append(typed_dest(h, "b32"))

    def run(m: Machine, bt: Batch) -> None:
        rx = compute[0](m, bt)
        ry = compute[1](m, bt)
        writers[0](m, bt, rx)
        writers[1](m, bt, ry)
    return run


def _compute_only(h: _Half) -> Callable:
    """The result bits (uint32, not a view of a register) of one VOPD half, without writing them."""
    if h.op == "v_cndmask_b32":
        a_r, b_r = typed_source(h, 0, h.fields["src0"], "b32"), typed_source(h, 1, 256 + h.fields["vsrc1"], "b32")
        sel = mask_source(h, VCC)
        return lambda m, bt: np.where(sel(m, bt), b_r(m, bt), a_r(m, bt))
    dst_t, src_ts, fn = OPS[h.op]
    codes = [h.fields["src0"]] if h.enc == "VOP1" else [h.fields["src0"], 256 + h.fields["vsrc1"]]
    if h.op in ACCUMULATE:
        codes = codes + [256 + h.fields["vdst"]]
    elif h.op == "v_fmamk_f32":
        codes = [codes[0], 255, codes[1]]
    elif h.op == "v_fmaak_f32":
        codes = [codes[0], codes[1], 255]
    srcs = [typed_source(h, i, codes[i], t) for i, t in enumerate(src_ts)]
    ty = TYPES[dst_t][1]
    return lambda m, bt: np.array(fn(*(s(m, bt) for s in srcs)), ty).view(u32)
