"""Link a lowered batch: placeholders become device buffers, what is known once is written once, the rest is the
host program that runs at every submit.

1. **bufferize**: every placeholder is offered to its device's summed `pm_bufferize` matcher (ctx: the device),
   whose rule returns `mem(buf)` of a device-owned buffer (`program`, `timeline`, `ring_<q>`, ...); a placeholder
   no rule takes (`slots`, `cmdbuf_<q>`, ...) gets a fresh zero-filled host buffer of its device, owned by the
   linked batch;
2. **addresses** (`pm_link`): `addr` of linked memory becomes a constant; `addr` of a JIT input becomes a load
   from the batch's address table (one u64 per input slot) plus the offset; ALU over constants folds;
3. **link-time patches**: a statement whose offset and value are constants (the blobs, program and internal
   buffer addresses, constant words) runs now, once;
4. **run-time patches**: what is left reads the address table, bound variables or memory at submit (the timeline
   value, the ring's put pointer): that is the host program (host.py), with the fence first and the pushes.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tg_core.device import Buffer, BufferSpec
from tg_core.dtype import dtypes
from tg_core.hcq import ops as q
from tg_core.hcq.encode import HCQError, stats, summed
from tg_core.hcq.host import HostProgram
from tg_core.hcq.hostc import CompiledHostProgram, compile_host
from tg_core.profile.hcq import Stamps
from tg_core.uop.alu import exec_alu
from tg_core.uop.ops import GroupOp, Ops
from tg_core.uop.rewrite import PatternMatcher, graph_rewrite
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat


@dataclass
class LinkedBatch:
    """A batch ready to run: `run(inputs, var_vals)` fills the address table and runs the host program (which
    rings the doorbells). `refs` keeps every buffer a word addresses alive as long as the batch."""
    program: HostProgram | CompiledHostProgram
    table: Any                      # the address table (u64 per input slot), None without inputs
    inputs: list[tuple[str, int]]   # per input slot: (device, nbytes)
    devices: list[str]
    refs: list[Buffer] = field(default_factory=list)
    link_stmts: int = 0             # statements run once at link
    buffers: dict[tuple[str, str], Buffer] = field(default_factory=dict)  # (placeholder tag, device) -> buffer

    locks: list[Any] = field(default_factory=list)  # its devices' submit locks, in name order
    stamps: Any = None  # profiling: the batch's device timestamps (tg_core/profile/hcq.py), None when off

    def run(self, inputs: list[Buffer] | None = None, var_vals: dict[str, int] | None = None) -> None:
        """Submit one run of the batch with these input buffers (one per input slot) and variable values."""
        if self.stamps is not None:  # profiled: read the previous run's timestamps first, remember this run's
            self.stamps.run(self, inputs, var_vals)
        else:
            self.submit(inputs, var_vals)

    def submit(self, inputs: list[Buffer] | None = None, var_vals: dict[str, int] | None = None) -> None:
        if self.table is not None:
            got = inputs or []
            if len(got) != len(self.inputs):
                raise ValueError(f"a linked batch of {len(self.inputs)} inputs was run with {len(got)}")
            table, address = self.table, self._address
            for i, b in enumerate(got):
                table[i] = address[i](b)
        # one submit at a time per device: two host programs must not push to one ring (its put value) at once
        if len(self.locks) == 1:  # the common case, one device: a with-statement is the cheapest lock
            with self.locks[0]:
                self.program.run(var_vals)
            return
        for lock in self.locks:
            lock.acquire()
        try:
            self.program.run(var_vals)
        finally:
            for lock in reversed(self.locks):
                lock.release()

    @property
    def compiled(self) -> bool:
        """Whether the host program runs compiled (hostc.py) rather than interpreted (host.py)."""
        return isinstance(self.program, CompiledHostProgram)

    def __post_init__(self) -> None:
        # per input slot its device's address(buf), looked up once (a replay calls it per input)
        self._address = [_dev(d).address for d, _ in self.inputs]


def _dev(name: str) -> Any:
    """The opened HCQ device `name` (an HCQCompiled: device.py imports this module, so it is not named here)."""
    from tg_core.device import Device
    return Device[name]


def _fold(x: UOp) -> UOp | None:
    if not all(s.op is Ops.CONST for s in x.src):
        return None
    if x.op is Ops.CAST:
        v = int(x.src[0].arg) & ((1 << (8 * x.dtype.itemsize)) - 1) if dtypes.is_int(x.dtype) else x.src[0].arg
        return UOp.const(x.dtype, v)
    return UOp.const(x.dtype, exec_alu(x.op, x.dtype, tuple(s.arg for s in x.src)))


def _addr(ctx: _LinkCtx, a: UOp) -> UOp | None:
    ref, off = a.src[0], a.arg[1]
    if ref.op is Ops.BUFFER:
        buf = ref.arg.buf
        ctx.refs.append(buf)
        return UOp.const(dtypes.uint64, ctx.address(buf) + off)
    if q.is_input(ref):
        if ctx.table_ref is None:
            raise HCQError(f"input {ref.arg[1]} of {ref.arg[2]} is addressed, but the batch was linked without inputs")
        load = q.host_load(ctx.table_ref, 8 * ref.arg[1])
        return load + UOp.const(dtypes.uint64, off) if off else load
    return None


pm_link = PatternMatcher([
    (UPat(Ops.INS, name="a"), lambda ctx, a: _addr(ctx, a) if a.arg[0] == "addr" else None),
    (UPat(tuple(GroupOp.ALU) + (Ops.CAST,), name="x"), _fold),
    (UPat(Ops.PARAM, name="p"), lambda ctx, p: ctx.mapping.get(p)),
])


def _device_address(buf: Buffer) -> int:
    return _dev(buf.device).address(buf)


@dataclass
class _LinkCtx:
    table_ref: UOp | None
    refs: list[Buffer]
    address: Callable[[Buffer], int] = _device_address
    mapping: dict[UOp, UOp] = field(default_factory=dict)  # placeholder -> mem(buffer)


def flatten(u: UOp) -> list[UOp]:
    """The host statements of a lowered batch, in order (SINK and LINEAR are sequences)."""
    out: list[UOp] = []
    stack = [u]
    while stack:
        x = stack.pop()
        if x.op in (Ops.SINK, Ops.LINEAR):
            stack.extend(reversed(x.src))
        else:
            out.append(x)
    return out


def _is_placeholder(u: UOp) -> bool:
    return u.op is Ops.PARAM and isinstance(u.arg, tuple) and u.arg[0] == "hcq"


def bufferize(body: UOp, owned: list[Buffer]) -> dict[UOp, UOp]:
    """placeholder -> mem(buffer), by the devices' pm_bufferize rules, else a fresh zeroed host buffer."""
    mapping: dict[UOp, UOp] = {}
    matchers: dict[str, Any] = {}
    for u in body.toposort():
        if _is_placeholder(u):
            dev_name = u.arg[1]
            dev = _dev(dev_name)
            if dev_name not in matchers:
                matchers[dev_name] = summed("tg_pm_bufferize", [dev_name])[0]
            pm = matchers[dev_name]
            got = pm.rewrite(u, dev) if pm is not None else None
            if got is None:
                buf = Buffer(dev_name, u.arg[2], dtypes.uint8, BufferSpec(host=True)).ensure_allocated()
                dev.host_view(buf)[:] = 0  # an allocator may hand back freed memory with stale contents
                owned.append(buf)
                got = q.mem(buf)
            elif got.op is not Ops.BUFFER or not isinstance(got.arg, q.Mem):
                raise HCQError(f"pm_bufferize of {dev_name} turned placeholder {u.tag!r} into {got.op}, not q.mem(buffer)")
            elif got.arg.buf.nbytes < u.arg[2]:
                raise HCQError(f"pm_bufferize of {dev_name} gave placeholder {u.tag!r} ({u.arg[2]} bytes) a buffer of "
                               f"{got.arg.buf.nbytes} bytes")
            mapping[u] = got
    return mapping


def _is_const_stmt(s: UOp) -> bool:
    if s.op is Ops.STORE:
        return s.arg != q.EVERY_RUN and s.src[0].src[1].op is Ops.CONST and s.src[1].op is Ops.CONST
    return s.op is Ops.INS and s.arg[0] == "blob"


def link(lowered: UOp, devices: list[str], inputs: list[tuple[str, int]] | None = None,
         compiled: bool = False) -> LinkedBatch:
    """Link the encoded and lowered batch `lowered`; `inputs` are the (device, nbytes) of its input slots.
    `compiled`: compile the host program when a device offers it (hostc.py; a batch linked to be replayed),
    else interpret it (a one-shot batch: compiling takes milliseconds, interpreting it once microseconds)."""
    stats["links"] += 1
    inputs = inputs or []
    body = q.linear(*flatten(lowered))
    owned: list[Buffer] = []
    mapping = bufferize(body, owned)
    table_ref, table = None, None
    if inputs:
        tbuf = Buffer(devices[0], 8 * len(inputs), dtypes.uint8, BufferSpec(host=True)).ensure_allocated()
        owned.append(tbuf)
        table_ref = q.mem(tbuf)
        table = _dev(devices[0]).host_view(tbuf).view(np.uint64)
    ctx = _LinkCtx(table_ref, [], mapping=mapping)
    body = graph_rewrite(body, pm_link, ctx)  # placeholders -> their buffers, addresses, folding: one pass
    stmts = flatten(body)
    once = [s for s in stmts if _is_const_stmt(s)]
    per_run = [s for s in stmts if not _is_const_stmt(s)]
    view_of = _view_of
    HostProgram(once, view_of, _ring).run()
    prog: HostProgram | CompiledHostProgram | None = None
    if compiled:
        prog = compile_host(per_run, view_of, table_ref, len(inputs), _dev, _waiter)
        if prog is not None and table is not None:
            table = prog.args  # the compiled function reads the input addresses from its argument table
    if prog is None:
        prog = HostProgram(per_run, view_of, _ring, _waiter)
    refs = owned + ctx.refs
    named = {(ph.tag, ph.arg[1]): m.arg.buf for ph, m in mapping.items()}
    locks = [_dev(d).submit_lock for d in sorted(devices)]
    # profiling: the batch's timestamp placeholders are keyed by its Stamps (tg_core/profile/hcq.py)
    stamps = next((ph.arg[3] for ph in mapping if ph.tag == "timestamps" and isinstance(ph.arg[3], Stamps)), None)
    return LinkedBatch(prog, table, inputs, list(devices), refs, len(once), named, locks, stamps)


def _view_of(ref: UOp) -> np.ndarray:
    if ref.op is not Ops.BUFFER:
        raise HCQError(f"a host statement addresses {ref.op} {ref.arg!r}, which is not linked memory")
    buf = ref.arg.buf
    return _dev(buf.device).host_view(buf)


def _ring(queue: q.Queue) -> None:
    _dev(queue.device).ring(queue)


def _waiter(what: tuple) -> Any:
    """A host wait on a device's memory: check the device's queues for faults while spinning, and on a timeout let
    the device say what its queues wait for (and recover)."""
    if what and isinstance(what[0], str):
        dev = _dev(what[0])
        return dev.check_fault, dev.on_host_timeout
    return None, None


def run_once(stmts: list[UOp], address: Callable[[Buffer], int], view_of: Callable[[UOp], np.ndarray]) -> None:
    """Link and run host statements over linked memory once (no placeholders, no inputs): what a device writes when
    it opens, such as its queue descriptors (structs.py). `address` and `view_of` are the device's own, since the
    registry does not know a device while it is being opened."""
    body = graph_rewrite(q.linear(*stmts), pm_link, _LinkCtx(None, [], address))
    HostProgram(flatten(body), view_of, _ring).run()
