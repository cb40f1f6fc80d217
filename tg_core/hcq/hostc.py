"""The host program compiled: host statements (ops.py) as one LLVM IR function, run by a CPU device's loader.

`compile_host(stmts, ...)` renders the per-run statements of a linked batch into

    i32 tg_host(u64 *args, u64 *state, i32 resume)

`args` is the per-run argument table (the input addresses, then the variables' values, one u64 each: what a
replay writes); every other memory the statements touch is linked memory at an absolute host address (the host
views' addresses, fixed at link), so the function is loads, stores, integer arithmetic and compares. It is core's
LLVM renderer (renderer/llvmir.py: `alu`, `cast` and the constants are its, so arithmetic is C's as a kernel's
is) extended by `HostFunction` with the host statements.

What must stay in Python is where the function returns: a host wait not satisfied yet returns its exit number
(the value waited for in `state[0]`); Python waits (`host.wait_until`: the timeout, the device's fault check)
and calls again with `resume` = that number, which jumps to the statement after the wait. Values computed before
a wait and used after it are kept in `state` (a LOAD is evaluated once per run, as the interpreter does). A
computed offset outside its buffer returns an error exit (the offset in `state[0]`) that Python raises as the
interpreter does. Doorbells are stored by the function; the `ring(queue)` that wakes a software queue is Python,
called for the doorbells written before each return. All memory accesses are volatile (another thread, the
queue, reads them; their order is the statements' order) and unaligned (`align 1`: ring offsets are computed).

The capability is the device's: `Compiled.compile_host_function(render, name)` (tg_core/device.py), which the CPU
device implements; `host_compiler()` finds it through `Device["CPU"]`. Without one, core interprets (host.py).
"""
from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tg_core.codegen.program import Program
from tg_core.dtype import DType, dtypes
from tg_core.hcq.host import wait_until
from tg_core.helpers import ContextVar
from tg_core.renderer.llvmir import LLVMFunction, LLVMRenderer, ltype, render_const
from tg_core.uop.ops import GroupOp, Ops
from tg_core.uop.uop import UOp

# 1: compile the host programs of batches linked for replay when a device offers it; 0: always interpret
TG_HCQ_COMPILE = ContextVar("TG_HCQ_COMPILE", 1)

FUNCTION = "tg_host"
_HOST_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)
_U64 = (1 << 64) - 1


@dataclass(frozen=True)
class Exit:
    """Where the function returns before its end: a wait (`cell` its u64, `what` for the timeout error, `waiter`
    the device's (check, describe)) or an out-of-bounds error (`error`: the message, '{o}' the offset);
    `bells` doorbells were written before it."""
    bells: int
    cell: np.ndarray | None = None
    label: str = ""
    waiter: tuple[Any, Any] = (None, None)
    error: str = ""


def _host(t: DType) -> DType:
    """The dtype a host value is computed in: weakint (a launch dim over a kernel's variables, as symbolic shapes
    make) in int64, every other dtype as it is."""
    return dtypes.int64 if t is dtypes.weakint else t


def _mem(t: DType) -> str:
    return "i8" if t is dtypes.bool else ltype(_host(t))


class HostFunction(LLVMFunction):
    """Renders host statements (not a kernel): see the module docstring. `spill` are the values a later segment
    reloads from `state` (found by a first rendering)."""

    def __init__(self, renderer: LLVMRenderer, stmts: list[UOp], address_of: Callable[[UOp], tuple[int, int]],
                 table: UOp | None, ninputs: int, var_names: list[str], waiter: Callable[[tuple], Any] | None,
                 spill: set[UOp]):
        super().__init__(renderer, Program(FUNCTION, (), (), ()))
        self.stmts, self.address_of, self.table, self.ninputs = stmts, address_of, table, ninputs
        self.arg_slots = {n: ninputs + j for j, n in enumerate(var_names)}  # the variables after the inputs
        self.waiter, self.spill = waiter, spill
        self.reloaded: set[UOp] = set()   # values reloaded from state (the next rendering's `spill`)
        self.src = ""
        self.slots: dict[UOp, int] = {}   # spilled value -> its state slot (slot 0 is the exit's value)
        self.defined: set[UOp] = set()    # values computed in an earlier segment
        self.exits: list[Exit] = []
        self.bells: list[Any] = []        # the doorbells' queues, in order
        self.resume: list[tuple[int, str]] = []
        self.segment = 0

    # ---- values ----

    def value(self, u: UOp) -> str:
        got = self.names.get(u)
        if got is not None:
            return got
        if u.op is Ops.CONST:
            v = render_const(int(u.arg) if dtypes.is_int(u.dtype) else u.arg, _host(u.dtype))
        elif u in self.defined:  # computed before a wait: this run's value, kept in state
            self.reloaded.add(u)
            v = self.ins(f"load {_mem(u.dtype)}, ptr {self.slot_ptr(u)}")
            if u.dtype is dtypes.bool:
                v = self.ins(f"icmp ne i8 {v}, 0")
        elif u.op is Ops.DEFINE_VAR:
            p = self.ins(f"getelementptr i64, ptr %args, i64 {self.arg_slots[u.arg[0]]}")
            v = self.cast(dtypes.uint64, _host(u.dtype), self.ins(f"load i64, ptr {p}"))
        elif u.op is Ops.LOAD:
            p = self.pointer(u.src[0], u.dtype, "load")
            v = self.ins(f"load volatile {_mem(u.dtype)}, ptr {p}, align 1")
            if u.dtype is dtypes.bool:
                v = self.ins(f"icmp ne i8 {v}, 0")
        elif u.op is Ops.CAST:
            v = self.cast(_host(u.src[0].dtype), _host(u.dtype), self.value(u.src[0]))
        elif u.op in GroupOp.ALU:
            vals = [self.value(s) for s in u.src]
            v = self.alu(u.op, _host(u.dtype), [_host(s.dtype) for s in u.src], vals)
        else:
            raise NotImplementedError(f"the compiled host program cannot compute {u.op} ({u.render()[:80]})")
        self.names[u] = v
        if u.op not in (Ops.CONST, Ops.DEFINE_VAR) and u not in self.defined:
            self.defined.add(u)
            if u in self.spill:
                self.stmt(f"store {_mem(u.dtype)} {self.to_mem(u.dtype, v)}, ptr {self.slot_ptr(u)}")
        return v

    def to_mem(self, dt: DType, v: str) -> str:
        return self.ins(f"zext i1 {v} to i8") if dt is dtypes.bool else v

    def slot_ptr(self, u: UOp) -> str:
        slot = self.slots.setdefault(u, len(self.slots) + 1)
        return self.ins(f"getelementptr i64, ptr %state, i64 {slot}")

    def pointer(self, index: UOp, dt: DType, what: str) -> str:
        """The host pointer of INDEX(ref, byte offset) for a `dt` access: bounds checked now for a constant
        offset (as the interpreter's prepare does), at run time (an error exit) for a computed one."""
        ref, off = index.src
        if ref is self.table:
            base, nbytes = "%args", 8 * self.ninputs
        else:
            address, nbytes = self.address_of(ref)
            base = self.ins(f"inttoptr i64 {address} to ptr")
        if off.op is Ops.CONST:
            o = int(off.arg)
            if o < 0 or o + dt.itemsize > nbytes:
                raise IndexError(f"host access of {dt.itemsize} bytes at offset {o} outside a buffer of "
                                 f"{nbytes} bytes")
            return self.ins(f"getelementptr i8, ptr {base}, i64 {o}")
        at = self.cast(_host(off.dtype), dtypes.int64, self.value(off))
        limit = nbytes - dt.itemsize
        ok = self.ins(f"icmp ule i64 {at}, {limit}")  # unsigned: a negative offset is out of bounds too
        self.exit_unless(ok, at, Exit(len(self.bells), error=f"host {what} of {dt.name} at offset {{o}} outside a "
                                                                f"buffer of {nbytes} bytes"))
        return self.ins(f"getelementptr i8, ptr {base}, i64 {at}")

    def exit_unless(self, ok: str, value: str, ex: Exit) -> str:
        """Go on when `ok`, else store `value` in state[0] and return this exit's number; the label going on."""
        self.exits.append(ex)
        n = len(self.exits)
        self.stmt(f"store i64 {value}, ptr %state")
        self.stmt(f"br i1 {ok}, label %go{n}, label %exit{n}")
        self.label(f"exit{n}")
        self.stmt(f"ret i32 {n}")
        self.label(f"go{n}")
        return f"go{n}"

    # ---- statements ----

    def statement(self, s: UOp) -> None:
        if s.op is Ops.STORE:
            idx, value = s.src
            v = self.value(value)
            p = self.pointer(idx, value.dtype, "store")
            self.stmt(f"store volatile {_mem(value.dtype)} {self.to_mem(value.dtype, v)}, ptr {p}, align 1")
        elif s.op is Ops.INS and s.arg[0] == "blob":
            _, offset, data = s.arg
            address, nbytes = self.address_of(s.src[0])
            if offset + len(data) > nbytes:
                raise IndexError(f"a blob of {len(data)} bytes at offset {offset} overflows a buffer of {nbytes}")
            name = f"@blob{len(self.declares)}"
            self.declare(f"{name} = private unnamed_addr constant [{len(data)} x i8] c\""
                         + "".join(f"\\{b:02X}" for b in data) + '"')
            self.declare("declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)")
            dst = self.ins(f"inttoptr i64 {address + offset} to ptr")
            self.stmt(f"call void @llvm.memcpy.p0.p0.i64(ptr {dst}, ptr {name}, i64 {len(data)}, i1 true)")
        elif s.op is Ops.INS and s.arg[0] == "host_wait":
            _, offset, what = s.arg
            address, nbytes = self.address_of(s.src[0])
            if offset < 0 or offset + 8 > nbytes:
                raise IndexError(f"host access of 8 bytes at offset {offset} outside a buffer of {nbytes} bytes")
            v = self.value(s.src[1])
            cell = self.ins(f"load volatile i64, ptr {self.ins(f'inttoptr i64 {address + offset} to ptr')}, align 1")
            ok = self.ins(f"icmp uge i64 {cell}, {v}")
            label = " ".join(str(w) for w in what) or "a signal"
            view = np.ctypeslib.as_array((ctypes.c_uint64 * 1).from_address(address + offset))
            waiter = self.waiter(what) if self.waiter is not None else (None, None)
            resume = self.exit_unless(ok, v, Exit(len(self.bells), view, label, waiter))
            # a resumed call jumps here: values of earlier segments come from state from now on
            self.resume.append((len(self.exits), resume))
            self.names = {}
            self.segment += 1
        elif s.op is Ops.INS and s.arg[0] == "doorbell":
            address, nbytes = self.address_of(s.src[0])
            if nbytes < 8:
                raise IndexError(f"host access of 8 bytes at offset 0 outside a buffer of {nbytes} bytes")
            v = self.value(s.src[1])
            self.stmt(f"store volatile i64 {v}, ptr {self.ins(f'inttoptr i64 {address} to ptr')}, align 1")
            self.bells.append(s.arg[1])
        else:
            raise NotImplementedError(f"not a host statement: {s.op} {s.arg!r}")

    def text(self) -> str:
        for s in self.stmts:
            self.statement(s)
        cases = " ".join(f"i32 {n}, label %{lab}" for n, lab in self.resume)
        head = [f"; host program of {len(self.stmts)} statements"]
        if self.r.data_layout:
            head.append(f'target datalayout = "{self.r.data_layout}"')
        if self.r.target_triple:
            head.append(f'target triple = "{self.r.target_triple}"')
        head.append(f"define i32 @{FUNCTION}(ptr noalias %args, ptr noalias %state, i32 %resume) nounwind {{")
        body = ["entry:", f"  switch i32 %resume, label %start [{cases}]", "start:"]
        return "\n".join(head + body + self.lines + ["  ret i32 0", "}", *self.declares]) + "\n"


class CompiledHostProgram:
    """A host program as a compiled function (see the module docstring); `run(var_vals)` as HostProgram's.
    `args` is the argument table: a replay writes input i's address at [i] (LinkedBatch.run), run() the
    variables after them."""

    def __init__(self, fn: Any, keep: Any, src: str, stmts: list[UOp], ninputs: int, var_names: list[str],
                 exits: list[Exit], bells: list[tuple[Any, Any]], nstate: int, keep_views: list[Any]):
        self.fn, self.keep, self.src, self.stmts, self.nstmts = fn, keep, src, list(stmts), len(stmts)
        self.ninputs, self.var_names, self.exits, self.bells = ninputs, tuple(var_names), exits, bells
        self.args = (ctypes.c_uint64 * max(1, ninputs + len(var_names)))()
        self.state = (ctypes.c_uint64 * (nstate + 1))()
        self.args_ptr, self.state_ptr = ctypes.addressof(self.args), ctypes.addressof(self.state)
        self.keep_views = keep_views  # the host views whose addresses the code holds

    def run(self, var_vals: dict[str, int] | None = None) -> None:
        if self.var_names:
            vv = var_vals or {}
            args, k = self.args, self.ninputs
            for name in self.var_names:
                if name not in vv:
                    raise ValueError(f"the host program needs a value for the variable {name}")
                args[k] = vv[name] & _U64
                k += 1
        code = self.fn(self.args_ptr, self.state_ptr, 0)
        rung = 0
        while code:
            ex = self.exits[code - 1]
            rung = self._ring(rung, ex.bells)  # the queues written so far may be what the wait waits for
            value = int(self.state[0])
            if ex.error:
                o = value - (1 << 64) if value >> 63 else value
                raise IndexError(ex.error.format(o=o))
            cell = ex.cell
            assert cell is not None
            check, describe = ex.waiter
            wait_until(_reader(cell), value, ex.label, describe, check)
            code = self.fn(self.args_ptr, self.state_ptr, code)
        self._ring(rung, len(self.bells))

    def _ring(self, start: int, end: int) -> int:
        bells = self.bells
        for i in range(start, end):
            dev, queue = bells[i]
            dev.ring(queue)
        return end


def _reader(cell: np.ndarray) -> Callable[[], int]:
    return lambda: int(cell[0])


def host_compiler() -> Any | None:
    """The device that compiles host programs: the CPU device when one is registered, else None (interpret)."""
    if not TG_HCQ_COMPILE.value:
        return None
    from tg_core.device import Device
    from tg_core.plugins.errors import DeviceUnavailable, PluginError
    try:
        return Device["CPU"]
    except (PluginError, DeviceUnavailable, KeyError):
        return None


def compile_host(stmts: list[UOp], view_of: Callable[[UOp], np.ndarray], table: UOp | None, ninputs: int,
                 ring_device: Callable[[str], Any], waiter: Callable[[tuple], Any],
                 compiler: Any = None) -> CompiledHostProgram | None:
    """The compiled host program of `stmts` (their input addresses read from `table`, ninputs u64), or None when
    no device compiles host programs."""
    compiler = compiler if compiler is not None else host_compiler()
    if compiler is None:
        return None
    var_names = sorted({u.arg[0] for s in stmts for u in s.toposort() if u.op is Ops.DEFINE_VAR})
    views: list[Any] = []

    def address_of(ref: UOp) -> tuple[int, int]:
        view = view_of(ref)
        views.append(view)
        return int(view.ctypes.data), int(view.nbytes)

    def render(renderer: LLVMRenderer, spill: set[UOp]) -> HostFunction:
        fn = HostFunction(renderer, stmts, address_of, table, ninputs, var_names, waiter, spill)
        fn.src = fn.text()
        return fn

    made: list[HostFunction] = []

    def render_module(renderer: LLVMRenderer) -> str:
        first = render(renderer, set())  # which values a later segment reloads: those are kept in state
        made.append(render(renderer, first.reloaded))
        return made[-1].src

    loaded = compiler.compile_host_function(render_module, FUNCTION)
    if loaded is None:
        return None
    fn = made[-1]
    bells = [(ring_device(qu.device), qu) for qu in fn.bells]
    return CompiledHostProgram(_HOST_FN(loaded.address), loaded, fn.src, stmts, ninputs, var_names, fn.exits, bells, len(fn.slots), views)
