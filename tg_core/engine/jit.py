"""TinyJit: capture the kernels a function runs once, then replay them without scheduling or codegen.

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor: ...

Call 0 runs the function eagerly. Call 1 runs it again while the engine records every exec item it runs
(the device runner from `Compiled.get_runner`, or a copy, with its buffers); the outputs are realized inside
the capture, so their kernels are recorded too. Later calls replay the recorded items with this call's input
buffers and variable values: no tensor graph is built, nothing is scheduled or compiled.

**Inputs** are the Tensor arguments (positional and keyword; they are realized first) and bound variables
(`UOp.variable(...).bind(n)`) passed as arguments, whose values replace the captured ones on replay. A replay
checks that the arguments have the same structure (which positions and keywords are Tensors, variables or
other values; plain scalars, strings and None must be equal, since they are baked into the kernels) and that
each input tensor has the captured dtype, device and view (shape, and the view ops over its buffer).
A difference raises JitError naming it; `reset()` makes the next call capture again.

**Outputs** are the Tensors the function returns (a Tensor, None, or tuples/lists/dicts of them). A replay
returns Tensors backed by the captured output buffers, so each call overwrites the previous call's outputs
(as in tinygrad): copy a result (`.numpy()`, `.clone()`) to keep it. An output that is a view of an input
is that view of the new input.

**Frozen at capture** (as in tinygrad): Python values and branches in the function, side effects other than
kernels (a `.grad` set during capture is not updated by replays), variables bound inside the function, and
tensors made from host data inside it. Random numbers are not frozen: a replay uploads fresh RNG keys, as
the eager calls would. Reading a value on the host (`.numpy()`, `.item()`) during the capture, and calling a
TinyJit inside another one's capture, raise JitError.

**Capture format** (device-neutral): a list of `JitItem(runner, bufs, inputs, var_names, ast)`: the
callable `runner(bufs, var_vals)`, the buffers it runs on, the positions in `bufs` that take input buffers,
and the names of the variables the kernel reads. A device with command queues (HCQ) can later turn
consecutive items into one linked batch and replay that instead. Intermediate buffers (made inside the
function and held by no tensor after it) are planned once at capture: those whose lifetimes in the item list
do not overlap share memory.
"""
from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tg_core.device import Buffer
from tg_core.engine.realize import _buffers, buffer_of, capture, stats
from tg_core.tensor import Tensor, _origins
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

R = TypeVar("R")

_VIEW_OPS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP, Ops.PAD, Ops.DETACH})
_FROZEN_TYPES = (bool, int, float, str, type(None))


class JitError(RuntimeError):
    """A TinyJit call that cannot replay what was captured, or something a capture cannot record."""


@dataclass(frozen=True)
class JitItem:
    """One captured exec item: `runner(bufs, var_vals)`. Entries of `bufs` at the positions in `inputs`
    ((position, input index) pairs) are None here and take the call's input buffers."""
    runner: Callable[[list[Buffer], dict[str, int]], None]
    bufs: list[Buffer | None]
    inputs: tuple[tuple[int, int], ...]
    var_names: tuple[str, ...]
    ast: UOp


@dataclass(frozen=True)
class _Out:
    """A returned tensor: its node, and the input it is a view of (None: a captured buffer)."""
    node: UOp
    device: str
    input_index: int | None


@dataclass
class CapturedJit:
    """Everything a replay needs. `structure` and `input_keys` are what a call must match."""
    items: list[JitItem]
    structure: tuple
    labels: list[str]                # the arguments as errors name them
    input_keys: tuple
    input_desc: list[str]            # the inputs as errors describe them
    input_nodes: list[UOp]           # the capture call's input BUFFER nodes (outputs that view an input)
    var_vals: dict[str, int]
    ret: Any                         # the return value with _Out in place of tensors
    rng_keys: list[Buffer]


    def __post_init__(self) -> None:
        self.n_kernels = sum(it.ast.op is not Ops.COPY for it in self.items)  # the engine's stats count them


def _view_key(u: UOp) -> tuple[tuple, UOp] | None:
    """(what a replay must match: the view ops over the buffer, its size, dtype and device; the BUFFER node),
    or None when `u` is not a view of a buffer."""
    chain = []
    while u.op is not Ops.BUFFER:
        if u.op not in _VIEW_OPS:
            return None
        chain.append((u.op, u.arg))
        u = u.src[0]
    return (tuple(chain), u.arg, u.dtype, u.src[1].arg), u


def _describe(t: Any, key: tuple) -> str:
    """An input as an error names it: dtype, shape, device, and the views over its buffer if any."""
    chain, size, _, _ = key
    views = [f"{op.name.lower()}{arg if arg is not None else ''}" for op, arg in reversed(chain)
             if not (op is Ops.RESHAPE and len(chain) == 1)]
    where = f"{t.dtype.name} {t.shape} on {t.device}"
    return where + (f" (a view of {size} elements: {', '.join(views)})" if views else "")


class TinyJit(Generic[R]):
    """Decorate a function whose Tensor work should be captured on call 1 and replayed afterwards (see the
    module docstring). Used on a method, one TinyJit is shared by all instances, as in tinygrad."""

    def __init__(self, fxn: Callable[..., R]):
        if not callable(fxn):
            raise TypeError(f"TinyJit wraps a function, not {type(fxn).__name__}")
        self.fxn = fxn
        self.name = getattr(fxn, "__qualname__", repr(fxn))
        functools.update_wrapper(self, fxn)
        self.reset()

    def reset(self) -> None:
        """Forget the capture: the next call runs eagerly and the one after captures again."""
        self.cnt = 0
        self.captured: CapturedJit | None = None

    @property
    def jit_cache(self) -> list[JitItem]:
        """The captured exec items (empty before the capture)."""
        return self.captured.items if self.captured is not None else []

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else functools.partial(self.__call__, obj)

    # ---- arguments ------------------------------------------------------------------------------------

    def _read_args(self, args: tuple, kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, UOp] | None, tuple]:
        """(the Tensor arguments, the variables bound by arguments, the structure: one entry per argument,
        positional then keywords by name, and the keywords' names)."""
        tensors: list[Any] = []
        binds: dict[str, UOp] | None = None
        structure: list[Any] = []
        for a in (args if not kwargs else (*args, *(kwargs[k] for k in sorted(kwargs)))):
            if isinstance(a, Tensor):
                tensors.append(a)
                structure.append("Tensor")
            elif isinstance(a, UOp):
                if a.op is not Ops.BIND:
                    label = _labels(args, kwargs)[len(structure)]
                    raise JitError(f"TinyJit({self.name}): {label} is an unbound {a.op.name} UOp; pass a bound "
                                   "variable (UOp.variable(name, lo, hi).bind(value)) or a Tensor")
                binds = binds or {}
                binds[a.src[0].arg[0]] = a
                structure.append(("variable", a.src[0]))
            elif isinstance(a, _FROZEN_TYPES):
                structure.append(("value", type(a), a))
            else:
                structure.append(("object", type(a)))
        return tensors, binds, (tuple(structure), tuple(sorted(kwargs)) if kwargs else ())

    def _prepare_inputs(self, tensors: list[Any], args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, list[UOp]]:
        """Realize the input tensors; their view keys and BUFFER nodes."""
        keys, nodes = [], []
        for t in tensors:
            got = _view_key(t.uop)
            if got is None:
                t.realize()
                if (got := _view_key(t.uop)) is None:
                    raise JitError(f"TinyJit({self.name}): {self._tensor_labels(args, kwargs)[len(keys)]} "
                                   f"({t.dtype.name} {t.shape}) is not a view of a buffer after realizing it")
            keys.append(got[0])
            nodes.append(got[1])
        if len(nodes) > 1 and len(set(nodes)) != len(nodes):
            dup = [label for label, n in zip(self._tensor_labels(args, kwargs), nodes) if nodes.count(n) > 1]
            raise JitError(f"TinyJit({self.name}): {' and '.join(dup)} share one buffer; a TinyJit needs distinct "
                           "input buffers (pass a .clone() of one)")
        return tuple(keys), nodes

    @staticmethod
    def _tensor_labels(args: tuple, kwargs: dict[str, Any]) -> list[str]:
        values = (*args, *(kwargs[k] for k in sorted(kwargs)))
        return [label for label, a in zip(_labels(args, kwargs), values) if isinstance(a, Tensor)]

    # ---- calls --------------------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        if capture.active is not None:
            raise JitError(f"TinyJit({self.name}) called while TinyJit({capture.active}) is capturing; "
                           "nested JITs are not supported (call the inner function undecorated)")
        tensors, binds, structure = self._read_args(args, kwargs)
        keys, nodes = self._prepare_inputs(tensors, args, kwargs)
        if self.captured is not None:
            cap = self.captured
            if structure != cap.structure or keys != cap.input_keys:
                raise JitError(self._mismatch(args, kwargs, tensors, structure, keys))
            return self._replay(cap, binds, nodes)
        if self.cnt == 0:
            ret = self.fxn(*args, **kwargs)
            self._realize_outputs(ret)
            self.cnt = 1
            return ret
        return self._capture(args, kwargs, structure, keys, nodes,
                             [_describe(t, k) for t, k in zip(tensors, keys)])

    def _realize_outputs(self, ret: Any) -> list[Any]:
        outs = _tensors_in(ret, self.name)
        if outs:
            Tensor.realize_all(*outs)
        return outs

    def _capture(self, args: tuple, kwargs: dict[str, Any], structure: tuple, keys: tuple, nodes: list[UOp],
                 desc: list[str]) -> R:
        capture.active, capture.items, capture.var_vals, capture.rng_keys = self.name, [], {}, []
        try:
            ret = self.fxn(*args, **kwargs)
            outs = self._realize_outputs(ret)
            recorded, var_vals, rng_keys = capture.items, capture.var_vals, capture.rng_keys
        finally:
            capture.active, capture.items, capture.var_vals, capture.rng_keys = None, [], {}, []
        items = _make_items(recorded, [buffer_of(n) for n in nodes])
        written = {id(it.bufs[p]) for it in items for p in _written(it) if it.bufs[p] is not None}
        index = {n: i for i, n in enumerate(nodes)}
        out_of: dict[int, _Out] = {}
        for t in outs:
            got = _view_key(t.uop)
            base = got[1] if got is not None else None
            out_of[id(t)] = _Out(t.uop, t.device, index.get(base))
            # a replay rewrites this buffer without the graph that computed it: gradients must not follow it
            if base is not None and id(buffer_of(base)) in written:
                _origins.pop(base, None)
        items = _plan(items, {id(b) for b in rng_keys})
        self.captured = CapturedJit(items, structure, _labels(args, kwargs), keys, desc, nodes, dict(var_vals),
                                    _template(ret, out_of), rng_keys)
        self.cnt = 2
        return ret

    def _replay(self, cap: CapturedJit, binds: dict[str, UOp] | None, nodes: list[UOp]) -> R:
        var_vals = cap.var_vals
        if binds:
            var_vals = dict(var_vals)
            for name, b in binds.items():
                var_vals[name] = b.src[1].arg
        if cap.rng_keys:
            for buf in cap.rng_keys:
                buf.copyin(Tensor._next_rng_key())
        in_bufs = [buffer_of(n) for n in nodes]
        for it in cap.items:
            if it.inputs:
                bufs = list(it.bufs)
                for pos, i in it.inputs:
                    bufs[pos] = in_bufs[i]
                it.runner(bufs, var_vals)
            else:
                it.runner(it.bufs, var_vals)
        stats["kernels"] += cap.n_kernels
        stats["copies"] += len(cap.items) - cap.n_kernels
        return _rebuild(cap.ret, cap.input_nodes, nodes)

    def _mismatch(self, args: tuple, kwargs: dict[str, Any], tensors: list[Any], structure: tuple, keys: tuple) -> str:
        cap = self.captured
        head = f"TinyJit({self.name}) cannot replay this call: "
        tail = "; a TinyJit replays the kernels captured for one signature (call reset() to capture again)"
        labels = _labels(args, kwargs)
        if structure != cap.structure:
            old_labels = cap.labels
            if labels != old_labels:
                return (head + f"it was captured with {', '.join(old_labels) or 'no arguments'} and is "
                        f"called with {', '.join(labels) or 'no arguments'}" + tail)
            for label, old, new in zip(labels, cap.structure[0], structure[0]):
                if old != new:
                    if old[0] == new[0] == "value":
                        return (head + f"{label} was {old[2]!r} at capture and is {new[2]!r} now; Python values are "
                                "frozen into the captured kernels, pass a Tensor or a bound variable instead" + tail)
                    if old[0] == new[0] == "variable":
                        return head + f"{label} binds variable {new[1].arg} instead of {old[1].arg}" + tail
                    return head + f"{label} is a {_kind(new)} but was a {_kind(old)} at capture" + tail
        for label, t, old, new, desc in zip(self._tensor_labels(args, kwargs), tensors, cap.input_keys, keys,
                                            cap.input_desc):
            if old != new:
                return head + f"input {label} is {_describe(t, new)}, captured as {desc}" + tail
        raise AssertionError("a mismatch was found but not located")


def _labels(args: tuple, kwargs: dict[str, Any]) -> list[str]:
    return [f"argument {i}" for i in range(len(args))] + [f"keyword argument {k!r}" for k in sorted(kwargs)]


def _kind(s: Any) -> str:
    if s == "Tensor":
        return "Tensor"
    return {"variable": "bound variable", "value": "Python value"}.get(s[0]) or s[1].__name__


def _tensors_in(ret: Any, name: str) -> list[Any]:
    """The tensors in a return value (a Tensor, None, or tuples/lists/dicts of those)."""
    if isinstance(ret, Tensor):
        return [ret]
    if ret is None:
        return []
    if isinstance(ret, (tuple, list)):
        return [t for x in ret for t in _tensors_in(x, name)]
    if isinstance(ret, dict):
        return [t for x in ret.values() for t in _tensors_in(x, name)]
    raise JitError(f"TinyJit({name}) returned a {type(ret).__name__}; a jitted function returns Tensors (or "
                   "None, or tuples/lists/dicts of them): other values would be frozen at capture")


def _template(ret: Any, out_of: dict[int, _Out]) -> Any:
    if isinstance(ret, (tuple, list)):
        return type(ret)(_template(x, out_of) for x in ret)
    if isinstance(ret, dict):
        return {k: _template(v, out_of) for k, v in ret.items()}
    return None if ret is None else out_of[id(ret)]


def _rebuild(tpl: Any, old_inputs: list[UOp], new_inputs: list[UOp]) -> Any:
    if isinstance(tpl, _Out):
        if tpl.input_index is None:
            return Tensor(tpl.node, device=tpl.device)
        i = tpl.input_index
        return Tensor(tpl.node.substitute({old_inputs[i]: new_inputs[i]}), device=tpl.device)
    if isinstance(tpl, (tuple, list)):
        return type(tpl)(_rebuild(x, old_inputs, new_inputs) for x in tpl)
    if isinstance(tpl, dict):
        return {k: _rebuild(v, old_inputs, new_inputs) for k, v in tpl.items()}
    return tpl


def _make_items(recorded: list[tuple[Callable, list[Buffer], UOp]], in_bufs: list[Buffer]) -> list[JitItem]:
    slot = {id(b): i for i, b in enumerate(in_bufs)}
    items = []
    for runner, bufs, ast in recorded:
        inputs = tuple((p, slot[id(b)]) for p, b in enumerate(bufs) if id(b) in slot)
        fixed = [None if id(b) in slot else b for b in bufs]
        names = () if ast.op is Ops.COPY else \
            tuple(sorted({u.arg[0] for u in ast.toposort() if u.op is Ops.DEFINE_VAR}))
        items.append(JitItem(runner, fixed, inputs, names, ast))
    return items


def _written(item: JitItem) -> set[int]:
    """Positions in item.bufs the item writes."""
    if item.ast.op is Ops.COPY:
        return {0}
    out = set()
    for u in item.ast.toposort():
        if u.op is Ops.STORE:
            p = u.src[0].src[0] if u.src[0].op is Ops.INDEX else u.src[0]
            if p.op is Ops.PARAM:
                out.add(p.arg if isinstance(p.arg, int) else p.arg[0])
    return out


def _plan(items: list[JitItem], keep: set[int]) -> list[JitItem]:
    """Memory planning over the whole capture: an intermediate (a buffer no live tensor holds, first used by
    a write) takes over the memory of one of equal device, size and dtype whose last use came before."""
    live = {id(b) for b in _buffers.values()} | keep
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    by_id: dict[int, Buffer] = {}
    readonly_first: set[int] = set()
    for i, it in enumerate(items):
        writes = _written(it)
        for p, b in enumerate(it.bufs):
            if b is None or id(b) in live:
                continue
            if id(b) not in first:
                first[id(b)] = i
                by_id[id(b)] = b
                if p not in writes:  # holds data from before the kernels (uploaded from the host): keep it
                    readonly_first.add(id(b))
            last[id(b)] = i
    planned = {k for k in first if k not in readonly_first}
    dying: dict[int, list[int]] = defaultdict(list)
    for k in planned:
        dying[last[k]].append(k)
    free: dict[tuple, list[Buffer]] = defaultdict(list)
    new: dict[int, Buffer] = {}
    out = []
    for i, it in enumerate(items):
        for b in it.bufs:
            if b is not None and id(b) in planned and first[id(b)] == i and id(b) not in new:
                key = (b.device, b.size, b.dtype)
                new[id(b)] = free[key].pop() if free[key] else b
        for k in dying[i]:
            b = by_id[k]
            free[(b.device, b.size, b.dtype)].append(new[k])
        out.append(JitItem(it.runner, [new.get(id(b), b) if b is not None else None for b in it.bufs], it.inputs,
                           it.var_names, it.ast))
    return out


__all__ = ["CapturedJit", "JitError", "JitItem", "TinyJit"]
