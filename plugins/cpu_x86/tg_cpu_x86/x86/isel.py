"""Instruction selection: a linear program (tg_core.codegen.Program) -> x86-64 machine instructions on
virtual registers (tg_core.renderer.isa), by rewrite rules over the program's uops.

Each uop of the program, in order, is matched against `isel_rules` (a PatternMatcher); the matching rule
emits the instructions for it into the selector (`ctx`). Value representation:

- floats (float32, float64) are scalars in xmm registers (class "vec"), computed with VEX instructions;
- ints and bools live in general registers (class "gpr"): 64-bit ints use the whole register, everything
  else 32 bits, with int8/int16 sign-extended and uint8/uint16/bool zero-extended to 32 bits (bool is 0/1),
  re-extended after each op that could leave the range; nothing reads the upper half of a 32-bit value;
- an accumulator (DEFINE_REG, always indexed by a constant) is a virtual register: its loads read the
  register, its stores write it, and an update `acc = acc op x` computes straight into it;
- loops are bottom-tested (`i = 0`, a guard when the trip count may be zero, body, `i += 1; cmp; jl`);
- gated loads and stores branch around the access; a gated load's result starts as its alternative;
- integer division by a value follows alu.py: x/0 and x%0 are 0, MIN/-1 wraps, instead of trapping.

Arguments follow the System V ABI: the buffers (by PARAM index), then the int variables, in rdi, rsi, rdx,
rcx, r8, r9, then on the stack.
"""
from __future__ import annotations

import bisect
import dataclasses
import itertools
import struct
from collections.abc import Callable

from tg_core.plugin_api import (
    CJUMP,
    JUMP,
    MOVE,
    RET,
    DType,
    FrameRef,
    GroupOp,
    Imm,
    Label,
    Mem,
    MFunction,
    MInst,
    Operand,
    Ops,
    PatternMatcher,
    Program,
    PtrDType,
    UOp,
    UPat,
    View,
    VReg,
    dtypes,
    float_to_int_range,
    label,
    param_index,
)
from tg_cpu_x86.x86.abi import ARG_REGS, GPR
from tg_cpu_x86.x86.slp import INT_LANES, NARROW, Group, buffer_of, gated_index, offset, users_of, widest_plan

DONE = UOp(Ops.NOOP, dtypes.void, (), "selected")  # what a rule returns: its instructions are emitted
FLOATS = (dtypes.float16, dtypes.float32, dtypes.float64)
INTS = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
        dtypes.uint64)
SUPPORTED = frozenset((dtypes.bool, *INTS, *FLOATS))  # float16 needs F16C (every AVX2 CPU has it)

# float16 values are kept as the float32 of the same value (F16C converts) and rounded back after each op
_SFX = {dtypes.float16: "ss", dtypes.float32: "ss", dtypes.float64: "sd"}
_PK = {dtypes.float16: "ps", dtypes.float32: "ps", dtypes.float64: "pd"}
_ROUNDED = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.SQRT, Ops.RECIPROCAL, Ops.MULACC})
_INT_BIN = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "imul", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor"}
_FLOAT_BIN = {Ops.ADD: "vadd", Ops.SUB: "vsub", Ops.MUL: "vmul", Ops.FDIV: "vdiv"}
# ops that write their result only after reading every source, so an accumulator update may target the
# accumulator itself (the rules for them take care of two-address forms)
_IN_PLACE = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.AND, Ops.OR, Ops.XOR, Ops.MAX, Ops.MULACC})
# vcmp predicates with C semantics: < and == are false on NaN, != is true
_VCMP = {Ops.CMPLT: 1, Ops.CMPEQ: 0, Ops.CMPNE: 4}
_GT_OQ, _LT_OQ = 30, 17  # vcmp predicates: ordered (false for NaN), quiet
_BOOL_OP = {Ops.ADD: Ops.OR, Ops.MUL: Ops.AND, Ops.MAX: Ops.OR}


def _signed(dt: DType) -> bool:
    return dtypes.is_int(dt) and not dtypes.is_unsigned(dt)


def gsize(dt: DType) -> int:
    """Bytes of the general register view a value of `dt` is computed in."""
    return 8 if dt.itemsize == 8 else 4


def _imm(u: UOp, size: int) -> int | None:
    """The int constant u as a sign-extended 32-bit immediate of an op of `size` bytes, if it is one."""
    if u.op is not Ops.CONST or dtypes.is_float(u.dtype):
        return None
    v = int(u.arg)
    if size == 4 and 2**31 <= v < 2**32:
        v -= 2**32  # the same 32 bits
    return v if -2**31 <= v < 2**31 else None


def _fits_imm(u: UOp, size: int) -> bool:
    return _imm(u, size) is not None


def rep_size(dt: DType) -> int:
    """Bytes of a float's register form (float16 is held as float32)."""
    return 4 if dt is dtypes.float16 else dt.itemsize


def _float_bits(value: float, dt: DType) -> bytes:
    return struct.pack("<d" if dt is dtypes.float64 else "<f", value)


class Selector:
    """The state of selecting one program: instructions per uop, the register of each value, constants."""

    def __init__(self, program: Program, isa: str = "avx2"):
        self.prog = program
        self.isa = isa  # "avx2": ymm vectors of 8 float32 lanes; "avx512": zmm vectors of 16 where they pack
        self.uops = program.uops
        self.pos = {u: i for i, u in enumerate(self.uops)}
        self.buckets: list[list[MInst]] = [[] for _ in range(len(self.uops) + 1)]  # the last is the preamble
        self.cur = self.buckets[-1]
        self.vals: dict[UOp, VReg] = {}
        self.addrs: dict[UOp, Mem] = {}
        self.gates: dict[UOp, VReg] = {}
        self.accs: dict[UOp, VReg] = {}
        self.wides: dict[UOp, VReg] = {}
        self.locals: dict[UOp, int] = {}
        self.local_bytes = 0
        self.data: dict[bytes, str] = {}
        self.loops: dict[UOp, tuple[str, str]] = {}
        self.at = 0  # the position of the uop being selected
        self.open_loops: list[UOp] = []  # the RANGEs around the uop being selected, innermost last
        self.preheaders: dict[UOp, list[MInst]] = {}  # per RANGE: run once before its loop starts
        self.pointers: dict[tuple, VReg] = {}  # (RANGE, base, invariant terms, step) -> its induction pointer
        self.steps: dict[UOp, list[tuple[VReg, int]]] = {}  # per RANGE: pointers advanced by each iteration
        self.counter_init: dict[UOp, MInst] = {}
        # per RANGE: (counter, its init and increment, its compare, a compare of a pointer with its end instead)
        self.counted: dict[UOp, tuple[VReg, tuple[MInst, MInst], MInst, MInst]] = {}
        self._labels = itertools.count()
        self.users = users_of(self.uops)  # the renderer's lane choice made it for this program already
        self._accs: dict[UOp, UOp | None] = {}  # _acc_of's answers (asked ~4 times per uop)
        self.fold_into = self._accumulator_updates()
        # where memory is written (stores to accumulators are register writes)
        self.store_pos = [i for i, u in enumerate(self.uops) if u.op is Ops.STORE and self._acc_of(u.src[0]) is None]
        # what a load may not be moved across: memory writes, and loop boundaries
        self.barriers = sorted(self.store_pos + [i for i, u in enumerate(self.uops) if u.op in (Ops.RANGE, Ops.END)])
        self.lazy: dict[Group, Mem] = {}  # broadcasts of loads emitted where first read (see emit_group)
        self.folded_adds = {u.src[1] for u in self.uops if u.op is Ops.INDEX and self._disp_fold(u) is not None}
        self._vector_plan()
        # uint16s read byte by byte, as one 16-bit load from the low byte's INDEX; the loads, casts and shift
        # that only they read are not selected (two-address code on one register is not dead-code eliminated)
        self.words: dict[UOp, UOp] = {}
        for u in self.uops:
            if (found := _word_of_bytes(self, u)) is not None:
                self.words[u] = found[0]
                chain = set(found[1]) | {u}
                self.vskip.update(x for x in found[1] if all(y in chain for y in self.users.get(x, ())))

    def _vector_plan(self) -> None:
        """Which uops are computed as vectors (slp.py: zmm with AVX-512 where 16 lanes pack, else ymm), where each
        group is emitted (after its last member), and which accumulator updates become one FMA into the
        accumulator."""
        widths = (16, 8) if self.isa == "avx512" else (8,)
        lanes, self.packer, self.groups = widest_plan(self.uops, self.users, widths)
        self.lanes, self.vbytes = lanes, 4 * lanes  # lanes and bytes of one vector of float32/int32 lanes
        self.lane_masks: dict[int, VReg] = {}  # opmasks of the first n lanes (partial zmm vectors)
        self.vskip: set[UOp] = set()
        self.emit_at: dict[UOp, list[Group]] = {}
        self.vvals: dict[Group, VReg] = {}
        self.vaccs: dict[tuple[UOp, ...], VReg] = {}
        self.fused: dict[Group, Group] = {}  # accumulator store -> the product it adds
        self.fused_away: set[Group] = set()  # the sum and product an FMA replaces
        for g in self.groups:
            if g.kind not in ("splat", "load"):  # loads are selected as scalars too (dead unless read by one)
                self.vskip.update(u for u in g.lanes if u.op is not Ops.CONST)
            if g.kind != "acc":  # after its last lane (a made-up lane where its anchor is; see slp._complete)
                at = max((self.packer.anchor(u) for u in g.lanes), key=lambda u: self.pos.get(u, -1))
                self.emit_at.setdefault(at, []).append(g)
        for g in self.groups:  # a gated load's INDEX and the modulo on its element, read by nothing else: not
            # selected (dead-code elimination cannot drop a division's two-address chain on one register)
            for ld in g.lanes if g.kind == "gload" else ():
                idx = ld.src[0]
                if all(x in self.vskip for x in self.users.get(idx, ())):
                    self.vskip.add(idx)
                    if idx.src[1] is not gated_index(idx) and all(x in self.vskip for x in self.users[idx.src[1]]):
                        self.vskip.add(idx.src[1])
        self.in_place: dict[Group, Group] = {}  # accumulator store -> the update computed into the accumulator
        for g in self.groups:
            v = g.srcs[0] if g.kind == "accstore" else None
            if v is None or v.kind != "alu" or v.lanes[0].op not in (Ops.ADD, Ops.MAX) or \
                    v.lanes[0].dtype is not dtypes.float32:
                continue
            acc = self.packer.acc_groups[g.accs]
            for k in (0, 1):
                x, m = v.srcs[k], v.srcs[1 - k]
                if x is not acc or not all(self.users.get(vl.src[k]) == [vl] and self.users.get(vl) == [sl]
                                           for vl, sl in zip(v.lanes, g.lanes)):
                    continue
                if v.lanes[0].op is Ops.ADD and m.kind == "alu" and m.lanes[0].op is Ops.MUL and \
                        all(self.users.get(ml) == [vl] for ml, vl in zip(m.lanes, v.lanes)):
                    self.fused[g] = m
                    self.fused_away.update((v, m))
                else:
                    self.in_place[g] = v
                    self.fused_away.add(v)
                break
        self._row_major_fmas()
        self.contracted: dict[Group, tuple[Group, Group]] = {}  # a*b + c -> (the product, c): one FMA
        for g in self.groups:
            if g.kind != "alu" or g.lanes[0].op is not Ops.ADD or g.lanes[0].dtype is not dtypes.float32 or \
                    g in self.fused_away:
                continue
            for k in (0, 1):
                m = g.srcs[k]
                if m.kind == "alu" and m.lanes[0].op is Ops.MUL and m not in self.fused_away and \
                        all(self.users.get(ml) == [gl] for ml, gl in zip(m.lanes, g.lanes)):
                    self.contracted[g] = (m, g.srcs[1 - k])
                    self.fused_away.add(m)
                    break

    def _row_major_fmas(self) -> None:
        """A register tile's FMAs (accumulator += vector load * broadcast) in the order of their broadcasts: each
        row's value is broadcast once, feeds its FMAs with every column vector and dies, so the tile holds one
        broadcast register instead of one per row (the program's order is column vector by column vector, which
        keeps every row's broadcast live until the last vector's FMAs: a 6x32 zmm tile spilled accumulators).
        A run of such FMAs is moved to where its last one is, when nothing but loads, broadcasts and the
        products they replace is emitted between them and no store or loop boundary lies between."""
        anchor = {g: at for at, gs in self.emit_at.items() for g in gs}
        fmas = sorted((g for g in self.fused if g in anchor and _splat_factor(self.fused[g]) is not None),
                      key=lambda g: self.pos[anchor[g]])
        members = set(fmas)
        movable = ("load", "splat", "accstore")
        run: list[Group] = []

        def flush() -> None:
            if len(run) > 2:
                first: dict[Group | None, int] = {}
                for i, g in enumerate(run):
                    first.setdefault(_splat_factor(self.fused[g]), i)
                order = sorted(range(len(run)), key=lambda i: (first[_splat_factor(self.fused[run[i]])], i))
                for g in run:
                    self.emit_at[anchor[g]].remove(g)
                self.emit_at.setdefault(anchor[run[-1]], []).extend(run[i] for i in order)
            run.clear()
        for g in fmas:
            if run:
                lo, hi = self.pos[anchor[run[-1]]], self.pos[anchor[g]]
                between = [x for u in self.uops[lo + 1:hi] for x in self.emit_at.get(u, ())]
                if bisect.bisect(self.barriers, lo) != bisect.bisect_left(self.barriers, hi) or any(
                        x.kind not in movable or x.kind == "accstore" and x not in members for x in between
                        if x not in self.fused_away):
                    flush()
            run.append(g)
        flush()

    # ---- analysis --------------------------------------------------------------------------------------

    def _acc_of(self, idx: UOp) -> UOp | None:
        """The DEFINE_REG an INDEX addresses (through AFTERs), if it is an accumulator (one element)."""
        if idx in self._accs:
            return self._accs[idx]
        buf = buffer_of(idx)
        acc = self._accs[idx] = buf if buf.op is Ops.DEFINE_REG and buf.ptrdtype.size == 1 else None
        return acc

    def local(self, arr: UOp) -> FrameRef:
        """A register array of more than one element (a packed panel): a stack array in the frame."""
        if arr not in self.locals:
            self.local_bytes = -(-self.local_bytes // 32) * 32
            self.locals[arr] = self.local_bytes
            self.local_bytes += arr.ptrdtype.size * arr.dtype.base.itemsize
        return FrameRef("local", self.locals[arr])

    def _accumulator_updates(self) -> dict[UOp, UOp]:
        """ALU results computed straight into their accumulator: the value of a STORE to an accumulator whose
        only user is that store, when no load of the accumulator is used between the ALU and the store."""
        out: dict[UOp, UOp] = {}
        loads: dict[UOp, list[UOp]] = {}  # accumulator -> its loads
        for u in self.uops:
            if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and (acc := self._acc_of(u.src[0])) is not None:
                loads.setdefault(acc, []).append(u)
        for u in self.uops:
            if u.op is not Ops.STORE or u.src[0].op is not Ops.INDEX or self._acc_of(u.src[0]) is None:
                continue
            v = u.src[1]
            if v.op not in _IN_PLACE or self.users.get(v) != [u] or v not in self.pos:
                continue
            acc = self._acc_of(u.src[0])
            assert acc is not None  # checked above
            lo, hi = self.pos[v], self.pos[u]
            reads_between = any(lo < self.pos[x] < hi for w in loads.get(acc, ()) if self.pos[w] < hi
                                for x in self.users.get(w, ()))
            if not reads_between:
                out[v] = acc
        return out

    def _disp_fold(self, idx: UOp) -> int | None:
        """`buf[x + c]` addresses buf[x] + c*size: the constant c, when the ADD has no other user."""
        if len(idx.src) < 2 or self._acc_of(idx) is not None:
            return None
        i = idx.src[1]
        if i.op is Ops.ADD and i.src[1].op is Ops.CONST and self.users.get(i) == [idx]:
            disp = int(i.src[1].arg) * idx.dtype.base.itemsize
            if -2**31 <= disp < 2**31:
                return int(i.src[1].arg)
        return None

    def _linear(self, e: UOp, rng: UOp, k: int, terms: dict[UOp | None, int]) -> bool:
        """Add k*e to `terms` (leaf -> coefficient, None -> the constant) as a sum over `rng` and values selected
        before rng's loop (available in its preheader); False if e is not such an affine form. Each node's bounds
        must lie strictly inside its dtype's, so the 32-bit arithmetic the program does never wraps and the
        64-bit sum is the same value (no sign-extension of the index needed)."""
        if e is rng or e.op is not Ops.CONST and self.pos.get(e, len(self.uops)) < self.pos[rng] and \
                e in self.vals and e not in self.folded_adds and e.dtype in (dtypes.int32, dtypes.int64):
            terms[e] = terms.get(e, 0) + k
            return True
        if e.dtype not in (dtypes.int32, dtypes.int64) or not dtypes.min(e.dtype) < e.vmin <= e.vmax < \
                dtypes.max(e.dtype):
            return False
        if e.op is Ops.CONST:
            terms[None] = terms.get(None, 0) + k * int(e.arg)
            return True
        if e.op is Ops.ADD:
            return self._linear(e.src[0], rng, k, terms) and self._linear(e.src[1], rng, k, terms)
        if e.op is Ops.MUL and Ops.CONST in (e.src[0].op, e.src[1].op):
            x, c = e.src if e.src[1].op is Ops.CONST else e.src[::-1]
            return self._linear(x, rng, k * int(c.arg), terms)
        if e.op is Ops.CAST and e.src[0].dtype in (dtypes.int32, dtypes.int64):  # value-preserving here
            return self._linear(e.src[0], rng, k, terms)
        if e.op is Ops.SHL and e.src[1].op is Ops.CONST and 0 <= int(e.src[1].arg) < 31:
            return self._linear(e.src[0], rng, k << int(e.src[1].arg), terms)
        return False

    def induction_address(self, idx: UOp, buf: VReg | None, frame: FrameRef | None, size: int) -> Mem | None:
        """`buf[idx]` inside a loop as [p + disp] with p a pointer computed once before the loop (base plus the
        loop-invariant part of idx) and advanced by the loop's step at each iteration (strength reduction: no
        index arithmetic or sign-extension per iteration). For a stack array p is the byte offset."""
        if not self.open_loops:
            return None
        rng = self.open_loops[-1]
        terms: dict[UOp | None, int] = {}
        if not self._linear(idx, rng, 1, terms):
            return None
        disp, step = terms.pop(None, 0) * size, terms.pop(rng, 0) * size
        # the constant (the None key) is popped: the rest are nodes
        inv = tuple(sorted(((u, c * size) for u, c in terms.items() if u is not None and c),
                           key=lambda t: self.pos[t[0]]))
        if not all(-2**31 <= v < 2**31 for v in (disp, step, *(c for _, c in inv))):
            return None
        key = (rng, buf, frame, inv, step)
        if key not in self.pointers:
            self.pointers[key] = p = VReg("gpr", 8)
            saved, self.cur = self.cur, self.preheaders[rng]
            if buf is not None:
                self.move(p, buf, 8)
            else:
                self.ins("mov", p, Imm(0), w=(0,))
            for u, c in inv:
                t = self.reg(u)
                if u.dtype.itemsize == 4:
                    t = VReg("gpr", 8)
                    self.ins("movsxd", t, View(self.reg(u), 4), w=(0,), r=(1,))
                if c in (1, 2, 4, 8):
                    self.ins("lea", p, Mem(base=p, index=t, scale=c, size=8), w=(0,))
                else:
                    m = VReg("gpr", 8)
                    self.ins("imul", m, t, Imm(c), w=(0,), r=(1,))
                    self.ins("add", p, m, w=(0,), r=(0, 1))
            self.cur = saved
            if step:
                self.steps.setdefault(rng, []).append((p, step))
        p = self.pointers[key]
        return Mem(base=p, disp=disp, size=size) if buf is not None else Mem(index=p, disp=disp, size=size, frame=frame)

    # ---- emitting --------------------------------------------------------------------------------------

    def ins(self, op: str, *operands: Operand, w: tuple[int, ...] = (), r: tuple[int, ...] = (),
            kind: str = "normal", target: str | None = None, iw: tuple = (), ir: tuple = ()) -> MInst:
        inst = MInst(op, operands, writes=w, reads=r, kind=kind, target=target, implicit_writes=iw, implicit_reads=ir)
        self.cur.append(inst)
        return inst

    def label(self) -> str:
        return f".L{next(self._labels)}"

    def place(self, name: str) -> None:
        self.cur.append(label(name))

    def jump(self, cc: str, target: str) -> None:
        self.ins(cc, Label(target), kind=JUMP if cc == "jmp" else CJUMP, target=target)

    def move(self, d: VReg, s: VReg, size: int | None = None) -> None:
        """A copy the allocator may coalesce away."""
        if d is s:
            return
        if d.cls == "gpr":
            sz = size or d.width
            self.ins("mov", View(d, sz), View(s, sz), w=(0,), r=(1,), kind=MOVE)
        else:
            self.ins("vmovaps", d, s, w=(0,), r=(1,), kind=MOVE)

    def const_data(self, blob: bytes) -> str:
        if blob not in self.data:
            self.data[blob] = f"c{len(self.data)}"
        return self.data[blob]

    def new(self, dt: DType) -> VReg:
        return VReg("vec", rep_size(dt)) if dtypes.is_float(dt) else VReg("gpr", gsize(dt))

    def out(self, u: UOp, in_place: bool = False) -> VReg:
        """The register u's result goes to: its accumulator for in-place updates (only rules that read all
        sources before writing ask for it), else a new one."""
        d = self.accumulator(self.fold_into[u]) if in_place and u in self.fold_into else self.new(u.dtype)
        self.vals[u] = d
        return d

    def accumulator(self, acc: UOp) -> VReg:
        if acc not in self.accs:
            self.accs[acc] = self.new(acc.dtype.base)
        return self.accs[acc]

    def reg(self, u: UOp) -> VReg:
        """The register holding u's value; a constant is materialized where the program defines it."""
        if u in self.vals:
            return self.vals[u]
        if u.op is not Ops.CONST:
            raise RuntimeError(f"X86 isel: {u.op.name} is used before it was selected")
        d = self.new(u.dtype)
        saved, self.cur = self.cur, self.buckets[self.pos.get(u, len(self.uops))]
        if dtypes.is_float(u.dtype):
            if _float_bits(u.arg, u.dtype) == bytes(rep_size(u.dtype)):
                inst = self.ins("vxorps", d, d, d, w=(0,))  # the zero idiom: no source is read
            else:
                name = self.const_data(_float_bits(u.arg, u.dtype))
                inst = self.ins("vmov" + _SFX[u.dtype], d, Mem(data=name, size=rep_size(u.dtype)), w=(0,))
        else:
            inst = self.ins("mov", View(d, d.width), Imm(int(u.arg)), w=(0,))
        d.remat = inst
        self.cur = saved
        self.vals[u] = d
        return d

    def wide(self, u: UOp) -> VReg:
        """A 32-bit index sign-extended for addressing, computed once where the index is defined (so it
        dominates every address using it)."""
        if u not in self.wides:
            i = self.reg(u)
            saved, self.cur = self.cur, self.buckets[self.pos.get(u, len(self.uops))]
            self.wides[u] = w = VReg("gpr", 8)
            self.ins("movsxd", w, View(i, 4), w=(0,), r=(1,))
            self.cur = saved
        return self.wides[u]

    def fsrc(self, u: UOp) -> Operand:
        """A float operand: a constant is read from the data section by the instruction itself (no register,
        nothing to spill), anything else from its register."""
        if u.op is Ops.CONST and u not in self.vals:
            return Mem(data=self.const_data(_float_bits(u.arg, u.dtype)), size=rep_size(u.dtype))
        return self.reg(u)

    def src(self, u: UOp, size: int) -> Operand:
        """An int operand: an immediate where the constant fits, else the register at `size` bytes."""
        v = _imm(u, size)
        return Imm(v) if v is not None else View(self.reg(u), size)

    def extend(self, d: VReg, dt: DType) -> None:
        """Restore the 32-bit form of a narrow int after an op that may have left its range."""
        if dt.itemsize < 4 and dt is not dtypes.bool:
            op = "movsx" if _signed(dt) else "movzx"
            self.ins(op, View(d, 4), View(d, dt.itemsize), w=(0,), r=(1,))

    def vw(self, v: VReg) -> View:
        """A vector register at the width of this program's vectors (ymm or zmm)."""
        return View(v, self.vbytes)

    def vnew(self) -> VReg:
        """A register for one vector of this program: zmm values are class "zvec" (zmm16-31, which only EVEX
        reaches, then the xmm0-15 they share with scalar and VEX code; see abi.ZVEC)."""
        return VReg(_vclass(self.vbytes), self.vbytes)

    def lane_mask(self, n: int) -> VReg:
        """An opmask of lanes 0..n-1 (a partial vector's loads and stores), loaded once at entry from the data
        section (so the allocator may reload it instead of spilling it)."""
        if n not in self.lane_masks:
            self.lane_masks[n] = k = VReg("mask", 2)
            mem = Mem(data=self.const_data(((1 << n) - 1).to_bytes(2, "little")), size=2)
            k.remat = MInst("kmovw", (k, mem), writes=(0,))
            self.buckets[-1].append(k.remat)
        return self.lane_masks[n]

    def partial(self, g: Group) -> bool:
        """Whether g's loads, stores or constants fill fewer lanes than a vector (then masked)."""
        return g.kind in ("load", "store", "const") and len(g.lanes) < self.lanes

    def half_bits(self, x: VReg) -> VReg:
        """A register whose low 16 bits are the float16 of x (x holds a float16 value exactly)."""
        t = VReg("vec", 16)
        self.ins("vcvtps2ph", t, x, Imm(0), w=(0,), r=(1,))
        return t

    def round_half(self, d: VReg, x: VReg) -> None:
        """d = x rounded to float16 (to nearest even), kept as float32."""
        self.ins("vcvtph2ps", d, self.half_bits(x), w=(0,), r=(1,))

    def bool_from_flags(self, d: VReg, cc: str) -> None:
        self.ins("set" + cc, View(d, 1), w=(0,))
        self.ins("movzx", View(d, 4), View(d, 1), w=(0,), r=(1,))

    def two_address(self, op: str, d: VReg, a: VReg, b: Operand, size: int, commutative: bool) -> None:
        """d = a op b with x86's `op d, b` (d is read and written), whatever registers d, a, b are."""
        if isinstance(b, View) and b.reg is d and a is not d:
            if commutative:
                a, b = b.reg, View(a, size)
            else:
                t = VReg("gpr", d.width)
                self.two_address(op, t, a, b, size, commutative)
                self.move(d, t, size)
                return
        self.move(d, a, size)
        self.ins(op, View(d, size), b, w=(0,), r=(0, 1))


# ---- rules ---------------------------------------------------------------------------------------------

def _arg_position(ctx: Selector, u: UOp) -> int:
    if u.op is Ops.PARAM:
        return u.arg[0] if isinstance(u.arg, tuple) else u.arg
    nparams = max((param_index(p) for p in ctx.prog.params), default=-1) + 1
    names = [v.arg[0] for v in ctx.prog.variables]
    return nparams + names.index(u.arg[0])


def sel_argument(ctx: Selector, u: UOp) -> None:
    """Arguments are copied out of their ABI places at entry (the preamble), so the argument registers are
    free after the first instructions."""
    k = _arg_position(ctx, u)
    size = 8 if isinstance(u.dtype, PtrDType) else gsize(u.dtype)
    d = VReg("gpr", size)
    saved, ctx.cur = ctx.cur, ctx.buckets[-1]
    if k < len(ARG_REGS):
        ctx.move(d, VReg("gpr", 8, fixed=ARG_REGS[k]), size)
    else:
        ctx.ins("mov", View(d, size), Mem(frame=FrameRef("arg", k - len(ARG_REGS)), size=size), w=(0,))
    ctx.cur = saved
    ctx.vals[u] = d


def sel_const(ctx: Selector, u: UOp) -> None:
    return None  # materialized by the first use that needs a register (ctx.reg), where the program has it


def sel_alias(ctx: Selector, u: UOp) -> None:
    if u.src[0] in ctx.vals:
        ctx.vals[u] = ctx.vals[u.src[0]]


def sel_nothing(ctx: Selector, u: UOp) -> None:
    return None


def sel_index(ctx: Selector, u: UOp) -> None:
    if ctx._acc_of(u) is not None:
        if u.src[1].op is not Ops.CONST:
            raise NotImplementedError(f"X86: accumulator {u.src[0]} indexed by a non-constant")
        return
    arr, idx = buffer_of(u), u.src[1]
    buf, frame = (None, ctx.local(arr)) if arr.op is Ops.DEFINE_REG else (ctx.reg(u.src[0]), None)
    size = u.dtype.base.itemsize
    c = ctx._disp_fold(u)
    if c is not None:
        idx, disp = idx.src[0], c * size
    else:
        disp = 0
    if idx.op is Ops.CONST and -2**31 <= (disp + int(idx.arg) * size) < 2**31:
        ctx.addrs[u] = Mem(base=buf, disp=disp + int(idx.arg) * size, size=size, frame=frame)
    elif (mem := ctx.induction_address(u.src[1], buf, frame, size)) is not None:
        ctx.addrs[u] = mem
    else:
        i = ctx.reg(idx) if idx.dtype.itemsize == 8 else ctx.wide(idx)
        ctx.addrs[u] = Mem(base=buf, index=i, scale=size, disp=disp, size=size, frame=frame)
    if len(u.src) == 3:
        ctx.gates[u] = ctx.reg(u.src[2])


def _load_inst(ctx: Selector, d: VReg, dt: DType, mem: Mem) -> None:
    if dt is dtypes.float16:
        t = VReg("gpr", 4)
        ctx.ins("movzx", View(t, 4), mem, w=(0,))
        ctx.ins("vmovd", d, View(t, 4), w=(0,), r=(1,))
        ctx.ins("vcvtph2ps", d, d, w=(0,), r=(1,))
    elif dtypes.is_float(dt):
        ctx.ins("vmov" + _SFX[dt], d, mem, w=(0,))
    elif dt.itemsize >= 4:
        ctx.ins("mov", View(d, dt.itemsize), mem, w=(0,))
    else:
        ctx.ins("movsx" if _signed(dt) else "movzx", View(d, 4), mem, w=(0,))


def sel_load(ctx: Selector, u: UOp) -> None:
    idx = u.src[0]
    acc = ctx._acc_of(idx)
    if acc is not None:
        ctx.vals[u] = _acc_load(ctx, u, acc)
        return
    mem = ctx.addrs[idx]
    if idx not in ctx.gates:
        _load_inst(ctx, ctx.out(u), u.dtype, mem)
        return
    d = ctx.out(u)
    if len(u.src) > 1:
        ctx.move(d, ctx.reg(u.src[1]))
    elif dtypes.is_float(u.dtype):
        ctx.ins("vxorps", d, d, d, w=(0,))
    else:
        ctx.ins("mov", View(d, 4), Imm(0), w=(0,))
    skip = ctx.label()
    g = ctx.gates[idx]
    ctx.ins("test", View(g, 4), View(g, 4), r=(0, 1))
    ctx.jump("je", skip)
    _load_inst(ctx, d, u.dtype, mem)
    ctx.place(skip)


def _acc_load(ctx: Selector, u: UOp, acc: UOp) -> VReg:
    """A load of an accumulator reads its register, unless the accumulator is written again before the
    loaded value's last use: then it is copied."""
    reg = ctx.accumulator(acc)
    at = ctx.pos[u]
    last_use = max((ctx.pos[x] for x in ctx.users.get(u, ()) if x in ctx.pos), default=at)
    for w in ctx.uops[at + 1:last_use + 1]:
        if w.op is Ops.STORE and ctx._acc_of(w.src[0]) is acc:
            write_at = ctx.pos[w.src[1]] if ctx.fold_into.get(w.src[1]) is acc else ctx.pos[w]
            if any(ctx.pos[x] > write_at for x in ctx.users.get(u, ()) if x in ctx.pos):
                copy = ctx.new(u.dtype)
                ctx.move(copy, reg)
                return copy
    return reg


def sel_store(ctx: Selector, u: UOp) -> None:
    idx, v = u.src
    acc = ctx._acc_of(idx)
    if acc is not None:
        d = ctx.accumulator(acc)
        if ctx.vals.get(v) is not d:
            if v.op is Ops.CONST and v not in ctx.vals:
                _const_into(ctx, d, v)
            else:
                ctx.move(d, ctx.reg(v))
        return
    mem = ctx.addrs[idx]
    skip = None
    if idx in ctx.gates:
        skip = ctx.label()
        g = ctx.gates[idx]
        ctx.ins("test", View(g, 4), View(g, 4), r=(0, 1))
        ctx.jump("je", skip)
    dt = v.dtype
    if dt is dtypes.float16:
        t = VReg("gpr", 4)
        ctx.ins("vmovd", View(t, 4), ctx.half_bits(ctx.reg(v)), w=(0,), r=(1,))
        ctx.ins("mov", mem, View(t, 2), r=(1,))
    elif dtypes.is_float(dt):
        ctx.ins("vmov" + _SFX[dt], mem, ctx.reg(v), r=(1,))
    elif v.op is Ops.CONST and (dt.itemsize < 8 or -2**31 <= int(v.arg) < 2**31):
        ctx.ins("mov", mem, Imm(int(v.arg) & ((1 << (8 * dt.itemsize)) - 1) if dt.itemsize < 8 else int(v.arg)))
    else:
        ctx.ins("mov", mem, View(ctx.reg(v), dt.itemsize), r=(1,))
    if skip is not None:
        ctx.place(skip)


def _const_into(ctx: Selector, d: VReg, c: UOp) -> None:
    """d = constant c, written in place (an accumulator's initial value)."""
    if dtypes.is_float(c.dtype):
        ctx.move(d, ctx.reg(c))
    else:
        ctx.ins("mov", View(d, d.width), Imm(int(c.arg)), w=(0,))


def sel_range(ctx: Selector, u: UOp) -> None:
    i = ctx.out(u)
    top, exit_ = ctx.label(), ctx.label()
    ctx.loops[u] = (top, exit_)
    size = gsize(u.dtype)
    ctx.preheaders[u] = []  # emitted before this bucket (select)
    ctx.open_loops.append(u)
    ctx.counter_init[u] = ctx.ins("mov", View(i, size), Imm(0), w=(0,))
    end = u.src[0]
    if not (end.op is Ops.CONST and int(end.arg) > 0):  # the trip count may be zero: guard the loop
        ctx.ins("cmp", View(i, size), ctx.src(end, size), r=(0, 1))
        ctx.jump("jge", exit_)
    ctx.place(top)


def sel_end(ctx: Selector, u: UOp) -> None:
    rng = u.src[-1]
    top, exit_ = ctx.loops[rng]
    i, size = ctx.vals[rng], gsize(rng.dtype)
    ctx.open_loops.remove(rng)
    for p, step in ctx.steps.get(rng, ()):
        ctx.ins("add", p, Imm(step), w=(0,), r=(0,))
    add = ctx.ins("add", View(i, size), Imm(1), w=(0,), r=(0,))
    cmp = ctx.ins("cmp", View(i, size), ctx.src(rng.src[0], size), r=(0, 1))
    ctx.jump("jl", top)
    ctx.place(exit_)
    n = int(rng.src[0].arg) if rng.src[0].op is Ops.CONST else 0
    ptr = next(((p, step) for p, step in ctx.steps.get(rng, ()) if step > 0 and step * n < 2**31), None)
    if n > 0 and ptr is not None:  # the loop may instead end when a pointer reaches its end (see select)
        end = VReg("gpr", 8)
        ctx.preheaders[rng].append(MInst("lea", (end, Mem(base=ptr[0], disp=ptr[1] * n, size=8)), writes=(0,)))
        ctx.counted[rng] = (i, (ctx.counter_init[rng], add), cmp, MInst("cmp", (ptr[0], end), reads=(0, 1)))


# ---- ALU: floats ---------------------------------------------------------------------------------------

def _const_last(u: UOp) -> tuple[UOp, UOp]:
    """The sources of a float op, a constant second where the op commutes (it can be a memory operand)."""
    a, b = u.src
    return (b, a) if a.op is Ops.CONST and b.op is not Ops.CONST and u.op in GroupOp.Commutative else (a, b)


def sel_float_binary(ctx: Selector, u: UOp) -> None:
    a, b = _const_last(u)
    av, bv = ctx.reg(a), ctx.fsrc(b)
    d = ctx.out(u, in_place=True)
    ctx.ins(_FLOAT_BIN[u.op] + _SFX[u.dtype], d, av, bv, w=(0,), r=(1, 2))


def sel_float_max(ctx: Selector, u: UOp) -> None:
    """max propagating NaN from either side: vmax gives b when either is NaN; a NaN a is then blended in."""
    a, b = _const_last(u)
    av, bv = ctx.reg(a), ctx.fsrc(b)
    dt = u.dtype
    t, m = ctx.new(dt), VReg("vec", 16)
    ctx.ins("vmax" + _SFX[dt], t, av, bv, w=(0,), r=(1, 2))
    ctx.ins("vcmp" + _SFX[dt], m, av, av, Imm(3), w=(0,), r=(1, 2))  # unordered: a is NaN
    d = ctx.out(u, in_place=True)
    ctx.ins("vblendv" + _PK[dt], d, t, av, m, w=(0,), r=(1, 2, 3))


def sel_fused_add(ctx: Selector, u: UOp) -> UOp | None:
    """a*b + c as one FMA when the product has no other use (contraction, as the LLVM renderer's `contract`);
    not for float16, whose product must round to float16 first."""
    if u.dtype is dtypes.float16:
        return None
    for m, c in (u.src, u.src[::-1]):
        if m.op is Ops.MUL and ctx.users.get(m) == [u]:
            return _rule(sel_mulacc)(ctx, u, srcs=(m.src[0], m.src[1], c))
    return None


def sel_mulacc(ctx: Selector, u: UOp, srcs: tuple[UOp, ...] | None = None) -> None:
    a, b, c = (ctx.reg(s) for s in (srcs or u.src))
    d = ctx.out(u, in_place=True)
    if dtypes.is_float(u.dtype):
        if d is a or d is b and d is not c:
            t = ctx.new(u.dtype)
            ctx.move(t, c)
            ctx.ins("vfmadd231" + _SFX[u.dtype], t, a, b, w=(0,), r=(0, 1, 2))
            ctx.move(d, t)
            return
        ctx.move(d, c)
        ctx.ins("vfmadd231" + _SFX[u.dtype], d, a, b, w=(0,), r=(0, 1, 2))
        return
    size = gsize(u.dtype)
    t = VReg("gpr", size)
    ctx.two_address("imul", t, a, View(b, size), size, True)
    ctx.two_address("add", d, t, View(c, size), size, True)
    ctx.extend(d, u.dtype)


def sel_float_unary(ctx: Selector, u: UOp) -> None:
    a, dt = ctx.reg(u.src[0]), u.dtype
    d = ctx.out(u)
    if u.op is Ops.SQRT:
        ctx.ins("vsqrt" + _SFX[dt], d, a, a, w=(0,), r=(1, 2))
    elif u.op is Ops.TRUNC:
        ctx.ins("vround" + _SFX[dt], d, a, a, Imm(11), w=(0,), r=(1, 2))  # toward zero, no precision exception
    elif u.op is Ops.NEG:
        size = rep_size(dt)
        sign = (1 << (8 * size - 1)).to_bytes(size, "little") * (16 // size)
        ctx.ins("vxor" + _PK[dt], d, a, Mem(data=ctx.const_data(sign), size=16), w=(0,), r=(1,))
    elif u.op is Ops.RECIPROCAL:
        one = ctx.reg(UOp.const(dt, 1.0))
        ctx.ins("vdiv" + _SFX[dt], d, one, a, w=(0,), r=(1, 2))
    else:
        raise NotImplementedError(f"the X86 renderer has no {u.op.name} for {dt!r}: it needs a decomposition "
                                  f"into arithmetic (the renderer's extra_matcher)")


def sel_float_compare(ctx: Selector, u: UOp, a: UOp, b: UOp) -> None:
    sfx = _SFX[a.dtype]
    av, bv = ctx.reg(a), ctx.reg(b)
    d = ctx.out(u)
    if u.op is Ops.CMPLT:  # a < b  <=>  b > a: "above" is false when unordered
        ctx.ins("vucomi" + sfx, bv, av, r=(0, 1))
        ctx.bool_from_flags(d, "a")
        return
    ctx.ins("vucomi" + sfx, av, bv, r=(0, 1))
    t = VReg("gpr", 4)
    if u.op is Ops.CMPEQ:  # equal and ordered
        ctx.ins("sete", View(d, 1), w=(0,))
        ctx.ins("setnp", View(t, 1), w=(0,))
        ctx.ins("and", View(d, 1), View(t, 1), w=(0,), r=(0, 1))
    else:  # not equal, or unordered
        ctx.ins("setne", View(d, 1), w=(0,))
        ctx.ins("setp", View(t, 1), w=(0,))
        ctx.ins("or", View(d, 1), View(t, 1), w=(0,), r=(0, 1))
    ctx.ins("movzx", View(d, 4), View(d, 1), w=(0,), r=(1,))


def _blend(ctx: Selector, u: UOp, mask: VReg, x: UOp, y: UOp) -> None:
    d = ctx.out(u)
    ctx.ins("vblendv" + _PK[u.dtype], d, ctx.reg(y), ctx.reg(x), mask, w=(0,), r=(1, 2, 3))


def sel_where_float_compare(ctx: Selector, u: UOp, c: UOp, x: UOp, y: UOp) -> UOp | None:
    """where(a cmp b, x, y) on floats of one width: the compare's lane mask selects directly."""
    a, b = c.src
    if not dtypes.is_float(a.dtype) or a.dtype is not u.dtype:
        return None
    m = VReg("vec", 16)
    ctx.ins("vcmp" + _SFX[a.dtype], m, ctx.reg(a), ctx.reg(b), Imm(_VCMP[c.op]), w=(0,), r=(1, 2))
    _blend(ctx, u, m, x, y)
    return DONE


def sel_where(ctx: Selector, u: UOp) -> None:
    c, x, y = u.src
    cond = ctx.reg(c)
    if dtypes.is_float(u.dtype):  # the bool becomes a lane mask: 0 -> 0, 1 -> all ones
        t, m = VReg("gpr", 8), VReg("vec", 16)
        size = rep_size(u.dtype)
        ctx.ins("mov", View(t, 4), View(cond, 4), w=(0,), r=(1,))
        ctx.ins("neg", View(t, size), w=(0,), r=(0,))
        ctx.ins("vmovd" if size == 4 else "vmovq", m, View(t, size), w=(0,), r=(1,))
        _blend(ctx, u, m, x, y)
        return
    size = gsize(u.dtype)
    d = ctx.out(u)
    xv = ctx.reg(x)
    ctx.move(d, ctx.reg(y), size)
    ctx.ins("test", View(cond, 4), View(cond, 4), r=(0, 1))
    ctx.ins("cmovne", View(d, size), View(xv, size), w=(0,), r=(0, 1))


# ---- ALU: integers -------------------------------------------------------------------------------------

def sel_int_binary(ctx: Selector, u: UOp) -> None:
    a, b = u.src
    size = gsize(u.dtype)
    op = _BOOL_OP.get(u.op, u.op) if u.dtype is dtypes.bool else u.op  # bools: + is or, * is and, max is or
    if op is Ops.MUL and (k := _imm(b, size)) is not None:
        av = ctx.reg(a)
        d = ctx.out(u, in_place=True)
        ctx.ins("imul", View(d, size), View(av, size), Imm(k), w=(0,), r=(1,))
    else:
        av, bv = ctx.reg(a), ctx.src(b, size)
        d = ctx.out(u, in_place=True)
        ctx.two_address(_INT_BIN[op], d, av, bv, size, op in GroupOp.Commutative)
    if op in (Ops.ADD, Ops.SUB, Ops.MUL):
        ctx.extend(d, u.dtype)


def _byte_load(x: UOp) -> UOp | None:
    """The INDEX of the ungated uint8 buffer load that x casts to uint16, if it is one."""
    if x.op is not Ops.CAST or (ld := x.src[0]).op is not Ops.LOAD or ld.dtype is not dtypes.uint8 or \
            len(ld.src) != 1 or ld.src[0].op is not Ops.INDEX or len(ld.src[0].src) != 2 or \
            buffer_of(ld.src[0]).op is not Ops.PARAM:
        return None
    return ld.src[0]


def _word_of_bytes(ctx: Selector, u: UOp) -> tuple[UOp, list[UOp]] | None:
    """For `ushort(b[i]) | ushort(b[i+1]) << 8` (a little-endian uint16 read byte by byte: a quantized block's
    float16 scale) with no store or loop boundary between the byte loads and u: the low byte's INDEX, and the
    uops between it and u (the loads, casts and shift)."""
    if u.op is not Ops.OR or u.dtype is not dtypes.uint16:
        return None
    for lo, hi in (u.src, u.src[::-1]):
        if hi.op is not Ops.SHL or hi.src[1].op is not Ops.CONST or int(hi.src[1].arg) != 8:
            continue
        a, b = _byte_load(lo), _byte_load(hi.src[0])
        if a is None or b is None or buffer_of(a) is not buffer_of(b):
            continue
        (ba, ca), (bb, cb) = offset(a), offset(b)
        if not (ba is bb and cb == ca + 1 or ba.op is bb.op is Ops.CONST and ca == cb and bb.arg == ba.arg + 1):
            continue
        first = min(ctx.pos[lo.src[0]], ctx.pos[hi.src[0].src[0]])
        if bisect.bisect(ctx.barriers, first) == bisect.bisect_left(ctx.barriers, ctx.pos[u]):
            return a, [lo, lo.src[0], hi, hi.src[0], hi.src[0].src[0]]
    return None


def sel_word_of_bytes(ctx: Selector, u: UOp) -> UOp | None:
    """One 16-bit load for a uint16 read byte by byte (Selector.words); other ORs are declined."""
    if u not in ctx.words:
        return None
    d = ctx.out(u)
    ctx.ins("movzx", View(d, 4), dataclasses.replace(ctx.addrs[ctx.words[u]], size=2), w=(0,))
    return DONE


def sel_int_neg(ctx: Selector, u: UOp) -> None:
    a, size = ctx.reg(u.src[0]), gsize(u.dtype)
    d = ctx.out(u)
    ctx.move(d, a, size)
    if u.dtype is dtypes.bool:
        ctx.ins("xor", View(d, 4), Imm(1), w=(0,), r=(0,))
        return
    ctx.ins("neg", View(d, size), w=(0,), r=(0,))
    ctx.extend(d, u.dtype)


def sel_shift(ctx: Selector, u: UOp) -> None:
    a, b = u.src
    size = gsize(u.dtype)
    op = "shl" if u.op is Ops.SHL else ("sar" if _signed(u.dtype) else "shr")
    av = ctx.reg(a)
    if b.op is Ops.CONST:
        d = ctx.out(u)
        ctx.move(d, av, size)
        ctx.ins(op, View(d, size), Imm(int(b.arg) & (8 * size - 1)), w=(0,), r=(0,))
    else:
        count = VReg("gpr", 8, fixed=GPR["rcx"])
        ctx.move(count, ctx.reg(b), 4)
        d = ctx.out(u)
        ctx.move(d, av, size)
        ctx.ins(op, View(d, size), View(count, 1), w=(0,), r=(0, 1))
    ctx.extend(d, u.dtype)


def sel_int_max(ctx: Selector, u: UOp) -> None:
    a, b = (ctx.reg(s) for s in u.src)
    size = gsize(u.dtype)
    d = ctx.out(u, in_place=True)
    ctx.ins("cmp", View(a, size), View(b, size), r=(0, 1))
    greater, less = ("g", "l") if _signed(u.dtype) else ("a", "b")
    if d is a:
        ctx.ins("cmov" + less, View(d, size), View(b, size), w=(0,), r=(0, 1))
    elif d is b:
        ctx.ins("cmov" + greater, View(d, size), View(a, size), w=(0,), r=(0, 1))
    else:
        ctx.move(d, b, size)
        ctx.ins("cmov" + greater, View(d, size), View(a, size), w=(0,), r=(0, 1))


def sel_int_compare(ctx: Selector, u: UOp) -> None:
    a, b = u.src
    size = gsize(a.dtype)
    av, bv = ctx.reg(a), ctx.src(b, size)
    d = ctx.out(u)
    ctx.ins("cmp", View(av, size), bv, r=(0, 1))
    cc = {Ops.CMPNE: "ne", Ops.CMPEQ: "e", Ops.CMPLT: "l" if _signed(a.dtype) else "b"}[u.op]
    ctx.bool_from_flags(d, cc)


def sel_divide(ctx: Selector, u: UOp) -> None:
    """IDIV/MOD with alu.py's semantics: division by 0 gives 0, MIN / -1 wraps (its remainder is 0)."""
    a, b = u.src
    dt, size = u.dtype, gsize(u.dtype)
    signed = _signed(dt)
    divisor = int(b.arg) if b.op is Ops.CONST else None
    d = ctx.out(u)
    if divisor == 0 or signed and divisor == -1 and u.op is Ops.MOD:
        ctx.ins("mov", View(d, 4), Imm(0), w=(0,))
        return
    if signed and divisor == -1:  # -x, wrapping at MIN (idiv would trap)
        ctx.move(d, ctx.reg(a), size)
        ctx.ins("neg", View(d, size), w=(0,), r=(0,))
        ctx.extend(d, dt)
        return
    if signed and size == 4 and divisor is not None and divisor > 1:
        _divide_by_constant(ctx, u, d, divisor)
        return
    done = ctx.label()
    bv = ctx.reg(b)
    if divisor is None:
        normal = ctx.label()
        ctx.ins("mov", View(d, 4), Imm(0), w=(0,))
        ctx.ins("test", View(bv, size), View(bv, size), r=(0, 1))
        ctx.jump("je", done)
        if signed:
            ctx.ins("cmp", View(bv, size), Imm(-1), r=(0,))
            ctx.jump("jne", normal)
            if u.op is Ops.IDIV:  # x / -1 is -x, wrapping at MIN
                ctx.move(d, ctx.reg(a), size)
                ctx.ins("neg", View(d, size), w=(0,), r=(0,))
            ctx.jump("jmp", done)
            ctx.place(normal)
    rax, rdx = VReg("gpr", 8, fixed=GPR["rax"]), VReg("gpr", 8, fixed=GPR["rdx"])
    ctx.move(rax, ctx.reg(a), size)
    if signed:
        ctx.ins("cqo" if size == 8 else "cdq", iw=(rdx,), ir=(rax,))
    else:
        ctx.ins("mov", View(rdx, 4), Imm(0), w=(0,))
    ctx.ins("idiv" if signed else "div", View(bv, size), r=(0,), iw=(rax, rdx), ir=(rax, rdx))
    ctx.move(d, rax if u.op is Ops.IDIV else rdx, size)
    ctx.place(done)
    ctx.extend(d, dt)


def _divide_by_constant(ctx: Selector, u: UOp, d: VReg, c: int) -> None:
    """int32 x / c and x % c (truncating, as alu.py) for a constant c > 1 without idiv (tens of cycles): a power
    of two is a shift of x biased by c - 1 when x is negative; otherwise q = (x*m >> L) + (x < 0) with the
    round-up reciprocal m = 2^L // c + 1, L = 31 + bitlen(c), in 64 bits (Hacker's Delight 10-4: the error
    x*(m*c - 2^L) stays below 2^L for every int32 x, so the floor is exact; m <= 2^32 keeps x*m in int64)."""
    xr = ctx.reg(u.src[0])
    x = View(xr, 4)
    q = VReg("gpr", 8)
    if c & (c - 1) == 0:
        k = c.bit_length() - 1
        ctx.ins("mov", View(q, 4), x, w=(0,), r=(1,))
        ctx.ins("sar", View(q, 4), Imm(31), w=(0,), r=(0,))
        ctx.ins("shr", View(q, 4), Imm(32 - k), w=(0,), r=(0,))
        ctx.ins("add", View(q, 4), x, w=(0,), r=(0, 1))
        ctx.ins("sar", View(q, 4), Imm(k), w=(0,), r=(0,))
    else:
        shift = 31 + c.bit_length()
        m, neg = VReg("gpr", 8), VReg("gpr", 4)
        ctx.ins("movsxd", q, x, w=(0,), r=(1,))
        ctx.ins("mov", m, Imm((1 << shift) // c + 1), w=(0,))
        ctx.ins("imul", q, m, w=(0,), r=(0, 1))
        ctx.ins("sar", q, Imm(shift), w=(0,), r=(0,))
        ctx.ins("mov", View(neg, 4), x, w=(0,), r=(1,))
        ctx.ins("sar", View(neg, 4), Imm(31), w=(0,), r=(0,))
        ctx.ins("sub", View(q, 4), View(neg, 4), w=(0,), r=(0, 1))
    if u.op is Ops.IDIV:
        ctx.move(d, q, 4)
        return
    p = VReg("gpr", 4)
    ctx.ins("imul", View(p, 4), View(q, 4), Imm(c), w=(0,), r=(1,))
    ctx.move(d, xr, 4)
    ctx.ins("sub", View(d, 4), View(p, 4), w=(0,), r=(0, 1))


def sel_int_pow(ctx: Selector, u: UOp) -> None:
    """x ** y on ints as alu.py defines it: exact modulo the width for y >= 0 (square and multiply); for
    y < 0 the truncated real power: 1 for x = 1, +-1 for x = -1, else 0."""
    dt, size = u.dtype, gsize(u.dtype)
    res, base, e = ctx.out(u), VReg("gpr", size), VReg("gpr", size)
    top, skip, done = ctx.label(), ctx.label(), ctx.label()
    ctx.move(base, ctx.reg(u.src[0]), size)
    ctx.move(e, ctx.reg(u.src[1]), size)
    ctx.ins("mov", View(res, size), Imm(1), w=(0,))
    negative = None
    if _signed(dt):
        negative = ctx.label()
        ctx.ins("test", View(e, size), View(e, size), r=(0, 1))
        ctx.jump("js", negative)
    ctx.place(top)
    ctx.ins("test", View(e, size), View(e, size), r=(0, 1))
    ctx.jump("je", done)
    ctx.ins("test", View(e, size), Imm(1), r=(0,))
    ctx.jump("je", skip)
    ctx.ins("imul", View(res, size), View(base, size), w=(0,), r=(0, 1))
    ctx.place(skip)
    ctx.ins("imul", View(base, size), View(base, size), w=(0,), r=(0, 1))
    ctx.ins("shr", View(e, size), Imm(1), w=(0,), r=(0,))
    ctx.jump("jmp", top)
    if negative is not None:
        not_one = ctx.label()
        ctx.place(negative)
        ctx.ins("cmp", View(base, size), Imm(1), r=(0,))
        ctx.jump("je", done)  # res is 1
        ctx.ins("mov", View(res, size), Imm(0), w=(0,))
        ctx.ins("cmp", View(base, size), Imm(-1), r=(0,))
        ctx.jump("jne", done)
        ctx.ins("mov", View(res, size), Imm(1), w=(0,))
        ctx.ins("test", View(e, size), Imm(1), r=(0,))
        ctx.jump("je", not_one)
        ctx.ins("mov", View(res, size), Imm(-1), w=(0,))
        ctx.place(not_one)
    ctx.place(done)
    ctx.extend(res, dt)


# ---- casts ---------------------------------------------------------------------------------------------

def sel_cast(ctx: Selector, u: UOp) -> None:
    src, dst = u.src[0].dtype, u.dtype
    a = ctx.reg(u.src[0])
    if src is dst:
        ctx.vals[u] = a
        return
    if src is dtypes.float16 and dst is dtypes.float32:
        ctx.vals[u] = a  # already held as this float32
    elif dtypes.is_float(src):
        _cast_from_float(ctx, u, a, src, dst)
    elif dtypes.is_float(dst):
        # an int rounds to float32 exactly below 2^24; beyond, both roundings give float16's inf
        _cast_int_to_float(ctx, u, a, src, dst)
        if dst is dtypes.float16:
            ctx.round_half(ctx.vals[u], ctx.vals[u])
    else:
        _cast_int(ctx, u, a, src, dst)


def _cast_int(ctx: Selector, u: UOp, a: VReg, src: DType, dst: DType) -> None:
    d = ctx.out(u)
    if dst is dtypes.bool:
        size = gsize(src)
        ctx.ins("test", View(a, size), View(a, size), r=(0, 1))
        ctx.bool_from_flags(d, "ne")
    elif dst.itemsize == 8:
        if src.itemsize == 8:
            ctx.move(d, a, 8)
        elif _signed(src):
            ctx.ins("movsxd", View(d, 8), View(a, 4), w=(0,), r=(1,))
        else:  # a 32-bit write clears the upper half
            ctx.ins("mov", View(d, 4), View(a, 4), w=(0,), r=(1,))
    else:
        ctx.move(d, a, 4)
        ctx.extend(d, dst)


def _cast_int_to_float(ctx: Selector, u: UOp, a: VReg, src: DType, dst: DType) -> None:
    d = ctx.out(u)
    cvt = "vcvtsi2" + _SFX[dst]
    if src is dtypes.uint64:
        _u64_to_float(ctx, d, a, dst)
        return
    if src is dtypes.uint32:  # zero-extended, it converts exactly as a 64-bit signed value
        wide = VReg("gpr", 8)
        ctx.ins("mov", View(wide, 4), View(a, 4), w=(0,), r=(1,))
        a, size = wide, 8
    else:
        size = 8 if src.itemsize == 8 else 4
    ctx.ins("vxorps", d, d, d, w=(0,))  # no dependence on d's old upper lanes
    ctx.ins(cvt, d, d, View(a, size), w=(0,), r=(1, 2))


def _u64_to_float(ctx: Selector, d: VReg, a: VReg, dst: DType) -> None:
    """uint64 -> float: values below 2^63 convert as signed; larger ones are halved (keeping the lowest bit,
    so rounding is right), converted and doubled."""
    cvt, big, done = "vcvtsi2" + _SFX[dst], ctx.label(), ctx.label()
    ctx.ins("vxorps", d, d, d, w=(0,))
    ctx.ins("test", View(a, 8), View(a, 8), r=(0, 1))
    ctx.jump("js", big)
    ctx.ins(cvt, d, d, View(a, 8), w=(0,), r=(1, 2))
    ctx.jump("jmp", done)
    ctx.place(big)
    half, low = VReg("gpr", 8), VReg("gpr", 8)
    ctx.move(half, a, 8)
    ctx.ins("shr", View(half, 8), Imm(1), w=(0,), r=(0,))
    ctx.move(low, a, 8)
    ctx.ins("and", View(low, 8), Imm(1), w=(0,), r=(0,))
    ctx.ins("or", View(half, 8), View(low, 8), w=(0,), r=(0, 1))
    ctx.ins(cvt, d, d, View(half, 8), w=(0,), r=(1, 2))
    ctx.ins("vadd" + _SFX[dst], d, d, d, w=(0,), r=(1, 2))
    ctx.place(done)


def _cast_from_float(ctx: Selector, u: UOp, a: VReg, src: DType, dst: DType) -> None:
    sfx = _SFX[src]
    d = ctx.out(u)
    if dst is dtypes.float16:
        ctx.round_half(d, a if src is dtypes.float32 else _to_float_odd(ctx, a))
    elif dtypes.is_float(dst):
        ctx.ins(f"vcvt{sfx}2{_SFX[dst]}", d, a, a, w=(0,), r=(1, 2))
    elif dst is dtypes.bool:  # x != 0, true for NaN
        z, t = VReg("vec", 16), VReg("gpr", 4)
        ctx.ins("vxorps", z, z, z, w=(0,))
        ctx.ins("vucomi" + sfx, a, z, r=(0, 1))
        ctx.ins("setne", View(d, 1), w=(0,))
        ctx.ins("setp", View(t, 1), w=(0,))
        ctx.ins("or", View(d, 1), View(t, 1), w=(0,), r=(0, 1))
        ctx.ins("movzx", View(d, 4), View(d, 1), w=(0,), r=(1,))
    else:
        # what the int cannot hold (NaN, inf, out of range) is alu.py's 0, not cvtt's "integer indefinite"
        # (MIN) or the low bits of a wider conversion
        zero, done = ctx.label(), ctx.label()
        _jump_if_outside(ctx, a, src, dst, zero)
        if dst is dtypes.uint64:
            _float_to_u64(ctx, d, a, src)
        else:
            # uint32 needs the 64-bit conversion (its values above 2^31); narrow ints take the low bits
            size = 8 if dst.itemsize == 8 or dst is dtypes.uint32 else 4
            ctx.ins(f"vcvtt{sfx}2si", View(d, size), a, w=(0,), r=(1,))
            ctx.extend(d, dst)
        ctx.jump("jmp", done)
        ctx.place(zero)
        ctx.ins("mov", View(d, 4), Imm(0), w=(0,))  # a 32-bit write clears the upper half too
        ctx.place(done)


def _jump_if_outside(ctx: Selector, a: VReg, src: DType, dst: DType, target: str) -> None:
    """Jump to `target` unless lo < a < hi (alu.float_to_int_range; exact in float32 for float16)."""
    lo, hi = float_to_int_range(src, dst)
    wide = dtypes.float64 if src is dtypes.float64 else dtypes.float32
    ctx.ins("vucomi" + _SFX[wide], a, ctx.reg(UOp.const(wide, lo)), r=(0, 1))
    ctx.jump("jbe", target)  # a <= lo, or NaN (unordered sets CF and ZF)
    ctx.ins("vucomi" + _SFX[wide], ctx.reg(UOp.const(wide, hi)), a, r=(0, 1))
    ctx.jump("jbe", target)  # hi <= a, or NaN


def _to_float_odd(ctx: Selector, a: VReg) -> VReg:
    """double -> float32 rounded to odd (truncated toward zero, the last bit set when inexact): rounding
    that to float16 then gives the correctly rounded float16 (two plain roundings could be off)."""
    f, back, done = VReg("vec", 4), VReg("vec", 8), ctx.label()
    ctx.ins("vcvtsd2ss", f, a, a, w=(0,), r=(1, 2))
    ctx.ins("vcvtss2sd", back, f, f, w=(0,), r=(1, 2))
    ctx.ins("vucomisd", back, a, r=(0, 1))
    ctx.jump("je", done)  # exact, or NaN (unordered sets ZF): f is right
    mask = Mem(data=ctx.const_data(((1 << 63) - 1).to_bytes(8, "little") * 2), size=16)
    abs_back, abs_a, bits, up = VReg("vec", 16), VReg("vec", 16), VReg("gpr", 4), VReg("gpr", 4)
    ctx.ins("vandpd", abs_back, back, mask, w=(0,), r=(1,))
    ctx.ins("vandpd", abs_a, a, mask, w=(0,), r=(1,))
    ctx.ins("vmovd", View(bits, 4), f, w=(0,), r=(1,))
    ctx.ins("vucomisd", abs_back, abs_a, r=(0, 1))
    ctx.bool_from_flags(up, "a")  # rounded away from zero: step back toward it
    ctx.ins("sub", View(bits, 4), View(up, 4), w=(0,), r=(0, 1))
    ctx.ins("or", View(bits, 4), Imm(1), w=(0,), r=(0,))
    ctx.ins("vmovd", f, View(bits, 4), w=(0,), r=(1,))
    ctx.place(done)
    return f


def _float_to_u64(ctx: Selector, d: VReg, a: VReg, src: DType) -> None:
    """float -> uint64: below 2^63 as signed; above, convert x - 2^63 and set the top bit."""
    sfx, high, done = _SFX[src], ctx.label(), ctx.label()
    limit = ctx.reg(UOp.const(dtypes.float64 if src is dtypes.float64 else dtypes.float32, 2.0 ** 63))
    ctx.ins("vucomi" + sfx, a, limit, r=(0, 1))
    ctx.jump("jae", high)
    ctx.ins(f"vcvtt{sfx}2si", View(d, 8), a, w=(0,), r=(1,))
    ctx.jump("jmp", done)
    ctx.place(high)
    t, top = VReg("vec", src.itemsize), VReg("gpr", 8)
    ctx.ins("vsub" + sfx, t, a, limit, w=(0,), r=(1, 2))
    ctx.ins(f"vcvtt{sfx}2si", View(d, 8), t, w=(0,), r=(1,))
    ctx.ins("mov", View(top, 8), Imm(1 << 63), w=(0,))
    ctx.ins("xor", View(d, 8), View(top, 8), w=(0,), r=(0, 1))
    ctx.place(done)


def _word_in_memory(ctx: Selector, w: UOp) -> Mem | None:
    """A uint16 read byte by byte (Selector.words) as a 4-byte memory operand at its low byte, when range analysis
    puts those 4 bytes inside the buffer (a quantized block's float16 scale, followed by the block's other bytes):
    vmovd then loads it into a vector register at once. None otherwise."""
    idx = ctx.words.get(w)
    if idx is None or idx not in ctx.addrs:
        return None
    size = buffer_of(idx).ptrdtype.size
    return dataclasses.replace(ctx.addrs[idx], size=4) if 0 <= idx.src[1].vmin and \
        int(idx.src[1].vmax) + 3 < size else None


def sel_bitcast(ctx: Selector, u: UOp) -> None:
    src, dst = u.src[0].dtype, u.dtype
    if dst is dtypes.float16 and (mem := _word_in_memory(ctx, u.src[0])) is not None:
        # a block scale's bits straight from memory: no general register and no vmovd from one (a port-5 uop of
        # the ~17 a Q4_1 block's vector code has per 32 weights; the word's movzx is then dead code)
        d, t = ctx.out(u), VReg("vec", 16)
        ctx.ins("vmovd", t, mem, w=(0,))
        ctx.ins("vcvtph2ps", d, t, w=(0,), r=(1,))
        return
    a = ctx.reg(u.src[0])
    if src is dtypes.float16:  # its 16 bits, as the int16/uint16 they are
        d = ctx.out(u)
        ctx.ins("vmovd", View(d, 4), ctx.half_bits(a), w=(0,), r=(1,))
        ctx.extend(d, dst)
        return
    if dst is dtypes.float16:
        d, t = ctx.out(u), VReg("vec", 16)
        ctx.ins("vmovd", t, View(a, 4), w=(0,), r=(1,))
        ctx.ins("vcvtph2ps", d, t, w=(0,), r=(1,))
        return
    if dtypes.is_float(src) == dtypes.is_float(dst):
        if dtypes.is_float(src) or dst.itemsize >= 4 and src.itemsize >= 4:
            ctx.vals[u] = a
            return
        d = ctx.out(u)
        ctx.move(d, a, 4)
        ctx.extend(d, dst)
        return
    d = ctx.out(u)
    size = dst.itemsize if dtypes.is_float(src) else src.itemsize
    mn = "vmovd" if size == 4 else "vmovq"
    if dtypes.is_float(src):
        ctx.ins(mn, View(d, size), a, w=(0,), r=(1,))
    else:
        ctx.ins(mn, d, View(a, size), w=(0,), r=(1,))


def sel_unsupported(ctx: Selector, u: UOp) -> None:
    raise NotImplementedError(f"the X86 renderer cannot select {u.op.name} of {u.dtype!r} "
                              f"(in kernel {ctx.prog.name})")


def _rule(fn: Callable[..., UOp | None]) -> Callable[..., UOp | None]:
    """A selection function as a rule: its instructions are emitted; the rule reports it handled the uop."""
    def apply(ctx: Selector, u: UOp, **kw: UOp) -> UOp | None:
        ret = fn(ctx, u, **kw)
        return DONE if ret is None else ret
    return apply


_I = (dtypes.bool, *INTS)
isel_rules = PatternMatcher([
    (UPat((Ops.PARAM, Ops.DEFINE_VAR), name="u"), _rule(sel_argument)),
    (UPat(Ops.CONST, name="u"), _rule(sel_const)),
    (UPat(Ops.AFTER, name="u"), _rule(sel_alias)),
    (UPat((Ops.DEFINE_REG, Ops.GROUP, Ops.NOOP, Ops.SINK), name="u"), _rule(sel_nothing)),
    (UPat(Ops.INDEX, name="u"), _rule(sel_index)),
    (UPat(Ops.LOAD, name="u"), _rule(sel_load)),
    (UPat(Ops.STORE, name="u"), _rule(sel_store)),
    (UPat(Ops.RANGE, name="u"), _rule(sel_range)),
    (UPat(Ops.END, name="u"), _rule(sel_end)),
    # floats
    (UPat(Ops.ADD, FLOATS, name="u"), sel_fused_add),
    (UPat((Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV), FLOATS, name="u"), _rule(sel_float_binary)),
    (UPat(Ops.MAX, FLOATS, name="u"), _rule(sel_float_max)),
    (UPat(Ops.MULACC, name="u"), _rule(sel_mulacc)),
    (UPat((Ops.SQRT, Ops.TRUNC, Ops.NEG, Ops.RECIPROCAL, Ops.EXP2, Ops.LOG2, Ops.SIN), FLOATS, name="u"),
     _rule(sel_float_unary)),
    (UPat(Ops.WHERE, FLOATS, src=(UPat(GroupOp.Comparison, name="c"), UPat.var("x"), UPat.var("y")), name="u"),
     sel_where_float_compare),  # returns DONE itself: it declines other compares
    (UPat(Ops.WHERE, name="u"), _rule(sel_where)),
    (UPat(GroupOp.Comparison, src=(UPat.var("a", FLOATS), UPat.var("b")), name="u"), _rule(sel_float_compare)),
    # ints and bools
    (UPat(GroupOp.Comparison, name="u"), _rule(sel_int_compare)),
    (UPat(Ops.OR, dtypes.uint16, name="u"), sel_word_of_bytes),  # returns DONE itself: declines other ORs
    (UPat((Ops.ADD, Ops.SUB, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR), _I, name="u"), _rule(sel_int_binary)),
    (UPat(Ops.MAX, dtypes.bool, name="u"), _rule(sel_int_binary)),
    (UPat(Ops.NEG, _I, name="u"), _rule(sel_int_neg)),
    (UPat(Ops.TRUNC, _I, name="u"), _rule(lambda ctx, u: sel_alias(ctx, u))),
    (UPat((Ops.SHL, Ops.SHR), _I, name="u"), _rule(sel_shift)),
    (UPat(Ops.MAX, _I, name="u"), _rule(sel_int_max)),
    (UPat((Ops.IDIV, Ops.MOD), _I, name="u"), _rule(sel_divide)),
    (UPat(Ops.POW, INTS, name="u"), _rule(sel_int_pow)),
    (UPat(Ops.CAST, name="u"), _rule(sel_cast)),
    (UPat(Ops.BITCAST, name="u"), _rule(sel_bitcast)),
    (UPat(None, name="u"), _rule(sel_unsupported)),
])


def _vector(ctx: Selector, g: Group) -> VReg:
    if g.kind == "acc":
        if g.accs not in ctx.vaccs:
            ctx.vaccs[g.accs] = ctx.vnew()
        return ctx.vaccs[g.accs]
    if g not in ctx.vvals and g in ctx.lazy:  # a deferred broadcast, emitted at its first reader
        ctx.vvals[g] = d = ctx.vnew()
        ctx.ins("vbroadcastss", ctx.vw(d), ctx.lazy[g], w=(0,))
    return ctx.vvals[g]


_VEC_BIN = {Ops.ADD: "vaddps", Ops.SUB: "vsubps", Ops.MUL: "vmulps", Ops.FDIV: "vdivps"}
_VEC_INT = {Ops.ADD: "vpaddd", Ops.SUB: "vpsubd", Ops.MUL: "vpmulld", Ops.AND: "vpand", Ops.OR: "vpor",
            Ops.XOR: "vpxor"}
# EVEX has the bitwise ops only per element size
_VEC_INT_EVEX = _VEC_INT | {Ops.AND: "vpandd", Ops.OR: "vpord", Ops.XOR: "vpxord"}
_UNORD = 3  # vcmp predicate: unordered (either side NaN)


def _splat_factor(product: Group) -> Group | None:
    """The broadcast factor of a product of a vector load and a broadcast (a register tile's FMA), else None."""
    kinds = [s.kind for s in product.srcs]
    return product.srcs[kinds.index("splat")] if sorted(kinds) == ["load", "splat"] else None


def _vclass(size: int) -> str:
    return "zvec" if size == 64 else "vec"


def _mask() -> VReg:
    """An AVX-512 opmask (16 bits: one per float32 lane of a zmm)."""
    return VReg("mask", 2)


def _vblend(ctx: Selector, d: Operand, mask: VReg, y: Operand, x: Operand, size: int) -> None:
    """d = mask ? x : y lane by lane: an opmask selects with vblendmps (zmm), a lane mask with vblendvps."""
    if size == 64:
        ctx.ins("vblendmps", d, mask, y, x, w=(0,), r=(1, 2, 3))
    else:
        ctx.ins("vblendvps", d, y, x, View(mask, size), w=(0,), r=(1, 2, 3))


def _vcmp(ctx: Selector, a: Operand, b: Operand, pred: int, size: int) -> VReg:
    """The lanes of a pred b: an opmask for zmm, else a vector of all-ones/zero lanes."""
    m = _mask() if size == 64 else VReg("vec", size)
    ctx.ins("vcmpps", m if size == 64 else View(m, size), a, b, Imm(pred), w=(0,), r=(1, 2))
    return m


def _vmax(ctx: Selector, d: Operand, a: Operand, b: Operand, size: int) -> None:
    """d = max(a, b) lane by lane, NaN from either side (as the scalar MAX): vmaxps gives b when either is
    NaN, so the lanes where a is NaN take a."""
    t = VReg(_vclass(size), size)
    ctx.ins("vmaxps", View(t, size), a, b, w=(0,), r=(1, 2))
    _vblend(ctx, d, _vcmp(ctx, a, a, _UNORD, size), View(t, size), a, size)


def _hreduce(ctx: Selector, g: Group) -> None:
    """The scalar ADD/MAX of accumulators' lanes: the vectors combined lane by lane, then halves folded onto
    each other (reassociated, as LLVM's reassoc reductions are), from 16 lanes (zmm) or 8 (ymm) to lane 0 of an
    xmm register."""
    add = g.lanes[-1].op is Ops.ADD
    x = ctx.vw(_vector(ctx, g.srcs[0]))
    for s in g.srcs[1:]:
        t = ctx.vnew()
        if add:
            ctx.ins("vaddps", ctx.vw(t), x, ctx.vw(_vector(ctx, s)), w=(0,), r=(1, 2))
        else:
            _vmax(ctx, ctx.vw(t), x, ctx.vw(_vector(ctx, s)), ctx.vbytes)
        x = ctx.vw(t)
    steps = (["vextractf64x4"] if ctx.vbytes == 64 else []) + ["vextractf128", "vmovhlps", "vpermilps"]
    for step in steps:
        size = 32 if step == "vextractf64x4" else 16
        t, r = VReg("vec", size), VReg("vec", size)
        if step == "vextractf64x4":  # the upper half; the lower half into ymm0-15, where VEX code reads it
            ctx.ins(step, View(t, size), x, Imm(1), w=(0,), r=(1,))
            lo = VReg("vec", 32)
            ctx.ins("vmovaps", View(lo, 32), View(x.reg, 32), w=(0,), r=(1,))
            x = View(lo, 32)
        elif step == "vextractf128":  # the upper half
            ctx.ins(step, View(t, size), x, Imm(1), w=(0,), r=(1,))
            x = View(x.reg, size)  # the lower half
        elif step == "vmovhlps":
            ctx.ins(step, View(t, 16), x, x, w=(0,), r=(1, 2))
        else:
            ctx.ins(step, View(t, 16), x, Imm(1), w=(0,), r=(1,))
        if add:
            ctx.ins("vaddps", View(r, size), x, View(t, size), w=(0,), r=(1, 2))
        else:
            _vmax(ctx, View(r, size), x, View(t, size), size)
        x = View(r, size)
    ctx.vals[g.lanes[-1]] = r  # the last step's result, which x views


def _const_blob(g: Group, lanes: int) -> bytes:
    """The lanes' values as `lanes` 32-bit elements (a partial vector's others 0)."""
    v0 = g.lanes[0]
    blob = struct.pack(f"<{len(g.lanes)}f", *(float(u.arg) for u in g.lanes)) if v0.dtype is dtypes.float32 else \
        b"".join((int(u.arg) & 0xFFFFFFFF).to_bytes(4, "little") for u in g.lanes)
    return blob + bytes(4 * lanes - len(blob))


def _const_group(g: Group) -> bool:
    return g.kind == "const" or g.kind == "splat" and g.lanes[0].op is Ops.CONST


def _vsrc(ctx: Selector, g: Group, user: Group) -> Operand:
    """A vector source operand of `user`: a nonzero constant is read from the data section by the instruction
    itself (as scalar fsrc does: no register holds it across the loop, pressure cannot force reloads), and so
    is a vector load only `user` reads when no store comes between the load and here (its vmovups dies), and
    (zmm float arithmetic) a broadcast of a loaded element only `user` reads."""
    if _const_group(g) and (blob := _const_blob(g, ctx.lanes)) != bytes(ctx.vbytes):
        return Mem(data=ctx.const_data(blob), size=ctx.vbytes)
    if ctx.vbytes == 64 and g in ctx.lazy and g not in ctx.vvals and user.lanes[0].op in _VEC_BIN and \
            user.lanes[0].dtype is dtypes.float32 and all(x in user.lanes for x in ctx.users.get(g.lanes[0], ())):
        # a deferred broadcast only `user` reads (a one-vector tile's row value): EVEX reads the element for
        # every lane itself ({1to16}), so no register holds the broadcast
        return dataclasses.replace(ctx.lazy[g], size=4, bcst=True)
    if g.kind == "load" and g.lanes[0].dtype.itemsize == 4 and not ctx.partial(g) and \
            g.lanes[0].src[0] in ctx.addrs and all(
            ctx.users.get(ld) == [x] for ld, x in zip(g.lanes, user.lanes)) and \
            bisect.bisect(ctx.store_pos, ctx.pos[g.lanes[0]]) == bisect.bisect_left(ctx.store_pos, ctx.at):
        return dataclasses.replace(ctx.addrs[g.lanes[0].src[0]], size=ctx.vbytes)
    return ctx.vw(_vector(ctx, g))


def _binary(ctx: Selector, user: Group, x: Group, y: Group, commutative: bool) -> tuple[Operand, Operand]:
    """The register and the register-or-memory operand of a two-source vector op (sources swapped where
    that lets the op read a constant or a load from memory)."""
    if commutative and not isinstance(_vsrc(ctx, y, user), Mem) and isinstance(_vsrc(ctx, x, user), Mem):
        x, y = y, x
    return ctx.vw(_vector(ctx, x)), _vsrc(ctx, y, user)


def _to_int32(ctx: Selector, d: VReg, x: Operand) -> None:
    """float32 lanes -> int32 lanes; lanes the int cannot hold (NaN, inf, out of range) are alu.py's 0, not
    vcvttps2dq's MIN: the in-range lanes are those ordered-greater than the low bound and -less than the high."""
    n = ctx.vbytes
    lo, hi = (Mem(data=ctx.const_data(struct.pack("<f", b) * (n // 4)), size=n)
              for b in float_to_int_range(dtypes.float32, dtypes.int32))
    if n == 64:  # an opmask of the in-range lanes, the second compare under the first's mask; others zeroed
        k = _vcmp(ctx, x, lo, _GT_OQ, n)
        ctx.ins("vcmpps", k, k, x, hi, Imm(_LT_OQ), w=(0,), r=(1, 2, 3))
        ctx.ins("vcvttps2dq{z}", ctx.vw(d), k, x, w=(0,), r=(1, 2))
        return
    inside, above = VReg("vec", n), VReg("vec", n)
    ctx.ins("vcvttps2dq", ctx.vw(d), x, w=(0,), r=(1,))
    ctx.ins("vcmpps", ctx.vw(above), x, lo, Imm(_GT_OQ), w=(0,), r=(1,))
    ctx.ins("vcmpps", ctx.vw(inside), x, hi, Imm(_LT_OQ), w=(0,), r=(1,))
    ctx.ins("vandps", ctx.vw(inside), ctx.vw(inside), ctx.vw(above), w=(0,), r=(1, 2))
    ctx.ins("vandps", ctx.vw(d), ctx.vw(d), ctx.vw(inside), w=(0,), r=(1, 2))


# widening loads of narrow int lanes into int32 lanes, by the lanes' dtype
_WIDEN = {dtypes.uint8: "vpmovzxbd", dtypes.int8: "vpmovsxbd", dtypes.uint16: "vpmovzxwd", dtypes.int16: "vpmovsxwd"}
# int32 lane shifts: by an immediate, by a vector of per-lane amounts (codegen/shifts.py keeps amounts inside
# the width, so neither needs the hardware's out-of-range results)
_VEC_SHIFT = {Ops.SHL: ("vpslld", "vpsllvd"), Ops.SHR: ("vpsrld", "vpsrlvd")}
_VEC_SAR = ("vpsrad", "vpsravd")


def _wrap(ctx: Selector, d: VReg, x: VReg, dt: DType) -> None:
    """d = int32 lanes x wrapped into the narrow `dt` (what its ops do): the low bits zero-extended (an AND with
    the mask) or sign-extended (shifted to the top and arithmetically back)."""
    bits = 8 * dt.itemsize
    if dtypes.is_unsigned(dt):
        mask = Mem(data=ctx.const_data(((1 << bits) - 1).to_bytes(4, "little") * ctx.lanes), size=ctx.vbytes)
        ctx.ins("vpandd" if ctx.vbytes == 64 else "vpand", ctx.vw(d), ctx.vw(x), mask, w=(0,), r=(1, 2))
    else:
        ctx.ins("vpslld", ctx.vw(d), ctx.vw(x), Imm(32 - bits), w=(0,), r=(1,))
        ctx.ins("vpsrad", ctx.vw(d), ctx.vw(d), Imm(32 - bits), w=(0,), r=(1,))


def _reload(ctx: Selector, g: Group) -> Mem | None:
    """For a wrapping convert of loaded narrow ints into the other signedness of their size (Q8_0's uint8 bytes
    bitcast to int8), the load's memory, where widening it again with the right extension replaces the wrap:
    no store or loop boundary between the load and here (the first widening load dies unless read)."""
    src = g.srcs[0]
    v0, s0 = g.lanes[0], src.lanes[0]
    if src.kind != "load" or s0.dtype not in NARROW or v0.dtype not in NARROW or \
            v0.dtype.itemsize != s0.dtype.itemsize or s0.src[0] not in ctx.addrs or \
            bisect.bisect(ctx.barriers, ctx.pos[s0]) != bisect.bisect_left(ctx.barriers, ctx.at):
        return None
    return dataclasses.replace(ctx.addrs[s0.src[0]], size=ctx.lanes * v0.dtype.itemsize)


def _int_shift(ctx: Selector, g: Group, d: VReg) -> None:
    """d = int lanes shifted by a constant (an immediate) or by packed amounts (per-lane variable shifts);
    right shifts of signed lanes are arithmetic, as alu.py's SHR of a signed int is."""
    v0 = g.lanes[0]
    names = _VEC_SAR if v0.op is Ops.SHR and not dtypes.is_unsigned(v0.dtype) else _VEC_SHIFT[v0.op]
    x, amt = g.srcs
    if _const_group(amt) and {int(u.arg) for u in amt.lanes} == {0}:  # a block's first field: no shift
        ctx.vvals[g] = _vector(ctx, x)
    elif _const_group(amt) and len({int(u.arg) for u in amt.lanes}) == 1:
        ctx.ins(names[0], ctx.vw(d), ctx.vw(_vector(ctx, x)), Imm(int(amt.lanes[0].arg) & 31), w=(0,), r=(1,))
    else:
        ctx.ins(names[1], ctx.vw(d), ctx.vw(_vector(ctx, x)), _vsrc(ctx, amt, g), w=(0,), r=(1, 2))


def _gate_mask(ctx: Selector, g: Group) -> VReg:
    """The opmask of a gated load's lanes whose gates hold: the lanes share few gates (a conv2d row's lanes one,
    its first and last columns their own), so each distinct scalar gate (0 or 1) is negated into all ones or
    zero, kept to its lanes' bits and or-ed in; kmovw reads the low 16 bits."""
    bits: dict[UOp, int] = {}
    for k, ld in enumerate(g.lanes):
        gate = ld.src[0].src[2]
        bits[gate] = bits.get(gate, 0) | 1 << k
    acc: VReg | None = None
    for gate, lanes in bits.items():
        if gate.op is Ops.CONST and not gate.arg:
            continue
        t = VReg("gpr", 4)
        if gate.op is Ops.CONST:
            ctx.ins("mov", View(t, 4), Imm(lanes), w=(0,))
        else:
            ctx.move(t, ctx.reg(gate), 4)
            ctx.ins("neg", View(t, 4), w=(0,), r=(0,))
            if lanes != 0xFFFF:
                ctx.ins("and", View(t, 4), Imm(lanes), w=(0,), r=(0,))
        if acc is not None:
            ctx.ins("or", View(t, 4), View(acc, 4), w=(0,), r=(0, 1))
        acc = t
    if acc is None:
        acc = VReg("gpr", 4)
        ctx.ins("mov", View(acc, 4), Imm(0), w=(0,))
    mask = _mask()
    ctx.ins("kmovw", mask, View(acc, 4), w=(0,), r=(1,))
    return mask


def _gated_address(ctx: Selector, g: Group) -> Mem:
    """The vector address of a gated load: lane 0's element without the modulo gated_index reads through (a
    pointer advanced by the innermost loop where the element is affine in it)."""
    idx = g.lanes[0].src[0]
    elem = gated_index(idx)
    assert elem is not None, "slp packs only gated_index loads into a gload"
    buf = ctx.reg(idx.src[0])
    mem = ctx.induction_address(elem, buf, None, 4)
    if mem is None:
        base, c = (elem.src[0], int(elem.src[1].arg)) if elem.op is Ops.ADD and elem.src[1].op is Ops.CONST \
            else (elem, 0)
        index = ctx.reg(base) if base.dtype.itemsize == 8 else ctx.wide(base)
        mem = Mem(base=buf, index=index, scale=4, disp=4 * c, size=4)
    return dataclasses.replace(mem, size=ctx.vbytes)


def emit_group(ctx: Selector, g: Group) -> None:
    """The vector instructions of one group (float32/int32 lanes in a ymm or zmm register)."""
    if g in ctx.fused_away:
        return
    n, vw = ctx.vbytes, ctx.vw
    v0 = g.lanes[0] if g.lanes else None
    if g.kind == "accstore":
        acc = _vector(ctx, ctx.packer.acc_groups[g.accs])
        if g in ctx.fused:
            m = ctx.fused[g]
            fa, fb = _binary(ctx, m, m.srcs[0], m.srcs[1], commutative=True)  # a load only it reads: from memory
            ctx.ins("vfmadd231ps", vw(acc), fa, fb, w=(0,), r=(0, 1, 2))
        elif g in ctx.in_place:  # acc = acc op x, written into the accumulator after reading it
            v = ctx.in_place[g]
            gx, gy = v.srcs
            a, b = _binary(ctx, v, gx, gy, commutative=v.lanes[0].op is Ops.ADD)
            if v.lanes[0].op is Ops.ADD:
                ctx.ins("vaddps", vw(acc), a, b, w=(0,), r=(1, 2))
            else:
                _vmax(ctx, vw(acc), a, b, n)
        else:
            ctx.ins("vmovaps", vw(acc), vw(_vector(ctx, g.srcs[0])), w=(0,), r=(1,), kind=MOVE)
        return
    assert v0 is not None  # only "acc" groups have no lanes, and they are not emitted (their accstore is)
    if g.kind == "store":
        mem = dataclasses.replace(ctx.addrs[v0.src[0]], size=n)
        if ctx.partial(g):  # the masked-off lanes' memory is not touched (nor can it fault)
            ctx.ins("vmovups", mem, ctx.lane_mask(len(g.lanes)), vw(_vector(ctx, g.srcs[0])), r=(1, 2))
        else:
            ctx.ins("vmovups", mem, vw(_vector(ctx, g.srcs[0])), r=(1,))
        return
    if g.kind == "cmp":  # a mask: an opmask (zmm) or a vector of lanes
        ca, cb = (_vector(ctx, s) for s in g.srcs)
        ctx.vvals[g] = _vcmp(ctx, vw(ca), vw(cb), _VCMP[v0.op], n)
        return
    d = ctx.vvals[g] = ctx.vnew()
    if g.kind == "where":
        mask, x, y = (_vector(ctx, s) for s in g.srcs)
        _vblend(ctx, vw(d), mask, vw(y), vw(x), n)
    elif g.kind == "hreduce":
        del ctx.vvals[g]
        _hreduce(ctx, g)
    elif g.kind in ("bitcast", "alias") or g.kind == "convert" and not g.wrap:
        ctx.vvals[g] = _vector(ctx, g.srcs[0])
    elif g.kind == "convert" and (wide := _reload(ctx, g)) is not None:  # uint8 bytes as int8: sign-extended
        ctx.ins(_WIDEN[v0.dtype], vw(d), wide, w=(0,))
    elif g.kind == "convert":
        _wrap(ctx, d, _vector(ctx, g.srcs[0]), v0.dtype)
    elif g.kind == "gload":  # gated-off lanes are +0.0 and read nothing (nor fault: a border's column -1)
        ctx.ins("vmovups{z}", vw(d), _gate_mask(ctx, g), _gated_address(ctx, g), w=(0,), r=(1,))
    elif g.kind == "cast" and v0.dtype is dtypes.int32:
        _to_int32(ctx, d, vw(_vector(ctx, g.srcs[0])))
    elif g.kind == "cast":
        ctx.ins("vcvtdq2ps", vw(d), vw(_vector(ctx, g.srcs[0])), w=(0,), r=(1,))
    elif g.kind == "splat" and v0.op is Ops.LOAD and v0.dtype.itemsize == 4 and v0.src[0] in ctx.addrs and \
            v0.src[0] not in ctx.gates:
        last = max(ctx.pos[x] for x in ctx.users[v0])
        if bisect.bisect(ctx.barriers, ctx.pos[v0]) == bisect.bisect_left(ctx.barriers, last):
            # no store, loop start or end before its last reader: broadcast where it is first read, so a tile
            # of one-use row values does not hold them all at once (8 rows x 1 vector: 8 fewer live registers)
            del ctx.vvals[g]
            ctx.lazy[g] = ctx.addrs[v0.src[0]]
        else:
            ctx.ins("vbroadcastss", vw(d), ctx.addrs[v0.src[0]], w=(0,))  # from memory (the scalar load may die)
    elif g.kind == "splat" and v0.op is not Ops.CONST:
        # an int's general register holds it as its int32 lane: narrow ints sign- or zero-extended
        if v0.dtype in INT_LANES and n == 64:  # EVEX broadcasts from a general register
            ctx.ins("vpbroadcastd", vw(d), View(ctx.reg(v0), 4), w=(0,), r=(1,))
        elif v0.dtype in INT_LANES:
            t = VReg("vec", 16)
            ctx.ins("vmovd", t, View(ctx.reg(v0), 4), w=(0,), r=(1,))
            ctx.ins("vpbroadcastd", vw(d), t, w=(0,), r=(1,))
        else:
            ctx.ins("vbroadcastss", vw(d), ctx.reg(v0), w=(0,), r=(1,))
    elif g.kind in ("splat", "const"):
        blob = _const_blob(g, ctx.lanes)
        if blob == bytes(n):
            d.remat = ctx.ins("vxorps", vw(d), vw(d), vw(d), w=(0,))
        else:
            d.remat = ctx.ins("vmovups", vw(d), Mem(data=ctx.const_data(blob), size=n), w=(0,))
    elif g.kind == "load" and v0.dtype in NARROW:  # whole vectors only (slp.py)
        mem = dataclasses.replace(ctx.addrs[v0.src[0]], size=ctx.lanes * v0.dtype.itemsize)
        ctx.ins(_WIDEN[v0.dtype], vw(d), mem, w=(0,))
    elif g.kind == "load":
        mem = dataclasses.replace(ctx.addrs[v0.src[0]], size=n)
        if ctx.partial(g):  # lanes past the run are zero and read nothing
            ctx.ins("vmovups{z}", vw(d), ctx.lane_mask(len(g.lanes)), mem, w=(0,), r=(1,))
        else:
            ctx.ins("vmovups", vw(d), mem, w=(0,))
    elif g in ctx.contracted:  # d = a*b + c: d starts as a, then vfmadd213ps d, b, c (c may be in memory)
        m, c = ctx.contracted[g]
        ma, mb = m.srcs
        ctx.ins("vmovaps", vw(d), vw(_vector(ctx, ma)), w=(0,), r=(1,), kind=MOVE)
        ctx.ins("vfmadd213ps", vw(d), vw(_vector(ctx, mb)), _vsrc(ctx, c, g), w=(0,), r=(0, 1, 2))
    elif (op := v0.op) in (Ops.SHL, Ops.SHR):
        _int_shift(ctx, g, d)
    elif op in _VEC_BIN or op is Ops.MAX:
        gx, gy = g.srcs
        a, b = _binary(ctx, g, gx, gy, commutative=op in (Ops.ADD, Ops.MUL))
        if op is Ops.MAX:
            _vmax(ctx, vw(d), a, b, n)
        else:
            ints = _VEC_INT_EVEX if n == 64 else _VEC_INT
            ctx.ins((ints if v0.dtype in INT_LANES else _VEC_BIN)[op], vw(d), a, b, w=(0,), r=(1, 2))
    else:
        srcs = [_vector(ctx, s) for s in g.srcs]
        if v0.dtype in INT_LANES:
            ints = _VEC_INT_EVEX if n == 64 else _VEC_INT
            ctx.ins(ints[op], vw(d), vw(srcs[0]), vw(srcs[1]), w=(0,), r=(1, 2))
        else:  # MULACC
            ctx.ins("vmovaps", vw(d), vw(srcs[2]), w=(0,), r=(1,), kind=MOVE)
            ctx.ins("vfmadd231ps", vw(d), vw(srcs[0]), vw(srcs[1]), w=(0,), r=(0, 1, 2))
    if g.wrap and g.kind == "alu":
        _wrap(ctx, d, d, v0.dtype)


_FLAG_WRITERS = frozenset({"cmp", "test", "vucomiss", "vucomisd"})


def _reads_flags(op: str) -> bool:
    return op.startswith(("set", "cmov")) or op.startswith("j") and op != "jmp"


def eliminate_dead_code(insts: list[MInst]) -> list[MInst]:
    """Drop what computes values nobody reads (a compare a pattern already folded, a load of an unused value),
    then compares whose flags no instruction reads: rules select each uop where the program has it, even when
    a later rule folded it into its user."""
    uses: dict[VReg, int] = {}
    sites: dict[VReg, list[int]] = {}
    for i, ins in enumerate(insts):
        for v in ins.used_regs():
            if isinstance(v, VReg):
                uses[v] = uses.get(v, 0) + 1
        for v in ins.defined_regs():
            if isinstance(v, VReg):
                sites.setdefault(v, []).append(i)
    alive = [True] * len(insts)

    def dead(ins: MInst) -> bool:
        own = ins.used_regs()
        return ins.kind in ("normal", MOVE) and bool(ins.defined_regs()) and all(
            isinstance(v, VReg) and v.fixed is None and uses.get(v, 0) == own.count(v) for v in ins.defined_regs())

    def remove(i: int, work: list[int]) -> None:
        alive[i] = False
        for v in insts[i].used_regs():
            if isinstance(v, VReg):
                uses[v] -= 1
                work.extend(sites.get(v, ()))
    work = list(range(len(insts)))
    while work:
        while work:
            i = work.pop()
            if alive[i] and dead(insts[i]):
                remove(i, work)
        live = [i for i in range(len(insts)) if alive[i]]
        for k, i in enumerate(live):
            if insts[i].op in _FLAG_WRITERS:
                nxt = next((insts[j] for j in live[k + 1:] if insts[j].op in _FLAG_WRITERS or
                            _reads_flags(insts[j].op) or insts[j].kind not in ("normal", MOVE)), None)
                if nxt is None or not _reads_flags(nxt.op):
                    remove(i, work)
    return [ins for i, ins in enumerate(insts) if alive[i]]


def select(program: Program, isa: str = "avx2") -> tuple[MFunction, dict[bytes, str]]:
    """The program as machine instructions on virtual registers (ending in a return), and the constants
    (bytes -> data label) they read; vectors of the widest width `isa` has at which the program packs."""
    ctx = Selector(program, isa)
    for i, u in enumerate(program.uops):
        ctx.cur, ctx.at = ctx.buckets[i], i
        if u in ctx.folded_adds:
            continue  # folded into the displacement of the address that is its only user
        if u not in ctx.vskip:
            if isel_rules.rewrite(u, ctx) is None:
                raise NotImplementedError(f"the X86 renderer has no rule for {u.op.name} (in kernel {program.name})")
            if u.dtype is dtypes.float16 and u.op in _ROUNDED:
                ctx.round_half(ctx.vals[u], ctx.vals[u])
        for g in ctx.emit_at.get(u, ()):
            emit_group(ctx, g)
    pre = {ctx.pos[r]: p for r, p in ctx.preheaders.items()}
    flat = ctx.buckets[-1] + [ins for i, b in enumerate(ctx.buckets[:-1]) for ins in pre.get(i, []) + b]
    insts = eliminate_dead_code(flat)
    # a loop whose counter only counts (every index became a pointer) ends when a pointer reaches its end:
    # no counter increment per iteration
    drop: set[int] = set()
    swap: dict[int, MInst] = {}
    for counter, control, cmp, pointer_cmp in ctx.counted.values():
        own = {id(x) for x in (*control, cmp)}
        if not any(counter in x.used_regs() or counter in x.defined_regs() for x in insts if id(x) not in own):
            drop.update(id(x) for x in control)
            swap[id(cmp)] = pointer_cmp
    if swap:
        insts = eliminate_dead_code([swap.get(id(x), x) for x in flat if id(x) not in drop])
    if ctx.groups:  # no penalty for the caller's SSE code after our 256-bit instructions
        insts.append(MInst("vzeroupper"))
    insts.append(MInst("ret", kind=RET))
    return MFunction(program.name, insts, ctx.local_bytes), ctx.data
