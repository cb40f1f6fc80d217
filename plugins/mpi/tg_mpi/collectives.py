"""Collectives over the ranks of the world on tg Tensors of any device, staged through host buffers.

Every reduction is the same two steps, written with point-to-point messages (exchange.py) rather than MPI's own
reductions: each rank owns one contiguous chunk, receives every rank's part of it and reduces them **in rank
order** 0..n-1 with numpy, then sends its reduced chunk to all (reduce-scatter, then all-gather: 2(n-1)/n of the
data sent per rank, as a ring). Since each chunk is reduced once, by one rank, in an order that does not depend
on who computes it, the result is bit-identical on every rank for floats too, whatever MPI library runs
underneath (MPI does not promise that of MPI_Allreduce).

Before the data, the ranks swap a fixed-size header (the collective, op, dtype and shapes): ranks that disagree
all raise the same error listing every rank's call, instead of exchanging garbage or deadlocking.

Work runs on one thread per world, in the order it was issued (the tags keep messages of different collectives
apart), so `async_op=True` returns a `Work` at once and the caller's next kernels run while the messages move.
"""
from __future__ import annotations

import functools
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from tg_core.plugin_api import Tensor
from tg_mpi.exchange import CollectiveError, exchange

if TYPE_CHECKING:
    from tg_mpi.group import World

UFUNCS: dict[str, Callable[..., Any]] = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "mean": np.add}
KINDS = ("allreduce", "broadcast", "all_gather", "reduce_scatter", "mean", "all_equal")
HEADER = 16  # int64 words: kind, op, dtype crc, tensors, elements, ndim, 8 dims of the first shape, shapes crc, root

_executors: dict[int, ThreadPoolExecutor] = {}


def split(n: int, parts: int) -> list[tuple[int, int]]:
    """[start, end) of `parts` near-equal pieces of n (the first n % parts one longer), as numpy's array_split."""
    q, r = divmod(n, parts)
    starts = [i * q + min(i, r) for i in range(parts + 1)]
    return list(zip(starts[:-1], starts[1:]))


def _world(world: World | None) -> World:
    from tg_mpi.group import get_world
    return world if world is not None else get_world()


def _check_op(op: str, what: str, dtype: np.dtype) -> None:
    if op not in UFUNCS:
        raise ValueError(f"tg_mpi.{what}: op is one of {', '.join(UFUNCS)}, got {op!r}")
    if op == "mean" and not np.issubdtype(dtype, np.floating):
        raise TypeError(f"tg_mpi.{what}: op 'mean' needs a float tensor, got dtype {dtype} (use 'sum')")
    if dtype == np.bool_ and op != "max":
        raise TypeError(f"tg_mpi.{what}: op {op!r} on a bool tensor; bool allows 'max' (any rank true)")


def _host(t: Tensor, what: str, async_op: bool) -> np.ndarray:
    if not isinstance(t, Tensor):
        raise TypeError(f"tg_mpi.{what} takes a tg Tensor, got {type(t).__name__}")
    if isinstance(t.device, tuple):
        raise ValueError(f"tg_mpi.{what} takes a tensor on one device, got one sharded over {t.device}: reduce it "
                         f"over its devices first, or pass each rank's local tensor")
    if async_op:  # the caller runs on while the messages move, and may assign to t: send a snapshot
        return np.ascontiguousarray(t.numpy()).reshape(-1)
    # a blocking collective sends straight from the tensor's memory where the device is host memory (no copy)
    return np.asarray(t.data()).reshape(-1)


def _header(kind: str, op: str, dtype: np.dtype, shapes: Sequence[tuple[int, ...]], root: int = 0) -> np.ndarray:
    h = np.zeros(HEADER, dtype=np.int64)
    first = shapes[0] if shapes else ()
    h[:6] = [KINDS.index(kind), list(UFUNCS).index(op) if op in UFUNCS else -1, zlib.crc32(str(dtype).encode()),
             len(shapes), sum(int(np.prod(s)) for s in shapes), len(first)]
    h[6:6 + min(8, len(first))] = first[:8]
    h[14], h[15] = zlib.crc32(repr(list(shapes)).encode()), root
    return h


def _describe(h: np.ndarray, dtypes_by_crc: dict[int, str]) -> str:
    kind, op = KINDS[int(h[0])], list(UFUNCS)[int(h[1])] if h[1] >= 0 else "-"
    shape = tuple(int(x) for x in h[6:6 + min(8, int(h[5]))])
    return (f"{kind}(op={op}, dtype={dtypes_by_crc.get(int(h[2]), '?')}, {int(h[3])} tensor(s) of {int(h[4])} "
            f"elements, first shape {shape}, root {int(h[15])})")


def _check_headers(world: World, mine: np.ndarray, tag: int, what: str, dtype: np.dtype) -> None:
    """Swap headers with every rank; any difference is the same error on every rank, listing each rank's call."""
    peers = [p for p in range(world.size) if p != world.rank]
    got = {p: np.empty_like(mine) for p in peers}
    exchange(world.comm, {p: mine for p in peers}, got, tag + 1, what, world.timeout)
    got[world.rank] = mine
    if all(np.array_equal(got[p], mine) for p in peers):
        return
    names = {zlib.crc32(str(np.dtype(d)).encode()): str(np.dtype(d)) for d in
             (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
              np.uint32, np.uint64, np.bool_)}
    calls = "; ".join(f"rank {p}: {_describe(got[p], names)}" for p in range(world.size))
    raise CollectiveError(f"tg_mpi {what}: the ranks disagree on the collective (shapes, dtypes or ops differ): "
                          f"{calls}")


def _reduce_chunk(world: World, flat: np.ndarray, bounds: list[tuple[int, int]], op: str, tag: int,
                  what: str, out: np.ndarray | None = None) -> np.ndarray:
    """This rank's chunk of the reduction: every rank's part of it, reduced in rank order (into `out` when
    given: the caller's slice of the result, so the reduced chunk is never copied)."""
    me, peers = world.rank, [p for p in range(world.size) if p != world.rank]
    lo, hi = bounds[me]
    parts = {p: np.empty(hi - lo, dtype=flat.dtype) for p in peers}
    exchange(world.comm, {p: flat[bounds[p][0]:bounds[p][1]] for p in peers}, parts, tag, what, world.timeout)
    parts[me] = flat[lo:hi]
    acc = np.empty(hi - lo, dtype=flat.dtype) if out is None else out
    # the first two parts combine straight into acc (no copy of part 0 first); the order stays 0, 1, ..., n-1
    UFUNCS[op](parts[0], parts[1], out=acc)
    for r in range(2, world.size):
        UFUNCS[op](acc, parts[r], out=acc)
    if op == "mean":
        np.divide(acc, world.size, out=acc, casting="unsafe")
    return acc


def host_allreduce(flat: np.ndarray, op: str, what: str, world: World, tag: int | None = None) -> np.ndarray:
    """The reduction of every rank's `flat` (1-D, the same length everywhere), the same bits on every rank."""
    if world.size == 1:
        return flat.copy()
    tag = world.next_tag() if tag is None else tag
    bounds = split(len(flat), world.size)
    out = np.empty_like(flat)
    lo, hi = bounds[world.rank]
    mine = _reduce_chunk(world, flat, bounds, op, tag, what, out[lo:hi])
    peers = [p for p in range(world.size) if p != world.rank]
    exchange(world.comm, {p: mine for p in peers}, {p: out[bounds[p][0]:bounds[p][1]] for p in peers}, tag, what,
             world.timeout)
    return out


def _bucket(flat: np.ndarray, op: str, world: World, tag: int) -> np.ndarray:
    return host_allreduce(flat, op, "allreduce", world, tag)


class Work:
    """A collective in flight: `wait()` returns its result (a Tensor, or a list for `allreduce_many`) on the
    caller's device, or raises the collective's error; `done()` says whether the messages are through."""

    def __init__(self, futures: list[Future], finish: Callable[[list[Any]], Any]) -> None:
        self._futures, self._finish = futures, finish

    def done(self) -> bool:
        return all(f.done() for f in self._futures)

    def wait(self) -> Any:
        return self._finish([f.result() for f in self._futures])


def _submit(world: World, fn: Callable[[], Any]) -> Future:
    ex = _executors.get(id(world))
    if ex is None:
        ex = _executors[id(world)] = ThreadPoolExecutor(1, thread_name_prefix="tg-mpi")
    return ex.submit(fn)


def _run(world: World, what: str, hdr: np.ndarray, dtype: np.dtype, body: Callable[[int], Any]) -> Future:
    tag = world.next_tag()  # taken now, on the caller's thread: the issue order is the matching order

    def job() -> Any:
        if world.size > 1:
            _check_headers(world, hdr, tag, what, dtype)
        return body(tag)
    return _submit(world, job)


def _tensor(a: np.ndarray, like: Tensor) -> Tensor:
    return Tensor(a, device=like.device, dtype=like.dtype)


def _done(work: Work, async_op: bool) -> Any:
    return work if async_op else work.wait()


def allreduce(t: Tensor, op: str = "sum", *, async_op: bool = False, world: World | None = None) -> Any:
    """Every rank's `t` reduced with `op` (sum, prod, max, mean), on every rank, bit-identical; on `t`'s device."""
    return allreduce_many([t], op, async_op=async_op, world=world, bucket_bytes=0, _single=True)


def allreduce_many(tensors: Sequence[Tensor], op: str = "sum", *, async_op: bool = False,
                   world: World | None = None, bucket_bytes: int | None = None, _single: bool = False) -> Any:
    """`allreduce` of each tensor, with consecutive tensors of one dtype fused into messages of up to
    `bucket_bytes` (default devices.MPI.bucket_bytes): a model's many small gradients cost a few messages."""
    w = _world(world)
    what = "allreduce"
    arrays = [_host(t, what, async_op) for t in tensors]
    for a in arrays:
        _check_op(op, what, a.dtype)
    limit = w.bucket_bytes if bucket_bytes is None else bucket_bytes
    if limit < 0:
        raise ValueError(f"tg_mpi.allreduce_many: bucket_bytes is >= 0 (0: one message per tensor), got {limit}")
    buckets: list[list[int]] = []
    for i, a in enumerate(arrays):
        b = buckets[-1] if buckets else None
        if b is not None and arrays[b[0]].dtype == a.dtype and \
                sum(arrays[j].nbytes for j in b) + a.nbytes <= limit:
            b.append(i)
        else:
            buckets.append([i])
    futures = []
    for b in buckets:
        flat = arrays[b[0]] if len(b) == 1 else np.concatenate([arrays[j] for j in b])
        hdr = _header(what, op, flat.dtype, [tensors[j].shape for j in b])
        futures.append(_run(w, what, hdr, flat.dtype, functools.partial(_bucket, flat, op, w)))

    def finish(results: list[np.ndarray]) -> Any:
        out: list[Tensor] = []
        for b, r in zip(buckets, results):
            at = 0
            for j in b:
                n = arrays[j].size
                out.append(_tensor(r[at:at + n].reshape(tensors[j].shape), tensors[j]))
                at += n
        return out[0] if _single else out
    return _done(Work(futures, finish), async_op)


def broadcast(t: Tensor, root: int = 0, *, async_op: bool = False, world: World | None = None) -> Any:
    """Rank `root`'s `t` on every rank (each passes a tensor of the same shape and dtype, overwritten)."""
    w = _world(world)
    if not isinstance(root, int) or isinstance(root, bool) or not 0 <= root < w.size:
        raise ValueError(f"tg_mpi.broadcast: root is a rank from 0 to {w.size - 1}, got {root!r}")
    flat = _host(t, "broadcast", async_op)
    hdr = _header("broadcast", "-", flat.dtype, [t.shape], root)

    def body(tag: int) -> np.ndarray:
        if w.rank == root:
            exchange(w.comm, {p: flat for p in range(w.size) if p != root}, {}, tag, "broadcast", w.timeout)
            return flat
        out = np.empty_like(flat)
        exchange(w.comm, {}, {root: out}, tag, "broadcast", w.timeout)
        return out
    return _done(Work([_run(w, "broadcast", hdr, flat.dtype, body)],
                      lambda r: _tensor(r[0].reshape(t.shape), t)), async_op)


def all_gather(t: Tensor, *, async_op: bool = False, world: World | None = None) -> Any:
    """Every rank's `t` (the same shape on all), concatenated along axis 0 in rank order, on every rank."""
    w = _world(world)
    if not t.shape:
        raise ValueError("tg_mpi.all_gather concatenates along axis 0: it takes a tensor of at least 1 dimension, "
                         "got a 0-d one (reshape it to (1,))")
    flat = _host(t, "all_gather", async_op)
    hdr = _header("all_gather", "-", flat.dtype, [t.shape])

    def body(tag: int) -> np.ndarray:
        out = np.empty(flat.size * w.size, dtype=flat.dtype)
        n, peers = flat.size, [p for p in range(w.size) if p != w.rank]
        out[w.rank * n:(w.rank + 1) * n] = flat
        exchange(w.comm, {p: flat for p in peers}, {p: out[p * n:(p + 1) * n] for p in peers}, tag, "all_gather",
                 w.timeout)
        return out
    shape = (t.shape[0] * w.size, *t.shape[1:])
    return _done(Work([_run(w, "all_gather", hdr, flat.dtype, body)],
                      lambda r: _tensor(r[0].reshape(shape), t)), async_op)


def reduce_scatter(t: Tensor, op: str = "sum", *, async_op: bool = False, world: World | None = None) -> Any:
    """The reduction of every rank's `t` (as `allreduce`), of which each rank keeps its rows: rank r gets piece r
    of axis 0 split into `size` near-equal pieces (the first ones one row longer), (n-1)/n of the data sent."""
    w = _world(world)
    if not t.shape:
        raise ValueError("tg_mpi.reduce_scatter splits axis 0: it takes a tensor of at least 1 dimension, got 0-d")
    flat = _host(t, "reduce_scatter", async_op)
    _check_op(op, "reduce_scatter", flat.dtype)
    rows = split(t.shape[0], w.size)
    row = int(np.prod(t.shape[1:], dtype=np.int64))
    bounds = [(a * row, b * row) for a, b in rows]
    hdr = _header("reduce_scatter", op, flat.dtype, [t.shape])
    lo, hi = rows[w.rank]

    def body(tag: int) -> np.ndarray:
        if w.size == 1:
            return flat.copy()
        return _reduce_chunk(w, flat, bounds, op, tag, "reduce_scatter")
    return _done(Work([_run(w, "reduce_scatter", hdr, flat.dtype, body)],
                      lambda r: _tensor(r[0].reshape((hi - lo, *t.shape[1:])), t)), async_op)


__all__ = ["CollectiveError", "Work", "all_gather", "allreduce", "allreduce_many", "broadcast", "reduce_scatter",
           "split"]
