"""Encode and lower a batch with the plugins' matchers (the four hooks, hookspecs.py `tg_pm_*`).

    batch SINK --pm_batch--> --pm_encode + pm_hcq_encode--> --pm_lower--> host statements (link.py)

- `pm_batch(device)`: each device of the batch may rewrite the whole SINK once (add work to it);
- `pm_encode(device)`: queue ops -> `words` (ops.py); core's `pm_hcq_encode` then packs a submit whose ops are
  all words into its command buffer: a placeholder `cmdbuf_<queue>` whose constant words are one blob and
  whose symbolic words are stores (patched at link or per run, link.py);
- `pm_lower(device)`: the submit of a command buffer -> the push onto the queue (ring words, write pointer,
  doorbell) as host statements. It runs after encoding, so a lower rule may rewrite what an encode rule made.

Matchers of every plugin taking part in a device are summed in plugin order (the registry's `matcher`); a
batch over several device kinds sums those of each kind. Leftovers are errors naming the op, the queue and the
plugins whose matchers were summed.
"""
from __future__ import annotations

from dataclasses import dataclass

from tg_core.hcq import ops as q
from tg_core.hcq.batch import Batch
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import PatternMatcher, graph_rewrite
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat

stats = {"encodes": 0, "links": 0}  # how many batches were encoded / linked (a JIT replay does neither)


class HCQError(RuntimeError):
    """A batch the plugins' matchers cannot encode or lower, or a queue that cannot run it."""


@dataclass
class EncodeCtx:
    """What encode rules may use: the batch (its uid keys its own command buffers) and the devices by name."""
    batch: Batch


def _registry():
    from tg_core.device import Device
    return Device.registry


def kinds(devices: list[str]) -> dict[str, str]:
    """One device per device kind (its base name), in first-use order: matchers are per plugin, not per index."""
    out: dict[str, str] = {}
    for d in devices:
        out.setdefault(d.split(":")[0], d)
    return out


def summed(hook: str, devices: list[str]) -> tuple[PatternMatcher | None, list[str]]:
    """The matchers of `hook` for the device kinds of `devices`, summed; and the labels of the plugins asked."""
    reg = _registry()
    total: PatternMatcher | None = None
    labels: list[str] = []
    for dev in kinds(devices).values():
        labels += [f"{r.name} ({dev})" for r in reg.participants(dev)]
        pm = reg.matcher(hook, dev)
        if pm is not None:
            total = pm if total is None else total + pm
    return total, labels


# ---- core's encode rules ----------------------------------------------------------------------------------

def make_cmdbuf(ctx: EncodeCtx, s: UOp) -> UOp | None:
    """A submit whose ops are all encoded -> `INS("cmdbuf")` (ops.py `command_buffer`): the command-buffer
    placeholder and the host statements writing it (one blob of the constant words, one store per symbolic word)."""
    body = s.src[0]
    if body.op is not Ops.LINEAR or not all(u.op is Ops.INS and u.arg[0] == "words" for u in body.src):
        return None
    queue = s.arg.queue
    try:
        cmd = q.command_buffer(queue, [w for ws in body.src for w in ws.src], ctx.batch.uid)
    except (TypeError, ValueError) as e:
        raise HCQError(str(e)) from e
    return s.replace(src=(cmd,))


pm_hcq_encode = PatternMatcher([
    (UPat(Ops.CUSTOM_FUNCTION, name="s"), lambda ctx, s: make_cmdbuf(ctx, s) if isinstance(s.arg, q.Submit) else None),
])


def _leftover_submit(u: UOp) -> bool:
    return u.op is Ops.CUSTOM_FUNCTION and isinstance(u.arg, q.Submit)


def apply_batch_hooks(batch: Batch) -> None:
    """pm_batch: each device's summed matcher may rewrite the batch's SINK once."""
    reg = _registry()
    for dev in kinds(batch.devices).values():
        pm = reg.matcher("tg_pm_batch", dev)
        if pm is not None and (new := pm.rewrite(batch.sink, EncodeCtx(batch))) is not None:
            batch.sink = new


def encode(batch: Batch) -> UOp:
    """The batch's SINK encoded and lowered: every submit is host statements."""
    stats["encodes"] += 1
    apply_batch_hooks(batch)
    ctx = EncodeCtx(batch)
    pm_enc, labels = summed("tg_pm_encode", batch.devices)
    enc = graph_rewrite(batch.sink, pm_hcq_encode if pm_enc is None else pm_enc + pm_hcq_encode, ctx)
    for u in enc.toposort():
        if q.is_queue_op(u):
            raise HCQError(f"queue op {u.arg[0]!r} on {u.arg[1]} was left unencoded: no pm_encode rule rewrote it "
                           f"(matchers summed from plugins: {', '.join(labels) or 'none'})")
    pm_low, labels = summed("tg_pm_lower", batch.devices)
    low = enc if pm_low is None else graph_rewrite(enc, pm_low, ctx)
    for u in low.toposort():
        if _leftover_submit(u):
            raise HCQError(f"the submit of {u.arg.queue} ({u.arg.name}) was left unlowered: no pm_lower rule turned "
                           f"its command buffer into a queue push (matchers summed from plugins: "
                           f"{', '.join(labels) or 'none'})")
    return low
