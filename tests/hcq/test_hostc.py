"""The host program compiled by the CPU device (tg_core/hcq/hostc.py) against core's interpreter (host.py): the same
statements over copies of the same memory give byte-identical memory (rings, command buffers, pointers,
doorbells) and the same doorbells rung, also across a wait that returns to Python and resumes; JIT replays on it
give the same results as interpreted ones; errors match."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from tg_core.device import Device
from tg_core.dtype import dtypes
from tg_core.engine.jit import TinyJit
from tg_core.hcq import ops as q
from tg_core.hcq.encode import stats
from tg_core.hcq.host import HCQTimeout, HostProgram
from tg_core.hcq.hostc import CompiledHostProgram, compile_host
from tg_core.helpers import Context
from tg_core.tensor import Tensor
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

pytest.importorskip("tg_cpu_x86")


@pytest.fixture
def hcq_cpu(hcq):
    hcq(cpu=True)


def _jit(n_var: UOp):
    w = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3), device="HCQREF").realize()

    @TinyJit
    def f(x: Tensor, k) -> Tensor:
        y = (x * 2 + Tensor(k, device="HCQREF")).contiguous()
        return ((y @ w).relu() + 1).contiguous()
    return f


def _want(x: np.ndarray, i: int) -> np.ndarray:
    return np.maximum((x * 2 + i) @ np.arange(12, dtype=np.float32).reshape(4, 3), 0) + 1


def _replays(f, v: UOp, n: int) -> list[np.ndarray]:
    out = []
    for i in range(n):
        x = np.linspace(-1, 1, 4, dtype=np.float32) * (i + 1)
        out.append(f(Tensor(x, device="HCQREF"), v.bind(i)).numpy())
        np.testing.assert_allclose(out[-1], _want(x, i), rtol=1e-6)
    return out


def test_jit_replay_runs_the_compiled_host_program(hcq_cpu):
    v = UOp.variable("hostc_k", 0, 100, dtypes.int32)
    f = _jit(v)
    _replays(f, v, 2)
    (lb,) = f.captured.hcq
    assert lb.compiled and isinstance(lb.program, CompiledHostProgram)
    before = dict(stats)
    compiled = _replays(f, v, 5)
    assert stats == before, "a compiled replay builds, encodes and links nothing"
    with Context(TG_HCQ_COMPILE=0):
        g = _jit(v)
        _replays(g, v, 2)
        assert not g.captured.hcq[0].compiled
        interpreted = _replays(g, v, 5)
    for a, b in zip(compiled, interpreted):
        assert a.tobytes() == b.tobytes()


def test_without_a_cpu_device_the_host_program_is_interpreted(hcq):
    v = UOp.variable("hostc_k", 0, 100, dtypes.int32)
    f = _jit(v)
    _replays(f, v, 3)
    assert not f.captured.hcq[0].compiled and isinstance(f.captured.hcq[0].program, HostProgram)


def _mems(stmts: list[UOp]) -> list:
    seen: dict[int, object] = {}
    for s in stmts:
        for u in s.toposort():
            if u.op is Ops.BUFFER and isinstance(u.arg, q.Mem):
                seen.setdefault(id(u.arg.buf), u.arg.buf)
    return list(seen.values())


class _Copy:
    """Private copies of every buffer the statements touch (so the two programs run over equal, separate memory),
    and a record of the doorbells rung."""

    table: np.ndarray

    def __init__(self, bufs: list, init: dict[int, np.ndarray]):
        self.mem = {id(b): init[id(b)].copy() for b in bufs}
        self.rung: list[tuple[str, str]] = []

    def view_of(self, ref: UOp) -> np.ndarray:
        return self.mem[id(ref.arg.buf)]

    def ring(self, queue: q.Queue) -> None:
        self.rung.append((queue.device, queue.name))

    def snapshot(self) -> dict[int, bytes]:
        return {k: v.tobytes() for k, v in self.mem.items()}


def _two_programs(lb) -> tuple[_Copy, HostProgram, _Copy, CompiledHostProgram]:
    stmts = lb.program.stmts
    bufs = _mems(stmts)
    init = {id(b): Device[b.device].host_view(b).copy() for b in bufs}
    table = next(u.src[0].src[0] for s in stmts for u in s.toposort() if u.op is Ops.LOAD
                 and u.src[0].src[0].op is Ops.BUFFER and u.src[0].src[0].arg.buf.nbytes == 8 * len(lb.inputs)
                 and (u.src[0].src[0].arg.buf not in lb.buffers.values()))
    a, b = _Copy(bufs, init), _Copy(bufs, init)
    interp = HostProgram(stmts, a.view_of, a.ring)
    comp = compile_host(stmts, b.view_of, table, len(lb.inputs), lambda d: b, None, Device["CPU"])
    assert comp is not None
    a.table = a.view_of(table).view(np.uint64)
    b.table = b.view_of(table).view(np.uint64)  # unread by the compiled program (it reads comp.args): kept equal
    return a, interp, b, comp


def _timeline(c: _Copy, lb) -> np.ndarray:
    return c.mem[id(lb.buffers[("timeline", "HCQREF")])].view(np.uint64)


def test_same_statements_give_byte_identical_memory_and_doorbells(hcq_cpu):
    v = UOp.variable("hostc_k", 0, 100, dtypes.int32)
    f = _jit(v)
    _replays(f, v, 3)
    (lb,) = f.captured.hcq
    a, interp, b, comp = _two_programs(lb)
    assert a.snapshot() == b.snapshot()
    for run in range(3):
        addrs = [0x1000 * (run + 1) + 64 * i for i in range(len(lb.inputs))]
        a.table[:] = b.table[:] = addrs
        for i, x in enumerate(addrs):
            comp.args[i] = x
        interp.run({"hostc_k": run + 7})
        comp.run({"hostc_k": run + 7})
        assert a.snapshot() == b.snapshot(), f"run {run}: the compiled program wrote other bytes"
        assert a.rung == b.rung and len(a.rung) >= 1
        for c in (a, b):  # what the queues would do: signal the timeline, so the next run's fence passes
            tl = _timeline(c, lb)
            tl[0] = tl[1]


def test_a_wait_returns_to_python_and_resumes(hcq_cpu):
    v = UOp.variable("hostc_k", 0, 100, dtypes.int32)
    f = _jit(v)
    _replays(f, v, 3)
    (lb,) = f.captured.hcq
    a, interp, b, comp = _two_programs(lb)
    for c, prog in ((a, interp), (b, comp)):
        for _ in range(2):
            tl = _timeline(c, lb)
            prog.run({"hostc_k": 3})  # the second run's fence waits for the first: satisfied by a "queue" later
            timer = threading.Timer(0.05, lambda tl=tl: tl.__setitem__(0, tl[1]))
            timer.start()
        timer.join()
    assert a.snapshot() == b.snapshot() and a.rung == b.rung
    # a wait nobody satisfies: the compiled program times out as the interpreter does
    comp.run({"hostc_k": 3})  # no queue signals this run: the next one's fence waits for ever
    with Context(TG_HCQ_TIMEOUT_MS=100):
        with pytest.raises(HCQTimeout, match="timed out after 100 ms"):
            comp.run({"hostc_k": 3})


def test_missing_variable_and_out_of_bounds_store_are_errors(hcq_cpu):
    Device["CPU"]
    buf = Device["HCQREF"].host_buffer(16)
    view = Device["HCQREF"].host_view(buf)
    ref = q.mem(buf)
    n = UOp.variable("hostc_off", 0, 100, dtypes.int64)
    stmts = [q.host_store(ref, n, UOp.const(dtypes.uint32, 7))]
    comp = compile_host(stmts, lambda r: view, None, 0, lambda d: None, None, Device["CPU"])
    interp = HostProgram(stmts, lambda r: view, lambda qu: None)
    comp.run({"hostc_off": 12})
    assert view[12:16].view(np.uint32)[0] == 7
    for prog in (interp, comp):
        with pytest.raises(IndexError, match="host store of uint at offset 13 outside a buffer of 16 bytes"):
            prog.run({"hostc_off": 13})
        with pytest.raises(ValueError, match="needs a value for the variable hostc_off"):
            prog.run({})


def test_interpreted_division_is_exact_for_64_bit_values():
    """The interpreter divides like C in exact integers (through floats, 2**60 + 1 would round)."""
    from tg_core.hcq.host import _INT_ALU
    from tg_core.uop.ops import Ops
    idiv, mod = _INT_ALU[Ops.IDIV], _INT_ALU[Ops.MOD]
    for a, b in [((1 << 60) + 1, 3), (-(1 << 62) - 7, 5), ((1 << 63) - 1, 4096), (-7, 2), (7, -2)]:
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        assert (idiv(a, b), mod(a, b)) == (q, a - q * b)
