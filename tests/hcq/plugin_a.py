"""Test plugin "a" extending HCQREF: pm_batch adds a `store` of a symbolic value ("magic") to every compute submit,
pm_lower turns "magic" into 1234, pm_encode encodes that store; pm_bufferize gives its "marker" placeholder a
buffer of its own (MARKERS)."""
from __future__ import annotations

from tg_core.device import Buffer
from tg_core.dtype import dtypes
from tg_core.hcq import ops as q
from tg_core.hcq import refisa
from tg_core.plugins.hookspecs import hookimpl
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import PatternMatcher
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat

MARKERS: dict[str, Buffer] = {}
MAGIC = UOp(Ops.CUSTOM_FUNCTION, dtypes.uint64, (), "magic")


def add_store(sink: UOp) -> UOp | None:
    out = []
    for s in sink.src:
        if isinstance(s.arg, q.Submit) and s.arg.queue.kind == "COMPUTE" and s.src[0].op is Ops.LINEAR:
            queue = s.arg.queue
            marker = q.placeholder("marker", 8, queue.device)
            if any(u.op is Ops.INS and u.arg[0] == "store" for u in s.src[0].src):
                return None
            s = q.submit(queue, [*s.src[0].src, q.ins("store", queue, q.addr(marker), MAGIC)])
        out.append(s)
    return sink.replace(src=tuple(out))


def encode_store(x: UOp, plus: int) -> UOp | None:
    if not (q.is_queue_op(x) and x.arg[0] == "store"):
        return None
    value = x.src[1] if plus == 0 else x.src[1] + UOp.const(dtypes.uint64, plus)
    return refisa.cmd(x.arg[1], refisa.STORE, x.src[0], value)


def bufferize(ctx, p: UOp) -> UOp | None:
    if p.tag != "marker":
        return None
    if p.arg[1] not in MARKERS:
        MARKERS[p.arg[1]] = ctx.host_buffer(8, nolru=True)
    return q.mem(MARKERS[p.arg[1]])


@hookimpl
def tg_pm_batch(device: str):
    return PatternMatcher([(UPat(Ops.SINK, name="sink"), add_store)])


@hookimpl
def tg_pm_encode(device: str):
    return PatternMatcher([(UPat(Ops.INS, name="x"), lambda x: encode_store(x, 0))])


@hookimpl
def tg_pm_lower(device: str):
    return PatternMatcher([(UPat(Ops.CUSTOM_FUNCTION, arg="magic"), lambda: UOp.const(dtypes.uint64, 1234))])


@hookimpl
def tg_pm_bufferize(device: str):
    return PatternMatcher([(UPat(Ops.PARAM, name="p"), bufferize)])
