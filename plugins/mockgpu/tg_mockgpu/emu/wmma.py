"""RDNA3 WMMA (VOP3P v_wmma_*_16x16x16_*): D = A x B + C on 16x16 matrices held across the 32 lanes of a wave.

Register layouts (wave32, the only wave size the emulator runs):
  A (src0)  lane l holds row l % 16 of A, its 16 K elements packed lowest first through the source registers
            (two f16/bf16 per VGPR: 8 VGPRs; four 8-bit: 4 VGPRs; eight 4-bit: 2 VGPRs)
  B (src1)  lane l holds column l % 16 of B, packed the same way
  C, D      VGPR i of lane l is element [2*i + l // 16][l % 16] (8 VGPRs); a 16-bit result uses one half of each
            VGPR (op_sel[2]: the high halves), reads C from that half and keeps the other one
The hardware requires lanes 16..31 of A and B to repeat lanes 0..15; the emulator reads lanes 0..15. EXEC must be
all ones (the ISA leaves anything else undefined): another mask is an error rather than a guess.

Float forms form every dot product in float64 and round once to the result type (exact products, then a sum
more precise than the hardware's; tests compare with a tolerance). neg_lo[0] / neg_lo[1] negate A / B. The integer
forms read A / B as signed when neg_lo[0] / neg_lo[1] is set; the sum wraps to 32 bits, or with clamp saturates.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tg_mockgpu.emu import fp
from tg_mockgpu.emu.machine import EXEC, WAVE, Batch, EmulatorError, Machine
from tg_mockgpu.emu.operands import constant

u8, u16, u32, f16, f32, f64, i64 = np.uint8, np.uint16, np.uint32, np.float16, np.float32, np.float64, np.int64

# name -> (input element kind, VGPRs per A/B operand, result kind)
WMMA: dict[str, tuple[str, int, str]] = {
    "v_wmma_f32_16x16x16_f16": ("f16", 8, "f32"), "v_wmma_f32_16x16x16_bf16": ("bf16", 8, "f32"),
    "v_wmma_f16_16x16x16_f16": ("f16", 8, "f16"), "v_wmma_bf16_16x16x16_bf16": ("bf16", 8, "bf16"),
    "v_wmma_i32_16x16x16_iu8": ("iu8", 4, "i32"), "v_wmma_i32_16x16x16_iu4": ("iu4", 2, "i32"),
}


def _operand(m: Machine, bt: Batch, r0: int, nregs: int, kind: str, signed: bool) -> np.ndarray:
    """A or B from VGPRs r0.. of lanes 0..15 as (waves, 16 lanes, 16 K) float64 (integer forms: exact integers). Registers are stored
    register-major, so the operand is one slice of the register file (no per-register copies)."""
    m.vgpr(r0 + nregs - 1)                                                     # the bounds check
    # one transposing copy of whole dwords (cheaper than of halves): (waves, 16 lanes, nregs)
    words = np.ascontiguousarray(m.v[r0:r0 + nregs, bt.idx, :16].transpose(1, 2, 0))
    if kind in ("f16", "bf16"):
        h = words.view(u16)                                                    # K = 2 * reg + half
        return (h.view(f16) if kind == "f16" else (h.astype(u32) << u32(16)).view(f32)).astype(f64)
    b = words.view(u8)                                                         # K = 4 * reg + byte
    # integers as float64: every product and the 16-term sum (< 2**21) are exact, and float matmul is faster
    if kind == "iu8":
        return (b.view(np.int8) if signed else b).astype(f64)
    nib = np.stack([b & u8(15), b >> u8(4)], axis=-1).reshape(*b.shape[:2], -1).astype(np.int8)  # K = 2 * byte + nibble
    return ((nib ^ 8) - 8 if signed else nib).astype(f64)


def compile_wmma(inst) -> Callable:
    name, f = inst.op, inst.fields
    kind, nregs, out = WMMA[name]
    opsel, opsel_hi, neg, neg_hi, clamp = (f.get("opsel", 0), f.get("opsel_hi", 7), f.get("neg", 0),
                                           f.get("neg_hi", 0), f.get("clamp", 0))
    is_int, out16 = out == "i32", out in ("f16", "bf16")
    hi = (opsel >> 2) & 1
    if opsel & (0b011 if out16 else 0b111) or opsel_hi != 7 or neg_hi or neg & 0b100 or (clamp and not is_int):
        raise EmulatorError(f"{name}: only neg_lo on A and B{', clamp' if is_int else ''}"
                            f"{' and op_sel[2] (the result half)' if out16 else ''} are defined here (op_sel "
                            f"{opsel:03b}, op_sel_hi {opsel_hi:03b}, neg_lo {neg:03b}, neg_hi {neg_hi:03b}, "
                            f"clamp {clamp})")
    for what, code in (("A (src0)", f["src0"]), ("B (src1)", f["src1"])):
        if code < 256:
            raise EmulatorError(f"{name}: {what} must be VGPRs")
    a0, b0, vdst = f["src0"] - 256, f["src1"] - 256, f["vdst"]
    c_code = f["src2"]
    c_const = None
    if c_code < 256:
        c_const = constant(c_code, 16 if out == "f16" else 32, not is_int, inst.literal)
        if out == "bf16" and c_const is not None:   # a float constant as bfloat16: the top half of its f32
            c_const >>= 16
        if c_const is None:
            raise EmulatorError(f"{name}: C (src2) must be VGPRs or an inline constant")
    sa, sb = bool(neg & 1), bool(neg & 2)

    def read_c(m: Machine, bt: Batch) -> np.ndarray:
        """C as (waves, 16, 16) in the computation's type."""
        if c_const is not None:
            bits = np.full((bt.n, 16, 16), c_const, u16 if out16 else u32)
        else:
            m.vgpr(c_code - 256 + 7)
            regs = m.v16[c_code - 256:c_code - 248, bt.idx, hi::2] if out16 else m.v[c_code - 256:c_code - 248, bt.idx]
            bits = regs.transpose(1, 0, 2).reshape(bt.n, 16, 16)   # [i][l // 16][l % 16] is row 2 * i + l // 16
        if is_int:
            return bits.view(np.int32).astype(i64)
        if out == "f32":
            return bits.view(f32).astype(f64)
        return (bits.view(f16) if out == "f16" else (bits.astype(u32) << u32(16)).view(f32)).astype(f64)

    def run(m: Machine, bt: Batch) -> None:
        if bt.mask() is not None:
            w = int(np.flatnonzero(~bt.active_lanes().all(axis=1))[0])
            raise EmulatorError(f"{name} needs EXEC all ones (the ISA leaves other masks undefined); "
                                f"{m.wave_name(int(bt.waves[w]))} has EXEC {int(m.s[EXEC][bt.waves[w]]):#010x}")
        a, b = _operand(m, bt, a0, nregs, kind, sa), _operand(m, bt, b0, nregs, kind, sb)   # a[M][K], b[N][K]
        if not is_int:
            a, b = (-a if sa else a), (-b if sb else b)
        d = np.matmul(a, b.transpose(0, 2, 1))                              # (waves, M, N)
        d = (d.astype(i64) if is_int else d) + read_c(m, bt)
        if is_int:
            res = (np.clip(d, -(1 << 31), (1 << 31) - 1) if clamp else d).astype(u32)
        elif out == "f32":
            res = d.astype(f32).view(u32)
        elif out == "f16":
            res = d.astype(f16).view(u16)
        else:
            res = fp.to_bf16_bits(d)
        res = res.reshape(bt.n, 8, WAVE).transpose(1, 0, 2)                 # back to [VGPR i][wave][lane]
        m.vgpr(vdst + 7)
        if out16:
            m.v16[vdst:vdst + 8, bt.idx, hi::2] = res
        else:
            m.v[vdst:vdst + 8, bt.idx] = res
    return run

