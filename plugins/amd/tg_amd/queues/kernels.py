"""Kernels on the AMD compute queue: the `pm_encode` rule for a compute submit holding `exec` ops.

An exec op names a kernel AST; the device's plan of it (AMDDevice.kernel_plan: the kernels `prepare` split it into,
each compiled, its code object loaded in GPU memory, its kernarg layout and launch dims) is laid out into the
submit's command buffer by a stream (stream.py), after the PM4 words of the ops before it:

- **PM4** (`queue: pm4`): each kernel's kernarg segment inline as a NOP payload, then its dispatch sequence; the
  whole buffer is one INDIRECT_BUFFER in the ring (rules.py `push_pm4`).
- **AQL** (`queue: aql`): each kernel's segment inline between the PM4 runs; the ring gets a vendor packet per PM4
  run and a kernel-dispatch packet per kernel, in order: they travel to the push as the command buffer's extra
  source (rules.py `push_aql`).

Every address in a segment or packet is a word of the command buffer: the program (`program` placeholder: the
device's loaded code object), the kernel's buffers (linked memory or JIT inputs), the temporaries a split kernel
shares (`temp` placeholders, keyed by the AST: one per batch), the scratch (`scratch`, the device's, sized by the
largest private segment seen). Grid sizes are expressions over the kernel's variables, evaluated per run.

Because a kernarg segment's address depends on where it sits in the buffer, the stream is laid out twice: once
from address 0 for the buffer's size (the placeholder's size), then from the placeholder's address.
"""
from __future__ import annotations

from typing import Any

from tg_core.plugin_api import Device, Ops, PatternMatcher, UOp, UPat, dtypes
from tg_core.plugin_api import hcq_ops as q
from tg_amd.kernargs import kernarg_words
from tg_amd.queues import pm4
from tg_amd.queues.instrument import DispatchSite, SubmitInstrumentation
from tg_amd.queues.pm4 import Word
from tg_amd.queues.stream import AQLStream, PM4Stream

KIND = "AMD"


def _words_of(u: UOp) -> list[Word]:
    """A words node's dwords: constants as ints, 64-bit words split low first."""
    out: list[Word] = []
    for w in u.src:
        if w.dtype == dtypes.uint64:
            out += [pm4.lo(w), pm4.hi(w)]
        else:
            out.append(int(w.arg) if w.op is Ops.CONST else w)
    return out


def _int64(e: UOp) -> UOp:
    """An index expression (weakint) as int64, so that the host program computes it."""
    if e.dtype == dtypes.weakint:
        return UOp(e.op, dtypes.int64, tuple(_int64(s) for s in e.src), e.arg)
    return e


def grid_word(e: UOp) -> Word:
    """A launch dim as a command word: an int when constant, else a uint32 expression over the variables."""
    if e.op is Ops.CONST:
        return int(e.arg)
    return _int64(e).cast(dtypes.uint32)


class _Sites:
    """The instrumentations of one submit and the dispatches placed so far (the site index)."""
    def __init__(self, insts: list[SubmitInstrumentation], queue: q.Queue, batch: int):
        self.insts, self.queue, self.batch, self.count = insts, queue, batch, 0

    def words(self, dev: Any, ast: UOp, part: Any, image: Word, grid: tuple[Word, Word, Word]) -> dict[str, Any]:
        if not self.insts:
            return {}
        site = DispatchSite(dev.device, self.queue, self.batch, self.count, part.kernel.name, ast, part, image, grid,
                            part.launch.local_size)
        self.count += 1
        return {"before": [w for i in self.insts for w in i.before(site)],
                "after_dispatch": [w for i in self.insts for w in i.after_dispatch(site)],
                "after": [w for i in self.insts for w in i.after(site)],
                "perfcount": any(i.perfcount for i in self.insts)}


def _exec(stream: PM4Stream | AQLStream, dev: Any, x: UOp, sites: _Sites) -> None:
    ast, nbufs = x.arg[2], x.arg[3]
    refs, variables = list(x.src[:nbufs]), {v.arg[0]: v for v in x.src[nbufs:]}
    plan = dev.kernel_plan(ast)
    temps = [q.placeholder("temp", max(n, 1) * dt.itemsize, dev.device, key=(ast, i))
             for i, (n, dt) in enumerate(plan.temps)]
    bufs = refs + temps
    for part in plan.parts:
        grid = tuple(grid_word(e) for e in part.launch.global_size)
        if any(g == 0 for g in grid if isinstance(g, int)):
            continue  # an empty range: nothing to run
        explicit: list[tuple[Word, int]] = [(q.addr(b), 8) for b in bufs[:part.nbufs]]
        explicit += [(variables[n], size) for n, size in zip(part.variables, part.sizes[part.nbufs:])]
        kernargs = kernarg_words(part.kernel, explicit, grid, part.launch.local_size, part.layout)  # type: ignore[arg-type]
        image = q.addr(q.placeholder("program", part.image_size, dev.device, key=part.key))
        extra = sites.words(dev, ast, part, image, grid)  # type: ignore[arg-type]
        if isinstance(stream, PM4Stream):
            stream.kernel(part.kernel, image, kernargs, grid, part.launch.local_size,  # type: ignore[arg-type]
                          dev.scratch_bases(part.kernel), **extra)
        else:
            stream.kernel(part.kernel, image, kernargs, grid, part.launch.local_size, **extra)  # type: ignore[arg-type]


def _layout(dev: Any, body: UOp, base: Word, sites: _Sites) -> PM4Stream | AQLStream:
    stream: PM4Stream | AQLStream = PM4Stream(base, dev.xccs) if dev.queue_kind == "pm4" else AQLStream(base)
    sites.count = 0
    for u in body.src:
        if u.arg[0] == "words":
            stream.add(_words_of(u))
        else:
            _exec(stream, dev, u, sites)
    if sites.count:
        stream.add([w for i in sites.insts for w in i.end()])
    return stream


def _u32(w: Word) -> UOp:
    return q.u32(w) if isinstance(w, int) else w


def encode_kernels(ctx: Any, s: UOp) -> UOp | None:
    """A compute submit of AMD with exec ops (the other ops already words) -> its command buffer."""
    if not isinstance(s.arg, q.Submit) or s.arg.queue.device.split(":")[0] != KIND or s.arg.queue.kind != "COMPUTE":
        return None
    body = s.src[0]
    if body.op is not Ops.LINEAR or not all(u.op is Ops.INS and u.arg[0] in ("words", "exec") for u in body.src):
        return None
    if not any(u.arg[0] == "exec" for u in body.src):
        return None  # words only: core's pm_hcq_encode packs them
    queue = s.arg.queue
    dev: Any = Device[queue.device]  # an AMDDevice
    sites = _Sites(dev.submit_instrumentation(queue, ctx.batch.uid), queue, ctx.batch.uid)
    size = 4 * len(_layout(dev, body, 0, sites).words)
    stream = _layout(dev, body, q.addr(q.placeholder(f"cmdbuf_{queue.slug}", size, queue.device, key=ctx.batch.uid)),
                     sites)
    extra: tuple[UOp, ...] = ()
    if isinstance(stream, AQLStream):
        extra = (q.linear(*(q.words(queue, *(_u32(w) for w in p)) for p in stream.finish())),)
    cmd = q.command_buffer(queue, [_u32(w) for w in stream.words], ctx.batch.uid, *extra)
    assert cmd.arg[2] == size, "the two layouts of one command buffer differ in size"
    host = [u for i in sites.insts for u in i.host()] if sites.count else []
    if host:  # after the command buffer is written, before the push (rules.py puts src[1] first)
        cmd = cmd.replace(src=(cmd.src[0], q.linear(*cmd.src[1].src, *host), *cmd.src[2:]))
    return s.replace(src=(cmd,))


pm_encode_kernels = PatternMatcher([(UPat(Ops.CUSTOM_FUNCTION, name="s"), encode_kernels)])
