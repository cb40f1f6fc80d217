"""Sharded tensors at the Tensor layer: `shard`, `.to` across device sets, reading a sharded tensor back, and the
storage model's writes into shards. A sharded tensor's `device` is the tuple of its devices and its node a graph
over MULTI nodes (tg_core/schedule/multi.py holds the layout rules and collectives; the engine lowers sharded
targets there). See docs/architecture.md, "Multi-device".
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tg_core.device import Device
from tg_core.dtype import dtypes, to_numpy_dtype
from tg_core.engine.realize import buffer_of
from tg_core.helpers import prod
from tg_core.schedule.multi import (
    Box,
    Layout,
    Lowerer,
    Placement,
    as_layout,
    box_shape,
    full_box,
    multi_node,
    replicated,
    split,
    to_placement,
)
from tg_core.tensor.args import axis_arg
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

if TYPE_CHECKING:
    from tg_core.tensor.tensor import Tensor

DeviceArg = str | Sequence[Any]


def canonical_device(device: DeviceArg) -> str | tuple[str, ...]:
    """A device name, or a tuple of distinct device names (a sharded tensor's), canonicalized."""
    if isinstance(device, str):
        return Device.canonicalize(device)
    if not isinstance(device, (tuple, list)) or not device or not all(isinstance(d, str) for d in device):
        raise TypeError(f"a device is a name ('CPU:1') or a non-empty tuple of names, got {device!r}")
    devs = tuple(Device.canonicalize(d) for d in device)
    if len(set(devs)) != len(devs):
        raise ValueError(f"the devices of a sharded tensor are distinct, got {devs}")
    return devs


def is_sharded(t: Tensor) -> bool:
    dev: object = t._device
    return isinstance(dev, tuple)


def devices_of(t: Tensor) -> tuple[str, ...]:
    dev: object = t._device
    assert isinstance(dev, tuple), "devices_of takes a sharded tensor"
    return dev


def is_stored(u: UOp) -> bool:
    """Whether `u` is a MULTI of realized shards (each a buffer or a reshape of one)."""
    return u.op is Ops.MULTI and all(s.op is Ops.BUFFER or s.op is Ops.RESHAPE and s.src[0].op is Ops.BUFFER
                                     for s in u.src)


def _grid(devices: Any, depth: int) -> tuple[list[str], list[int]]:
    """A nested device list `depth` deep: its devices in row-major order and its extent per level."""
    if depth == 0:
        if not isinstance(devices, str):
            raise TypeError(f"shard: expected a device name, got {devices!r}")
        return [devices], []
    if not isinstance(devices, (list, tuple)) or not devices:
        raise TypeError(f"shard over {depth} axes takes devices nested {depth} deep (a grid), got {devices!r}")
    rows = [_grid(d, depth - 1) for d in devices]
    if any(r[1] != rows[0][1] for r in rows):
        raise ValueError(f"shard: the device grid {devices!r} is not rectangular")
    return [d for r in rows for d in r[0]], [len(devices)] + rows[0][1]


def placement_for(shape: tuple[int, ...], devices: Any, axis: int | tuple[int, ...] | None) -> Placement:
    """The (device, box) of every shard of a tensor of `shape` split along `axis` (normalized axes; None:
    replicated) over `devices` (a grid with one level per axis)."""
    if axis is None:
        names, _ = _grid(devices, 1)
        return replicated(list(canonical_device(names)), shape)
    axes = (axis,) if isinstance(axis, int) else axis
    names, extents = _grid(devices, len(axes))
    devs = canonical_device(names)
    assert isinstance(devs, tuple)
    per_axis: list[list[tuple[int, int]]] = []
    for a, n in zip(axes, extents):
        if shape[a] < n:
            raise ValueError(f"cannot shard axis {a} of shape {shape} over {n} devices: each device needs at least one "
                             f"element (an axis of size {shape[a]} splits over at most {shape[a]})")
        per_axis.append(split(shape[a], n))
    out = []
    for i, dev in enumerate(devs):
        box = list(full_box(shape))
        rest = i
        for level in reversed(range(len(axes))):  # row-major position in the grid
            rest, pos = divmod(rest, extents[level])
            box[axes[level]] = per_axis[level][pos]
        out.append((dev, tuple(box)))
    return tuple(out)


def lower(t: Tensor) -> Layout | UOp:
    return Lowerer().lower(t.uop) if is_sharded(t) else t.uop


def shard(t: Tensor, devices: Any, axis: int | Sequence[int] | None = None) -> Tensor:
    """`t` split along `axis` over `devices` (None: a full copy on each); an axis of size n splits into pieces of
    ceil or floor(n / devices), the larger first. Several axes (2D sharding) take a grid of devices."""
    from tg_core.tensor.tensor import Tensor
    if isinstance(devices, str):
        raise TypeError(f"shard takes a sequence of devices, got the single device {devices!r}; use .to() for one")
    if axis is None:
        norm: int | tuple[int, ...] | None = None
    elif isinstance(axis, int):
        norm = t._axis(axis)
    else:
        norm = tuple(t._axis(a) for a in axis)
        if len(set(norm)) != len(norm):
            raise ValueError(f"shard: axis {tuple(axis)} names an axis twice")
    placement = placement_for(t.shape, devices, norm)
    value: Layout | UOp = lower(t)
    if not isinstance(value, Layout) and value.device is not None:
        # a copy even onto the device `t` is on: a shard is storage of its own, never an alias of t's
        nodes = [UOp(Ops.COPY, value.dtype, (value.shrink(box), UOp(Ops.DEVICE, dtypes.void, (), dev)))
                 for dev, box in placement]
    else:
        nodes = to_placement(value, placement)
    out = Tensor(_multi(nodes, placement), device=[d for d, _ in placement])
    out.requires_grad = t.requires_grad
    return out


def _multi(nodes: Sequence[UOp], placement: Placement) -> UOp:
    return UOp(Ops.MULTI, nodes[0].dtype, tuple(nodes), placement)


def to(t: Tensor, device: DeviceArg) -> Tensor:
    """`t` on `device`: a sharded tensor moved to one device is gathered there; moved to as many devices, each
    shard moves to the device in its place; a single-device tensor moved to several is copied to each."""
    from tg_core.tensor.tensor import Tensor
    dev = canonical_device(device)
    if not is_sharded(t):
        return shard(t, list(dev))  # replicated
    value = lower(t)
    lay = as_layout(value, devices_of(t))
    if isinstance(dev, str):
        node = to_placement(lay, ((dev, full_box(t.shape)),))[0]
        return Tensor(node if node.device is not None else UOp(Ops.CONTIGUOUS, node.dtype, (node,)), device=dev)
    if dev == devices_of(t):
        return t
    if len(dev) != len(lay.shards):
        return shard(t.to(lay.devices[0]), list(dev))
    moved = tuple((d, box) for d, (_, box) in zip(dev, lay.placement))
    return Tensor(_multi(to_placement(lay, moved), moved), device=dev)


def to_numpy(t: Tensor) -> np.ndarray:
    """The whole value of a sharded tensor as one numpy array (each distinct shard read once)."""
    t.realize()
    u = t.uop
    if not is_stored(u):  # a view of shards that realize kept as a view
        from tg_core.engine.realize import realize
        u = realize([u], devices=[devices_of(t)])[u]  # type: ignore[list-item]
    out = np.empty(t.shape, dtype=to_numpy_dtype(t.dtype))
    done: set[Box] = set()
    for (_, box), src in zip(u.arg, u.src):
        if box in done:
            continue
        done.add(box)
        base = src if src.op is Ops.BUFFER else src.src[0]
        out[tuple(slice(s, e) for s, e in box)] = buffer_of(base).numpy().reshape(box_shape(box))
    return out


def fresh_write(value: UOp, devices: tuple[str, ...]) -> UOp:
    """`value` (a sharded graph) written into new storage of its own on each of its shards' devices."""
    from tg_core.tensor.storage import fresh_write as single
    lay = as_layout(Lowerer().lower(value), devices)
    return multi_node([s.__class__(s.device, s.box, single(s.node, s.device)) for s in lay.shards])


def split_writes(pairs: list[tuple[Tensor, UOp]]) -> list[tuple[Tensor, UOp]]:
    """Writes into sharded tensors as writes into each shard's storage, with the value brought to the shard's box
    (realizing a destination that holds no storage yet)."""
    from tg_core.tensor.tensor import Tensor
    out: list[tuple[Tensor, UOp]] = []
    lowerer = Lowerer()
    for t, v in pairs:
        if not is_sharded(t):
            out.append((t, v))
            continue
        if not is_stored(t.uop):
            t.realize()
        nodes = to_placement(as_layout(lowerer.lower(v), devices_of(t)), t.uop.arg)
        out.extend((Tensor(s, device=d), n) for (d, _), s, n in zip(t.uop.arg, t.uop.src, nodes))
    return out


# ---- collectives ----------------------------------------------------------------------------------------------

_OPS = {"sum": Ops.ADD, "prod": Ops.MUL, "max": Ops.MAX}


def _parts(parts: Tensor, what: str, op: str) -> tuple[Ops, list[tuple[str, UOp]]]:
    """The per-device contributions of `parts`: a tensor sharded along axis 0 with one row per device."""
    if op not in _OPS:
        raise ValueError(f"{what}: op is one of {', '.join(_OPS)}, got {op!r}")
    if not is_sharded(parts):
        raise ValueError(f"{what} takes a tensor sharded along axis 0 with one row per device, got one on the single "
                         f"device {parts.device}")
    lay = as_layout(lower(parts), devices_of(parts))
    n = len(lay.shards)
    if not parts.shape or parts.shape[0] != n or any(s.box[0] != (i, i + 1) for i, s in enumerate(lay.shards)):
        raise ValueError(f"{what} takes a tensor sharded along axis 0 with one row per device: {n} devices need shape "
                         f"({n}, ...) sharded with axis=0, got shape {parts.shape} placed as "
                         f"{[s.box for s in lay.shards]}")
    inner = parts.shape[1:]
    return _OPS[op], [(s.device, s.node.reshape(inner)) for s in lay.shards]


def allreduce(parts: Tensor, op: str = "sum") -> Tensor:
    """Every device's row of `parts` (sharded along axis 0, one row per device) reduced with `op` (sum, prod or
    max), the result on every device (replicated). The algorithm follows RING and ALL2ALL (schedule/multi.py)."""
    from tg_core.schedule.multi import allreduce as reduce_all
    from tg_core.tensor.tensor import Tensor
    rop, items = _parts(parts, "allreduce", op)
    nodes = reduce_all(rop, items)
    inner = parts.shape[1:]
    return Tensor(_multi(nodes, replicated([d for d, _ in items], inner)), device=[d for d, _ in items])


def reduce_scatter(parts: Tensor, op: str = "sum", axis: int = 0) -> Tensor:
    """The reduction of the rows of `parts` (as `allreduce`), left sharded along `axis` of the result: each device
    receives only its piece, (n-1)/n of the data sent per device."""
    from tg_core.schedule.multi import reduce_scatter as scatter
    from tg_core.schedule.multi import use_ring
    from tg_core.tensor.tensor import Tensor
    rop, items = _parts(parts, "reduce_scatter", op)
    inner = parts.shape[1:]
    a = axis_arg(axis, len(inner), inner, "reduce_scatter: axis")
    placement = placement_for(inner, [d for d, _ in items], a)
    nodes = scatter(rop, items, [box for _, box in placement], [d for d, _ in placement],
                    use_ring(len(items), prod(inner)))
    return Tensor(_multi(nodes, placement), device=[d for d, _ in items])


def all_gather(t: Tensor) -> Tensor:
    """The whole of the sharded `t` on each of its devices (replicated)."""
    if not is_sharded(t):
        raise ValueError(f"all_gather takes a sharded tensor, got one on the single device {t.device}")
    return shard(t, list(devices_of(t)))


def bytes_sent(t: Tensor) -> dict[str, int]:
    """The bytes each device sends in the schedule that would realize `t` now, by source device: its buffers
    copied by COPY items, the parts of them that kernels of other devices read in place, and what its kernels
    store into other devices' buffers (devices sharing memory, device.shares_memory); nothing runs. The benchmark
    compares these with the textbook figures."""
    from tg_core.engine.realize import build
    items = build([t.uop], [t.device])[0]
    out: dict[str, int] = {}

    def add(buf: UOp, nbytes: int) -> None:
        dev = Device.canonicalize(buf.src[1].arg)
        out[dev] = out.get(dev, 0) + nbytes
    for ast, nodes in items:
        if ast.op is Ops.COPY:
            add(nodes[1], nodes[1].arg * nodes[1].dtype.itemsize)
            continue
        for (i, stored), elements in peer_traffic(ast, nodes).items():
            add(nodes[0] if stored else nodes[i], elements * nodes[i].dtype.itemsize)
    return out


def peer_traffic(ast: UOp, nodes: Sequence[UOp]) -> dict[tuple[int, bool], int]:
    """The elements a kernel reads in place from (False) or stores into (True) each buffer of another device than
    its own (by PARAM index): the union of the index ranges (vmin..vmax) of those accesses, an upper bound exact
    for a chunk."""
    here = Device.canonicalize(nodes[0].src[1].arg)
    topo = ast.toposort()
    stored_at = {n.src[0] for n in topo if n.op is Ops.STORE}
    spans: dict[tuple[int, bool], list[tuple[int, int]]] = {}
    for n in topo:
        if n.op is Ops.INDEX and n.src[0].op is Ops.PARAM:
            i = n.src[0].arg
            if Device.canonicalize(nodes[i].src[1].arg) != here:
                lo, hi = max(int(n.src[1].vmin), 0), min(int(n.src[1].vmax), nodes[i].arg - 1)
                spans.setdefault((i, n in stored_at), []).append((lo, hi))
    out = {}
    for i, parts in spans.items():
        total, end = 0, -1
        for lo, hi in sorted(parts):
            if hi > end:
                total += hi - max(lo, end + 1) + 1
                end = hi
        out[i] = total
    return out


def shard_tensors(t: Tensor) -> list[Tensor]:
    """One tensor per shard of the sharded `t` (realized first), each a view of that shard's storage: TinyJit
    takes a sharded argument as these inputs."""
    from tg_core.tensor.tensor import Tensor
    if not is_stored(t.uop):
        t.realize()
    return [Tensor(s, device=d) for (d, _), s in zip(t.uop.arg, t.uop.src)]


def from_data(data: Any, devices: tuple[str, ...], dtype: Any) -> UOp:
    """The node of host data put on every device of `devices` (a list or array operand of a sharded tensor)."""
    from tg_core.tensor.tensor import Tensor
    return shard(Tensor(data, device=devices[0], dtype=dtype), list(devices)).uop
