"""The schedule cache: a tensor graph of the same shape is scheduled once.

Two realizations have the same schedule when their graphs are equal after renaming the input buffers in
order of appearance and stripping the values bound to symbolic variables (BIND nodes, also those in the
symbolic dims of movement ops' args). That normalized graph is a
hash-consed UOp, so it is the cache key itself. The cached schedule refers to the canonical input buffers
and to the buffers it creates; a hit maps the first to this call's buffers and replaces the second with
fresh ones.

In front of it sits an identity layer: the targets themselves are hash-consed, so realizing the very same
nodes again (`(x + 1).realize()` in a loop, while the previous result's graph is alive) finds the normalized
key, the inputs in canonical order and the bound values by the targets' identity, and skips renaming the
graph. It holds the targets weakly (an entry goes with the first of them to die, so it keeps no buffer
alive) and is only a shortcut to an entry of the normalized cache: a hit there is what it returns.
"""
from __future__ import annotations

import functools
import weakref
from collections import OrderedDict
from collections.abc import Sequence

from tg_core.dtype import DType, dtypes
from tg_core.helpers import ContextVar
from tg_core.schedule.rangeify import create_schedule
from tg_core.uop.ops import Ops
from tg_core.uop.sint import arg_vars, has_sym, unbind_arg
from tg_core.uop.tensor_ops import _unique_counter  # the counter that makes each BUFFER node distinct
from tg_core.uop.uop import UOp

SCACHE = ContextVar("SCACHE", 1)
# the ops whose arg may hold symbolic dims (tg_core/uop/sint.py), bound in the tensor graph
_SYM_ARG_OPS = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.ARANGE})
CACHE_SIZE = 256

Items = list[tuple[UOp, list[UOp]]]
# key -> (items, the targets' buffers); both refer to canonical input buffers, which keeps those nodes alive
# (and so the same objects that `_canonical_buffer` rebuilds when binding a hit)
_cache: OrderedDict[tuple, tuple[Items, list[UOp]]] = OrderedDict()
stats = {"hits": 0, "misses": 0}


def _canonical_buffer(i: int, like: UOp) -> UOp:
    return _canonical(i, like.dtype, like.src[1], like.arg)


@functools.lru_cache(maxsize=4096)
def _canonical(i: int, dtype: DType, device: UOp, size: int) -> UOp:
    # remembered: every realize renames its inputs, and these few nodes are the same each time
    return UOp(Ops.BUFFER, dtype, (UOp(Ops.UNIQUE, dtypes.void, (), ("input", i)), device), size)


def _normalize(targets: list[UOp]) -> tuple[list[UOp], dict[UOp, UOp], dict[str, int]]:
    """The targets with input buffers renamed and bound values stripped; the canonical input buffers mapped to
    the real ones (in canonical order); the values of the bound variables. One depth-first pass renames and
    rebuilds, since this runs on every realize."""
    done: dict[UOp, UOp] = {}
    canonical: dict[UOp, UOp] = {}
    var_vals: dict[str, int] = {}
    free: set[UOp] = set()  # the variables of symbolic dims
    for t in targets:
        stack: list[tuple[UOp, bool]] = [(t, False)]
        while stack:
            n, ready = stack.pop()
            if n in done:
                continue
            op = n.op
            if op is Ops.BUFFER:
                c = done[n] = _canonical_buffer(len(canonical), n)
                canonical[c] = n
            elif op is Ops.BIND:
                var, val = n.src
                name = var.arg[0]
                if var_vals.get(name, val.arg) != val.arg:
                    raise ValueError(f"variable {name} is bound to both {var_vals[name]} and {val.arg} in one realize")
                var_vals[name] = val.arg
                done[n] = var
            elif not ready:
                stack.append((n, True))
                stack.extend((s, False) for s in reversed(n.src) if s not in done)
            else:
                src = n.src
                new_src = tuple([done[s] for s in src])
                arg = n.arg
                if op in _SYM_ARG_OPS and has_sym(arg):  # symbolic dims: the kernel takes their values at run time
                    arg = unbind_arg(arg, var_vals)
                    free.update(arg_vars(arg))
                done[n] = n if arg is n.arg and all(a is b for a, b in zip(src, new_src)) else \
                    UOp(op, n.dtype, new_src, arg, n.tag)
    if unbound := sorted({v.arg for v in free if v.arg[0] not in var_vals}):
        raise ValueError("a symbolic shape depends on the unbound variable" + ("s " if len(unbound) > 1 else " ") +
                         ", ".join(f"{n} (range [{lo}, {hi}])" for n, lo, hi in unbound) + "; only a bound variable "
                         "(UOp.variable(name, lo, hi).bind(value)) has a value to realize it with")
    return [done[t] for t in targets], canonical, var_vals


class _Known:
    """The identity layer's entry for one tuple of targets: what `_normalize` found for them, and the binding
    plan of their cached schedule. `plan` refers to slots: 0..len(inputs)-1 are the inputs (this call's
    BUFFER nodes, in canonical order), the rest the buffers the schedule creates, fresh on every hit."""
    __slots__ = ("refs", "key", "hit", "inputs", "var_vals", "fresh", "plan", "outs", "__weakref__")

    def __init__(self, refs: tuple[weakref.ref[UOp], ...], key: tuple, hit: tuple[Items, list[UOp]],
                 inputs: dict[UOp, UOp], var_vals: dict[str, int]):
        self.refs, self.key, self.hit, self.var_vals = refs, key, hit, var_vals
        self.inputs = list(inputs.values())  # the real input nodes: the targets hold them, so no longer life
        slot = {c: i for i, c in enumerate(inputs)}
        fresh: list[UOp] = []
        plan: list[tuple[UOp, tuple[int, ...]]] = []
        items, outs = hit
        for ast, bufs in items:
            for b in bufs:
                if b not in slot:
                    slot[b] = len(slot)
                    fresh.append(b)
            plan.append((ast, tuple(slot[b] for b in bufs)))
        self.fresh, self.plan = fresh, plan
        self.outs = [slot.get(o) for o in outs]  # None: an output that is none of the items' buffers (kept as is)

    def alive(self, targets: list[UOp]) -> bool:
        """Whether this entry's targets are these very nodes (not dead ones whose ids these have taken)."""
        refs = self.refs
        if len(refs) == 1:
            return refs[0]() is targets[0]
        return all(r() is t for r, t in zip(refs, targets))

    def bind(self, targets: list[UOp]) -> tuple[Items, dict[UOp, UOp]]:
        """What `_bind(..., fresh=True)` gives, from the precomputed plan."""
        # what `b.fresh_buffer()` makes, built here: its function-level import was a tenth of a tiny realize's hit
        # (plain loops: in Python 3.11 every comprehension is a call of its own)
        slots = list(self.inputs)
        for b in self.fresh:
            slots.append(UOp(Ops.BUFFER, b.dtype, (UOp(Ops.UNIQUE, dtypes.void, (), next(_unique_counter)), b.src[1]),
                             b.arg))
        bound: Items = []
        for ast, idx in self.plan:
            bufs = list(map(slots.__getitem__, idx))
            bound.append((UOp(Ops.COPY, dtypes.void, tuple(bufs)) if ast.op is Ops.COPY else ast, bufs))
        out: dict[UOp, UOp] = {}
        for t, i, o in zip(targets, self.outs, self.hit[1]):
            out[t] = slots[i] if i is not None else o
        return bound, out


# targets' ids (and devices) -> their entry; an entry is dropped when one of its targets dies
_known: dict[tuple, _Known] = {}
_sweep_at = [4 * CACHE_SIZE]
stats["identity_hits"] = 0


def _forget(key: tuple, ref: weakref.ref[UOp], known: dict[tuple, _Known] = _known) -> None:
    # (`known` bound here: at interpreter exit the module's globals may already be None when targets die)
    entry = known.get(key)
    if entry is not None and any(r is ref for r in entry.refs):  # not a newer entry at the same ids
        del known[key]


def _sweep() -> None:
    """Drop the identity entries whose schedule the normalized cache has evicted: a target without input
    buffers is its own normalized key, so the cache keeps it alive and only this bounds such entries."""
    for k in [k for k, e in _known.items() if _cache.get(e.key) is not e.hit]:
        del _known[k]
    _sweep_at[0] = max(4 * CACHE_SIZE, 2 * len(_known))  # the live entries that stay: next sweep at twice them


def clear() -> None:
    """Forget every cached schedule (both layers): the next realize of any graph schedules it anew."""
    _cache.clear()
    _known.clear()


def schedule(targets: list[UOp], devices: Sequence[str | None] | None = None) -> tuple[Items, dict[UOp, UOp],
                                                                                    dict[str, int]]:
    """Like create_schedule, through the cache; also returns the bound variables' values."""
    devs = tuple(devices) if devices else None
    if SCACHE.value:
        ident = (*map(id, targets), devs)
        known = _known.get(ident)
        if known is not None and known.alive(targets) and _cache.get(known.key) is known.hit:
            stats["hits"] += 1
            stats["identity_hits"] += 1
            _cache.move_to_end(known.key)
            return (*known.bind(targets), dict(known.var_vals))
    normalized, inputs, var_vals = _normalize(targets)
    if not SCACHE:
        items, out = create_schedule(normalized, devices)
        return (*_bind(items, [out[n] for n in normalized], inputs, targets, fresh=False), var_vals)
    key = (tuple(normalized), devs)
    hit = _cache.get(key)
    if hit is None:
        stats["misses"] += 1
        items, out = create_schedule(normalized, devices)
        _cache[key] = hit = (items, [out[n] for n in normalized])
        if len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    else:
        stats["hits"] += 1
        _cache.move_to_end(key)
    callback = functools.partial(_forget, ident)
    _known[ident] = _Known(tuple(weakref.ref(t, callback) for t in targets), key, hit, inputs, dict(var_vals))
    if len(_known) > _sweep_at[0]:
        _sweep()
    items, outs = hit
    return (*_bind(items, outs, inputs, targets, fresh=True), var_vals)


def _bind(items: Items, outs: list[UOp], inputs: dict[UOp, UOp], targets: list[UOp],
          fresh: bool) -> tuple[Items, dict[UOp, UOp]]:
    """The schedule with canonical inputs (`inputs`: canonical -> this call's buffer) mapped to this call's
    buffers and, when `fresh`, every buffer the schedule creates replaced by a new one (a cached schedule's
    own buffers belong to no one)."""
    mapping: dict[UOp, UOp] = dict(inputs)
    bound: Items = []
    for ast, bufs in items:
        new_bufs = []
        for b in bufs:
            if b not in mapping:
                mapping[b] = b.fresh_buffer() if fresh else b
            new_bufs.append(mapping[b])
        if ast.op is Ops.COPY:
            ast = UOp(Ops.COPY, dtypes.void, tuple(new_bufs))
        bound.append((ast, new_bufs))
    out = {t: mapping.get(o, o) for t, o in zip(targets, outs)}
    return bound, out
