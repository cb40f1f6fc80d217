"""Multi-device tensors: a tensor graph over sharded values (MULTI nodes) lowered to one graph per device, with
the copies and collectives its ops need.

A MULTI node holds a tensor in shards: `src` are the shards (each a tensor graph on its own device, or one with no
buffer at all, such as a sharded constant), `arg` is ((device, box), ...) with one box per shard: the (start, end)
of every axis of the full tensor that shard holds. Two boxes are either equal (replicas: an unsharded axis, a
replicated tensor) or disjoint, and the distinct boxes tile the full shape. `Tensor.shard` makes one; the Tensor
layer builds ops over it as over any node, and `lower` (called by the engine for the targets whose device is a
tuple) rewrites the graph bottom-up into a `Layout` per node, one table row per op kind:

  elementwise            per shard, the operands brought to the layout of the most sharded one (no copy when they
                         already match; an unsharded operand is shrunk to each box on its own device)
  PERMUTE, FLIP, PAD,    per shard, the boxes moved with the axes (a FLIP mirrors them, a PAD grows the first and last
  EXPAND, SHRINK         shard of an axis; a SHRINK that would leave a device empty gathers what remains instead)
  RESHAPE                per shard when the sharded axis maps onto one new axis at shard boundaries, else gathered
  REDUCE_AXIS            per shard, then an allreduce over the shards whose boxes differ only on the reduced axes
  COPY to one device     gathered there (the shards copied over and put in place)
  anything else          its sharded operands gathered to every device first

Allreduce has three algorithms (tinygrad's switches): `RING=0` naive (every device reads every other part),
`RING=2` ring (reduce-scatter then all-gather in n chunks along the ring: 2(n-1)/n of the data sent per device),
`ALL2ALL=2` all-to-all (the same two phases, every chunk sent straight to its owner); RING's default 1 takes the ring
for more than two devices and more than 2^18 elements (ALL2ALL=1: the all-to-all), as tinygrad does. Every result
is one expression computed once and copied, so all devices get the same bits.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tg_core.dtype import dtypes
from tg_core.helpers import ContextVar, prod
from tg_core.uop.ops import GroupOp, Ops
from tg_core.uop.uop import UOp

RING = ContextVar("RING", 1)
ALL2ALL = ContextVar("ALL2ALL", 0)
_AUTO_MIN_ELEMENTS = 1 << 18  # the default (1) uses ring or all-to-all above this many elements on > 2 devices

Box = tuple[tuple[int, int], ...]
Shape = tuple[int, ...]
Placement = tuple[tuple[str, Box], ...]  # a MULTI's arg: (device, box) per shard


@dataclass(frozen=True)
class Shard:
    device: str
    box: Box
    node: UOp  # a plain (MULTI-free) graph of the box's shape, on `device` or on none


@dataclass(frozen=True)
class Layout:
    shards: tuple[Shard, ...]

    @property
    def placement(self) -> Placement:
        return tuple((s.device, s.box) for s in self.shards)

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(s.device for s in self.shards)

    @property
    def shape(self) -> Shape:
        return placement_shape(self.placement)


def placement_shape(placement: Placement) -> Shape:
    """The full shape a placement's boxes tile (the shape of its MULTI node)."""
    return tuple(max(box[i][1] for _, box in placement) for i in range(len(placement[0][1])))


def box_shape(box: Box) -> Shape:
    return tuple(e - s for s, e in box)


def full_box(shape: Shape) -> Box:
    return tuple((0, n) for n in shape)


def split(n: int, parts: int) -> list[tuple[int, int]]:
    """[0, n) in `parts` consecutive pieces whose sizes differ by at most one, the larger first (numpy's
    array_split)."""
    q, r = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        size = q + (1 if i < r else 0)
        out.append((start, start + size))
        start += size
    return out


def multi_node(shards: Sequence[Shard]) -> UOp:
    """The MULTI node of these shards."""
    return UOp(Ops.MULTI, shards[0].node.dtype, tuple(s.node for s in shards), tuple((s.device, s.box) for s in shards))


def layout_of_multi(u: UOp) -> Layout:
    return Layout(tuple(Shard(d, box, s) for (d, box), s in zip(u.arg, u.src)))


def replicated(devices: Sequence[str], shape: Shape) -> Placement:
    return tuple((d, full_box(shape)) for d in devices)


def device_of(node: UOp) -> str | None:
    return node.device


def copy_to(node: UOp, device: str) -> UOp:
    """`node` on `device`: itself when it is there or on no device (a constant is computed where it is used)."""
    if device_of(node) in (None, device):
        return node
    return UOp(Ops.COPY, node.dtype, (node, UOp(Ops.DEVICE, dtypes.void, (), device)))


def _combine(op: Ops, a: UOp, b: UOp) -> UOp:
    return a.alu(op, b)


def _place_pieces(pieces: list[tuple[UOp, Box]], box: Box) -> UOp:
    """Pieces (node, the part of `box` it holds, in full-tensor coordinates) that tile `box`, put together: each
    padded to the box with zeros and the pieces added (OR for bools), as `Tensor.cat` does."""
    out: UOp | None = None
    for node, part in pieces:
        placed = node.pad(tuple((ps - bs, be - pe) for (ps, pe), (bs, be) in zip(part, box)))
        out = placed if out is None else out.alu(Ops.OR if placed.dtype is dtypes.bool else Ops.ADD, placed)
    assert out is not None, "a box is always covered by at least one piece"
    return out


def _intersect(a: Box, b: Box) -> Box | None:
    out = tuple((max(s0, s1), min(e0, e1)) for (s0, e0), (s1, e1) in zip(a, b))
    return out if all(s < e for s, e in out) else None


def _relative(part: Box, within: Box) -> Box:
    return tuple((s - ws, e - ws) for (s, e), (ws, _) in zip(part, within))


def to_placement(value: UOp | Layout, placement: Placement) -> list[UOp]:
    """The nodes holding `value` in `placement`, one per (device, box): a shard already there is used as is (or
    shrunk on its device); otherwise the parts of other shards that cover the box are shrunk where they are,
    copied over and put in place (only the bytes the box needs move)."""
    if not isinstance(value, Layout):
        if value.tensor_shape == () and placement[0][1] != ():  # a scalar an ALU op broadcasts (gradient rules)
            return [copy_to(value, dev) for dev, _ in placement]
        return [copy_to(value.shrink(box), dev) for dev, box in placement]
    if value.placement == placement:
        return [s.node for s in value.shards]
    out = []
    for dev, box in placement:
        local = next((s for s in value.shards if s.device == dev and _intersect(s.box, box) == box), None)
        if local is not None:
            out.append(local.node.shrink(_relative(box, local.box)))
            continue
        pieces, seen = [], set()
        for s in value.shards:
            part = _intersect(s.box, box)
            if part is None or s.box in seen:
                continue
            seen.add(s.box)
            src = next((t for t in value.shards if t.box == s.box and t.device == dev), s)  # a local replica first
            pieces.append((copy_to(src.node.shrink(_relative(part, src.box)), dev), part))
        out.append(_place_pieces(pieces, box))
    return out


def gather(value: Layout, devices: Sequence[str]) -> Layout:
    """The whole tensor on each of `devices` (all-gather)."""
    placement = replicated(devices, value.shape)
    return Layout(tuple(Shard(d, box, n) for (d, box), n in zip(placement, to_placement(value, placement))))


def _distinct(devices: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(devices))


# ---- allreduce -----------------------------------------------------------------------------------------------

def allreduce(op: Ops, parts: Sequence[tuple[str, UOp]]) -> list[UOp]:
    """Each device's copy of the reduction (`op`: ADD, MUL or MAX) of all parts (one per device, equal shapes)."""
    n = len(parts)
    if n == 1:
        return [parts[0][1]]
    numel = parts[0][1].numel
    auto = n > 2 and numel > _AUTO_MIN_ELEMENTS
    if ALL2ALL.value >= 2 or (ALL2ALL.value >= 1 and auto):
        return _chunked(op, parts, ring=False)
    if RING.value >= 2 or (RING.value >= 1 and auto):
        return _chunked(op, parts, ring=True)
    return _naive(op, parts)


def _reduce_list(op: Ops, nodes: Sequence[UOp]) -> UOp:
    out = nodes[0]
    for x in nodes[1:]:
        out = _combine(op, out, x)
    return out


def _naive(op: Ops, parts: Sequence[tuple[str, UOp]]) -> list[UOp]:
    # the same order on every device, so every copy has the same bits
    return [_reduce_list(op, [copy_to(p, dev) for _, p in parts]) for dev, _ in parts]


def _chunked(op: Ops, parts: Sequence[tuple[str, UOp]], ring: bool) -> list[UOp]:
    """Reduce-scatter then all-gather over n chunks of the flattened parts: chunk k is reduced onto device k, then
    sent to the others (along the ring, each device forwarding what it received; or straight from k)."""
    n, shape = len(parts), parts[0][1].tensor_shape
    numel = prod(shape)
    devs = [d for d, _ in parts]
    flat = [(d, p.reshape((numel,))) for d, p in parts]
    chunks = [((lo, hi),) for lo, hi in split(numel, n)]
    live = [k for k, ((lo, hi),) in enumerate(chunks) if lo < hi]  # fewer elements than devices: some are empty
    reduced = reduce_scatter(op, flat, [chunks[k] for k in live], [devs[k] for k in live], ring)
    if _host_shared(devs):
        return _gathered_in_place(reduced, [chunks[k] for k in live], live, devs, ring, shape)
    got: list[list[tuple[UOp, Box]]] = [[] for _ in range(n)]
    for k, acc in zip(live, reduced):
        got[k].append((acc, chunks[k]))
        held = acc
        for j in range(1, n):
            i = (k + j) % n
            held = copy_to(held if ring else acc, devs[i])
            got[i].append((held, chunks[k]))
    return [_place_pieces(pieces, ((0, numel),)).reshape(shape) for pieces in got]


def _host_shared(devs: Sequence[str]) -> bool:
    """Whether every device's kernels may read every other's buffers in place (device.shares_memory)."""
    from tg_core.device import shares_memory
    return all(shares_memory(devs[0], d) for d in devs[1:])


def _gathered_in_place(reduced: Sequence[UOp], chunks: Sequence[Box], owners: Sequence[int], devs: Sequence[str],
                       ring: bool, shape: Shape) -> list[UOp]:
    """The all-gather between devices that share memory: each device's result is one buffer written chunk by chunk
    (AFTER its ASSIGNs), the owner's chunk by the reduction itself and every other chunk as a read in place from the
    device that forwards it (the ring's previous device, or the owner), so nothing is put together by padding. The
    scheduler stores such a read-back chunk from the reduction's kernel itself (rangeify `find_mirrors`): one kernel
    per chunk, which writes it into every device's buffer, (n-1)/n of the data sent per device as in the textbook."""
    n = len(devs)
    numel = prod(shape)
    bufs = [UOp.new_buffer(d, numel, reduced[0].dtype) for d in devs]
    writes: list[list[UOp]] = [[] for _ in range(n)]
    for acc, box, k in zip(reduced, chunks, owners):
        held = UOp(Ops.ASSIGN, acc.dtype, (bufs[k].shrink(box), acc))
        writes[k].append(held)
        owner = held
        for j in range(1, n):
            i = (k + j) % n
            src = held if ring else owner  # the chunk where it was written, read through the buffer that holds it
            held = UOp(Ops.ASSIGN, acc.dtype, (bufs[i].shrink(box), copy_to(src, devs[i])))
            writes[i].append(held)
    return [UOp(Ops.AFTER, b.dtype, (b.reshape(shape), *w)) for b, w in zip(bufs, writes)]


def reduce_scatter(op: Ops, parts: Sequence[tuple[str, UOp]], boxes: Sequence[Box], owners: Sequence[str],
                   ring: bool) -> list[UOp]:
    """Box k of the reduction of all parts, computed onto device `owners[k]`: along the ring of the parts' devices
    that ends there (each step one box-sized copy to the next device, which adds its own part), or with every
    part's box sent straight to the owner. Either way each device sends each box at most once."""
    n = len(parts)
    devs = [d for d, _ in parts]
    out = []
    for box, owner in zip(boxes, owners):
        pieces = [p.shrink(box) for _, p in parts]
        if ring:
            end = devs.index(owner) if owner in devs else n - 1
            order = [(end + j) % n for j in range(1, n + 1)]  # ends on the owner's part
            acc = pieces[order[0]]
            for i in order[1:]:
                acc = _combine(op, copy_to(acc, devs[i]), pieces[i])
            out.append(copy_to(acc, owner))
        else:
            out.append(_reduce_list(op, [copy_to(piece, owner) for piece in pieces]))
    return out


def use_ring(n: int, numel: int) -> bool:
    """Whether a reduce-scatter goes along the ring (RING=2, or the default for > 2 devices and large data)."""
    return RING.value >= 2 or (RING.value >= 1 and n > 2 and numel > _AUTO_MIN_ELEMENTS)


# ---- lowering --------------------------------------------------------------------------------------------------

_ELEMENTWISE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.CONTIGUOUS, Ops.DETACH}


class MultiDeviceError(ValueError):
    """An op over sharded tensors that cannot be built (tensors on different device sets)."""


def _same_devices(layouts: Sequence[Layout], what: Ops) -> None:
    sets = [_distinct(lay.devices) for lay in layouts]
    for s in sets[1:]:
        if set(s) != set(sets[0]):
            raise MultiDeviceError(f"{what.name} of tensors on different device sets {sets[0]} and {s}; move one "
                                   f"with .to() or .shard()")


class Lowerer:
    """Lowers tensor graphs over MULTI nodes; one instance memoizes across all the targets of one realize, so a
    node shared by two targets is lowered (and computed) once."""

    def __init__(self) -> None:
        self.memo: dict[UOp, UOp | Layout] = {}

    def lower(self, root: UOp) -> UOp | Layout:
        memo = self.memo
        for n in root.toposort():
            if n in memo:
                continue
            if n.op is Ops.MULTI:
                memo[n] = layout_of_multi(n)
                continue
            srcs = [memo[s] for s in n.src]
            if not any(isinstance(s, Layout) for s in srcs):
                memo[n] = n if all(a is b for a, b in zip(srcs, n.src)) else n.replace(src=tuple(srcs))
                continue
            memo[n] = self._rule(n, srcs)
        return memo[root]

    def _rule(self, n: UOp, srcs: list) -> UOp | Layout:
        op = n.op
        if op in _ELEMENTWISE or op is Ops.ASSIGN:
            return self._elementwise(n, srcs)
        lay = srcs[0]
        assert isinstance(lay, Layout), f"{op} over a sharded operand other than its first"
        if op is Ops.RESHAPE:
            return self._reshape(lay, n.arg)
        if op is Ops.PERMUTE:
            return Layout(tuple(Shard(s.device, tuple(s.box[i] for i in n.arg), s.node.permute(n.arg))
                                for s in lay.shards))
        if op is Ops.FLIP:
            full = lay.shape
            return Layout(tuple(Shard(s.device, tuple((full[i] - e, full[i] - b) if f else (b, e)
                                                      for i, ((b, e), f) in enumerate(zip(s.box, n.arg))),
                                      s.node.flip(n.arg)) for s in lay.shards))
        if op is Ops.EXPAND:  # only an axis of (full) size 1 grows, and such an axis is never split
            grown = [full == 1 and new != 1 for full, new in zip(lay.shape, n.arg)]
            shards = []
            for s in lay.shards:
                box = tuple((0, new) if g else be for be, new, g in zip(s.box, n.arg, grown))
                shards.append(Shard(s.device, box, s.node.expand(box_shape(box))))
            return Layout(tuple(shards))
        if op is Ops.PAD:
            return self._pad(lay, n.arg)
        if op is Ops.SHRINK:
            return self._shrink(lay, n.arg)
        if op is Ops.REDUCE_AXIS:
            return self._reduce(lay, n)
        if op is Ops.COPY:
            return to_placement(lay, ((n.src[1].arg, full_box(lay.shape)),))[0]
        # any other op: its sharded operands whole on every device
        devs = _distinct(lay.devices)
        whole = [gather(s, devs) if isinstance(s, Layout) else s for s in srcs]
        return Layout(tuple(Shard(d, full_box(n.tensor_shape),
                                  n.replace(src=tuple(w.shards[i].node if isinstance(w, Layout) else copy_to(w, d)
                                                      for w in whole)))
                            for i, d in enumerate(devs)))

    def _elementwise(self, n: UOp, srcs: list) -> Layout:
        layouts = [s for s in srcs if isinstance(s, Layout)]
        _same_devices(layouts, n.op)
        # the most sharded operand's layout (an ASSIGN: its destination's); the others are brought to it
        target = layouts[0] if n.op is Ops.ASSIGN else max(layouts, key=lambda lay: len({s.box for s in lay.shards}))
        pieces = [to_placement(s, target.placement) for s in srcs]
        return Layout(tuple(Shard(s.device, s.box, n.replace(src=tuple(p[i] for p in pieces)))
                            for i, s in enumerate(target.shards)))

    def _reshape(self, lay: Layout, new: Shape) -> Layout:
        old = lay.shape
        split_axes = {i for s in lay.shards for i, (b, e) in enumerate(s.box) if (b, e) != (0, old[i])}
        if not split_axes:
            return Layout(tuple(Shard(s.device, full_box(new), s.node.reshape(new)) for s in lay.shards))
        if len(split_axes) == 1:
            a = next(iter(split_axes))
            before, after = prod(old[:a]), prod(old[a + 1:])
            for j in range(len(new)):
                rest = prod(new[j + 1:])
                if prod(new[:j]) != before or new[j] * rest != old[a] * after or rest == 0:
                    continue
                if all(b * after % rest == 0 and e * after % rest == 0 for s in lay.shards for b, e in [s.box[a]]):
                    shards = []
                    for s in lay.shards:
                        b, e = s.box[a]
                        box = tuple((b * after // rest, e * after // rest) if i == j else (0, m) for i, m in enumerate(new))
                        shards.append(Shard(s.device, box, s.node.reshape(box_shape(box))))
                    return Layout(tuple(shards))
        # the sharded axis does not survive as one axis: every device reshapes the whole tensor
        return self._reshape(gather(lay, _distinct(lay.devices)), new)

    def _pad(self, lay: Layout, padding: tuple[tuple[int, int], ...]) -> Layout:
        full = lay.shape
        shards = []
        for s in lay.shards:
            mine = tuple((p0 if b == 0 else 0, p1 if e == n else 0) for (b, e), (p0, p1), n in zip(s.box, padding, full))
            box = tuple((b + (p0 if b > 0 else 0), e + p0 + (p1 if e == n else 0))
                        for (b, e), (p0, p1), n in zip(s.box, padding, full))
            shards.append(Shard(s.device, box, s.node.pad(mine)))
        return Layout(tuple(shards))

    def _shrink(self, lay: Layout, bounds: tuple[tuple[int, int], ...]) -> Layout:
        parts = [(s, _intersect(s.box, bounds)) for s in lay.shards]
        kept = tuple(Shard(s.device, _relative(part, bounds), s.node.shrink(_relative(part, s.box)))
                     for s, part in parts if part is not None)
        if len(kept) == len(parts):
            return Layout(kept)
        if not kept:  # an empty result: every device holds nothing
            return Layout(tuple(Shard(s.device, full_box(box_shape(bounds)), s.node.shrink(
                tuple((0, min(hi - lo, e - b)) for (lo, hi), (b, e) in zip(bounds, s.box)))) for s in lay.shards))
        # some devices would hold nothing: what remains is gathered to every device
        return gather(Layout(kept), _distinct(lay.devices))

    def _reduce(self, lay: Layout, n: UOp) -> Layout:
        op, axes = n.arg
        partial = [(s, tuple((0, 1) if i in axes else be for i, be in enumerate(s.box)),
                    n.replace(src=(s.node,))) for s in lay.shards]
        out: list[Shard | None] = [None] * len(partial)
        groups: dict[Box, list[int]] = {}
        for i, (_, box, _) in enumerate(partial):
            groups.setdefault(box, []).append(i)
        for box, members in groups.items():
            reps: dict[Box, int] = {}  # one part per distinct original box: replicas would count twice
            for i in members:
                reps.setdefault(partial[i][0].box, i)
            if len(reps) == 1:
                for i in members:
                    out[i] = Shard(partial[i][0].device, box, partial[i][2])
                continue
            rep_ids = list(reps.values())
            reduced = allreduce(op, [(partial[i][0].device, partial[i][2]) for i in rep_ids])
            for i, r in zip(rep_ids, reduced):
                out[i] = Shard(partial[i][0].device, box, r)
            for i in members:
                if out[i] is None:
                    out[i] = Shard(partial[i][0].device, box, copy_to(reduced[0], partial[i][0].device))
        return Layout(tuple(s for s in out if s is not None))


# ---- the engine's entry ------------------------------------------------------------------------------------------

def _own_buffer(node: UOp, device: str) -> UOp:
    """A write of `node` into a fresh buffer on `device` (a shard that reads no buffer, or one equal to another)."""
    shape = node.tensor_shape
    buf = UOp.new_buffer(device, max(prod(shape), 1), node.dtype)
    return UOp(Ops.ASSIGN, node.dtype, (buf.reshape(shape) if shape != (buf.arg,) else buf, node))


def as_layout(value: UOp | Layout, devices: Sequence[str]) -> Layout:
    """`value` as a layout over `devices`: a plain node (a constant) is replicated to each."""
    if isinstance(value, Layout):
        return value
    return Layout(tuple(Shard(d, full_box(value.tensor_shape), copy_to(value, d)) for d in devices))


def lower_targets(targets: Sequence[UOp], devices: Sequence[str | tuple[str, ...] | None]
                  ) -> tuple[list[UOp], list[str | None], Callable[[dict[UOp, UOp]], dict[UOp, UOp]]]:
    """The per-device targets for `targets` (those whose device is a tuple are sharded values, lowered), their
    devices, and the function turning the engine's results for them back into results for `targets` (a MULTI of
    the shards' buffers for a sharded target)."""
    lowerer = Lowerer()
    flat: list[UOp] = []
    flat_devs: list[str | None] = []
    groups: list[tuple[UOp, Placement, list[UOp]] | tuple[UOp, None, UOp]] = []
    seen: set[UOp] = set()
    for t, d in zip(targets, devices):
        if not isinstance(d, tuple):
            flat.append(t)
            flat_devs.append(d)
            groups.append((t, None, t))
            continue
        lay = as_layout(lowerer.lower(t), d)
        nodes = []
        for s in lay.shards:
            node = s.node
            if device_of(node) is None or node in seen:
                node = _own_buffer(node, s.device)
            seen.add(node)
            nodes.append(node)
            flat.append(node)
            flat_devs.append(s.device)
        groups.append((t, lay.placement, nodes))

    def rebuild(out: dict[UOp, UOp]) -> dict[UOp, UOp]:
        res: dict[UOp, UOp] = dict(out)
        for t, placement, nodes in groups:
            if placement is None:
                continue
            assert isinstance(nodes, list)
            bufs = []
            for (_, box), node in zip(placement, nodes):
                buf, shape = out[node], box_shape(box)
                bufs.append(buf.reshape(shape) if shape != (buf.arg,) else buf)
            res[t] = UOp(Ops.MULTI, t.dtype, tuple(bufs), placement)
        return res
    return flat, flat_devs, rebuild
