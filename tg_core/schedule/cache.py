"""The schedule cache: a tensor graph of the same shape is scheduled once.

Two realizations have the same schedule when their graphs are equal after renaming the input buffers in
order of appearance and stripping the values bound to symbolic variables (BIND nodes, also those in the
symbolic dims of movement ops' args). That normalized graph is a
hash-consed UOp, so it is the cache key itself. The cached schedule refers to the canonical input buffers
and to the buffers it creates; a hit maps the first to this call's buffers and replaces the second with
fresh ones.
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Sequence

from tg_core.dtype import DType, dtypes
from tg_core.helpers import ContextVar
from tg_core.schedule.rangeify import create_schedule
from tg_core.uop.ops import Ops
from tg_core.uop.sint import arg_vars, has_sym, unbind_arg
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


def schedule(targets: list[UOp], devices: Sequence[str | None] | None = None) -> tuple[Items, dict[UOp, UOp],
                                                                                    dict[str, int]]:
    """Like create_schedule, through the cache; also returns the bound variables' values."""
    normalized, inputs, var_vals = _normalize(targets)
    if not SCACHE:
        items, out = create_schedule(normalized, devices)
        return (*_bind(items, [out[n] for n in normalized], inputs, targets, fresh=False), var_vals)
    key = (tuple(normalized), tuple(devices) if devices else None)
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
