"""VOP3P: packed 16-bit math (two halves per register), mixed-precision FMA and dot products (f16/bf16 pairs into
f32; 8-bit quads and 4-bit octets into 32-bit integers, signed per operand for the iu forms); WMMA is wmma.py's.

For a packed op, the low result half uses each source's half chosen by `opsel` and the high result half the one
chosen by `opsel_hi`; `neg` negates the low-half inputs and `neg_hi` the high-half ones (floats only). Inline
constants stand for the 16-bit constant in both halves.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tg_mockgpu.emu import fp
from tg_mockgpu.emu.machine import WAVE, Batch, EmulatorError, Machine
from tg_mockgpu.emu.operands import INLINE_FLOAT, vdst_writer, vsrc
from tg_mockgpu.emu.wmma import WMMA, compile_wmma

u8, u16, u32, i16, f16, f32 = np.uint8, np.uint16, np.uint32, np.int16, np.float16, np.float32

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
    if name in DOTS:
        return _compile_dot(inst)
    if name in WMMA:
        return compile_wmma(inst)
    if f.get("clamp", 0):
        raise EmulatorError(f"{name}: clamp is not implemented for VOP3P")
    if name in ("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16"):
        return _compile_mix(inst)
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


def _bf16_to_f32(h: np.ndarray) -> np.ndarray:
    return (h.astype(u32) << u32(16)).view(f32)


# float dot products: name -> the f32 value of a 16-bit half (the products and sum are formed in f64, rounded once)
FLOAT_DOT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "v_dot2_f32_f16": lambda h: h.view(f16).astype(f32),
    "v_dot2_f32_bf16": _bf16_to_f32,
}
# integer dot products: name -> (element bits, "iu" form). The iu forms read src0 / src1 as signed when NEG[0] /
# NEG[1] is set (that is all neg means for them), the others are unsigned; the sum wraps to 32 bits, or with
# clamp saturates to the result's range (int32 for iu, uint32 else).
INT_DOT: dict[str, tuple[int, bool]] = {
    "v_dot4_u32_u8": (8, False), "v_dot4_i32_iu8": (8, True),
    "v_dot8_u32_u4": (4, False), "v_dot8_i32_iu4": (4, True),
}
DOTS = FLOAT_DOT.keys() | INT_DOT.keys()


def _compile_dot(inst) -> Callable:
    f = inst.fields
    name, clamp = inst.op, f.get("clamp", 0)
    opsel, opsel_hi, neg, neg_hi = f.get("opsel", 0), f.get("opsel_hi", 7), f.get("neg", 0), f.get("neg_hi", 0)
    w = vdst_writer(f["vdst"], 32)
    if name in INT_DOT:
        bits, iu = INT_DOT[name]
        if opsel or opsel_hi != 7 or neg_hi or neg & (0b100 if iu else 0b111):
            raise EmulatorError(f"{name}: op_sel, neg_hi{'' if iu else ', neg'} and neg on src2 mean nothing here "
                                f"(op_sel {opsel:03b}, op_sel_hi {opsel_hi:03b}, neg {neg:03b}, neg_hi {neg_hi:03b})")
        signed = (bool(iu and neg & 1), bool(iu and neg & 2))
        a_r, b_r, c_r = (_word_source(inst, f[k], False) for k in ("src0", "src1", "src2"))
        low, high = (-(1 << 31), (1 << 31) - 1) if iu else (0, (1 << 32) - 1)
        byte_type = {False: u8, True: np.int8}

        def elements(x, sgn: bool, shape: tuple[int, int]) -> np.ndarray:
            """(waves, 32, 32 // bits) int32 elements of each word, lowest first (byte views, no shifts)."""
            word = np.ascontiguousarray(np.broadcast_to(np.asarray(x, u32), shape))
            if bits == 8:
                return word.view(byte_type[sgn]).reshape(*shape, 4).astype(np.int32)
            b = word.view(u8).reshape(*shape, 4).astype(np.int32)
            e = np.stack([b & 15, b >> 4], axis=-1).reshape(*shape, 8)     # nibble 2k + j is byte k's j-th
            return (e ^ 8) - 8 if sgn else e

        def run_int(m: Machine, bt: Batch) -> None:
            shape = (bt.n, WAVE)
            p = elements(a_r(m, bt), signed[0], shape) * elements(b_r(m, bt), signed[1], shape)
            dot = p[..., 0] + p[..., 1]           # small explicit adds: faster than a reduce over a short axis
            for k in range(2, p.shape[-1]):
                dot += p[..., k]                  # |dot| <= 8 * 255 * 255: exact in int32
            c = np.asarray(c_r(m, bt), u32)
            if not clamp:                         # the 32-bit sum wraps, signed or not
                w(m, bt, dot.view(u32) + c)
                return
            total = dot.astype(np.int64) + (c.view(np.int32) if iu else c).astype(np.int64)
            w(m, bt, np.clip(total, low, high).astype(u32))
        return run_int
    if neg_hi & 0b100:
        raise EmulatorError(f"{name}: neg_hi on the f32 accumulator is not defined")
    to_f32 = FLOAT_DOT[name]
    a_r, b_r = _word_source(inst, f["src0"], True), _word_source(inst, f["src1"], True)
    c_r = vsrc(f["src2"], 32, True, inst.literal)

    def part(x, i: int, hi_result: int) -> np.ndarray:
        h = _half(x, _bit(opsel_hi if hi_result else opsel, i))
        if _bit(neg_hi if hi_result else neg, i):
            h = h ^ u16(0x8000)
        return to_f32(h).astype(np.float64)

    def run(m: Machine, bt: Batch) -> None:
        a, b = a_r(m, bt), b_r(m, bt)
        c = np.asarray(c_r(m, bt)).view(f32)
        if _bit(neg, 2):
            c = -c
        r = np.asarray(part(a, 0, 0) * part(b, 1, 0) + part(a, 0, 1) * part(b, 1, 1) + c, f32)
        if clamp:   # floats to [0, 1], NaN to 0
            r = np.where(np.isnan(r), f32(0), np.clip(r, f32(0), f32(1)))
        w(m, bt, r.view(u32))
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


def dot2acc_value(inst, src0: int, vsrc1: int, vdst: int) -> Callable:
    """The f32 bits of v_dot2acc_f32_f16 (VOP2, or a VOPD half): vdst + src0.lo * vsrc1.lo + src0.hi * vsrc1.hi."""
    a_r, b_r = _word_source(inst, src0, True), vsrc(256 + vsrc1, 32, False, None)
    d_r = vsrc(256 + vdst, 32, True, None)

    def value(m: Machine, bt: Batch) -> np.ndarray:
        a, b = a_r(m, bt), b_r(m, bt)
        s = sum(_half(a, h).view(f16).astype(np.float64) * _half(b, h).view(f16).astype(np.float64) for h in (0, 1))
        return np.asarray(s + np.asarray(d_r(m, bt)).view(f32), f32).view(u32)
    return value


def compile_dot2acc(inst) -> Callable:
    """VOP2 v_dot2acc_f32_f16: D.f32 += S0.lo * S1.lo + S0.hi * S1.hi."""
    f = inst.fields
    value, w = dot2acc_value(inst, f["src0"], f["vsrc1"], f["vdst"]), vdst_writer(f["vdst"], 32)
    return lambda m, bt: w(m, bt, value(m, bt))


# VOP3 dots into a 16-bit result: name -> (the f32 value of a half, the result type's conversion from f64)
DOT16: dict[str, tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]] = {
    "v_dot2_f16_f16": (lambda h: h.view(f16).astype(f32), lambda x: np.asarray(x, f16).view(u16)),
    "v_dot2_bf16_bf16": (_bf16_to_f32, lambda x: fp.to_bf16_bits(np.asarray(x, f32))),
}


def compile_dot16(inst) -> Callable:
    """VOP3 v_dot2_f16_f16 / v_dot2_bf16_bf16: D.16 = S0.lo * S1.lo + S0.hi * S1.hi + S2.16, formed in f64 and
    rounded once. S0 and S1 are packed pairs; op_sel[2] picks S2's half, op_sel[3] the destination's (the other
    half keeps its value). Source modifiers, clamp and omod are refused (LLVM does not emit them here)."""
    f = inst.fields
    opsel = f.get("opsel", 0)
    if f.get("neg", 0) or f.get("abs", 0) or f.get("clamp", 0) or f.get("omod", 0) or opsel & 0b11:
        raise EmulatorError(f"{inst.op}: source modifiers, clamp, omod and op_sel on the packed sources are not "
                            "implemented")
    to_f32, to_result = DOT16[inst.op]
    a_r, b_r = _word_source(inst, f["src0"], False), _word_source(inst, f["src1"], False)
    c_r = vsrc(f["src2"], 16, True, inst.literal, _bit(opsel, 2))
    w = vdst_writer(f["vdst"], 16, _bit(opsel, 3))

    def run(m: Machine, bt: Batch) -> None:
        a, b = a_r(m, bt), b_r(m, bt)
        s = sum(to_f32(_half(a, h)).astype(np.float64) * to_f32(_half(b, h)).astype(np.float64) for h in (0, 1))
        w(m, bt, to_result(s + to_f32(np.asarray(c_r(m, bt), u16)).astype(np.float64)))
    return run
