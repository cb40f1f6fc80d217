"""X86Renderer: a linear program -> x86-64 machine code, with no external assembler.

Pipeline: instruction selection (isel.py: rewrite rules, virtual registers) -> linear-scan register
allocation (tg_core.codegen.lib.regalloc with the System V description in abi.py: spill code, callee-saved
saves, the frame) -> the encoder (encode.py's Assembler: bytes, and the text `asm_str` shows). The code
is a C function `void kernel(void *buf0, ..., int/long var0, ...)` with its entry at offset 0 and its
constants after it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from tg_core.plugin_api import (
    LABEL,
    Allocation,
    AxisType,
    CPUTarget,
    Imm,
    Label,
    Mem,
    MInst,
    Operand,
    Ops,
    Opt,
    OptOps,
    PatternMatcher,
    PReg,
    Program,
    Renderer,
    UOp,
    View,
    allocate,
    apply_opts,
    core_axis,
    cpu_opts,
    dtypes,
    kernel_ranges,
    linearize_kernel,
    tile_rows_for,
)
from tg_cpu_x86.caches import host_caches
from tg_cpu_x86.x86 import isa as _isa
from tg_cpu_x86.x86 import operands as x86
from tg_cpu_x86.x86.abi import X86Arch
from tg_cpu_x86.x86.encode import Assembler
from tg_cpu_x86.x86.isel import SUPPORTED, select
from tg_cpu_x86.x86.slp import Group, buffer_of, users_of, widest_plan


def _decompositions() -> PatternMatcher | None:
    """Core's polynomial EXP2/LOG2/SIN/POW rules (x86 has no such instructions), when this tg-core has them."""
    try:
        from tg_core.plugin_api import decomp
    except ImportError:
        return None
    return decomp


def _operand(o: Operand) -> x86.Operand:
    if isinstance(o, PReg):
        if o.cls == "mask":
            return x86.kreg(o.num)
        return x86.gpr(o.num, 8) if o.cls == "gpr" else x86.vreg(o.num, 16)
    if isinstance(o, View):
        r = o.reg
        assert isinstance(r, PReg)
        return x86.gpr(r.num, o.size) if r.cls == "gpr" else x86.vreg(r.num, o.size if o.size in (32, 64) else 16)
    if isinstance(o, Mem):
        if o.data is not None:
            return x86.Mem(x86.reg("rip"), disp=x86.Label(o.data), size=o.size, bcst=o.bcst)
        base = x86.gpr(o.base.num, 8) if isinstance(o.base, PReg) else None
        index = x86.gpr(o.index.num, 8) if isinstance(o.index, PReg) else None
        return x86.Mem(base, index, o.scale, o.disp, o.size, o.bcst)
    if isinstance(o, Imm):
        return x86.Imm(o.value, o.size)
    if isinstance(o, Label):
        return x86.Label(o.name)
    raise TypeError(f"X86: operand {o!r} was not allocated to a physical register")


def _users(uops: tuple[UOp, ...]) -> dict[UOp, list[UOp]]:
    return users_of(uops)  # made once per program: the selector reads the same map


@dataclass
class X86Kernel:
    """A compiled kernel: its machine code and what produced it."""
    code: bytes
    assembler: Assembler
    allocation: Allocation

    def asm_str(self) -> str:
        return self.assembler.asm_str()


def assemble(insts: list[MInst], data: dict[bytes, str]) -> Assembler:
    asm = Assembler()
    for ins in insts:
        if ins.kind == LABEL:
            assert ins.target is not None, "a LABEL instruction names its label"
            asm.label(ins.target)
        else:
            asm.emit(ins.op, *(_operand(o) for o in ins.operands))
    for blob, name in data.items():
        asm.data(name, blob, align=64 if len(blob) >= 64 else 16)  # a zmm constant within one cache line
    return asm


# Lanes are scalar registers here (no vector instructions yet): 4 lanes on contiguous axes (separate
# accumulators for reductions), and matmul register tiles of 3 rows x 4 columns, whose 12 accumulators, 3 row
# values and a column value fill the 16 xmm registers; no packed panels (they need indexed register arrays)
_LANES = CPUTarget(vector_bytes=16, auto_vectorize=False, pack=False)
_TILE = CPUTarget(vector_bytes=8, tile_rows=3, auto_vectorize=False, pack=False)
_HEAVY = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW})
# ymm lanes: 8 float32 lanes on the contiguous axis, matmul tiles of 4 rows x 16 columns (8 ymm accumulators)
# reading B from packed panels (stack arrays); one-vector panels (_NARROW) where the columns are a multiple of
# one vector but not of two
# A quantized matmul (a weight decoded from bytes, no panels) upcasts 4 rows of its other operand: each decoded
# vector serves 4 rows' accumulators (prefill's tokens); where that does not pack, the kernel is tried without
_VECTOR = CPUTarget(vector_bytes=32, tile_rows=4, auto_vectorize=False, pack=True, quant_rows=4)
_NARROW = CPUTarget(vector_bytes=16, tile_rows=8, auto_vectorize=False, pack=True)
# zmm lanes (AVX-512): 16 float32 lanes, matmul tiles of 8 rows x 32 columns (16 zmm accumulators of 32 registers;
# tile_rows_for), 9-15 columns as one masked zmm of 16 rows; a quantized matmul upcasts 8 rows of its other
# operand (a Q4_1 block's 2 vectors x 8 rows: 16 accumulators of the 32 registers; prefill's 32-token Q4_1
# projections 0.7-0.8x the time of 4 rows, one core)
_VECTOR512 = CPUTarget(vector_bytes=64, tile_rows=tile_rows_for(64), auto_vectorize=False, pack=True, quant_rows=8,
                       masked=True)
_NARROW512 = CPUTarget(vector_bytes=32, tile_rows=8, auto_vectorize=False, pack=True)
# per ISA, widest first: (lanes of a vector, tile target, one-vector-panel target); a kernel that does not pack
# at 16 lanes (its columns a multiple of 8 only) is tried at 8
_TARGETS = {"avx512": ((16, _VECTOR512, _NARROW512), (8, _VECTOR, _NARROW)), "avx2": ((8, _VECTOR, _NARROW),)}
# what a kernel may contain to be tried with vector lanes (slp.py decides whether it really packs)
_VECTOR_OPS = frozenset({Ops.SINK, Ops.PARAM, Ops.DEFINE_VAR, Ops.CONST, Ops.RANGE, Ops.END, Ops.INDEX, Ops.LOAD,
                         Ops.STORE, Ops.REDUCE, Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.MULACC, Ops.GROUP,
                         Ops.AFTER, Ops.NOOP, Ops.WHERE, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.EXP2, Ops.LOG2, Ops.SQRT,
                         Ops.RECIPROCAL, Ops.CAST, Ops.BITCAST, Ops.SHL, Ops.SHR, Ops.AND, Ops.OR, Ops.XOR})
# what a kernel may load to be tried with vector lanes: float32, and the ints slp.py widens into int32 lanes (a
# quantized weight's bytes, dequantized in the kernel that reads them); stores stay float32
_VECTOR_LOADS = frozenset({dtypes.float32, dtypes.int32, dtypes.uint8, dtypes.int8, dtypes.uint16, dtypes.int16})
# integer index math a vector kernel may contain besides, computed in scalar code (slp.py packs no lane of it): a
# weight's block fields (Q4_K's 6-bit scales cut from 12 bytes by divisions), and the row bounds of a kernel split
# across cores by a symbolic count (`(c+1)*n//k`: attention's scores over start_pos+1 keys were scalar code)
_BLOCK_OPS = frozenset({Ops.IDIV, Ops.MOD})
# what padded (gated) loads add, tried only where AVX-512's masked loads can vectorize them: their gates' bool
# AND/OR and the `% size` the scheduler leaves on their element (slp.gated_index)
_GATED_OPS = frozenset({Ops.AND, Ops.OR, Ops.MOD})


def _copy_lanes(ast: UOp, opts: list[Opt]) -> list[Opt]:
    """The panel copy's column loop as lanes too (LLVM's loop vectorizer widens it; slp.py only packs lanes):
    each panel row is copied by vector loads and stores instead of one float at a time."""
    packed = apply_opts(ast, opts)
    copies = [u.src[0] for u in packed.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX
              and buffer_of(u.src[0]).op is Ops.DEFINE_REG and buffer_of(u.src[0]).ptrdtype.size > 1]
    width = opts[0].amt
    loops = kernel_ranges(packed, AxisType.LOOP)
    cols = [r for r in loops if r.src[0].op is Ops.CONST and r.src[0].arg == width and
            any(r in c.src[1].ranges for c in copies)]
    return [Opt(OptOps.UPCAST, loops.index(cols[0]), width)] if len(cols) == 1 else []


def _worth_it(prog: Program, groups: list[Group]) -> bool:
    """Whether a vector plan is the program's: some group, and the accumulators' updates among them where the
    program has accumulators (a matmul whose padded last panel gates the tile's stores packs only its panel
    copy, with masked loads; the next, narrower target vectorizes the tile itself)."""
    accs = any(u.op is Ops.DEFINE_REG and u.ptrdtype.size == 1 for u in prog.uops)
    return bool(groups) and (not accs or any(g.kind == "accstore" for g in groups))


class _VectorISA:
    """X86Renderer.vector_isa: the instance's ISA, or on the class (what tg bench reads from a device's renderer
    class) the one a renderer built now would use (TG_X86_ISA against the host)."""

    def __get__(self, obj: X86Renderer | None, cls: type | None = None) -> str:
        return obj.isa if obj is not None else _isa.resolve()


class X86Renderer(Renderer):
    """Native x86-64 code for the CPU device (DEV=CPU:X86): AVX-512 (zmm, 16 float32 lanes) or AVX2 (ymm, 8)
    vectors, chosen by `isa` (default: TG_X86_ISA, else auto: the widest the host runs; see isa.py). With
    `emit_only` the code need not run here (tests check AVX-512 encodings on AVX2 hosts); otherwise an ISA the
    host lacks is an isa.UnsupportedISAError."""
    name = "X86"
    device = "CPU"
    supported_dtypes = SUPPORTED
    vector_isa = _VectorISA()

    def __init__(self, isa: str | None = None, emit_only: bool = False):
        self.isa = _isa.resolve(isa)
        self.emit_only = emit_only
        if not emit_only:
            _isa.check_runnable(self.isa)

    def program(self, ast: UOp, opts: Sequence[Opt] | None = None) -> Program:
        """With the renderer's own opts: vector lanes where the kernel packs into vectors whole (slp.py), the
        widest of the ISA's first, else the scalar lanes of opts_for."""
        if opts is None:
            for lanes, tile, narrow in _TARGETS[self.isa]:
                tried: list[list[Opt]] = []
                for target in (tile, dataclasses.replace(tile, quant_rows=0)):
                    # K blocks (a deep K) sized from the host's L2, tile rows limited by its L1's sets
                    c = host_caches()
                    target, narrow = (dataclasses.replace(t, l2_bytes=c.l2, l1_bytes=c.l1, l1_ways=c.l1_ways)
                                      for t in (target, narrow))
                    vector = self._vector_opts(ast, lanes, target, narrow, gated=lanes == 16)
                    if not vector or vector in tried:
                        continue
                    tried.append(vector)
                    prog = linearize_kernel(ast, self.lower_reduce, vector, self.extra_matcher)
                    if _worth_it(prog, widest_plan(prog.uops, _users(prog.uops), (lanes, 8) if lanes > 8 else (8,))[2]):
                        return prog
        return super().program(ast, opts)

    @staticmethod
    def _vector_opts(ast: UOp, lanes: int = 8, tile: CPUTarget = _VECTOR, narrow: CPUTarget = _NARROW,
                     gated: bool = False) -> list[Opt]:
        """The vector lanes' opts for `ast` at `lanes`; with `gated` (16 lanes: opmasks) kernels with padded
        loads too (conv2d), whose gated loads slp.py packs into masked loads."""
        nodes = ast.toposort()
        gated = gated and any(u.op is Ops.INDEX and len(u.src) > 2 for u in nodes)
        ints = any(u.op is Ops.LOAD and u.dtype.itemsize < 4 for u in nodes)
        allowed = _VECTOR_OPS | _BLOCK_OPS | (_GATED_OPS if gated else frozenset())
        if any(u.op not in allowed or u.op is Ops.STORE and u.src[0].dtype.base is not dtypes.float32
               or u.op is Ops.LOAD and u.src[0].dtype.base not in _VECTOR_LOADS
               or u.op is Ops.INDEX and len(u.src) > 2 and not gated and not (ints and u.dtype.base.itemsize < 4)
               for u in nodes):
            return []
        opts = cpu_opts(ast, tile)
        if opts and opts[0].op is OptOps.PACK:
            cols = kernel_ranges(ast, AxisType.LOOP)[opts[0].axis].src[0]
            if cols.op is Ops.CONST and cols.arg % opts[0].amt and not cols.arg % lanes:
                # a padded last panel gates the copy and the stores (no vector forms here): one-vector panels
                # that divide the columns, twice the rows (1000 columns: 8 x 125 panels)
                opts = cpu_opts(ast, narrow)
            return opts + _copy_lanes(ast, opts) if opts and opts[0].op is OptOps.PACK else opts
        return opts

    def core_axis(self, ast: UOp, cores: int) -> UOp | None:
        """The axis the device splits `ast` across cores by (None: its outermost): a packed matmul's columns,
        when every core gets whole panels (heuristic.core_axis)."""
        return core_axis(ast, _TARGETS[self.isa][0][1], cores)

    def opts_for(self, ast: UOp) -> list[Opt]:
        """Register tiles for matmul-like kernels; otherwise scalar lanes only where they split a short chain
        (a reduction's accumulators, a column reduction's), not for elementwise work (an out-of-order core
        already overlaps its iterations; lanes only cost compile time) nor around transcendentals, whose lanes
        add register pressure and code (measured: softmax 2.7x slower, and 4x longer to compile, with them)."""
        opts = cpu_opts(ast, _LANES)
        if sum(o.op is OptOps.UPCAST for o in opts) == 2:  # a register tile: size it for scalar accumulators
            return cpu_opts(ast, _TILE)
        nodes = ast.toposort()
        if any(u.op in _HEAVY for u in nodes) or not any(u.op is Ops.REDUCE for u in nodes):
            return []
        # separate accumulators for contiguous reductions; a lone UPCAST is a column reduction's accumulators
        return [o for o in opts if o.op is OptOps.UNROLL] or opts

    @property
    def extra_matcher(self) -> PatternMatcher | None:  # type: ignore[override]  # imported when first needed
        return _decompositions()

    def compile(self, program: Program) -> X86Kernel:
        self.check_dtypes(program)
        fn, data = select(program, self.isa)
        alloc = allocate(fn, X86Arch(frame_pointer=fn.local_bytes > 0))
        asm = assemble(alloc.insts, data)
        return X86Kernel(asm.assemble(), asm, alloc)

    def render(self, program: Program) -> bytes:  # type: ignore[override]  # machine code, not text
        return self.compile(program).code

    def asm_str(self, program: Program) -> str:
        """The kernel's instructions in Intel syntax (as capstone prints them), one per line."""
        return self.compile(program).asm_str()
