"""Scalar ALU (SOP1, SOP2, SOPC, SOPK) and program control (SOPP, s_getpc/s_setpc/s_swappc/s_call).

Scalar values are (waves,) arrays: one per wave of the batch. An entry of `SOP` is
  mnemonic -> (destination bits or 0, source bits, function returning (result, scc) where either may be None).
SCC is written where the ISA says the instruction writes it; `None` leaves it alone.

Control flow: compilers in `CONTROL` return (executor, flow); flow tells the scheduler what to do after the executor
ran: NEXT (fall through), JUMP (the executor returned the new pc: an int for the batch or an array per wave), END
(s_endpgm), BARRIER (s_barrier).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tg_mockgpu.emu.machine import EXEC, VCC, Batch, EmulatorError, Machine
from tg_mockgpu.emu.operands import UTYPE, scalar_reader, sdst_writer

u32, u64, i32, i64 = np.uint32, np.uint64, np.int32, np.int64
NEXT, JUMP, END, BARRIER = "next", "jump", "end", "barrier"


def _nz(x: np.ndarray) -> np.ndarray:
    return x != 0


def _sat(x: np.ndarray, bits: int) -> np.ndarray:
    return x.astype(UTYPE[bits])


def _bitwise(fn: Callable, bits: int) -> Callable:
    def f(a, b):
        r = fn(a, b)
        return r, _nz(r)
    return f


def _signed(x, bits: int = 32):
    return np.asarray(x, u32 if bits == 32 else u64).view(i32 if bits == 32 else i64)


def _with_nz(r):
    """(result, SCC = result != 0): what the bitwise and shift instructions give."""
    return r, _nz(r)


def _carry_out(wide):
    """(low 32 bits, SCC = carry out) of a sum computed in 64 bits."""
    return wide.astype(u32), (wide >> u64(32)) != 0


def _bfm(a, b, bits: int):
    """S_BFM: a mask of a bits shifted left by b."""
    ones = (u64(1) << (np.asarray(a, u64) & u64(bits - 1))) - u64(1)
    return (ones << (np.asarray(b, u64) & u64(bits - 1))).astype(UTYPE[bits])


def _add_i32(a, b):
    r = _signed(a).astype(i64) + _signed(b)
    return r.astype(u32), (r > 2**31 - 1) | (r < -2**31)


def _sub_i32(a, b):
    r = _signed(a).astype(i64) - _signed(b)
    return r.astype(u32), (r > 2**31 - 1) | (r < -2**31)


def _lshl_add(n: int) -> Callable:
    def f(a, b):
        r = (np.asarray(a, u64) << u64(n)) + np.asarray(b, u64)
        return r.astype(u32), r >= u64(1 << 32)
    return f


def _bfe(bits: int, signed: bool) -> Callable:
    def f(a, b):
        off = np.asarray(b, u64) & u64(bits - 1 if bits == 32 else 63)
        w = (np.asarray(b, u64) >> u64(16)) & u64(0x7F)
        v = np.asarray(a, u64) >> off
        w = np.minimum(w, u64(bits))
        keep = np.where(w >= 64, u64(0xFFFFFFFFFFFFFFFF), (u64(1) << np.minimum(w, u64(63))) - u64(1))
        r = v & keep
        if signed:
            sh = (u64(64) - w) & u64(63)
            r = np.where(w == 0, u64(0), ((r << sh).view(i64) >> sh.astype(i64)).view(u64))
        r = r.astype(UTYPE[bits])
        return r, _nz(r)
    return f


def _ff1(bits: int) -> Callable:   # s_ctz: index of the lowest set bit, -1 for 0
    def f(a):
        a = np.asarray(a, u64)
        low = a & (~a + u64(1))
        r = np.where(a == 0, -1, np.log2(np.maximum(low, u64(1)).astype(np.float64)).astype(i64))
        return r.astype(i32).view(u32), None
    return f


def _flbit(bits: int) -> Callable:  # s_clz: leading zeros, -1 for 0
    def f(a):
        a = np.asarray(a, u64)
        top = np.floor(np.log2(np.maximum(a, u64(1)).astype(np.float64))).astype(i64)
        # log2 in f64 can round up just below a power of two: correct by checking the bit
        top = np.where((a >> np.maximum(top, 0).astype(u64)) == 0, top - 1, top)
        r = np.where(a == 0, -1, bits - 1 - top)
        return r.astype(i32).view(u32), None
    return f


SOP: dict[str, tuple[int, tuple[int, ...], Callable]] = {}


def sop(names: str, dst: int, srcs: tuple[int, ...], fn: Callable) -> None:
    for n in names.split():
        SOP[n] = (dst, srcs, fn)


for _b in (32, 64):
    _s = f"b{_b}"
    sop(f"s_mov_{_s}", _b, (_b,), lambda a: (a, None))
    sop(f"s_not_{_s}", _b, (_b,), lambda a: (~a, _nz(~a)))
    sop(f"s_and_{_s}", _b, (_b, _b), _bitwise(lambda a, b: a & b, _b))
    sop(f"s_or_{_s}", _b, (_b, _b), _bitwise(lambda a, b: a | b, _b))
    sop(f"s_xor_{_s}", _b, (_b, _b), _bitwise(lambda a, b: a ^ b, _b))
    sop(f"s_nand_{_s}", _b, (_b, _b), _bitwise(lambda a, b: ~(a & b), _b))
    sop(f"s_nor_{_s}", _b, (_b, _b), _bitwise(lambda a, b: ~(a | b), _b))
    sop(f"s_xnor_{_s}", _b, (_b, _b), _bitwise(lambda a, b: ~(a ^ b), _b))
    sop(f"s_and_not1_{_s}", _b, (_b, _b), _bitwise(lambda a, b: a & ~b, _b))
    sop(f"s_or_not1_{_s}", _b, (_b, _b), _bitwise(lambda a, b: a | ~b, _b))
    sop(f"s_bcnt1_i32_{_s}", 32, (_b,), lambda a: (np.bitwise_count(a).astype(u32), _nz(np.bitwise_count(a))))
    sop(f"s_bcnt0_i32_{_s}", 32, (_b,), lambda a, _b=_b: _with_nz((_b - np.bitwise_count(a)).astype(u32)))
    sop(f"s_ctz_i32_{_s}", 32, (_b,), _ff1(_b))
    sop(f"s_bfm_{_s}", _b, (32, 32), lambda a, b, _b=_b: (_bfm(a, b, _b), None))
sop("s_clz_i32_u32", 32, (32,), _flbit(32))
sop("s_clz_i32_u64", 32, (64,), _flbit(64))
# s_cls: the leading bits equal to the sign bit (the sign bit included), -1 when all are: s_clz of x or ~x
sop("s_cls_i32", 32, (32,), lambda a: _flbit(32)(np.where(_signed(a) < 0, ~np.asarray(a, u32), a)))
sop("s_cls_i32_i64", 32, (64,), lambda a: _flbit(64)(np.where(_signed(a, 64) < 0, ~np.asarray(a, u64), a)))
sop("s_brev_b32", 32, (32,), lambda a: (np.asarray([int(f"{int(x):032b}"[::-1], 2) for x in np.atleast_1d(a)], u32),
                                        None))
sop("s_sext_i32_i8", 32, (32,), lambda a: (np.asarray(a, u32).astype(np.int8).astype(i32).view(u32), None))
sop("s_sext_i32_i16", 32, (32,), lambda a: (np.asarray(a, u32).astype(np.int16).astype(i32).view(u32), None))
sop("s_abs_i32", 32, (32,), lambda a: (np.abs(_signed(a)).view(u32), _nz(np.abs(_signed(a)))))
def _add_u32(a, b):
    r = a + b               # wraps in 32 bits; the carry shows as a result below an operand
    return r, r < b


sop("s_add_u32", 32, (32, 32), _add_u32)
sop("s_sub_u32", 32, (32, 32), lambda a, b: (a - b, b > a))
sop("s_add_i32", 32, (32, 32), _add_i32)
# these also read SCC (the carry/borrow in), passed as a third argument
sop("s_addc_u32", 32, (32, 32), lambda a, b, c: _carry_out(np.asarray(a, u64) + b + c))
sop("s_subb_u32", 32, (32, 32), lambda a, b, c: (a - b - c, np.asarray(b, u64) + c > a))
READS_SCC = {"s_addc_u32", "s_subb_u32"}
sop("s_sub_i32", 32, (32, 32), _sub_i32)
sop("s_absdiff_i32", 32, (32, 32), lambda a, b: _with_nz(np.abs(_signed(a).astype(i64) - _signed(b)).astype(u32)))
sop("s_lshl_b32", 32, (32, 32), lambda a, b: (a << (b & u32(31)), _nz(a << (b & u32(31)))))
sop("s_lshr_b32", 32, (32, 32), lambda a, b: (a >> (b & u32(31)), _nz(a >> (b & u32(31)))))
sop("s_ashr_i32", 32, (32, 32), lambda a, b: _with_nz((_signed(a) >> (b & u32(31)).astype(i32)).view(u32)))
sop("s_lshl_b64", 64, (64, 32), lambda a, b: _with_nz(a << (np.asarray(b, u64) & u64(63))))
sop("s_lshr_b64", 64, (64, 32), lambda a, b: _with_nz(a >> (np.asarray(b, u64) & u64(63))))
sop("s_ashr_i64", 64, (64, 32), lambda a, b: _with_nz((_signed(a, 64) >> (np.asarray(b, i64) & i64(63))).view(u64)))
for _n in (1, 2, 3, 4):
    sop(f"s_lshl{_n}_add_u32", 32, (32, 32), _lshl_add(_n))
sop("s_min_i32", 32, (32, 32), lambda a, b: (np.minimum(_signed(a), _signed(b)).view(u32), _signed(a) < _signed(b)))
sop("s_max_i32", 32, (32, 32), lambda a, b: (np.maximum(_signed(a), _signed(b)).view(u32), _signed(a) > _signed(b)))
sop("s_min_u32", 32, (32, 32), lambda a, b: (np.minimum(a, b), a < b))
sop("s_max_u32", 32, (32, 32), lambda a, b: (np.maximum(a, b), a > b))
sop("s_bfe_u32", 32, (32, 32), _bfe(32, False))
sop("s_bfe_i32", 32, (32, 32), _bfe(32, True))
sop("s_bfe_u64", 64, (64, 32), _bfe(64, False))
sop("s_bfe_i64", 64, (64, 32), _bfe(64, True))
sop("s_mul_i32", 32, (32, 32), lambda a, b: (a * b, None))
sop("s_mul_hi_u32", 32, (32, 32), lambda a, b: (((np.asarray(a, u64) * b) >> u64(32)).astype(u32), None))
sop("s_mul_hi_i32", 32, (32, 32), lambda a, b: (((_signed(a).astype(i64) * _signed(b)) >> i64(32)).astype(u32), None))
sop("s_pack_ll_b32_b16", 32, (32, 32), lambda a, b: ((a & u32(0xFFFF)) | (b << u32(16)), None))
sop("s_pack_lh_b32_b16", 32, (32, 32), lambda a, b: ((a & u32(0xFFFF)) | (b & u32(0xFFFF0000)), None))
sop("s_pack_hh_b32_b16", 32, (32, 32), lambda a, b: ((a >> u32(16)) | (b & u32(0xFFFF0000)), None))
sop("s_pack_hl_b32_b16", 32, (32, 32), lambda a, b: ((a >> u32(16)) | (b << u32(16)), None))

# s_cmp_*: (function of the typed sources) -> SCC
CMP = {"eq": np.equal, "lg": np.not_equal, "gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal}


def _compile_sop(inst, dst_code: int | None, src_codes: list[int]) -> Callable:
    dst_bits, src_bits, fn = SOP[inst.op]
    srcs = [scalar_reader(c, b, False, inst.literal, False) for c, b in zip(src_codes, src_bits)]
    out = sdst_writer(dst_code, dst_bits) if dst_code is not None else None
    carry_in = inst.op in READS_SCC

    def run(m: Machine, bt: Batch) -> None:
        args = [s(m, bt) for s in srcs]   # per-wave arrays or constants; numpy broadcasts them
        if carry_in:
            args.append(m.scc[bt.idx])
        res, scc = fn(*args)
        if scc is not None:
            m.scc[bt.idx] = scc
        if out is not None and res is not None:
            out(m, bt, res)
    return run


def _compile_cmp(inst, a_code: int, b_code: int | None, imm: int | None = None) -> Callable:
    parts = inst.op.split("_")              # s_cmp[k]_<cond>_<type>, s_bitcmp0/1_b32/b64
    if parts[1].startswith("bitcmp"):
        bits = int(parts[2][1:])
        want = int(parts[1][-1])
        assert b_code is not None, "s_bitcmp is SOPC: it has a second source"
        a_r = scalar_reader(a_code, bits, False, inst.literal, False)
        b_r = scalar_reader(b_code, 32, False, inst.literal, False)

        def bitcmp(m: Machine, bt: Batch) -> None:
            a, b = np.asarray(a_r(m, bt), u64), np.asarray(b_r(m, bt), u64)
            m.scc[bt.idx] = ((a >> (b & u64(bits - 1))) & u64(1)) == want
        return bitcmp
    cond, typ = parts[2], parts[3]
    bits = int(typ[1:])
    a_r = scalar_reader(a_code, bits, False, inst.literal, False)
    signed = typ[0] == "i"
    fn = CMP[cond]
    if imm is not None:     # s_cmpk: the 16-bit immediate, sign-extended for the signed compares
        k = np.int64(imm - 65536) if signed and imm >= 32768 else (np.int64(imm) if signed else UTYPE[bits](imm))

        def run_k(m: Machine, bt: Batch) -> None:
            a = a_r(m, bt)
            m.scc[bt.idx] = fn(_signed(a, bits).astype(i64) if signed else a, k)
        return run_k
    assert b_code is not None, "a compare without an immediate (s_cmp, not s_cmpk) has a second source"
    b_r = scalar_reader(b_code, bits, False, inst.literal, False)
    if signed:
        def run_signed(m: Machine, bt: Batch) -> None:
            m.scc[bt.idx] = fn(_signed(a_r(m, bt), bits), _signed(b_r(m, bt), bits))
        return run_signed

    def run(m: Machine, bt: Batch) -> None:     # same-width unsigned values compare directly
        m.scc[bt.idx] = fn(a_r(m, bt), b_r(m, bt))
    return run


SAVEEXEC = {"and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e,
            "nand": lambda s, e: ~(s & e), "nor": lambda s, e: ~(s | e), "xnor": lambda s, e: ~(s ^ e),
            "and_not0": lambda s, e: ~s & e, "or_not0": lambda s, e: ~s | e, "and_not1": lambda s, e: s & ~e,
            "or_not1": lambda s, e: s | ~e}


def _compile_saveexec(inst) -> Callable:
    name = inst.op
    wrexec = "_wrexec_" in name
    key = name[2:name.index("_wrexec_" if wrexec else "_saveexec_")]
    if name.endswith("_b64"):
        raise EmulatorError(f"{name} is a wave64 instruction; the mock runs wave32")
    fn = SAVEEXEC[key]
    src = scalar_reader(inst.fields["ssrc0"], 32, False, inst.literal, False)
    out = sdst_writer(inst.fields["sdst"])
    ex = sdst_writer(EXEC)

    def run(m: Machine, bt: Batch) -> None:
        s = np.broadcast_to(src(m, bt), (bt.n,))
        old = m.s[EXEC][bt.idx].copy()
        new = fn(s, old).astype(u32)
        ex(m, bt, new)
        out(m, bt, new if wrexec else old)
        m.scc[bt.idx] = new != 0
    return run


def _compile_cselect(inst) -> Callable:
    bits = 64 if inst.op.endswith("64") else 32
    f = inst.fields
    a_r = scalar_reader(f["ssrc0"], bits, False, inst.literal, False)
    b_r = scalar_reader(f["ssrc1"], bits, False, inst.literal, False)
    out = sdst_writer(f["sdst"], bits)
    return lambda m, bt: out(m, bt, np.where(m.scc[bt.idx] != 0, a_r(m, bt), b_r(m, bt)))


def _compile_cmov(inst) -> Callable:
    bits = 64 if inst.op.endswith("64") else 32
    f = inst.fields
    if inst.enc == "SOPK":
        k = u32(np.int64(np.int16(np.uint16(f["simm16"]))) & 0xFFFFFFFF)
        a_r = lambda m, bt: k  # noqa: E731
    else:
        a_r = scalar_reader(f["ssrc0"], bits, False, inst.literal, False)
    cur = scalar_reader(f["sdst"], bits, False, None, False)
    out = sdst_writer(f["sdst"], bits)
    return lambda m, bt: out(m, bt, np.where(m.scc[bt.idx] != 0, a_r(m, bt), cur(m, bt)))


def _compile_sopk(inst) -> Callable:
    f = inst.fields
    imm = f["simm16"]
    sext = imm - 65536 if imm >= 32768 else imm
    name = inst.op
    if name.startswith("s_cmpk_"):
        return _compile_cmp(inst, f["sdst"], None, imm)
    out = sdst_writer(f["sdst"])
    cur = scalar_reader(f["sdst"], 32, False, None, False)
    if name == "s_movk_i32":
        k = u32(sext & 0xFFFFFFFF)
        return lambda m, bt: out(m, bt, k)
    if name == "s_cmovk_i32":
        return _compile_cmov(inst)
    if name == "s_addk_i32":
        k = u32(sext & 0xFFFFFFFF)

        def addk(m: Machine, bt: Batch) -> None:
            r, scc = _add_i32(cur(m, bt), k)
            m.scc[bt.idx] = scc
            out(m, bt, r)
        return addk
    if name == "s_mulk_i32":
        k = u32(sext & 0xFFFFFFFF)
        return lambda m, bt: out(m, bt, cur(m, bt) * k)
    raise KeyError(name)


def compile_salu(inst) -> Callable:
    name, f = inst.op, inst.fields
    if "saveexec" in name or "wrexec" in name:
        return _compile_saveexec(inst)
    if name.startswith(("s_cselect_",)):
        return _compile_cselect(inst)
    if name in ("s_cmov_b32", "s_cmov_b64"):
        return _compile_cmov(inst)
    if inst.enc == "SOPC":
        return _compile_cmp(inst, f["ssrc0"], f["ssrc1"])
    if inst.enc == "SOPK":
        return _compile_sopk(inst)
    if name.startswith(("s_bitset0_", "s_bitset1_")):
        bits = 64 if name.endswith("64") else 32
        one = name[8] == "1"
        idx_r = scalar_reader(f["ssrc0"], 32, False, inst.literal, False)
        cur = scalar_reader(f["sdst"], bits, False, None, False)
        out = sdst_writer(f["sdst"], bits)
        t = UTYPE[bits]

        def bitset(m: Machine, bt: Batch) -> None:
            bit = t(1) << (np.asarray(idx_r(m, bt)).astype(t) & t(bits - 1))
            c = np.asarray(cur(m, bt), t)
            out(m, bt, c | bit if one else c & ~bit)
        return bitset
    if name not in SOP:
        raise KeyError(name)
    if inst.enc == "SOP1":
        return _compile_sop(inst, f["sdst"], [f["ssrc0"]])
    return _compile_sop(inst, f["sdst"], [f["ssrc0"], f["ssrc1"]])


# ---- control: SOPP and the program-counter SOP1s ----

def _sext16(v: int) -> int:
    return v - 65536 if v >= 32768 else v


def compile_control(inst, kernel: str) -> tuple[Callable, str] | None:
    """(executor, flow) for a control instruction, or None if `inst` is not one."""
    name, f = inst.op, inst.fields
    nxt = inst.addr + inst.size
    if name == "s_endpgm":
        return (lambda m, bt: None), END
    if name == "s_barrier":
        return (lambda m, bt: None), BARRIER
    if name in ("s_branch", "s_cbranch_scc0", "s_cbranch_scc1", "s_cbranch_vccz", "s_cbranch_vccnz",
                "s_cbranch_execz", "s_cbranch_execnz"):
        target = inst.addr + 4 + 4 * _sext16(f["simm16"])
        if name == "s_branch":
            return (lambda m, bt: target), JUMP
        cond = {"s_cbranch_scc0": lambda m, bt: m.scc[bt.idx] == 0,
                "s_cbranch_scc1": lambda m, bt: m.scc[bt.idx] != 0,
                "s_cbranch_vccz": lambda m, bt: m.s[VCC][bt.idx] == 0,
                "s_cbranch_vccnz": lambda m, bt: m.s[VCC][bt.idx] != 0,
                "s_cbranch_execz": lambda m, bt: m.s[EXEC][bt.idx] == 0,
                "s_cbranch_execnz": lambda m, bt: m.s[EXEC][bt.idx] != 0}[name]

        def branch(m: Machine, bt: Batch):
            taken = cond(m, bt)
            if taken.all():
                return target
            if not taken.any():
                return nxt
            return np.where(taken, target, nxt)
        return branch, JUMP
    if name == "s_getpc_b64":
        out = sdst_writer(f["sdst"], 64)
        return (lambda m, bt: out(m, bt, np.full(bt.n, nxt, u64))), NEXT
    if name in ("s_setpc_b64", "s_swappc_b64"):
        src = scalar_reader(f["ssrc0"], 64, False, inst.literal, False)
        ret_out = sdst_writer(f["sdst"], 64) if name == "s_swappc_b64" else None

        def setpc(m: Machine, bt: Batch):
            t = np.asarray(src(m, bt), u64).copy()
            if ret_out is not None:
                ret_out(m, bt, np.full(bt.n, nxt, u64))
            return int(t[0]) if (t == t[0]).all() else t.astype(np.int64)
        return setpc, JUMP
    if name == "s_call_b64":
        out = sdst_writer(f["sdst"], 64)
        target = inst.addr + 4 + 4 * _sext16(f["simm16"])

        def call(m: Machine, bt: Batch):
            out(m, bt, np.full(bt.n, nxt, u64))
            return target
        return call, JUMP
    if name in HINTS or name.startswith("s_waitcnt"):
        return (lambda m, bt: None), NEXT
    if name == "s_sendmsg":
        if f["simm16"] not in (3,):   # MSG_DEALLOC_VGPRS: nothing to do for an emulator
            raise EmulatorError(f"s_sendmsg {f['simm16']:#x} is not implemented (only MSG_DEALLOC_VGPRS)")
        return (lambda m, bt: None), NEXT
    if name == "s_denorm_mode":
        if f["simm16"] & 0xF != 0xF:
            raise EmulatorError(f"s_denorm_mode {f['simm16']:#x}: only 'keep denormals' (0xf) is implemented")
        return (lambda m, bt: None), NEXT
    if name == "s_round_mode":
        if f["simm16"] & 0xF:
            raise EmulatorError(f"s_round_mode {f['simm16']:#x}: only round-to-nearest-even (0) is implemented")
        return (lambda m, bt: None), NEXT
    if name == "s_trap":
        def trap(m: Machine, bt: Batch):
            raise EmulatorError(f"kernel {kernel} executed s_trap {f['simm16']} (a trap, e.g. llvm.trap)")
        return trap, NEXT
    if name == "s_code_end":
        def code_end(m: Machine, bt: Batch):
            raise EmulatorError(f"kernel {kernel} ran past its end into s_code_end padding")
        return code_end, NEXT
    return None


# instructions that only steer timing, caches or prefetch: nothing to emulate for in-order, synchronous memory
HINTS = {"s_nop", "s_clause", "s_delay_alu", "s_sleep", "s_set_inst_prefetch_distance", "s_setprio", "s_icache_inv",
         "s_wait_idle", "s_ttracedata", "s_ttracedata_imm", "s_incperflevel", "s_decperflevel", "s_version",
         "s_dcache_inv", "s_gl1_inv"}
