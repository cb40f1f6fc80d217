"""Test plugin "never" extending HCQREF: while ARMED, pm_batch makes every compute submit first wait for a signal
that no queue writes."""
from __future__ import annotations

from tg_core.hcq import ops as q
from tg_core.plugins.hookspecs import hookimpl
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import PatternMatcher
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat

ARMED = [False]


def add_wait(sink: UOp) -> UOp | None:
    if not ARMED[0]:
        return None
    out = []
    for s in sink.src:
        if isinstance(s.arg, q.Submit) and s.arg.queue.kind == "COMPUTE":
            queue = s.arg.queue
            never = q.placeholder("never", 8, queue.device)
            s = q.submit(queue, [q.ins("wait", queue, q.addr(never), q.u64(1)), *s.src[0].src])
        out.append(s)
    return sink.replace(src=tuple(out))


@hookimpl
def tg_pm_batch(device: str):
    return PatternMatcher([(UPat(Ops.SINK, name="sink"), add_wait)])
