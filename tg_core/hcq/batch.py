"""A batch: consecutive exec items on HCQ devices become queue ops on their devices' queues, one submit per queue.

For each item (a kernel or a copy; hcq.md §3.4):
- its queue: a kernel runs on `COMPUTE:0` of its device, a copy on `COPY:0` of its source's device (a device
  without a copy queue copies on `COMPUTE:0`);
- its waits: the DepsTracker (deps.py) gives the earlier items whose bytes it overlaps; a dependency on the
  same queue needs nothing (a queue runs in order), one on another queue (of this or another device) becomes
  `wait(signal of that queue >= its tag + 1)`, the latest tag per producer queue only; the producer then
  signals its queue after that item;
- on the first use of a queue in the batch: `barrier` and `wait(timeline >= tv)`, where tv is the device's
  value before this batch (every earlier batch on the device is done);
- the device's epilogue, on COMPUTE:0 when the device uses more than one queue (else on its only queue):
  wait for the device's other queues' last signals, then `signal(timeline, tv + 1)`.

The signals live in one host placeholder per device and batch (tag `slots`): 16 bytes per queue it uses, then
the "sched" slot, where the host fence records the timeline value this batch's last run reached. The batch is
`SINK(fence, *submits)`; the fence (host statements) runs first at every run: wait until this batch's previous
run is done, bump the device's host timeline value, re-arm the queue signals (values restart at tag + 1).

When profiling is on (tg_core/profile), every exec and copy sits between two `timestamp` ops (after its waits,
before its signal) whose slots tg_core/profile/hcq.py reads back after each run.
"""
from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass, field

from tg_core.dtype import dtypes
from tg_core.hcq import ops as q
from tg_core.hcq.deps import DepsTracker, Region
from tg_core.hcq.ops import Queue
from tg_core.profile import state as profiling
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

SLOT = 16  # bytes per signal slot: [u64 value][u64 timestamp]
_variables: weakref.WeakKeyDictionary[UOp, tuple[UOp, ...]] = weakref.WeakKeyDictionary()
_batch_ids = itertools.count()


@dataclass
class Item:
    """One exec item of a batch: a kernel SINK (or a COPY node) and its buffers as refs (q.mem / q.input_ref),
    in kernel-argument order (a copy: dst, src); `writes` are the indices of refs it writes."""
    ast: UOp
    refs: list[UOp]
    writes: tuple[int, ...]

    @property
    def is_copy(self) -> bool:
        return self.ast.op is Ops.COPY


@dataclass
class Batch:
    """A built batch: the SINK the passes rewrite, its devices in first-use order, and a unique id."""
    sink: UOp
    devices: list[str]
    uid: int
    queues: dict[str, list[Queue]] = field(default_factory=dict)


def new_batch_id() -> int:
    """A batch id no other batch of this process has (it keys the batch's own command buffers)."""
    return next(_batch_ids)


def _region(ref: UOp) -> Region:
    if ref.op is Ops.BUFFER:
        buf = ref.arg.buf
        return Region(buf.base, buf.offset, buf.offset + buf.nbytes)
    return Region(("input", ref.arg[1]), 0, ref.arg[3])


def queue_of(item: Item, copy_queue: dict[str, bool]) -> Queue:
    """The queue an item runs on (a copy on its source's device: p2p writes are faster than reads)."""
    if item.is_copy:
        dev = q.device_of(item.refs[1])
        return Queue(dev, "COPY:0" if copy_queue.get(dev, True) else "COMPUTE:0")
    return Queue(q.device_of(item.refs[0]), "COMPUTE:0")


def build(items: list[Item], copy_queue: dict[str, bool] | None = None) -> Batch:
    """The batch of `items` (in order) as a SINK of the host fence and one submit per queue."""
    if not items:
        raise ValueError("a batch needs at least one exec item")
    copy_queue = copy_queue or {}
    uid = new_batch_id()
    queues_of: dict[str, list[Queue]] = {}
    placed = []
    for item in items:
        queue = queue_of(item, copy_queue)
        qs = queues_of.setdefault(queue.device, [])
        if queue not in qs:
            qs.append(queue)
        placed.append(queue)
    devices = list(queues_of)
    slots = {d: q.placeholder("slots", SLOT * (len(qs) + 1), d, key=uid) for d, qs in queues_of.items()}
    timeline = {d: q.placeholder("timeline", 16, d) for d in devices}
    tv = {d: q.host_load(timeline[d], 8) for d in devices}  # this run's device value, read by the fence

    def signal_addr(queue: Queue) -> UOp:
        return q.addr(slots[queue.device], SLOT * queues_of[queue.device].index(queue))

    # pass 1: dependencies -> waits, and which items must signal their queue
    tracker: DepsTracker = DepsTracker()
    waits: list[dict[Queue, int]] = []
    signal_tags: set[int] = set()
    last: dict[Queue, int] = {}
    for tag, (item, queue) in enumerate(zip(items, placed)):
        deps = tracker.access([_region(r) for r in item.refs], item.writes, (queue, tag))
        mine: dict[Queue, int] = {}
        for pq, ptag in deps:
            if pq != queue and ptag < tag:
                mine[pq] = max(mine.get(pq, -1), ptag)
        signal_tags.update(mine.values())
        waits.append(mine)
        last[queue] = tag
    epilogue = {d: (Queue(d, "COMPUTE:0") if len(qs) > 1 else qs[0]) for d, qs in queues_of.items()}
    signal_tags.update(t for queue, t in last.items() if queue != epilogue[queue.device])

    # pass 2: the queue ops, per queue in item order
    stamps = None
    if profiling.on:
        from tg_core.profile.hcq import Stamps
        stamps = Stamps.for_batch(placed, queues_of, SLOT)
    ops: dict[Queue, list[UOp]] = {}
    for tag, (item, queue) in enumerate(zip(items, placed)):
        lst = ops.get(queue)
        if lst is None:
            lst = ops[queue] = [q.ins("barrier", queue), q.ins("wait", queue, q.addr(timeline[queue.device], 0),
                                                               tv[queue.device])]
        for pq, ptag in waits[tag].items():
            lst.append(q.ins("wait", queue, signal_addr(pq), q.u64(ptag + 1)))
        if stamps is None:
            lst.append(_item_op(item, queue))
        else:
            lst.extend(stamps.around(item, queue, _item_op(item, queue)))
        if tag in signal_tags:
            lst.append(q.ins("signal", queue, signal_addr(queue), q.u64(tag + 1)))
    for d, queue in epilogue.items():
        lst = ops.setdefault(queue, [])
        for other in queues_of[d]:
            if other != queue:
                lst.append(q.ins("wait", queue, signal_addr(other), q.u64(last[other] + 1)))
        lst.append(q.ins("signal", queue, q.addr(timeline[d], 0), tv[d] + UOp.const(dtypes.uint64, 1)))
    fence = _fence(devices, queues_of, slots, timeline, tv)
    sink = UOp(Ops.SINK, dtypes.void, (fence, *(q.submit(queue, lst) for queue, lst in ops.items())))
    return Batch(sink, devices, uid, queues_of)


def _item_op(item: Item, queue: Queue) -> UOp:
    if item.is_copy:
        dst, src = item.refs
        return q.ins("copy", queue, dst, src, extra=(min(q.nbytes_of(dst), q.nbytes_of(src)),))
    variables = _variables.get(item.ast)
    if variables is None:  # once per kernel: a batch repeats kernels, and walking an AST is most of an item's cost
        variables = _variables[item.ast] = tuple(sorted((u for u in item.ast.toposort() if u.op is Ops.DEFINE_VAR),
                                                        key=lambda v: v.arg[0]))
    return q.ins("exec", queue, *item.refs, *variables, extra=(item.ast, len(item.refs)))


def _fence(devices: list[str], queues_of: dict[str, list[Queue]], slots: dict[str, UOp], timeline: dict[str, UOp],
           tv: dict[str, UOp]) -> UOp:
    """Host statements run before the submits, device after device: wait until this batch's previous run on
    the device is done (its slots and command buffers are reusable), reserve this run's value, re-arm."""
    stmts = []
    one = UOp.const(dtypes.uint64, 1)
    for d in devices:
        sched = SLOT * len(queues_of[d])
        target = q.host_load(slots[d], sched)
        stmts.append(q.host_wait(timeline[d], 0, target, (d, "host fence", "timeline")))
        stmts.append(q.host_store(timeline[d], 8, tv[d] + one))
        stmts.append(q.host_store(slots[d], sched, tv[d] + one))
    for d in devices:
        for k in range(len(queues_of[d])):
            # every run: a constant store would be a link-time patch, and a replay's waits would then be satisfied
            # by the previous run's signals
            stmts.append(q.host_store(slots[d], SLOT * k, UOp.const(dtypes.uint64, 0), every_run=True))
    return q.linear(*stmts)
