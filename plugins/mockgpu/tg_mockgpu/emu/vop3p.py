"""VOP3P: packed 16-bit math (two halves per register), mixed-precision FMA and dot products.

For a packed op, the low result half uses each source's half chosen by `opsel` and the high result half the one
chosen by `opsel_hi`; `neg` negates the low-half inputs and `neg_hi` the high-half ones (floats only). Inline
constants stand for the 16-bit constant in both halves.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tg_mockgpu.emu import fp
from tg_mockgpu.emu.machine import Batch, EmulatorError, Machine
from tg_mockgpu.emu.operands import INLINE_FLOAT, vdst_writer, vsrc

u16, u32, i16, f16, f32 = np.uint16, np.uint32, np.int16, np.float16, np.float32

PK: dict[str, tuple[type, int, Callable]] = {
    "v_pk_add_f16": (f16, 2, lambda a, b: a + b), "v_pk_mul_f16": (f16, 2, lambda a, b: a * b),
    "v_pk_fma_f16": (f16, 3, fp.fma), "v_pk_min_f16": (f16, 2, fp.fmin), "v_pk_max_f16": (f16, 2, fp.fmax),
    "v_pk_add_u16": (u16, 2, lambda a, b: a + b), "v_pk_sub_u16": (u16, 2, lambda a, b: a - b),
    "v_pk_add_i16": (i16, 2, lambda a, b: a + b), "v_pk_sub_i16": (i16, 2, lambda a, b: a - b),
    "v_pk_mul_lo_u16": (u16, 2, lambda a, b: a * b),
    "v_pk_lshlrev_b16": (u16, 2, lambda a, b: b << (a & u16(15))),
    "v_pk_lshrrev_b16": (u16, 2, lambda a, b: b >> (a & u16(15))),
    "v_pk_ashrrev_i16": (i16, 2, lambda a, b: b >> (a & i16(15))),
    "v_pk_max_i16": (i16, 2, np.maximum), "v_pk_min_i16": (i16, 2, np.minimum),
    "v_pk_max_u16": (u16, 2, np.maximum), "v_pk_min_u16": (u16, 2, np.minimum),
    "v_pk_mad_u16": (u16, 3, lambda a, b, c: a * b + c), "v_pk_mad_i16": (i16, 3, lambda a, b, c: a * b + c),
}


def _word_source(inst, code: int, packed_const: bool) -> Callable:
    """A source as its 32-bit word (an inline float constant as the f16 pattern in both halves)."""
    if packed_const and code in INLINE_FLOAT:
        k = u32(INLINE_FLOAT[code][0] * 0x10001)
        return lambda m, bt: k
    return vsrc(code, 32, False, inst.literal)


def _half(word: np.ndarray | np.generic, hi: int) -> np.ndarray:
    w = np.asarray(word, u32)
    return ((w >> u32(16)) if hi else w).astype(u16)


def _bit(v: int, i: int) -> int:
    return (v >> i) & 1


def compile_vop3p(inst) -> Callable:
    name, f = inst.op, inst.fields
    if f.get("clamp", 0):
        raise EmulatorError(f"{name}: clamp is not implemented for VOP3P")
    if name in ("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16"):
        return _compile_mix(inst)
    if name == "v_dot2_f32_f16":
        return _compile_dot2(inst)
    if name not in PK:
        raise KeyError(name)
    ty, nsrc, fn = PK[name]
    is_float = ty is f16
    codes = [f["src0"], f["src1"], f["src2"]][:nsrc]
    words = [_word_source(inst, c, is_float) for c in codes]
    opsel, opsel_hi, neg, neg_hi = f.get("opsel", 0), f.get("opsel_hi", 7), f.get("neg", 0), f.get("neg_hi", 0)
    if not is_float and (neg or neg_hi):
        raise EmulatorError(f"{name}: neg modifiers on integer sources")
    w = vdst_writer(f["vdst"], 32)

    def operand(x: np.ndarray, i: int, hi_result: int) -> np.ndarray:
        h = _half(x, _bit(opsel_hi if hi_result else opsel, i))
        if _bit(neg_hi if hi_result else neg, i):
            h = h ^ u16(0x8000)
        return h.view(ty)

    def run(m: Machine, bt: Batch) -> None:
        xs = [s(m, bt) for s in words]
        lo = np.asarray(fn(*(operand(x, i, 0) for i, x in enumerate(xs))), ty).view(u16)
        hi = np.asarray(fn(*(operand(x, i, 1) for i, x in enumerate(xs))), ty).view(u16)
        w(m, bt, lo.astype(u32) | (hi.astype(u32) << u32(16)))
    return run


def _compile_mix(inst) -> Callable:
    """v_fma_mix*: each source is f32, or (opsel_hi bit set) an f16 half (opsel picks which) converted to f32;
    neg negates and neg_hi takes the absolute value of a source."""
    f = inst.fields
    opsel, opsel_hi, neg, absb = f.get("opsel", 0), f.get("opsel_hi", 0), f.get("neg", 0), f.get("neg_hi", 0)
    words = [vsrc(c, 32, True, inst.literal) for c in (f["src0"], f["src1"], f["src2"])]
    halves = [vsrc(c, 16, True, inst.literal, _bit(opsel, i)) for i, c in enumerate((f["src0"], f["src1"], f["src2"]))]

    def src(m: Machine, bt: Batch, i: int) -> np.ndarray:
        if _bit(opsel_hi, i):
            x = np.asarray(halves[i](m, bt)).view(f16).astype(f32)
        else:
            x = np.asarray(words[i](m, bt)).view(f32)
        if _bit(absb, i):
            x = np.abs(x)
        if _bit(neg, i):
            x = -x
        return x

    if inst.op == "v_fma_mix_f32":
        w32 = vdst_writer(f["vdst"], 32)
        return lambda m, bt: w32(m, bt, fp.fma(src(m, bt, 0), src(m, bt, 1), src(m, bt, 2)).view(u32))
    # mixlo/mixhi: the f16 result goes to one half; the other half keeps its value
    w16 = vdst_writer(f["vdst"], 16, 1 if inst.op == "v_fma_mixhi_f16" else 0)
    return lambda m, bt: w16(m, bt, fp.fma(src(m, bt, 0), src(m, bt, 1), src(m, bt, 2)).astype(f16).view(u16))


def _compile_dot2(inst) -> Callable:
    f = inst.fields
    opsel, opsel_hi, neg, neg_hi = f.get("opsel", 0), f.get("opsel_hi", 7), f.get("neg", 0), f.get("neg_hi", 0)
    a_r, b_r = _word_source(inst, f["src0"], True), _word_source(inst, f["src1"], True)
    c_r = vsrc(f["src2"], 32, True, inst.literal)
    w = vdst_writer(f["vdst"], 32)

    def part(x, i: int, hi_result: int) -> np.ndarray:
        h = _half(x, _bit(opsel_hi if hi_result else opsel, i))
        if _bit(neg_hi if hi_result else neg, i):
            h = h ^ u16(0x8000)
        return h.view(f16).astype(np.float64)

    def run(m: Machine, bt: Batch) -> None:
        a, b = a_r(m, bt), b_r(m, bt)
        c = np.asarray(c_r(m, bt)).view(f32)
        if _bit(neg, 2):
            c = -c
        s = part(a, 0, 0) * part(b, 1, 0) + part(a, 0, 1) * part(b, 1, 1) + c
        w(m, bt, np.asarray(s, f32).view(u32))
    return run


def compile_pk_fmac(inst) -> Callable:
    """VOP2 v_pk_fmac_f16: D.lo += S0.lo * S1.lo and D.hi += S0.hi * S1.hi."""
    f = inst.fields
    a_r, b_r = _word_source(inst, f["src0"], True), vsrc(256 + f["vsrc1"], 32, False, None)
    d_r = vsrc(256 + f["vdst"], 32, False, None)
    w = vdst_writer(f["vdst"], 32)

    def run(m: Machine, bt: Batch) -> None:
        a, b, d = a_r(m, bt), b_r(m, bt), d_r(m, bt)
        lo = fp.fma(_half(a, 0).view(f16), _half(b, 0).view(f16), _half(d, 0).view(f16)).view(u16)
        hi = fp.fma(_half(a, 1).view(f16), _half(b, 1).view(f16), _half(d, 1).view(f16)).view(u16)
        w(m, bt, lo.astype(u32) | (hi.astype(u32) << u32(16)))
    return run


def compile_dot2acc(inst) -> Callable:
    """VOP2 v_dot2acc_f32_f16: D.f32 += S0.lo * S1.lo + S0.hi * S1.hi."""
    f = inst.fields
    a_r, b_r = _word_source(inst, f["src0"], True), vsrc(256 + f["vsrc1"], 32, False, None)
    d_r = vsrc(256 + f["vdst"], 32, True, None)
    w = vdst_writer(f["vdst"], 32)

    def run(m: Machine, bt: Batch) -> None:
        a, b = a_r(m, bt), b_r(m, bt)
        s = sum(_half(a, h).view(f16).astype(np.float64) * _half(b, h).view(f16).astype(np.float64) for h in (0, 1))
        w(m, bt, np.asarray(s + np.asarray(d_r(m, bt)).view(f32), f32).view(u32))
    return run
