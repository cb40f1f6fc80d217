"""The AMD queues as hcq rules: `pm_encode` (queue ops -> PM4 or SDMA words) and `pm_lower` (a command buffer ->
the host statements that push it onto its ring and ring the doorbell).

Queues: `COMPUTE:n` is a PM4 compute queue, `COPY:n` an SDMA queue. Ring placeholders (bufferized by the device to
the queue's own memory): `ring_<q>`, `write_ptr_<q>`, `read_ptr_<q>`, `doorbell_<q>`, `put_value_<q>` (the host's
shadow of put).

- **PM4**: the command buffer stays where the encoder put it (GPU-visible) and the ring receives one 4-dword
  INDIRECT_BUFFER pointing at it. The ring is a whole number of 4-dword packets and put advances by 4, so a
  packet never straddles the ring's end. put, wptr and doorbell count dwords.
- **AQL** (`compute="aql"`): the command buffer still holds PM4; the ring receives 64-byte AQL packets, here
  one vendor packet wrapping the whole buffer in an INDIRECT_BUFFER (a kernel dispatch would be a packet of
  its own between PM4 runs, aql.py). put and wptr count packets; the doorbell is put - 1.
- **SDMA**: the command buffer is host memory the engine never reads: its dwords are streamed into the ring.
  A submission that does not fit before the ring's end zero-fills the tail (zero dwords are SDMA NOPs) and
  restarts at offset 0. put, wptr and doorbell count bytes and never wrap (amd.md 4).

Kernel dispatch (`exec`) needs the device's compiled programs and kernarg segments: the submit-level rule of
queues/kernels.py lays kernels out in the command buffer; `device_pm_encode` is the two together, for the device.
"""
from __future__ import annotations

from typing import Any

from tg_core.plugin_api import Device, Ops, PatternMatcher, UOp, UPat, dtypes
from tg_core.plugin_api import hcq_ops as q
from tg_amd.queues import aql, pm4, sdma

KIND = "AMD"
PM4_RING_DWORDS = 1024        # a multiple of 4: INDIRECT_BUFFER packets tile it
AQL_RING_PACKETS = 256
COMPUTE_QUEUES = ("pm4", "aql")
SDMA_RING_BYTES = 16 << 10


def _mine(x: UOp) -> bool:
    return x.arg[1].device.split(":")[0] == KIND


def encode_pm4(x: UOp, xccs: int = 1) -> UOp | None:
    kind, queue = x.arg[0], x.arg[1]
    if kind == "signal":
        ws = pm4.signal(x.src[0], q.u64(x.src[1]), xccs)
    elif kind == "store":
        ws = pm4.store(x.src[0], q.u64(x.src[1]), xccs)
    elif kind == "wait":
        ws = pm4.wait(x.src[0], q.u64(x.src[1]))
    elif kind == "timestamp":
        ws = pm4.timestamp(x.src[0], xccs)
    elif kind == "barrier":
        ws = pm4.barrier()
    else:
        return None
    return q.words(queue, *ws)


def encode_sdma(x: UOp, max_copy: int = sdma.MAX_COPY_BYTES) -> UOp | None:
    kind, queue = x.arg[0], x.arg[1]
    if kind == "copy":
        ws = sdma.copy_linear(q.addr(x.src[0]), q.addr(x.src[1]), x.arg[2], max_copy)
    elif kind == "signal":
        ws = sdma.signal(x.src[0], q.u64(x.src[1]))
    elif kind == "store":
        ws = sdma.store(x.src[0], q.u64(x.src[1]))
    elif kind == "wait":
        ws = sdma.poll_regmem(x.src[0], q.u64(x.src[1]))
    elif kind == "timestamp":
        ws = sdma.timestamp(x.src[0])
    elif kind == "barrier":
        ws = []  # the engine runs its packets in order and writes memory directly: nothing to flush
    else:
        return None
    return q.words(queue, *ws)


def pm_encode(xccs: int = 1, max_copy: int = sdma.MAX_COPY_BYTES) -> PatternMatcher:
    """The AMD device's encode rules for a part with `xccs` XCCs and an SDMA engine copying `max_copy` bytes a
    packet."""
    def rule(x: UOp) -> UOp | None:
        if not (q.is_queue_op(x) and _mine(x)):
            return None
        return encode_pm4(x, xccs) if x.arg[1].kind == "COMPUTE" else encode_sdma(x, max_copy)
    return PatternMatcher([(UPat(Ops.INS, name="x"), rule)])


def ring_buffers(queue: q.Queue, ring_bytes: int) -> tuple[UOp, UOp, UOp, UOp, UOp]:
    """The placeholders of a queue's ring, write pointer, read pointer, doorbell and host put value."""
    d, s = queue.device, queue.slug
    return (q.placeholder(f"ring_{s}", ring_bytes, d), q.placeholder(f"write_ptr_{s}", 8, d),
            q.placeholder(f"read_ptr_{s}", 8, d), q.placeholder(f"doorbell_{s}", 8, d),
            q.placeholder(f"put_value_{s}", 8, d))


def _c(v: int) -> UOp:
    return UOp.const(dtypes.uint64, v)


def _room(queue: q.Queue, rptr: UOp, nxt: UOp, size: int) -> UOp:
    """Wait until the engine has read up to nxt - size: the push overwrites nothing unread."""
    need = UOp(Ops.SUB, dtypes.uint64, (nxt.maximum(_c(size)), _c(size)))
    return q.host_wait(rptr, 0, need, (queue.device, f"room in the ring of {queue}", "its read pointer"))


def push_pm4(cmdbuf: UOp, ring_dwords: int = PM4_RING_DWORDS) -> UOp:
    queue, nbytes = cmdbuf.arg[1], cmdbuf.arg[2]
    if ring_dwords % 4:
        raise ValueError(f"a PM4 ring of {ring_dwords} dwords: INDIRECT_BUFFER packets tile it only in multiples of 4")
    ring, wptr, rptr, bell, put = ring_buffers(queue, 4 * ring_dwords)
    p = q.host_load(put, 0)
    pos = (p % _c(ring_dwords)) * _c(4)
    nxt = p + _c(4)
    ib = pm4.indirect_buffer(q.addr(cmdbuf.src[0]), nbytes // 4)
    stores = [q.host_store(ring, pos + _c(4 * i), w if isinstance(w, UOp) else q.u32(w)) for i, w in enumerate(ib)]
    return q.linear(cmdbuf.src[1], _room(queue, rptr, nxt, ring_dwords), *stores,
                    q.host_store(wptr, 0, nxt), q.host_store(put, 0, nxt), q.doorbell(queue, bell, nxt))


def push_sdma(cmdbuf: UOp, ring_bytes: int = SDMA_RING_BYTES) -> UOp:
    """Stream the command buffer into the ring. Zeroing a tail of run-time length with straight-line stores:
    zero dword k goes to (pos + 4k) mod ring: in the tail when the submission does not fit, else (and past the
    ring's end) inside the bytes the submission itself then overwrites."""
    queue, n = cmdbuf.arg[1], cmdbuf.arg[2]
    if n > ring_bytes:
        raise ValueError(f"{queue}: a submission of {n} bytes does not fit an SDMA ring of {ring_bytes}")
    ring, wptr, rptr, bell, put = ring_buffers(queue, ring_bytes)
    buf = cmdbuf.src[0]
    p = q.host_load(put, 0)
    pos = p % _c(ring_bytes)
    nofit = (_c(ring_bytes - n) < pos).cast(dtypes.uint64)
    start = pos - pos * nofit
    nxt = p + (_c(ring_bytes) - pos) * nofit + _c(n)
    zeros = [q.host_store(ring, (pos + _c(4 * k)) % _c(ring_bytes), q.u32(0)) for k in range(n // 4)]
    data = [q.host_store(ring, start + _c(4 * i), q.host_load(buf, 4 * i, dtypes.uint32)) for i in range(n // 4)]
    return q.linear(cmdbuf.src[1], _room(queue, rptr, nxt, ring_bytes), *zeros, *data,
                    q.host_store(wptr, 0, nxt), q.host_store(put, 0, nxt), q.doorbell(queue, bell, nxt))


def push_aql(cmdbuf: UOp, ring_packets: int = AQL_RING_PACKETS) -> UOp:
    """The command buffer's AQL packets at put (in packets): the ones its encoder made (its third source: vendor
    and kernel-dispatch packets, queues/kernels.py), else one vendor packet running the whole buffer. A packet is
    64 bytes, so none straddles the ring's end; each one's header is stored after its body, because the packet
    processor takes a packet whose header is valid as ready (amd.md 3)."""
    queue, nbytes = cmdbuf.arg[1], cmdbuf.arg[2]
    packets: list[list[UOp | int]] = [list(p.src) for p in cmdbuf.src[2].src] if len(cmdbuf.src) > 2 else \
        [aql.pm4_ib(q.addr(cmdbuf.src[0]), nbytes // 4)]
    if len(packets) > ring_packets:
        raise ValueError(f"{queue}: a submission of {len(packets)} AQL packets does not fit a ring of {ring_packets}")
    ring, wptr, rptr, bell, put = ring_buffers(queue, aql.PACKET_BYTES * ring_packets)
    p = q.host_load(put, 0)
    nxt = p + _c(len(packets))
    stores = []
    for k, words in enumerate(packets):
        pos = ((p + _c(k)) % _c(ring_packets)) * _c(aql.PACKET_BYTES)
        body = [q.host_store(ring, pos + _c(4 * i), w if isinstance(w, UOp) else q.u32(w)) for i, w in enumerate(words)]
        stores += body[1:] + body[:1]
    return q.linear(cmdbuf.src[1], _room(queue, rptr, nxt, ring_packets), *stores,
                    q.host_store(wptr, 0, nxt), q.host_store(put, 0, nxt), q.doorbell(queue, bell, nxt - _c(1)))


def _push(s: UOp, compute: str | None, pm4_ring_dwords: int, sdma_ring_bytes: int, aql_ring_packets: int) -> UOp | None:
    if not isinstance(s.arg, q.Submit) or s.arg.queue.device.split(":")[0] != KIND:
        return None
    cmdbuf = s.src[0]
    if cmdbuf.op is not Ops.INS or cmdbuf.arg[0] != "cmdbuf":
        return None
    if s.arg.queue.kind == "COPY":
        return push_sdma(cmdbuf, sdma_ring_bytes)
    if compute is None:
        dev: Any = Device[s.arg.queue.device]  # an AMDDevice
        compute = dev.queue_kind
    return push_pm4(cmdbuf, pm4_ring_dwords) if compute == "pm4" else push_aql(cmdbuf, aql_ring_packets)


def pm_lower(compute: str | None = "pm4", pm4_ring_dwords: int = PM4_RING_DWORDS,
             sdma_ring_bytes: int = SDMA_RING_BYTES, aql_ring_packets: int = AQL_RING_PACKETS) -> PatternMatcher:
    """The pushes; `compute` is the compute queues' kind, "pm4" or "aql" (None: each AMD device's own)."""
    if compute is not None and compute not in COMPUTE_QUEUES:
        raise ValueError(f"compute queue kind {compute!r}; kinds: {', '.join(COMPUTE_QUEUES)}")
    return PatternMatcher([(UPat(Ops.CUSTOM_FUNCTION, name="s"),
                            lambda s: _push(s, compute, pm4_ring_dwords, sdma_ring_bytes, aql_ring_packets))])


def _device_encode(x: UOp) -> UOp | None:
    """The encode rule of an opened AMD device: its XCC count and its SDMA engine's copy size."""
    if not (q.is_queue_op(x) and _mine(x)):
        return None
    dev: Any = Device[x.arg[1].device]  # an AMDDevice (tg_amd/device.py imports this module)
    return encode_pm4(x, dev.xccs) if x.arg[1].kind == "COMPUTE" else encode_sdma(x, dev.max_copy)


def device_pm_encode() -> PatternMatcher:
    """What the AMD device's `tg_pm_encode` hook returns: per-op rules, then the kernels of compute submits."""
    from tg_amd.queues.kernels import pm_encode_kernels
    return PatternMatcher([(UPat(Ops.INS, name="x"), _device_encode)]) + pm_encode_kernels
