"""Memory reuse while a TinyJit captures (engine/jit.py): an intermediate that died may hold a later one.

During a capture every exec item the engine runs is recorded with its buffers, and the record keeps them
alive, so without this each realize of the captured function allocates fresh memory: the peak of a capture is
the sum of all its intermediates (a 30-layer model's prefill chunk: 29 layers' worth, ~40 MB, planned down to
~1 MB only afterwards by `jit._plan`). `CaptureRecycler` gives a buffer the engine is about to allocate the memory
of a recorded buffer that is dead: no live BUFFER node maps to it (`realize._buffers`, a weak map: no later
item can name it), so no later item reads it. The new node simply gets the dead Buffer object itself
(`realize.attach`), the way `realize._plan_memory` shares a buffer between the intermediates of one schedule, and
the record then holds one buffer with lifetimes that follow each other in item order, which a replay repeats.

Not recycled: views and buffers with views (their memory is shared with others), buffers whose first recorded
use reads them (they hold data from the host, which a replay needs), the RNG key and device-side check buffers
(a replay writes and reads them outside the items), and buffers of command-queue devices (their items run later,
in a batch: the memory may still be in use when the engine hands it out).
"""
from __future__ import annotations

from collections import defaultdict

from tg_core.device import Buffer, Device
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp


def written_params(ast: UOp) -> set[int]:
    """Positions in an exec item's buffers that its kernel (or COPY) writes."""
    if ast.op is Ops.COPY:
        return {0}
    out = set()
    for u in ast.toposort():
        if u.op is Ops.STORE:
            p = u.src[0].src[0] if u.src[0].op is Ops.INDEX else u.src[0]
            if p.op is Ops.PARAM:
                out.add(p.arg if isinstance(p.arg, int) else p.arg[0])
    return out


def _key(b: Buffer) -> tuple:
    return (b.device, b.size, b.dtype, b.options)


class CaptureRecycler:
    """The engine's hook during one capture (`capture.recycle`): `sweep` once per realize, before its items
    run, then `take(nodes)` before each kernel item allocates its buffers."""

    def __init__(self, items: list, rng_keys: list[Buffer], checks: list) -> None:
        # the capture state's own lists: read as they grow
        self.items, self.rng_keys, self.checks = items, rng_keys, checks
        self._scanned = 0                               # items already looked at
        self._seen: set[int] = set()                    # ids of buffers met in the record (held by it)
        self._candidates: dict[int, Buffer] = {}        # recorded buffers that may be recycled once dead
        self._free: dict[tuple, list[Buffer]] = defaultdict(list)  # dead ones, by (device, size, dtype, options)
        self._given: dict[int, tuple[Buffer, Buffer]] = {}  # this realize: id(fresh buffer) -> (it, recycled one)
        self._written: dict[UOp, set[int]] = {}         # per kernel AST (layers repeat kernels)
        self._sync: dict[str, bool] = {}                # per device: items run when the engine calls them
        self.reused_bytes = 0                           # what recycling saved (tests and measurements)

    def _synchronous(self, device: str) -> bool:
        got = self._sync.get(device)
        if got is None:
            got = self._sync[device] = not getattr(Device[device], "hcq", False)
        return got

    def _scan(self) -> None:
        """Register the buffers of the items recorded since the last scan."""
        for _, bufs, ast in self.items[self._scanned:]:
            writes = self._written.get(ast)
            if writes is None:
                writes = self._written[ast] = written_params(ast)
            for p, b in enumerate(bufs):
                if b is None or id(b) in self._seen:
                    continue
                self._seen.add(id(b))
                if p in writes and not b.is_view and b._views is None and self._synchronous(b.device):
                    self._candidates[id(b)] = b
        self._scanned = len(self.items)

    def sweep(self) -> None:
        """Move the candidates no live node holds (dead: no later item can read them) to the free lists."""
        from tg_core.engine.realize import _buffers
        self._given.clear()
        self._scan()
        if not self._candidates:
            return
        live = {id(b.base) for b in _buffers.values()}
        live.update(id(b) for b in self.rng_keys)
        live.update(id(b) for _, b in self.checks)
        for k in [k for k in self._candidates if k not in live]:
            b = self._candidates.pop(k)
            if b._views is None:  # a view made since it was recorded shares its memory: not free
                self._free[_key(b)].append(b)

    def take(self, nodes: list[UOp]) -> None:
        """Give each of `nodes` whose buffer is not allocated yet a dead recorded buffer of its kind, if any."""
        from tg_core.engine.realize import _buffers, attach
        for n in nodes:
            b = _buffers.get(n)
            if b is None:  # no Buffer made yet (a schedule of one item plans nothing): the engine would make one
                free = self._free.get((Device.canonicalize(n.src[1].arg), n.arg, n.dtype, None))
                if free:
                    d = free.pop()
                    self._candidates[id(d)] = d  # live again; recyclable when it dies again
                    self.reused_bytes += d.nbytes
                    attach(n, d)
                continue
            if b.is_allocated() or b.is_view:
                continue
            got = self._given.get(id(b))
            if got is None:  # the schedule's own planning may map several nodes to this buffer: all get one
                free = self._free.get(_key(b))
                if not free:
                    continue
                got = self._given[id(b)] = (b, free.pop())
                self._candidates[id(got[1])] = got[1]
                self.reused_bytes += b.nbytes
            attach(n, got[1])


__all__ = ["CaptureRecycler", "written_params"]
