"""Instrumentation points of the AMD compute queue: what a profiler plugin fills through the
`amd_dispatch_instrumenters` hook (tg_amd/hookspecs.py) without tg-amd knowing which plugin it is.

When queues/kernels.py encodes a compute submit with kernels, it asks every offered instrumenter for a
`SubmitInstrumentation` (`instrumenter.submit(device, queue, batch)`; None: this submit is not instrumented) and
places its words around each dispatch:

    PM4: ACQUIRE_MEM, before(site), PGM .. START_X (PERFCOUNT_ENABLE = perfcount), DISPATCH_DIRECT,
         after_dispatch(site), CS_PARTIAL_FLUSH, after(site)       ... end() after the submit's last op
    AQL: before(site) closes the PM4 run before the dispatch packet; after_dispatch(site) and after(site) open
         the next run (the packet's barrier bit makes it wait for the dispatch)   ... end() last

`host()` are host statements run at every submit after the command buffer is written and before the ring push
(a profiler's slot bookkeeping). Words are ints or uint32 UOps (run-time words such as a slot address may read
host memory: the host program evaluates them per submit). A command buffer is laid out twice (sizes, then
addresses), so `before`/`after_dispatch`/`after`/`end` must give the same words for the same site; `host` is
asked once per encoding. After `AMDDevice.synchronize` found the queues idle, each instrumenter's
`synchronized(device)` runs (collection).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tg_core.plugin_api import UOp
from tg_core.plugin_api import hcq_ops as q
from tg_amd.queues.pm4 import Word


@dataclass(frozen=True)
class DispatchSite:
    """One kernel dispatch being encoded: `index` counts the instrumented dispatches before it in this submit;
    `part` is the device's KernelPart (code object, kernel symbol, program key); `program` the address word of
    its loaded code object; `grid` in workgroups (ints or run-time words)."""
    device: str
    queue: q.Queue
    batch: int
    index: int
    name: str
    ast: UOp
    part: Any
    program: Word
    grid: tuple[Word, Word, Word]
    local: tuple[int, int, int]


class SubmitInstrumentation(Protocol):
    perfcount: bool  # COMPUTE_PERFCOUNT_ENABLE of the dispatches (PMC counts only dispatches that enable it)

    def before(self, site: DispatchSite) -> list[Word]: ...

    def after_dispatch(self, site: DispatchSite) -> list[Word]: ...

    def after(self, site: DispatchSite) -> list[Word]: ...

    def end(self) -> list[Word]: ...

    def host(self) -> list[UOp]: ...


class Instrumenter(Protocol):
    name: str

    def submit(self, device: Any, queue: q.Queue, batch: int) -> SubmitInstrumentation | None: ...

    def synchronized(self, device: Any) -> None: ...


def instrumenters(device: str) -> list[Instrumenter]:
    """The instrumenters plugins offer for `device`, in plugin order (the hook exists once tg loaded tg-amd)."""
    from tg_core.plugin_api import collect_named
    return list(collect_named("amd_dispatch_instrumenters", device).values())
