"""The storage model: which tensors are views of storage, what realized storage was computed from, and
writing into storage.

A tensor whose node is a chain of view ops (RESHAPE, PERMUTE, EXPAND, SHRINK, FLIP, DETACH) over a BUFFER is
a view of that storage: it always shows the storage's current contents. Any other tensor is a value: it
means what its graph computed when it was built. `write` into storage runs at once, in one schedule with
every live unrealized value that reads the storage (those are computed first, from the old contents), so
laziness never changes what a program means. Assigning to a value gives it new storage (`fresh_write`);
assigning to a view of an unrealized value writes into that value's tensor, realized for it (`note_view`).

Three registries serve that and autograd (autograd.py):
- the live tensors (weak): a write finds the unrealized values that still read the old contents, and
  `backward()` finds the tensors that require grad in a graph (as tinygrad does);
- origins: realized BUFFER -> the graph it was computed from, so differentiation follows a realized buffer
  into that graph (while the backward graph reads the buffer wherever it needs the value);
- versions: BUFFER -> how many times it was written, so differentiating through a graph that read storage
  assigned since is an error (PyTorch's "modified by an inplace operation") instead of a wrong gradient.

nn/ (optimizer steps, state dicts) and engine/ (TinyJit) use these through the public names below.
`StorageMixin` holds the Tensor methods of the model: assign, clone, contiguous.
"""
from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from tg_core.dtype import dtypes
from tg_core.engine.realize import buffer_of, build, prepare
from tg_core.helpers import prod
from tg_core.tensor.args import shape_of
from tg_core.tensor.base import TensorBase
from tg_core.uop.ops import Ops
from tg_core.uop.sint import buffer_view, canonical, has_sym, smax
from tg_core.uop.uop import UOp

if TYPE_CHECKING:
    from tg_core.tensor.base import Operand
    from tg_core.tensor.tensor import Tensor

VIEW_OPS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP, Ops.DETACH})

_live: dict[int, weakref.ref[Tensor]] = {}
# BUFFER -> (the graph its value was computed from, {storage BUFFER that graph read: its version then})
_origins: weakref.WeakKeyDictionary[UOp, tuple[UOp, dict[UOp, int]]] = weakref.WeakKeyDictionary()
# BUFFER -> how many times it has been written since it was made
_versions: weakref.WeakKeyDictionary[UOp, int] = weakref.WeakKeyDictionary()
_version_refs: dict[weakref.ref[UOp], int] = _versions.data  # type: ignore[attr-defined]  # (never replaced)


# ---- the registry of live tensors --------------------------------------------------------------------------

def track(t: Tensor) -> None:
    """Add a new tensor to the live registry (every Tensor.__init__ does; it leaves when collected)."""
    key = id(t)

    def forget(ref: weakref.ref[Tensor], key: int = key) -> None:
        if _live.get(key) is ref:
            del _live[key]
    _live[key] = weakref.ref(t, forget)


def live_tensors() -> list[Tensor]:
    return [t for r in list(_live.values()) if (t := r()) is not None]


# ---- views of storage --------------------------------------------------------------------------------------

def storage_of(u: UOp) -> UOp | None:
    """The BUFFER a node is a view of, or None for a value."""
    while u.op in VIEW_OPS:
        u = u.src[0]
    return u if u.op is Ops.BUFFER else None


def buffers_in(root: UOp) -> list[UOp]:
    """The BUFFER nodes in a graph (one pass that stops at buffers: this runs on every realize)."""
    return list(_walk(root)[0])


# root -> (its BUFFER nodes, the realize points below it): what every realize asks of its targets, remembered
# for the roots asked about (a loop realizing the same hash-consed graph walks it once). The values hold only
# nodes of the key's graph, never the key itself, so an entry goes with its graph.
_WALKS: weakref.WeakKeyDictionary[UOp, tuple[tuple[UOp, ...], frozenset[UOp]]] = weakref.WeakKeyDictionary()


def _walk(root: UOp) -> tuple[tuple[UOp, ...], frozenset[UOp]]:
    """The BUFFER nodes of a graph (in the order of a depth-first walk that stops at buffers) and its realize
    points other than the root (CONTIGUOUS, and ASSIGN: a clone's write into its own storage)."""
    got = _WALKS.get(root)
    if got is not None:
        return got
    seen: set[UOp] = set()
    bufs: list[UOp] = []
    points: set[UOp] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op is Ops.BUFFER:
            bufs.append(n)
            continue
        if n.op is Ops.CONTIGUOUS or n.op is Ops.ASSIGN:
            points.add(n)
        stack.extend(n.src)
    points.discard(root)
    got = (tuple(bufs), frozenset(points) if points else _NONE)
    if root.op is not Ops.BUFFER:  # (a BUFFER's own entry would hold its key)
        _WALKS[root] = got
    return got


_READS: weakref.WeakKeyDictionary[UOp, frozenset[UOp]] = weakref.WeakKeyDictionary()
_NONE: frozenset[UOp] = frozenset()


def _reads_of(u: UOp) -> frozenset[UOp]:
    """A node's remembered set; a BUFFER's is made on the spot: remembered, its entry's value would hold its key,
    and the weak key would never die (every buffer a write had asked about stayed allocated for good: in SmolLM2's
    prefill captures, one activation per layer that the JIT could not plan away)."""
    return frozenset((u,)) if u.op is Ops.BUFFER else _READS[u]


def buffers_read(root: UOp) -> frozenset[UOp]:
    """The BUFFER nodes a graph reads, remembered per node (nodes are immutable): every write asks this of every
    live tensor (does it read a buffer being written?), and a model's hundreds of lazy weights would otherwise be
    walked whole at every write (a cache write per layer). A node shares its sources' set when it adds nothing."""
    if root.op is Ops.BUFFER:
        return _reads_of(root)
    got = _READS.get(root)
    if got is not None:
        return got
    for n in root.toposort(gate=lambda u: u not in _READS):
        if n in _READS or n.op is Ops.BUFFER:
            continue
        sets = {id(r): r for r in map(_reads_of, n.src) if r}
        _READS[n] = next(iter(sets.values())) if len(sets) == 1 else frozenset().union(*sets.values()) if sets else _NONE
    return _READS[root]


# ---- views of unrealized values ---------------------------------------------------------------------------
# A view of a value (a slice of `x.permute(1, 0).contiguous()`) has no storage to write into yet. So that an
# assign into it still lands in the tensor it views, each such view remembers its root: the tensor whose
# node its chain of view ops starts from. id(view) -> (the view, its node then, the root, the root's node then),
# keyed by id and dropped when the view is collected (Tensor's == is elementwise, so no WeakKeyDictionary).
_ViewEntry = tuple["weakref.ref[Tensor]", UOp, "weakref.ref[Tensor]", UOp]
_view_roots: dict[int, _ViewEntry] = {}


def note_view(parent: Tensor, view: Tensor) -> None:
    """`view` was made from `parent` by one view op (or is `parent`'s value again): remember the tensor at the bottom of its chain of views
    (a view of storage needs nothing: it writes into the storage already)."""
    u = view.uop
    # a view op that changes nothing (a reshape to the same shape) gives the parent's own node
    if u is not parent.uop and (u.op not in VIEW_OPS or u.src[0] is not parent.uop) or storage_of(u) is not None:
        return
    found = _view_root(parent)
    root, start = found if found is not None else (parent, parent.uop)
    key = id(view)

    def forget(ref: weakref.ref[Tensor], key: int = key) -> None:
        if (e := _view_roots.get(key)) is not None and e[0] is ref:
            del _view_roots[key]
    _view_roots[key] = (weakref.ref(view, forget), u, weakref.ref(root), start)


def _view_root(view: Tensor) -> tuple[Tensor, UOp] | None:
    """The live tensor `view` is still a view of, with the node the view's chain starts from (None if the
    view has been given a value of its own since, or its root is gone)."""
    e = _view_roots.get(id(view))
    if e is None or e[0]() is not view or e[1] is not view.uop or (root := e[2]()) is None:
        return None
    return root, e[3]


def _write_through(view: Tensor) -> bool:
    """Make `view`, a view of an unrealized value, a view of its root's storage, realizing the root first.
    The root's node now holds the value the view's chain was built on (it was realized from it, or written
    into since, which a view sees too), so the chain is rebuilt over it. Every other live view of the same
    root is rebuilt too: they are views of one tensor, and each must see the others' writes."""
    found = _view_root(view)
    if found is None:
        return False
    root, start = found
    if storage_of(root.uop) is None:
        root.realize()
    if storage_of(root.uop) is None:  # an empty root
        return False
    for key, (vref, vu, rref, ru) in list(_view_roots.items()):
        if rref() is root and ru is start and (v := vref()) is not None and v.uop is vu:
            v.uop = vu.substitute({start: root.uop})
            del _view_roots[key]
    return True


def _expands(u: UOp, start: UOp) -> bool:
    """Whether the chain of views from `u` down to `start` has an EXPAND."""
    while u is not start and u.op in VIEW_OPS:
        if u.op is Ops.EXPAND:
            return True
        u = u.src[0]
    return False


# ---- origins and versions ----------------------------------------------------------------------------------

def note_origin(buf: UOp, graph: UOp) -> None:
    """Remember that the storage `buf` now holds the value of `graph`."""
    # a write into buf itself (assigning to a value, clone) computed its value
    while graph.op is Ops.ASSIGN and storage_of(graph.src[0]) is buf:
        graph = graph.src[1]
    shape = shape_of(graph)
    if graph.op is Ops.DETACH or (not _int_shape(shape) and has_sym(shape)):
        # DETACH: nothing flows back through it, keeping it would only keep its inputs alive; a symbolic shape:
        # its buffer holds the value of one binding of its variables only, so gradients stop there
        _origins.pop(buf, None)
        return
    # (_versions.get inlined: this runs after every realize, and the WeakKeyDictionary's get is Python code;
    # ref(n) is the node's shared weak reference)
    versions, ref = _version_refs.get, weakref.ref
    reads = {}
    for n in _walk(graph)[0]:
        reads[n] = versions(ref(n), 0)
    if buf not in reads:  # a graph that reads buf's old contents cannot stand for its new ones
        _origins[buf] = (graph, reads)


def _int_shape(shape: tuple) -> bool:
    """Whether every dim is a plain int (the common case, checked before the recursive has_sym)."""
    for d in shape:
        if type(d) is not int:
            return False
    return True


def note_realized(before: list[tuple[Tensor, UOp]]) -> None:
    """After a realize: each (tensor, the node it had before) whose tensor now views storage."""
    for t, u in before:
        if t.uop is not u and (buf := storage_of(t.uop)) is not None:
            note_origin(buf, u)


def forget_origin(buf: UOp) -> None:
    """Gradients stop at `buf`: its contents are no longer what its graph computed (a TinyJit replay
    rewrites it)."""
    _origins.pop(buf, None)


def _realized_base(n: UOp) -> UOp | None:
    base = n if n.op is Ops.BUFFER else n.src[0] if n.op is Ops.RESHAPE and n.src[0].op is Ops.BUFFER else None
    return base if base is not None and base in _origins else None


def through_realized(roots: list[UOp]) -> tuple[dict[UOp, UOp], list[UOp]]:
    """For every realized BUFFER in the graphs of `roots` (and, transitively, in the graphs they were realized
    from): the graph that computed it, flattened like it. Also the graphs computed from storage that has been
    assigned since (stale: differentiating through them would use the new contents)."""
    through: dict[UOp, UOp] = {}
    stale: list[UOp] = []
    seen: set[UOp] = set()
    stack = list(roots)
    while stack:
        for n in stack.pop().toposort():
            if n in seen:
                continue
            seen.add(n)
            if n.op is not Ops.BUFFER or n not in _origins:
                continue
            # only the flat BUFFER links to its graph: its views reach it through their own gradient rules
            graph, reads = _origins[n]
            through[n] = graph.reshape(shape_of(n))
            if any(_versions.get(b, 0) != v for b, v in reads.items()):
                stale.append(graph)
            stack.append(graph)
    return through, stale


def origin_of(u: UOp) -> UOp:
    """The graph a realized tensor node was first computed from (u itself if it was not realized)."""
    while (base := _realized_base(u)) is not None and _origins[base][0].shape == u.shape:
        u = _origins[base][0]
    return u


# ---- writes ------------------------------------------------------------------------------------------------

def fresh_write(value: UOp, device: str) -> UOp:
    """`value` written into new storage of its own (a tuple of devices: on each shard's device, multi.py)."""
    if isinstance(device, tuple):
        from tg_core.tensor.multi import fresh_write as fresh_shards
        return fresh_shards(value, device)
    shape = shape_of(value)
    # a symbolic shape (tg_core/uop/sint.py) gets storage of its largest size, seen as its first numel elements
    buf = UOp.new_buffer(device, max(smax(canonical(prod(shape))), 1), value.dtype)
    # its memory now (allocated on first use): a schedule that writes it on the way to something else must
    # not take it for an intermediate whose memory can be shared, since this tensor keeps it
    buffer_of(buf)
    return UOp(Ops.ASSIGN, value.dtype, (buffer_view(buf, shape), value))


def distinct_values(tensors: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """Each tensor once; two tensors whose (hash-consed, so identical) graphs are equal get separate writes,
    or realized as one node they would share storage."""
    if len(tensors) == 1:
        return tensors
    tensors = tuple({id(t): t for t in tensors}.values())
    seen: dict[UOp, Tensor] = {}
    for t in tensors:
        if t.numel() != 0 and not t._is_realized() and storage_of(t.uop) is None:
            if seen.setdefault(t.uop, t) is not t:
                t.uop = fresh_write(t.uop, t.device)
    return tensors


def kept_intermediates(todo: Sequence[Tensor]) -> list[Tensor]:
    """The live tensors that are a realize point (CONTIGUOUS, or a clone's write into its own storage) inside
    the graphs of `todo`, and not themselves in it: the schedule computes them into a buffer on the way, so
    realized with `todo` they keep that buffer instead of running their kernel again when read. One tensor
    per node (equal graphs are one node, and giving two tensors one buffer would make them share storage)."""
    points: set[UOp] = set()
    for t in todo:
        if t.uop.op is not Ops.BUFFER:
            points.update(_walk(t.uop)[1])
    if not points:  # the common case: no live tensor scan
        return []
    points.difference_update(t.uop for t in todo)
    out: dict[UOp, Tensor] = {}
    for t in live_tensors():
        if t.uop in points and t.uop not in out and not dtypes.is_weak(t.dtype):
            out[t.uop] = t
    return list(out.values())


def write(pairs: list[tuple[Tensor, UOp]], others: Sequence[Tensor] = (), calls: Sequence[UOp] = ()) -> None:
    """Write each value into the storage its tensor views, all in one schedule (simultaneously: every value
    is what it was before any of the writes), after computing the live values that read those buffers.
    `others` are realized in the same schedule. `calls` are custom kernels (tensor/custom.py: CALL(kernel AST,
    *BUFFERs)) that write their buffers in place; they run after the readers, before the writes.

    Computing those readers now is only the cheap way to keep their values. A reader the device cannot
    build (a dtype it cannot compile) stays lazy instead, reading a copy of the old contents made in the
    schedule, so its error is raised when it is realized itself and the write goes ahead."""
    # every pair's tensor views storage (a value is given new storage by assign, not written); a sharded
    # tensor's storage is its shards' (multi.py), written shard by shard
    skip = {id(t) for t, _ in pairs}
    if any(isinstance(t.device, tuple) for t, _ in pairs):
        from tg_core.tensor.multi import split_writes
        pairs = split_writes(pairs)
    bases = {b for t, _ in pairs if (b := storage_of(t.uop)) is not None} | {b for c in calls for b in c.src[1:]}
    skip |= {id(t) for t, _ in pairs}
    lazy = [r for r in live_tensors() if id(r) not in skip and r.numel() != 0 and storage_of(r.uop) is None
            and not bases.isdisjoint(buffers_read(r.uop))]
    others = [o for o in others if not o._is_realized() and storage_of(o.uop) is None and all(o is not r for r in lazy)]
    for t, v in pairs:
        if v.shape != t.shape or v.dtype != t.dtype:
            raise ValueError(f"cannot write a {v.dtype!r} value of shape {v.shape} into a {t.dtype!r} tensor "
                             f"of shape {t.shape}")
    writes = [UOp(Ops.ASSIGN, t.dtype, (t.uop, v)) for t, v in pairs]
    if not lazy and not others and not writes and not calls:
        return
    writes = list(calls) + writes
    write_devs = [c.src[1].src[1].arg for c in calls] + [t.device for t, _ in pairs]
    readers: list[Tensor] = lazy + list(others)
    stale: list[Tensor] = []
    snapshots: dict[UOp, UOp] = {}
    targets = _reader_targets(readers)
    try:
        run = prepare(targets + writes, devices=[r.device for r in readers] + write_devs)
    except Exception:  # nothing ran (prepare builds every kernel first)
        stale = [r for r in lazy if not _builds(r)]
        if not stale:
            raise  # the writes (or `others`) cannot be built: that is the error
        snapshots = {b: UOp(Ops.COPY, b.dtype, (b, UOp(Ops.DEVICE, dtypes.void, (), b.src[1].arg))) for b in bases
                     if any(b in r.uop.toposort() for r in stale)}
        readers = [r for r in readers if all(r is not s for s in stale)]
        targets = _reader_targets(readers) + list(snapshots.values())
        run = prepare(targets + writes, devices=[r.device for r in readers] + [b.src[1].arg for b in snapshots]
                      + write_devs)
    out = run()
    for r, u in zip(readers, targets):
        note_origin(out[u], r.uop)
        r.uop = buffer_view(out[u], r.shape)
    copies = {b: out[c] for b, c in snapshots.items()}
    for old, c in copies.items():
        note_origin(c, old)  # gradients into the old contents stop as they do for the readers realized above
    for r in stale:
        r.uop = r.uop.substitute(copies)
    for b in bases:
        # what was computed from the old contents can no longer be differentiated through them
        _versions[b] = _versions.get(b, 0) + 1
        _origins.pop(b, None)


def _reader_targets(readers: list[Tensor]) -> list[UOp]:
    targets: list[UOp] = []
    seen: set[UOp] = set()
    for r in readers:
        # hash-consing gives equal graphs one node; realized once, they would share one buffer
        targets.append(r.uop if r.uop not in seen else fresh_write(r.uop, r.device))
        seen.add(r.uop)
    return targets


def _builds(t: Tensor) -> bool:
    """Whether the device can build the kernels that compute `t` (nothing is run)."""
    try:
        build([t.uop], [t.device])
    except Exception:  # whatever it is, realizing `t` itself raises it again
        return False
    return True


class StorageMixin(TensorBase):
    """The Tensor methods of the storage model."""
    __slots__ = ()

    def assign(self, x: Operand) -> Tensor:
        """Give this tensor the value `x` (broadcast and cast to this tensor's shape and dtype). A view of
        storage has `x` written into it, seen by every view of that storage; so does a view of an unrealized
        tensor, whose root is realized first (`_write_through`); any other tensor gets new storage. An
        expanded view is an error. A tensor on another device is copied to this one."""
        me = cast("Tensor", self)
        v = self._operand(x).to(self.device)._cast_to(self.dtype)._broadcast_to(self.shape)
        if v.uop is self.uop:
            return me
        base = storage_of(self.uop)
        if base is None and self.uop.op is Ops.MULTI and isinstance(self.device, tuple):
            from tg_core.tensor.multi import is_stored
            if is_stored(self.uop):  # sharded storage: written shard by shard
                write([(me, v.uop)])
                return me
        if base is None and (found := _view_root(me)) is not None and _expands(self.uop, found[1]):
            raise RuntimeError(f"cannot assign to an expanded view of shape {self.shape}: several of its elements "
                               f"are one element of the {found[0].shape} tensor it views")
        if base is None and self.numel() != 0 and _write_through(me):
            base = storage_of(self.uop)
        if base is None or self.numel() == 0:
            self.uop = fresh_write(v.uop, self.device) if self.numel() != 0 else v.uop
            return me
        if any(n.op is Ops.EXPAND for n in self.uop.toposort(gate=lambda n: n.op is not Ops.BUFFER)):
            raise RuntimeError(f"cannot assign to an expanded view of shape {self.shape}: several of its elements "
                               "are one element of the storage")
        write([(me, v.uop)])
        return me

    def clone(self) -> Tensor:
        """A copy in storage of its own, holding this tensor's value as of now (even if this tensor is
        assigned before the copy is realized)."""
        if self.numel() == 0:
            return self._new(self.uop)
        return self._new(fresh_write(self.uop, self.device))

    def contiguous(self) -> Tensor:
        """This value laid out densely in a buffer of its own shape. It only asks for a layout: a tensor that
        already is one dense buffer is returned as is (so it may share storage), anything else is realized
        into a buffer when it is realized."""
        if self._is_realized():
            return cast("Tensor", self)
        return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))
