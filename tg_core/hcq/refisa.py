"""The command words of the reference HCQ device (refdev.py) and its three matchers: encode, lower, bufferize.

Words are little-endian dwords; a command is a header `opcode << 24 | n` followed by n payload dwords (u64 fields
take two, low first):

| opcode | payload |
|---|---|
| EXEC 1 | program address u64, program bytes u32, nbufs u32, per buffer (address u64, nbytes u32), nvars u32, per variable (value u64) in name order |
| COPY 2 | dst u64, src u64, nbytes u64 |
| WAIT 3 | address u64, value u64: stall until the u64 at address >= value |
| SIGNAL 4 / STORE 7 | address u64, value u64: store the u64 |
| TIMESTAMP 5 | address u64: store the device clock (ns) |
| BARRIER 6 | none (a queue runs in order and its memory is the host's: nothing to flush) |
| INDIRECT 8 | address u64, ndwords u32: run a command buffer (the only packet in a ring; 4 dwords) |

A program is the kernel's AST pickled into device memory (tag `program`): the "GPU" unpickles and interprets it.
The ring holds INDIRECT packets; its size is a multiple of 4 dwords, so a packet never straddles its end. The
push (pm_lower): wait for room (the queue's read pointer >= put + 4 - ring size), the packet words at put, then the
write pointer, the host's put value and the doorbell, all = put + 4.
"""
from __future__ import annotations

import pickle
import weakref

from tg_core.dtype import dtypes
from tg_core.hcq import ops as q
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import PatternMatcher
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat

NOP, EXEC, COPY, WAIT, SIGNAL, TIMESTAMP, BARRIER, STORE, INDIRECT = range(9)
NAMES = {EXEC: "EXEC", COPY: "COPY", WAIT: "WAIT", SIGNAL: "SIGNAL", TIMESTAMP: "TIMESTAMP", BARRIER: "BARRIER",
         STORE: "STORE", INDIRECT: "INDIRECT", NOP: "NOP"}
RING_DWORDS = 1024
KIND = "HCQREF"

_images: weakref.WeakKeyDictionary[UOp, bytes] = weakref.WeakKeyDictionary()


def program_image(ast: UOp) -> bytes:
    """The bytes of a kernel as the reference device loads it (its AST, pickled), once per AST."""
    img = _images.get(ast)
    if img is None:
        img = _images[ast] = pickle.dumps(ast)
    return img


def header(op: int, n: int) -> int:
    return (op << 24) | n


def _dw(*ws: UOp | int) -> int:
    return sum(2 if isinstance(w, UOp) and w.dtype.itemsize == 8 else 1 for w in ws)


def cmd(queue: q.Queue, op: int, *payload: UOp | int) -> UOp:
    return q.words(queue, header(op, _dw(*payload)), *payload)


def _mine(x: UOp) -> bool:
    return x.arg[1].device.split(":")[0] == KIND


def _encode(x: UOp) -> UOp | None:
    kind, queue = x.arg[0], x.arg[1]
    if kind == "exec":
        ast, nbufs = x.arg[2], x.arg[3]
        refs, variables = x.src[:nbufs], x.src[nbufs:]
        img = program_image(ast)
        prog = q.placeholder("program", len(img), queue.device, key=ast)
        payload: list[UOp | int] = [q.addr(prog), len(img), nbufs]
        for r in refs:
            payload += [q.addr(r), q.nbytes_of(r)]
        payload.append(len(variables))
        payload += [v.cast(dtypes.uint64) for v in variables]
        return cmd(queue, EXEC, *payload)
    if kind == "copy":
        return cmd(queue, COPY, q.addr(x.src[0]), q.addr(x.src[1]), q.u64(x.arg[2]))
    if kind in ("wait", "signal", "store"):
        op = {"wait": WAIT, "signal": SIGNAL, "store": STORE}[kind]
        return cmd(queue, op, x.src[0], q.u64(x.src[1]))
    if kind == "timestamp":
        return cmd(queue, TIMESTAMP, x.src[0])
    if kind == "barrier":
        return cmd(queue, BARRIER)
    return None


pm_encode = PatternMatcher([
    (UPat(Ops.INS, name="x"), lambda x: _encode(x) if q.is_queue_op(x) and _mine(x) else None),
])


def queue_buffers(queue: q.Queue) -> tuple[UOp, UOp, UOp, UOp, UOp]:
    """The placeholders of a queue's ring, write pointer, doorbell, host put value and read pointer."""
    d, s = queue.device, queue.slug
    return (q.placeholder(f"ring_{s}", 4 * RING_DWORDS, d), q.placeholder(f"write_ptr_{s}", 8, d),
            q.placeholder(f"doorbell_{s}", 8, d), q.placeholder(f"put_value_{s}", 8, d),
            q.placeholder(f"read_ptr_{s}", 8, d))


def push(s: UOp) -> UOp | None:
    """The submit of a command buffer -> its statements, then the ring push of one INDIRECT packet."""
    cmdbuf = s.src[0]
    if cmdbuf.op is not Ops.INS or cmdbuf.arg[0] != "cmdbuf":
        return None
    queue, nbytes = cmdbuf.arg[1], cmdbuf.arg[2]
    ring, wptr, bell, put, rptr = queue_buffers(queue)
    p = q.host_load(put, 0)
    size = UOp.const(dtypes.uint64, RING_DWORDS)
    pos = (p % size) * UOp.const(dtypes.uint64, 4)
    four = UOp.const(dtypes.uint64, 4)
    nxt = p + four
    # the ring has room for the packet once the queue has read up to nxt - size (no overwrite of unread packets)
    room = UOp(Ops.SUB, dtypes.uint64, (nxt.maximum(size), size))
    return q.linear(
        cmdbuf.src[1],
        q.host_wait(rptr, 0, room, (queue.device, f"room in the ring of {queue}", "its read pointer")),
        q.host_store(ring, pos, q.u32(header(INDIRECT, 3))),
        q.host_store(ring, pos + four, q.addr(cmdbuf.src[0])),
        q.host_store(ring, pos + UOp.const(dtypes.uint64, 12), q.u32(nbytes // 4)),
        q.host_store(wptr, 0, nxt),
        q.host_store(put, 0, nxt),
        q.doorbell(queue, bell, nxt))


pm_lower = PatternMatcher([
    (UPat(Ops.CUSTOM_FUNCTION, name="s"),
     lambda s: push(s) if isinstance(s.arg, q.Submit) and s.arg.queue.device.split(":")[0] == KIND else None),
])


def _bufferize(ctx, p: UOp) -> UOp | None:
    """Device-owned placeholders: the timeline, programs, and each queue's ring, pointers and doorbell."""
    tag = p.tag
    if not isinstance(tag, str) or p.arg[1] != ctx.device:
        return None
    if tag == "timeline":
        return q.mem(ctx.timeline)
    if tag == "program":
        return q.mem(ctx.program_buffer(p.arg[3]))
    for part in ("ring", "write_ptr", "doorbell", "put_value", "read_ptr"):
        if tag.startswith(part + "_"):
            engine = ctx.engines.get(tag[len(part) + 1:])
            return None if engine is None else q.mem(getattr(engine, part))
    return None


pm_bufferize = PatternMatcher([(UPat(Ops.PARAM, name="p"), _bufferize)])
