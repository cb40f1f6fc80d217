"""LLVM IR text for linear programs: the renderer shared by the CPU (x86-64 host) and AMD (amdgcn) plugins.

A program becomes one function: buffers (PARAMs, by index) are `noalias` pointers, then the DEFINE_VARs
(by name) as ints. Loops are blocks with a phi (header, body, latch, exit), top-tested so an empty range
runs nothing. Accumulators (DEFINE_REG) are allocas in the entry block, which LLVM's mem2reg turns into
registers. Semantics are C's: signed/unsigned division and shifts by the dtype, float compares ordered
except `!=` (true for NaN), MAX propagates NaN (llvm.maximum), float -> bool is `x != 0`. Where C leaves
integer division undefined (by zero, MIN/-1) the result is alu.py's (0, MIN) rather than a trap or poison;
shifts arrive with amounts inside the width (core's pipeline, codegen/shifts.py), so `shl`/`ashr`/`lshr`
never make poison; a float -> int conversion converts 0 instead of a value the int cannot hold (NaN, inf,
out of range), so the result is alu.py's 0 rather than poison.

Vector values exist only where a hand-written kernel makes them: a LOAD of `base.vec(n)` from a scalar INDEX reads
n consecutive elements, VECTORIZE packs scalars, GEP takes lanes, and intrinsics take and give them (AMD's WMMA).
A LOAD whose arg is "nontemporal" carries `!nontemporal` (streamed data that should not stay in the caches).

Values are kept in their LLVM type (bool is i1) except in memory, where a bool is a byte. bfloat16 is
carried as its 16 raw bits (i16): every op on it runs in float32, and float32 -> bfloat16 rounds to
nearest even in integer code, so no target needs bfloat16 instructions or a runtime library.

Extending it for a target (the public API plugins build on; tg-amd and tg-cpu-x86 use nothing else):
- `LLVMRenderer` class attributes configure the module: `addrspaces` (GLOBAL/LOCAL/REG -> LLVM address
  space), `calling_convention`, `target_triple`, `data_layout`, `function_attributes` (or override
  `attributes(program)` when they depend on the kernel), `float_flags`/`reduce_flags` (fast-math flags),
  `special_intrinsics` (SPECIAL name -> the i32 intrinsic reading it, e.g. a GPU's workgroup id).
- `LLVMRenderer.intrinsics` maps a device intrinsic's name (the arg of a CUSTOM uop a hand-written kernel uses,
  e.g. AMD's "sudot4") to a function `(fn, u) -> result name` that renders it; a CUSTOM the table lacks is a
  NotImplementedError naming it and the ones the renderer knows.
- `LLVMRenderer.function_class` is the `LLVMFunction` subclass that renders one program. Its `handlers`
  table maps an op to the name of the method rendering it, so a subclass adds ops the shared renderer does
  not know (a GPU's DEFINE_LOCAL and BARRIER) by extending the table, and replaces how an op is rendered by
  overriding the method (`special`, `define_reg`, `index`, `load`, `store`, `range`, `end`, `cast_uop`,
  `bitcast`). Arithmetic goes through `alu` -> `float_alu` / `int_alu`: override `float_alu` to use a
  target's math instructions for some ops and dtypes, delegating the rest to the base.
- Inside a method, `names[u]` is the rendered value of a uop (set it for the uop being rendered), `ins`
  writes an instruction and returns its result, `stmt` one without a result, `call` calls a function it
  declares, `declare` adds a module-level line (a declaration or a global), `cast` converts a value between
  dtypes; `ltype` and `render_const` give a dtype's LLVM type and a constant's literal.
"""
from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping

from tg_core.codegen.program import Program, param_index
from tg_core.dtype import AddrSpace, ConstType, DType, PtrDType, as_const, dtypes
from tg_core.renderer import Renderer, UnsupportedDTypeError
from tg_core.uop.alu import bitcast_const, float_to_int_range
from tg_core.uop.ops import GroupOp, Ops
from tg_core.uop.uop import UOp

_LTYPE = {dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16",
          dtypes.int32: "i32", dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64",
          dtypes.float16: "half", dtypes.bfloat16: "i16", dtypes.float32: "float", dtypes.float64: "double"}
_INTRINSIC_SUFFIX = {dtypes.float16: "f16", dtypes.float32: "f32", dtypes.float64: "f64"}

_FLOAT_BINARY = {Ops.ADD: "fadd", Ops.SUB: "fsub", Ops.MUL: "fmul", Ops.FDIV: "fdiv"}
_INT_BINARY = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor",
               Ops.SHL: "shl"}
_INT_SIGNED = {Ops.IDIV: ("sdiv", "udiv"), Ops.MOD: ("srem", "urem"), Ops.SHR: ("ashr", "lshr")}
# ordered (false for NaN) except !=, which C makes true for NaN
_FCMP = {Ops.CMPLT: "olt", Ops.CMPNE: "une", Ops.CMPEQ: "oeq"}
_ICMP = {Ops.CMPLT: ("slt", "ult"), Ops.CMPNE: ("ne", "ne"), Ops.CMPEQ: ("eq", "eq")}
_INTRINSIC = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SQRT: "sqrt", Ops.SIN: "sin", Ops.TRUNC: "trunc",
              Ops.POW: "pow", Ops.MAX: "maximum"}


def ltype(dt: DType) -> str:
    """The LLVM type of a value of `dt`."""
    return _LTYPE[dt.scalar()]


def vtype(dt: DType) -> str:
    """The LLVM type of a value of `dt`, a vector `<n x T>` for a vector dtype."""
    return ltype(dt) if dt.count == 1 else f"<{dt.count} x {ltype(dt)}>"


def _memtype(dt: DType) -> str:
    return "i8" if dt is dtypes.bool else ltype(dt)


def _signed(dt: DType) -> bool:
    return dtypes.is_int(dt) and not dtypes.is_unsigned(dt)


def render_const(value: ConstType, dt: DType) -> str:
    """A constant as an LLVM literal: floats in hex, so every value (inf, NaN, -0.0) is exact."""
    if dt is dtypes.bool:
        return "true" if value else "false"
    if dt is dtypes.bfloat16:
        return str(_as_signed(int(bitcast_const(value, dt, dtypes.uint16)), 16))
    if dtypes.is_int(dt):
        return str(_as_signed(int(value), 8 * dt.itemsize))
    value = as_const(value, dt)  # on the dtype's grid, or LLVM rejects the literal
    if dt is dtypes.float16:
        return f"0xH{struct.unpack('<H', struct.pack('<e', value))[0]:04X}"
    # float and double literals are written as the double with the same value (exact for float's grid)
    return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"


def _as_signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


class LLVMFunction:
    """The state of rendering one program: SSA names, the current block, and the lines written. Targets
    subclass it (see the module docstring) and name the subclass in their renderer's `function_class`."""
    # op -> the method rendering it (by name, so a subclass's override of the method is the one called)
    handlers: dict[Ops, str] = {Ops.SPECIAL: "special", Ops.DEFINE_REG: "define_reg", Ops.INDEX: "index",
                                Ops.LOAD: "load", Ops.STORE: "store", Ops.RANGE: "range", Ops.END: "end",
                                Ops.CAST: "cast_uop", Ops.BITCAST: "bitcast", Ops.VECTORIZE: "vectorize",
                                Ops.GEP: "gep", Ops.CUSTOM: "intrinsic"}

    def __init__(self, renderer: LLVMRenderer, program: Program):
        self.r, self.prog = renderer, program
        self.names: dict[UOp, str] = {}
        self.gates: dict[UOp, str] = {}  # a gated INDEX -> its valid bit
        self.allocas: list[str] = []
        self.lines: list[str] = []
        self.declares: dict[str, None] = {}
        self.count = 0
        self.block = "entry"
        self.loops: dict[UOp, str] = {}
        self.reduce_ops = _reduction_updates(program.uops) if renderer.reduce_flags else set()
        self.open: list[UOp] = []  # the loops open where rendering is
        self.updates: dict[UOp, int] = {}  # loop -> accumulator updates directly inside it
        self.metadata: list[str] = []

    # ---- writing ---------------------------------------------------------------------------------------

    def tmp(self, prefix: str = "v") -> str:
        self.count += 1
        return f"%{prefix}{self.count}"

    def ins(self, text: str) -> str:
        """An instruction with a result; the result's name."""
        name = self.tmp()
        self.lines.append(f"  {name} = {text}")
        return name

    def stmt(self, text: str) -> None:
        self.lines.append(f"  {text}")

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.block = name

    def ptr(self, dt: DType) -> str:
        space = self.r.addrspaces[dt.addrspace] if isinstance(dt, PtrDType) else 0
        return "ptr" if space == 0 else f"ptr addrspace({space})"

    def declare(self, text: str) -> None:
        """A module-level line after the function (a declaration or a global), written once."""
        self.declares[text] = None

    def call(self, fn: str, ret: str, args: list[tuple[str, str]], flags: str = "") -> str:
        """A call of `fn` (declared as returning `ret`), its result's name."""
        self.declare(f"declare {ret} @{fn}({', '.join(t for t, _ in args)})")
        return self.ins(f"call{flags} {ret} @{fn}({', '.join(f'{t} {v}' for t, v in args)})")

    # ---- the function ----------------------------------------------------------------------------------

    def text(self) -> str:
        args = []
        by_index = {param_index(p): p for p in self.prog.params}
        for idx in range(max(by_index, default=-1) + 1):
            p = by_index.get(idx)
            if p is None:  # an argument the kernel never mentions still holds its place in the signature
                args.append(f"{self.ptr(dtypes.void.ptr())} %data{idx}")
                continue
            self.names[p] = f"%data{idx}"
            args.append(f"{self.ptr(p.dtype)} noalias %data{idx}" if isinstance(p.dtype, PtrDType)
                        else f"{ltype(p.dtype)} %data{idx}")
        for v in self.prog.variables:
            self.names[v] = "%var." + _ident(v.arg[0])  # the prefix keeps user names apart from temporaries
            args.append(f"{ltype(v.dtype)}{self._range(v)} {self.names[v]}")
        for u in self.prog.uops:
            self.render(u)
        head = [f"; kernel {self.prog.name}"]
        if self.r.data_layout:
            head.append(f'target datalayout = "{self.r.data_layout}"')
        if self.r.target_triple:
            head.append(f'target triple = "{self.r.target_triple}"')
        cc = f"{self.r.calling_convention} " if self.r.calling_convention else ""
        fn = self.r.function_name(self.prog)
        head.append(f"define {cc}void @{fn}({', '.join(args)}) {self.r.attributes(self.prog)} {{")
        return "\n".join(head + ["entry:"] + self.allocas + self.lines + ["  ret void", "}", *self.declares,
                                                                          *self.metadata]) + "\n"

    def _range(self, v: UOp) -> str:
        """With the renderer's `variable_ranges`, a variable's bounds as its parameter's `range` attribute: LLVM
        then knows that index arithmetic over it cannot wrap (a core's column offset, `core_id * 512`, left
        the SLP vectorizer unable to prove a tile's lanes consecutive)."""
        lo, hi = v.arg[1], v.arg[2]
        if not self.r.variable_ranges or not (isinstance(lo, int) and isinstance(hi, int)) or hi < lo:
            return ""
        if not dtypes.min(v.dtype) <= lo <= hi < dtypes.max(v.dtype):
            return ""
        t = ltype(v.dtype)
        return f" range({t} {lo}, {hi + 1})"

    def render(self, u: UOp) -> None:
        """Render one uop of the program, in order."""
        op = u.op
        if op in (Ops.PARAM, Ops.DEFINE_VAR, Ops.SINK, Ops.GROUP, Ops.NOOP):
            return
        if op is Ops.CONST:
            self.names[u] = render_const(u.arg, u.dtype)
        elif op is Ops.AFTER:
            self.names[u] = self.names[u.src[0]]
        elif op in self.handlers:
            getattr(self, self.handlers[op])(u)
        elif op in GroupOp.ALU:
            flags = self.r.reduce_flags if u in self.reduce_ops else ""
            self.names[u] = self.alu(u.op, u.dtype, [s.dtype for s in u.src], [self.names[s] for s in u.src], flags)
        else:
            raise NotImplementedError(f"the {self.r.name} renderer cannot render {op.name} "
                                      f"(in kernel {self.prog.name})")

    # ---- memory ----------------------------------------------------------------------------------------

    def special(self, u: UOp) -> None:
        if u.arg not in self.r.special_intrinsics:
            raise NotImplementedError(f"the {self.r.name} renderer has no intrinsic for SPECIAL {u.arg!r} "
                                      f"(in kernel {self.prog.name})")
        v = self.call(self.r.special_intrinsics[u.arg], "i32", [])
        self.names[u] = self.cast(dtypes.int32, u.dtype, v)

    def define_reg(self, u: UOp) -> None:
        name = f"%acc{u.arg}" if isinstance(u.arg, int) else self.tmp("acc")
        space = self.r.addrspaces[AddrSpace.REG]
        where = f", addrspace({space})" if space else ""
        self.allocas.append(f"  {name} = alloca [{u.ptrdtype.size} x {_memtype(u.dtype.base)}]{where}")
        self.names[u] = name

    def index(self, u: UOp) -> None:
        buf, idx = u.src[0], u.src[1]
        i = self.names[idx]
        it = ltype(idx.dtype)
        if len(u.src) == 3:
            # a gated access reads a safe address (element 0) instead of the one out of bounds
            valid = self.names[u.src[2]]
            self.gates[u] = valid
            i = self.ins(f"select i1 {valid}, {it} {i}, {it} 0")
        self.names[u] = self.ins(f"getelementptr inbounds {_memtype(u.dtype.base)}, {self.ptr(buf.dtype)} "
                                 f"{self.names[buf]}, {it} {i}")

    def metadata_node(self, node: str) -> str:
        """The name of the module-level metadata node `node` (e.g. `!{i32 1}`), added to the module once."""
        for line in self.metadata:
            if line.endswith(f" = {node}"):
                return line.split(" = ")[0]
        name = f"!{len(self.metadata)}"
        self.metadata.append(f"{name} = {node}")
        return name

    def nontemporal(self) -> str:
        """The metadata node `!{i32 1}` that `!nontemporal` names."""
        return self.metadata_node("!{i32 1}")

    def load(self, u: UOp) -> None:
        index, dt = u.src[0], u.dtype
        hint = f", !nontemporal {self.nontemporal()}" if u.arg == "nontemporal" else ""
        if dt.count > 1:  # n consecutive elements from the index on, aligned as one element is
            if dt.scalar() is dtypes.bool:
                raise NotImplementedError(f"the {self.r.name} renderer has no vector loads of bool "
                                          f"(in kernel {self.prog.name})")
            vt = vtype(dt)
            v = self.ins(f"load {vt}, {self.ptr(index.dtype)} {self.names[index]}, align {dt.scalar().itemsize}{hint}")
            if index in self.gates:
                alt = self.names[u.src[1]] if len(u.src) > 1 else "zeroinitializer"
                v = self.ins(f"select i1 {self.gates[index]}, {vt} {v}, {vt} {alt}")
            self.names[u] = v
            return
        v = self.ins(f"load {_memtype(dt)}, {self.ptr(index.dtype)} {self.names[index]}{hint}")
        if dt is dtypes.bool:
            v = self.ins(f"icmp ne i8 {v}, 0")
        if index in self.gates:
            alt = self.names[u.src[1]] if len(u.src) > 1 else render_const(False if dt is dtypes.bool else 0, dt)
            v = self.ins(f"select i1 {self.gates[index]}, {ltype(dt)} {v}, {ltype(dt)} {alt}")
        self.names[u] = v

    def store(self, u: UOp) -> None:
        index, value = u.src
        v = self.names[value]
        if value.dtype is dtypes.bool:
            v = self.ins(f"zext i1 {v} to i8")
        text = f"store {_memtype(value.dtype)} {v}, {self.ptr(index.dtype)} {self.names[index]}"
        if value in self.reduce_ops and self.open:
            self.updates[self.open[-1]] = self.updates.get(self.open[-1], 0) + 1
        if index not in self.gates:
            self.stmt(text)
            return
        do, done = self.tmp("store").lstrip("%"), self.tmp("stored").lstrip("%")
        self.stmt(f"br i1 {self.gates[index]}, label %{do}, label %{done}")
        self.label(do)
        self.stmt(text)
        self.stmt(f"br label %{done}")
        self.label(done)

    # ---- loops -----------------------------------------------------------------------------------------

    def range(self, u: UOp) -> None:
        loop = self.tmp("loop").lstrip("%")
        self.loops[u] = loop
        it, pre = ltype(u.dtype), self.block
        self.stmt(f"br label %{loop}")
        self.label(loop)
        r = f"%{loop}.i"
        self.stmt(f"{r} = phi {it} [0, %{pre}], [%{loop}.next, %{loop}.latch]")
        self.names[u] = r
        self.open.append(u)
        go = self.ins(f"icmp slt {it} {r}, {self.names[u.src[0]]}")
        self.stmt(f"br i1 {go}, label %{loop}.body, label %{loop}.exit")
        self.label(f"{loop}.body")

    def end(self, u: UOp) -> None:
        rng = u.src[-1]
        loop, it = self.loops[rng], ltype(rng.dtype)
        self.open.pop()
        self.stmt(f"br label %{loop}.latch")
        self.label(f"{loop}.latch")
        # i < end <= the type's maximum, so i + 1 cannot wrap: nsw lets LLVM widen the index to 64 bits
        self.stmt(f"%{loop}.next = add nsw {it} {self.names[rng]}, 1")
        # several accumulators updated in one loop are lanes codegen made (a register tile, an unrolled
        # reduction): the SLP vectorizer packs them into vectors. With reassoc the loop vectorizer would
        # instead widen each lane across iterations (strided loads, spills), so it is turned off there.
        md = ""
        if self.updates.get(rng, 0) > 1:
            n = len(self.metadata)
            self.metadata += [f"!{n} = distinct !{{!{n}, !{n + 1}}}",
                              f'!{n + 1} = !{{!"llvm.loop.vectorize.enable", i1 false}}']
            md = f", !llvm.loop !{n}"
        self.stmt(f"br label %{loop}{md}")
        self.label(f"{loop}.exit")

    # ---- vectors and intrinsics ----------------------------------------------------------------------------

    def vectorize(self, u: UOp) -> None:
        vt, et = vtype(u.dtype), ltype(u.dtype)
        v = "poison"
        for i, s in enumerate(u.src):
            v = self.ins(f"insertelement {vt} {v}, {et} {self.names[s]}, i32 {i}")
        self.names[u] = v

    def gep(self, u: UOp) -> None:
        src, lanes = u.src[0], u.arg
        if len(lanes) == 1:
            self.names[u] = self.ins(f"extractelement {vtype(src.dtype)} {self.names[src]}, i32 {lanes[0]}")
            return
        mask = ", ".join(f"i32 {i}" for i in lanes)
        self.names[u] = self.ins(f"shufflevector {vtype(src.dtype)} {self.names[src]}, {vtype(src.dtype)} poison, "
                                 f"<{len(lanes)} x i32> <{mask}>")

    def intrinsic(self, u: UOp) -> None:
        """A device intrinsic (CUSTOM, arg its name) from the renderer's `intrinsics` table."""
        fn = self.r.intrinsics.get(u.arg)
        if fn is None:
            known = ", ".join(sorted(self.r.intrinsics)) or "none"
            raise NotImplementedError(f"the {self.r.name} renderer for {self.r.device or 'this device'} has no intrinsic "
                                      f"{u.arg!r} (in kernel {self.prog.name}); it knows: {known}")
        self.names[u] = fn(self, u)

    # ---- values ----------------------------------------------------------------------------------------

    def alu(self, op: Ops, dt: DType, src_dts: list[DType], vals: list[str], extra_flags: str = "") -> str:
        """`op` on already rendered operands (float ops get `extra_flags` besides the renderer's
        float_flags); bfloat16 operands are computed in float32."""
        if op is not Ops.WHERE and dtypes.bfloat16 in src_dts:
            vals = [self.cast(s, dtypes.float32, v) if s is dtypes.bfloat16 else v for s, v in zip(src_dts, vals)]
            src_dts = [dtypes.float32 if s is dtypes.bfloat16 else s for s in src_dts]
            out = dtypes.float32 if dt is dtypes.bfloat16 else dt
            res = self.alu(op, out, src_dts, vals, extra_flags)
            return self.cast(dtypes.float32, dtypes.bfloat16, res) if dt is dtypes.bfloat16 else res
        if op in GroupOp.Comparison:
            a = src_dts[0]
            t = ltype(a)
            if dtypes.is_float(a):
                return self.ins(f"fcmp {_FCMP[op]} {t} {vals[0]}, {vals[1]}")
            return self.ins(f"icmp {_ICMP[op][0 if _signed(a) else 1]} {t} {vals[0]}, {vals[1]}")
        t = ltype(dt)
        if op is Ops.WHERE:
            return self.ins(f"select i1 {vals[0]}, {t} {vals[1]}, {t} {vals[2]}")
        if op is Ops.MULACC:
            prod = self.alu(Ops.MUL, dt, src_dts[:2], vals[:2])
            return self.alu(Ops.ADD, dt, [dt, dt], [prod, vals[2]])
        if dtypes.is_float(dt):
            return self.float_alu(op, dt, vals, extra_flags)
        return self.int_alu(op, dt, src_dts, vals)

    def float_alu(self, op: Ops, dt: DType, vals: list[str], extra_flags: str = "") -> str:
        t = ltype(dt)
        flags = " ".join(f for f in (self.r.float_flags, extra_flags) if f)
        flags = f" {flags}" if flags else ""
        if op in _FLOAT_BINARY:
            return self.ins(f"{_FLOAT_BINARY[op]}{flags} {t} {vals[0]}, {vals[1]}")
        if op is Ops.MAX:  # a call takes fast-math flags too (a vectorized max reduction needs them)
            return self.call(f"llvm.maximum.{_INTRINSIC_SUFFIX[dt]}", t, [(t, v) for v in vals], flags)
        if op is Ops.NEG:
            return self.ins(f"fneg {t} {vals[0]}")
        if op is Ops.RECIPROCAL:
            return self.ins(f"fdiv {t} {render_const(1.0, dt)}, {vals[0]}")
        if op in _INTRINSIC:
            return self.call(f"llvm.{_INTRINSIC[op]}.{_INTRINSIC_SUFFIX[dt]}", t, [(t, v) for v in vals])
        raise NotImplementedError(f"the {self.r.name} renderer has no {op.name} for {dt!r}")

    def int_alu(self, op: Ops, dt: DType, src_dts: list[DType], vals: list[str]) -> str:
        t, signed = ltype(dt), _signed(dt)
        if op in (Ops.SHL, Ops.SHR) and ltype(src_dts[1]) != t:
            vals = [vals[0], self.cast(src_dts[1], dt, vals[1])]  # LLVM shifts need one type
        if op is Ops.ADD and dt is dtypes.bool:
            op = Ops.OR  # a bool sum saturates at True (alu.py), where i1 add would wrap
        if op in _INT_BINARY:
            return self.ins(f"{_INT_BINARY[op]} {t} {vals[0]}, {vals[1]}")
        if op in (Ops.IDIV, Ops.MOD):
            return self.safe_divide(op, dt, vals[0], vals[1])
        if op in _INT_SIGNED:
            return self.ins(f"{_INT_SIGNED[op][0 if signed else 1]} {t} {vals[0]}, {vals[1]}")
        if op is Ops.NEG:
            return self.ins(f"xor i1 {vals[0]}, true" if dt is dtypes.bool else f"sub {t} 0, {vals[0]}")
        if op is Ops.TRUNC:
            return vals[0]
        if op is Ops.MAX:
            if dt is dtypes.bool:
                return self.ins(f"or i1 {vals[0]}, {vals[1]}")
            gt = self.ins(f"icmp {'sgt' if signed else 'ugt'} {t} {vals[0]}, {vals[1]}")
            return self.ins(f"select i1 {gt}, {t} {vals[0]}, {t} {vals[1]}")
        raise NotImplementedError(f"the {self.r.name} renderer has no {op.name} for {dt!r}")

    def safe_divide(self, op: Ops, dt: DType, a: str, b: str) -> str:
        """Division: x/0 is 0 (and x%0 is 0) and MIN/-1 wraps to MIN, as alu.py and the reference device
        define them, instead of the trap x86 raises; both are UB in LLVM, which may then drop the code
        around them. A constant divisor is decided here, a value is tested at run time."""
        t, signed = ltype(dt), _signed(dt)
        if not b.startswith("%"):  # a literal: render_const wrote it as a signed decimal
            c = int(b)
            if c == 0:
                return "0"
            if c == -1 and signed:
                return self.ins(f"sub {t} 0, {a}") if op is Ops.IDIV else "0"
            return self.ins(f"{_INT_SIGNED[op][0 if signed else 1]} {t} {a}, {b}")
        zero = self.ins(f"icmp eq {t} {b}, 0")
        safe = self.ins(f"select i1 {zero}, {t} 1, {t} {b}")
        minus_one = None
        if signed:
            minus_one = self.ins(f"icmp eq {t} {b}, -1")
            safe = self.ins(f"select i1 {minus_one}, {t} 1, {t} {safe}")
        res = self.ins(f"{_INT_SIGNED[op][0 if signed else 1]} {t} {a}, {safe}")
        if minus_one is not None:
            flipped = self.ins(f"sub {t} 0, {a}") if op is Ops.IDIV else "0"
            res = self.ins(f"select i1 {minus_one}, {t} {flipped}, {t} {res}")
        return self.ins(f"select i1 {zero}, {t} 0, {t} {res}")

    def cast_uop(self, u: UOp) -> None:
        self.names[u] = self.cast(u.src[0].dtype, u.dtype, self.names[u.src[0]])

    def cast(self, src: DType, dst: DType, v: str) -> str:
        """A value converted as C converts (float -> int truncates, -> bool is != 0)."""
        if src is dst:
            return v
        if src is dtypes.bfloat16:
            bits = self.ins(f"zext i16 {v} to i32")
            v = self.ins(f"bitcast i32 {self.ins(f'shl i32 {bits}, 16')} to float")
            return self.cast(dtypes.float32, dst, v)
        if dst in (dtypes.float16, dtypes.bfloat16) and src not in (dtypes.float16, dtypes.float32):
            # a double (or an int, exact in a double up to 2**53, and beyond that past the 16-bit formats'
            # range anyway) goes through float32 rounded to odd, which makes the second rounding exact, and
            # needs no runtime library call (x86 has no double -> half instruction)
            v, src = self._to_float_odd(self.cast(src, dtypes.float64, v)), dtypes.float32
        if dst is dtypes.bfloat16:
            return self._round_bf16(self.cast(src, dtypes.float32, v))
        ts, td = ltype(src), ltype(dst)
        if dst is dtypes.bool:
            return self.ins(f"fcmp une {ts} {v}, 0.0" if dtypes.is_float(src) else f"icmp ne {ts} {v}, 0")
        if src is dtypes.bool:
            return self.ins(f"{'uitofp' if dtypes.is_float(dst) else 'zext'} i1 {v} to {td}")
        if dtypes.is_float(src) and dtypes.is_float(dst):
            return self.ins(f"{'fpext' if dst.itemsize > src.itemsize else 'fptrunc'} {ts} {v} to {td}")
        if dtypes.is_float(src):
            # out of range (NaN and inf too) fptosi/fptoui is poison: alu.py's 0 is converted instead
            lo, hi = float_to_int_range(src, dst)
            wide = dtypes.float64 if src is dtypes.float64 else dtypes.float32  # the bounds are exact there
            w, tw = self.cast(src, wide, v), ltype(wide)
            above = self.ins(f"fcmp ogt {tw} {w}, {render_const(lo, wide)}")
            below = self.ins(f"fcmp olt {tw} {w}, {render_const(hi, wide)}")
            inside = self.ins(f"and i1 {above}, {below}")
            v = self.ins(f"select i1 {inside}, {ts} {v}, {ts} {render_const(0.0, src)}")
            return self.ins(f"{'fptosi' if _signed(dst) else 'fptoui'} {ts} {v} to {td}")
        if dtypes.is_float(dst):
            return self.ins(f"{'sitofp' if _signed(src) else 'uitofp'} {ts} {v} to {td}")
        if dst.itemsize == src.itemsize:
            return v
        if dst.itemsize < src.itemsize:
            return self.ins(f"trunc {ts} {v} to {td}")
        return self.ins(f"{'sext' if _signed(src) else 'zext'} {ts} {v} to {td}")

    def _to_float_odd(self, d: str) -> str:
        """double -> float32 rounded to odd: truncated toward zero, the last bit set when inexact."""
        f = self.ins(f"fptrunc double {d} to float")
        back = self.ins(f"fpext float {f} to double")
        inexact = self.ins(f"fcmp one double {back}, {d}")  # false for NaN: a NaN passes through
        bits = self.ins(f"bitcast float {f} to i32")
        up = self.ins(f"fcmp ogt double {self.call('llvm.fabs.f64', 'double', [('double', back)])}, "
                      f"{self.call('llvm.fabs.f64', 'double', [('double', d)])}")
        down = self.ins(f"sub i32 {bits}, {self.ins(f'zext i1 {up} to i32')}")
        odd = self.ins(f"select i1 {inexact}, i32 {self.ins(f'or i32 {down}, 1')}, i32 {bits}")
        return self.ins(f"bitcast i32 {odd} to float")

    def _round_bf16(self, f: str) -> str:
        """float32 -> bfloat16 bits, rounding to nearest even; a NaN stays a (quiet) NaN."""
        bits = self.ins(f"bitcast float {f} to i32")
        high = self.ins(f"lshr i32 {bits}, 16")
        odd = self.ins(f"and i32 {high}, 1")
        rounded = self.ins(f"add i32 {self.ins(f'add i32 {bits}, 32767')}, {odd}")
        value = self.ins(f"trunc i32 {self.ins(f'lshr i32 {rounded}, 16')} to i16")
        nan = self.ins(f"or i16 {self.ins(f'trunc i32 {high} to i16')}, 64")
        return self.ins(f"select i1 {self.ins(f'fcmp uno float {f}, 0.0')}, i16 {nan}, i16 {value}")

    def bitcast(self, u: UOp) -> None:
        src, dst, v = u.src[0].dtype, u.dtype, self.names[u.src[0]]
        ts, td = ltype(src), ltype(dst)
        if ts == td:
            self.names[u] = v
        elif src is dtypes.bool or dst is dtypes.bool:  # a bool is one byte in memory: its bits are 0 or 1
            self.names[u] = self.ins(f"zext i1 {v} to {td}" if src is dtypes.bool else f"trunc {ts} {v} to i1")
        else:
            self.names[u] = self.ins(f"bitcast {ts} {v} to {td}")


def _reduction_updates(uops: tuple[UOp, ...]) -> set[UOp]:
    """The combines of reductions' accumulator updates: the value of a STORE into a DEFINE_REG that is an op
    on a LOAD of the same accumulator (`acc = acc op x`, as reduce.py lowers a REDUCE)."""
    def reg_of(index: UOp) -> UOp | None:
        base = index.src[0] if index.op is Ops.INDEX else None
        while base is not None and base.op is Ops.AFTER:
            base = base.src[0]
        return base if base is not None and base.op is Ops.DEFINE_REG else None
    out = set()
    for u in uops:
        if u.op is Ops.STORE and (reg := reg_of(u.src[0])) is not None and u.src[1].op in (Ops.ADD, Ops.MUL, Ops.MAX):
            if any(s.op is Ops.LOAD and reg_of(s.src[0]) is reg for s in u.src[1].src):
                out.add(u.src[1])
    return out


class LLVMRenderer(Renderer):
    """LLVM IR text for any LLVM target; subclasses set the target's address spaces and conventions."""
    name = "LLVM"
    supported_dtypes = frozenset({dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32,
                                  dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16,
                                  dtypes.float32, dtypes.float64})
    addrspaces: dict[AddrSpace, int] = {AddrSpace.GLOBAL: 0, AddrSpace.LOCAL: 0, AddrSpace.REG: 0}
    calling_convention: str = ""  # e.g. "amdgpu_kernel"
    target_triple: str | None = None
    data_layout: str | None = None
    function_attributes: str = "nounwind"
    # fast-math flags on float arithmetic, e.g. "contract" to let LLVM fuse a multiply and an add into an FMA;
    # empty (strict IEEE, results as the reference device computes them) unless a device opts in
    float_flags: str = ""
    # extra fast-math flags on the combine of a reduction's accumulator update only, e.g. "reassoc": a
    # reduction's order is unspecified, so LLVM may split it into vector accumulators (the loop vectorizer
    # needs reassoc for that) without reassociating any other float arithmetic of the kernel
    reduce_flags: str = ""
    # variables' bounds (DEFINE_VAR min/max) as their parameters' `range` attributes (LLVM 19 and later)
    variable_ranges: bool = False
    # SPECIAL name -> the intrinsic (no arguments, i32 result) that reads it, e.g. a GPU's workgroup id
    special_intrinsics: dict[str, str] = {}
    # CUSTOM name -> the function rendering that device intrinsic: (LLVMFunction, uop) -> the result's name
    intrinsics: Mapping[str, Callable[[LLVMFunction, UOp], str]] = {}
    # the class rendering one program: LLVMFunction, or a target's subclass of it
    function_class: type[LLVMFunction] = LLVMFunction

    def check_dtypes(self, program: Program) -> None:
        """As the base's, but vectors of supported scalars are fine (hand-written kernels' vector values)."""
        for u in program.uops:
            dt = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype
            if dt is not dtypes.void and dt.scalar() not in self.supported_dtypes:
                raise UnsupportedDTypeError(f"the {self.name} renderer does not support {dt!r} "
                                            f"(needed by {u.op.name} in kernel {program.name})")

    def render(self, program: Program) -> str:
        self.check_dtypes(program)
        return self.function_class(self, program).text()

    def attributes(self, program: Program) -> str:
        """The attributes of `program`'s function: `function_attributes`, unless a target derives them from
        the kernel (AMD: its workgroup size)."""
        return self.function_attributes

    @staticmethod
    def function_name(program: Program) -> str:
        """The symbol of the program's function in the rendered module (what a loader looks up)."""
        return _ident(program.name)


def _ident(name: str) -> str:
    """A name usable as an LLVM identifier as is."""
    out = re.sub(r"[^A-Za-z0-9_.]", "_", name)
    return out if out and not out[0].isdigit() else "_" + out
