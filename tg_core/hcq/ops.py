"""The UOps of the hcq pipeline: queues, queue ops, words, placeholders, addresses, and the host statements.

Everything from a batch on is a UOp graph that `PatternMatcher`s rewrite (docs/architecture.md, hcq):

- a **queue op** is an `Ops.INS` node whose arg is `(kind, queue, *extra)`, kind one of `QUEUE_OPS`:
  `exec` (src: the kernel's buffers, then its variables; extra: the kernel AST, the number of buffers), `copy` (src: dst, src; extra:
  nbytes), `wait` (src: signal address, value: wait until the u64 there is >= value), `signal` and `store`
  (src: address, value: a u64 store; a signal is what other queues wait on), `timestamp` (src: address: the
  device clock is stored there), `barrier` (no src: earlier work's memory is visible to later work);
- a **submit** is `CUSTOM_FUNCTION(LINEAR(queue ops))` whose arg is a `Submit` (its name
  `submit_<device kind>_<queue kind>`, e.g. `submit_hcqref_compute`); one per queue per batch;
- **words** (`INS("words", queue)`, src: the words) are what a device's `pm_encode` rule makes of a queue op:
  a word is a CONST (uint32 or uint64: constant blob bytes) or any other UOp of those dtypes (a symbolic
  word: an address, a signal value, a variable), patched later;
- a **placeholder** is a `PARAM` tagged with its role (`program`, `scratch`, `timeline`, `signal`, `slots`,
  `cmdbuf_<q>`, `ring_<q>`, `write_ptr_<q>`, `doorbell_<q>`, `put_value_<q>`, `inputs`, ...) and an arg
  `("hcq", device, nbytes, key)`; it becomes a device buffer at link (`pm_bufferize`);
- an **input** is an untagged `PARAM` `("input", slot, device, nbytes)`: a JIT input whose address changes per
  run and is read from the batch's address table;
- `mem(buf)` is linked memory (a `BUFFER` node whose arg is a `Mem` holding the Buffer); `addr(x, off)` is
  the address of a placeholder, input or mem plus a byte offset (`INS("addr")`, uint64);
- **host statements** (what `pm_lower` makes of a submit, and what the host program runs): `STORE(INDEX(ref,
  byte offset), value)`, `LOAD(INDEX(ref, byte offset), dtype)` (host programs index *bytes*), `INS("blob",
  ref)` (constant bytes at an offset), `INS("host_wait", ref)` (spin until the u64 at a byte offset is >=
  a value, bounded by TG_HCQ_TIMEOUT_MS), and `INS("doorbell")` (the MMIO write that wakes a queue).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from tg_core.device import Buffer
from tg_core.dtype import DType, dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

QUEUE_OPS = ("exec", "copy", "wait", "signal", "timestamp", "barrier", "store")
QUEUE_KINDS = ("COMPUTE", "COPY")


@dataclass(frozen=True)
class Queue:
    """A hardware queue of a device: `Queue("HCQREF", "COMPUTE:0")`."""
    device: str
    name: str

    def __post_init__(self) -> None:
        kind, _, idx = self.name.partition(":")
        if kind not in QUEUE_KINDS or not idx.isdigit():
            raise ValueError(f"queue {self.name!r} of {self.device}: a queue is KIND:n with KIND one of "
                             f"{', '.join(QUEUE_KINDS)} (e.g. COMPUTE:0)")

    @property
    def kind(self) -> str:
        return self.name.split(":")[0]

    @property
    def slug(self) -> str:
        """The queue as placeholder tags name it: 'compute_0'."""
        return self.name.lower().replace(":", "_")

    def __str__(self) -> str:
        return f"{self.device} {self.name}"


@dataclass(frozen=True)
class Submit:
    """The arg of a submit: its queue and its function name."""
    queue: Queue

    @property
    def name(self) -> str:
        return f"submit_{self.queue.device.split(':')[0].lower()}_{self.queue.kind.lower()}"


@dataclass(frozen=True, eq=False)
class Mem:
    """Linked memory: a Buffer (by identity) in a UOp's arg."""
    buf: Buffer

    def __repr__(self) -> str:
        return f"Mem({self.buf!r})"


_BYTES = dtypes.uint8.ptr()


def placeholder(tag: str, nbytes: int, device: str, key: Any = None) -> UOp:
    """A device buffer of `nbytes` that the link makes from its tag (and key: placeholders with equal tag, device
    and key are one buffer)."""
    return UOp(Ops.PARAM, _BYTES, (), ("hcq", device, nbytes, key), tag)


def input_ref(slot: int, device: str, nbytes: int) -> UOp:
    """Input `slot` of a linked batch: its address is read from the address table at every run."""
    return UOp(Ops.PARAM, _BYTES, (), ("input", slot, device, nbytes))


def mem(buf: Buffer) -> UOp:
    return UOp(Ops.BUFFER, _BYTES, (), Mem(buf))


def nbytes_of(ref: UOp) -> int:
    """The size in bytes of a placeholder, input or mem."""
    if ref.op is Ops.BUFFER:
        return ref.arg.buf.nbytes
    return ref.arg[3] if ref.arg[0] == "hcq" else ref.arg[3]


def device_of(ref: UOp) -> str:
    if ref.op is Ops.BUFFER:
        return ref.arg.buf.device
    return ref.arg[1] if ref.arg[0] == "hcq" else ref.arg[2]


def is_input(ref: UOp) -> bool:
    return ref.op is Ops.PARAM and ref.arg[0] == "input"


def addr(ref: UOp, offset: int = 0) -> UOp:
    """The device address of byte `offset` of `ref`."""
    return UOp(Ops.INS, dtypes.uint64, (ref,), ("addr", offset))


def ins(kind: str, queue: Queue, *src: UOp, extra: tuple = ()) -> UOp:
    """A queue op of `kind` on `queue`."""
    if kind not in QUEUE_OPS:
        raise ValueError(f"unknown queue op {kind!r}; queue ops: {', '.join(QUEUE_OPS)}")
    return UOp(Ops.INS, dtypes.void, tuple(src), (kind, queue, *extra))


def is_queue_op(u: UOp) -> bool:
    return u.op is Ops.INS and u.arg[0] in QUEUE_OPS


def submit(queue: Queue, ops: list[UOp]) -> UOp:
    return UOp(Ops.CUSTOM_FUNCTION, dtypes.void, (UOp(Ops.LINEAR, dtypes.void, tuple(ops)),), Submit(queue))


def words(queue: Queue, *ws: UOp | int) -> UOp:
    """Command words (ints are uint32 constants)."""
    return UOp(Ops.INS, dtypes.void, tuple(u32(w) if isinstance(w, int) else w for w in ws), ("words", queue))


def u32(v: int) -> UOp:
    return UOp.const(dtypes.uint32, v & 0xFFFFFFFF)


def u64(v: int | UOp) -> UOp:
    return UOp.const(dtypes.uint64, v & 0xFFFFFFFFFFFFFFFF) if isinstance(v, int) else v.cast(dtypes.uint64)


# ---- host statements ------------------------------------------------------------------------------------

def host_load(ref: UOp, offset: int, dtype: DType = dtypes.uint64) -> UOp:
    return UOp(Ops.LOAD, dtype, (UOp(Ops.INDEX, _BYTES, (ref, UOp.const(dtypes.int64, offset))),))


EVERY_RUN = "every_run"  # the arg of a host STORE that link must keep in the per-run program


def host_store(ref: UOp, offset: int | UOp, value: UOp, every_run: bool = False) -> UOp:
    """Store `value` at `ref` + `offset`. A store of a constant at a constant offset is a link-time patch, done
    once; `every_run` keeps it in the host program (state the queues change and each run resets, such as a
    queue's signal re-armed to 0)."""
    off = UOp.const(dtypes.int64, offset) if isinstance(offset, int) else offset.cast(dtypes.int64)
    return UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, _BYTES, (ref, off)), value), EVERY_RUN if every_run else None)


def host_blob(ref: UOp, offset: int, data: bytes) -> UOp:
    return UOp(Ops.INS, dtypes.void, (ref,), ("blob", offset, bytes(data)))


def host_wait(ref: UOp, offset: int, value: UOp, what: tuple = ()) -> UOp:
    """Spin until the u64 at `ref`+`offset` >= `value`; `what` names the wait for the timeout error."""
    return UOp(Ops.INS, dtypes.void, (ref, value), ("host_wait", offset, what))


def doorbell(queue: Queue, ref: UOp, value: UOp) -> UOp:
    """Ring `queue`'s doorbell: store `value` (u64) at `ref` and wake the queue."""
    return UOp(Ops.INS, dtypes.void, (ref, value), ("doorbell", queue))


def linear(*stmts: UOp) -> UOp:
    return UOp(Ops.LINEAR, dtypes.void, tuple(stmts))


def _word_bytes(w: UOp) -> bytes | None:
    """The blob bytes of a constant word, None for a symbolic one."""
    c = w
    while c.op is Ops.CAST and c.src[0].op is Ops.CONST:
        c = UOp.const(c.dtype, c.src[0].arg)
    if c.op is not Ops.CONST:
        return None
    return struct.pack("<Q" if c.dtype.itemsize == 8 else "<I", int(c.arg) & ((1 << (8 * c.dtype.itemsize)) - 1))


def command_buffer(queue: Queue, ws: list[UOp], key: Any, *extra: UOp) -> UOp:
    """The command buffer of `queue` holding words `ws`: `INS("cmdbuf", queue, nbytes)` whose sources are the
    placeholder `cmdbuf_<queue>` (keyed by `key`, e.g. the batch), the host statements writing it (one blob of
    the constant words, one store per symbolic word) and `extra` (what a device's lower rule needs besides)."""
    blob = bytearray()
    patches: list[tuple[int, UOp]] = []
    for w in ws:
        if w.dtype not in (dtypes.uint32, dtypes.uint64):
            raise TypeError(f"{queue}: a command word must be uint32 or uint64, got {w.dtype!r} ({w.render()[:80]})")
        got = _word_bytes(w)
        if got is None:
            patches.append((len(blob), w))
            got = bytes(w.dtype.itemsize)
        blob += got
    if not blob:
        raise ValueError(f"{queue}: the submit encodes to no command words")
    buf = placeholder(f"cmdbuf_{queue.slug}", len(blob), queue.device, key=key)
    stmts = [host_blob(buf, 0, bytes(blob))] + [host_store(buf, off, w) for off, w in patches]
    return UOp(Ops.INS, dtypes.void, (buf, linear(*stmts), *extra), ("cmdbuf", queue, len(blob)))
