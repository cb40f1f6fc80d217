"""The host program of a linked batch: host statements (ops.py) prepared once into closures, run per submit.

A host program is a list of statements over host-visible memory (linked `mem` refs): stores and loads at byte
offsets, constant blobs, spin waits and doorbells. Values are SSA: a node (a LOAD included) is evaluated once
per run, when the first statement needing it runs. The command words that read the device's timeline value
are the same LOAD node the fence reads before bumping it, so they see this run's value (hcq.md §3.5).

Core *interprets* the program (each statement a prepared closure over typed numpy views, no UOp is looked at
per run) unless it is compiled (hostc.py: a batch linked for replay, when the CPU device offers it).
"""
from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tg_core.dtype import DType, dtypes, to_numpy_dtype
from tg_core.helpers import ContextVar, cdiv, cmod
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

TG_HCQ_TIMEOUT_MS = ContextVar("TG_HCQ_TIMEOUT_MS", 30000)

ViewOf = Callable[[UOp], np.ndarray]  # a mem ref -> its host bytes (uint8)


class HCQTimeout(RuntimeError):
    """A wait that was not satisfied within TG_HCQ_TIMEOUT_MS."""


def _wrapper(dt: DType) -> Callable[[int], int]:
    """Integer results wrap to `dt` (as the device's words do); the function is chosen once per node."""
    if not dtypes.is_int(dt) or dt.itemsize > 8:
        return lambda v: v
    mask, bits = (1 << (8 * dt.itemsize)) - 1, 8 * dt.itemsize
    if dtypes.is_unsigned(dt):
        return lambda v: v & mask
    return lambda v: (v & mask) - ((v & mask) >> (bits - 1) << bits)


_INT_ALU: dict[Ops, Callable[[int, int], int]] = {
    Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
    Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b, Ops.XOR: lambda a, b: a ^ b,
    Ops.SHL: lambda a, b: a << b, Ops.SHR: lambda a, b: a >> b,
    # C division in exact integers (through floats it rounds past 2**53, and addresses are 64-bit)
    Ops.IDIV: lambda a, b: cdiv(a, b) if b else 0, Ops.MOD: lambda a, b: cmod(a, b) if b else 0,
    Ops.MAX: max, Ops.CMPLT: lambda a, b: int(a < b),
}


def wait_until(read: Callable[[], int], value: int, what: str, on_timeout: Callable[[], str] | None = None,
               check: Callable[[], None] | None = None) -> None:
    """Spin (yielding the core) until read() >= value; HCQTimeout after TG_HCQ_TIMEOUT_MS naming `what`, with what
    `on_timeout()` adds (and does: recover the device). `check()` may raise (a queue that faulted meanwhile)."""
    if read() >= value:
        return
    deadline = time.monotonic() + TG_HCQ_TIMEOUT_MS.value / 1000
    spins = 0
    while read() < value:
        if check is not None:
            check()
        spins += 1
        if spins > 64:
            time.sleep(0.0002 if spins < 5000 else 0.002)
        else:
            time.sleep(0)
        if time.monotonic() > deadline:
            extra = on_timeout() if on_timeout is not None else ""
            raise HCQTimeout(f"timed out after {TG_HCQ_TIMEOUT_MS.value} ms (TG_HCQ_TIMEOUT_MS) waiting for {what} "
                             f">= {value} (it is {read()}){extra}")


class HostProgram:
    """Prepared host statements. `run(var_vals)` executes them once, in order."""

    def __init__(self, stmts: list[UOp], view_of: ViewOf, ring: Callable[[Any], None],
                 waiter: Callable[[tuple], tuple[Callable[[], None], Callable[[], str]]] | None = None):
        self.view_of, self.ring, self.waiter = view_of, ring, waiter
        self.index: dict[UOp, int] = {}
        self.steps: list[Callable[[list, dict[str, int]], None]] = []
        self._pending: list[tuple[int, Callable]] = []
        self.stmts, self.nstmts = list(stmts), len(stmts)  # kept for inspection (tests, debugging)
        for s in stmts:
            self.steps.append(self._stmt(s))
        self.nvals = len(self.index)

    def run(self, var_vals: dict[str, int] | None = None) -> None:
        vals: list = [None] * self.nvals
        vv = var_vals or {}
        for step in self.steps:
            step(vals, vv)

    # ---- preparing ----

    def _typed(self, ref: UOp, offset: int, dt: DType) -> np.ndarray:
        view = self.view_of(ref)
        if offset < 0 or offset + dt.itemsize > view.nbytes:
            raise IndexError(f"host access of {dt.itemsize} bytes at offset {offset} outside a buffer of "
                             f"{view.nbytes} bytes")
        return view[offset:offset + dt.itemsize].view(to_numpy_dtype(dt))

    def _value(self, u: UOp) -> int:
        """The slot of `u`'s value; its computation is queued for the statement being prepared."""
        got = self.index.get(u)
        if got is not None:
            return got
        fn = self._value_fn(u)
        i = self.index[u] = len(self.index)
        self._pending.append((i, fn))
        return i

    def _value_fn(self, u: UOp) -> Callable[[list, dict[str, int]], int]:
        dt = u.dtype
        if u.op is Ops.CONST:
            c = int(u.arg)
            return lambda vals, vv: c
        if u.op is Ops.DEFINE_VAR:
            name = u.arg[0]

            def var(vals: list, vv: dict[str, int]) -> int:
                if name not in vv:
                    raise ValueError(f"the host program needs a value for the variable {name}")
                return vv[name]
            return var
        if u.op is Ops.LOAD:
            idx = u.src[0]
            if idx.src[1].op is Ops.CONST:
                cell = self._typed(idx.src[0], int(idx.src[1].arg), dt)
                return lambda vals, vv: int(cell[0])
            # struct reads the bytes through the array's buffer (a memoryview: what struct's signature names)
            raw, off, fmt = self.view_of(idx.src[0]).data, self._value(idx.src[1]), "<" + str(dt.fmt)
            unpack = struct.Struct(fmt).unpack_from
            return lambda vals, vv: unpack(raw, vals[off])[0]
        if u.op is Ops.CAST:
            a, wrap = self._value(u.src[0]), _wrapper(dt)
            return lambda vals, vv: wrap(vals[a])
        if u.op in _INT_ALU:
            a, b, f, wrap = self._value(u.src[0]), self._value(u.src[1]), _INT_ALU[u.op], _wrapper(dt)
            return lambda vals, vv: wrap(f(vals[a], vals[b]))
        raise NotImplementedError(f"the host program cannot compute {u.op} ({u.render()[:80]})")

    def _take_pending(self) -> list[tuple[int, Callable]]:
        out, self._pending = self._pending, []
        return out

    def _stmt(self, s: UOp) -> Callable[[list, dict[str, int]], None]:
        if s.op is Ops.STORE:
            idx, value = s.src
            ref, dt = idx.src[0], value.dtype
            v = self._value(value)
            if idx.src[1].op is Ops.CONST:
                cell = self._typed(ref, int(idx.src[1].arg), dt)
                effect = _store_cell(cell, v)
            else:
                # a computed offset (a ring position): struct packs at any byte, aligned or not
                raw, off, pack = self.view_of(ref).data, self._value(idx.src[1]), struct.Struct("<" + str(dt.fmt)).pack_into
                limit = raw.nbytes - dt.itemsize

                def effect(vals: list, vv: dict[str, int]) -> None:
                    o = vals[off]
                    if not 0 <= o <= limit:
                        raise IndexError(f"host store of {dt.name} at offset {o} outside a buffer of {limit + dt.itemsize} bytes")
                    pack(raw, o, vals[v])
        elif s.op is Ops.INS and s.arg[0] == "blob":
            _, offset, data = s.arg
            view, src = self.view_of(s.src[0]), np.frombuffer(data, np.uint8)
            if offset + len(data) > view.nbytes:
                raise IndexError(f"a blob of {len(data)} bytes at offset {offset} overflows a buffer of {view.nbytes}")

            def effect(vals: list, vv: dict[str, int]) -> None:
                view[offset:offset + len(src)] = src
        elif s.op is Ops.INS and s.arg[0] == "host_wait":
            _, offset, what = s.arg
            cell, v = self._typed(s.src[0], offset, dtypes.uint64), self._value(s.src[1])
            check, describe = self.waiter(what) if self.waiter is not None else (None, None)
            label = " ".join(str(w) for w in what) or "a signal"

            def effect(vals: list, vv: dict[str, int]) -> None:
                if cell[0] < vals[v]:  # the common case, satisfied already, costs one compare
                    wait_until(lambda: int(cell[0]), vals[v], label, describe, check)
        elif s.op is Ops.INS and s.arg[0] == "doorbell":
            queue = s.arg[1]
            cell, v, ring = self._typed(s.src[0], 0, dtypes.uint64), self._value(s.src[1]), self.ring

            def effect(vals: list, vv: dict[str, int]) -> None:
                cell[0] = vals[v]
                ring(queue)
        else:
            raise NotImplementedError(f"not a host statement: {s.op} {s.arg!r}")
        pending = self._take_pending()
        if not pending:
            return effect

        def step(vals: list, vv: dict[str, int]) -> None:
            for i, fn in pending:
                vals[i] = fn(vals, vv)
            effect(vals, vv)
        return step


def _store_cell(cell: np.ndarray, v: int) -> Callable[[list, dict[str, int]], None]:
    def effect(vals: list, vv: dict[str, int]) -> None:
        cell[0] = vals[v]
    return effect
