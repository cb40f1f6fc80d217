"""TinyJit: capture the kernels a function runs once, then replay them without scheduling or codegen.

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor: ...

Call 0 runs the function eagerly. Call 1 runs it again while the engine records every exec item it runs
(the device runner from `Compiled.get_runner`, or a copy, with its buffers); the outputs are realized inside
the capture, so their kernels are recorded too. Later calls replay the recorded items with this call's input
buffers and variable values: no tensor graph is built, nothing is scheduled or compiled.

**Inputs** are the Tensors in the arguments (positional and keyword, also inside lists, tuples, dicts and
frozen dataclasses, however nested; they are realized first) and the bound variables (`UOp.variable(...).bind(n)`) found there,
whose values replace the captured ones on replay. A replay checks that the arguments have the captured
structure (engine/jit_signature.py: container types, lengths and dict keys; plain values such as numbers,
strings and None equal, since they are baked into the kernels; any other object the very same one) and that
each input tensor has the captured dtype, device and view (shape, and the view ops over its buffer).
A difference raises JitError naming it; `reset()` makes the next call capture again.

**Threads**: the capture state is per thread, so another thread's work during a capture runs normally and
is not recorded; calls of one TinyJit from several threads run one at a time.

**Outputs** are the Tensors the function returns (a Tensor, None, or tuples/lists/dicts of them, nested;
namedtuples and dict subclasses keep their type). A replay returns Tensors backed by the captured output
buffers, so each call overwrites the previous call's outputs (as in tinygrad): copy a result (`.numpy()`,
`.clone()`) to keep it. An output that is a view of an input is that view of the new input. An output
passed back in (`x = f(x)`) works: an input held in memory the kernels write is read from a private copy.

**Frozen at capture** (as in tinygrad): Python values and branches in the function, what it reads from
objects (the tensors `self.w` of a method held at capture: so an object argument, `self` included, must be
the same object on replay), side effects other than kernels (a `.grad` set during capture is not updated by
replays), variables bound inside the function, and tensors made from host data inside it. Random numbers
are not frozen: a replay uploads fresh RNG keys, as the eager calls would, and device-side checks
(engine/checks.py) captured among the items are re-armed by each replay, so the next host read reports
them. Reading a value on the host
(`.numpy()`, `.item()`) during the capture, and calling a TinyJit inside another one's capture, raise
JitError.

**Capture format** (device-neutral): a list of `JitItem(runner, bufs, inputs, var_names, ast)`: the
callable `runner(bufs, var_vals)`, the buffers it runs on, the positions in `bufs` that take input buffers,
and the names of the variables the kernel reads. A device with command queues (HCQ) can later turn
consecutive items into one linked batch and replay that instead. Intermediate buffers (made inside the
function and held by no tensor after it) are planned once at capture: those whose lifetimes in the item list
do not overlap share memory.
"""
from __future__ import annotations

import functools
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from tg_core.device import Buffer
from tg_core.engine.checks import Check
from tg_core.engine.checks import ran as ran_checks
from tg_core.engine.jit_memory import CaptureRecycler
from tg_core.engine.jit_signature import Signature, SignatureError, mismatch, remake
from tg_core.engine.jit_signature import read as read_signature
from tg_core.engine.realize import _buffer_refs, _buffers, buffer_of, capture, stats
from tg_core.profile import events as profile_events
from tg_core.profile import state as profiling
from tg_core.tensor import Tensor
from tg_core.tensor.storage import forget_origin
from tg_core.uop.ops import Ops
from tg_core.uop.sint import arg_binds, binds_of_arg, has_sym, rebind_graph, unbind_arg
from tg_core.uop.uop import UOp

R = TypeVar("R")

_VIEW_OPS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP, Ops.PAD, Ops.DETACH})


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
    """Everything a replay needs. `signature` and `input_keys` are what a call must match."""
    items: list[JitItem]
    signature: Signature             # of the capture call, without its tensors
    input_keys: tuple
    input_desc: list[str]            # the inputs as errors describe them
    input_nodes: list[UOp]           # the capture call's input BUFFER nodes (outputs that view an input)
    var_vals: dict[str, int]
    ret: Any                         # the return value with _Out in place of tensors
    rng_keys: list[Buffer]
    checks: list[tuple[Check, Buffer]]  # device-side checks whose kernels are among the items


    def __post_init__(self) -> None:
        self.n_kernels = sum(it.ast.op is not Ops.COPY for it in self.items)  # the engine's stats count them
        # the memory the items write, and the inputs they write into: an input held in that memory is aliased
        self.written = {id(b.base) for it in self.items for p in _written(it) if (b := it.bufs[p]) is not None}
        self.written_inputs = {i for it in self.items for p, i in it.inputs if p in _written(it)}
        self.private: dict[int, Buffer] = {}  # by input index: where an aliased input is copied to be read
        self.hcq: list | None = None  # hcq: the items as linked batches and plain items (tg_core/hcq/jit.py)
        self._calls: list[Callable[[list[Buffer], dict[str, int]], None]] | None = None

    @property
    def calls(self) -> list[Callable[[list[Buffer], dict[str, int]], None]]:
        """Each item as a call taking the replay's input buffers and variable values, prepared on first use (after
        memory planning and hcq linking have settled the buffers): a runner that offers `prebind(bufs, inputs)`
        (the CPU's) makes its argument lists once; any other is called with the item's buffers, inputs filled in."""
        if self._calls is None:
            self._calls = [_prebound(it) for it in self.items]
        return self._calls


def _prebound(it: JitItem) -> Callable[[list[Buffer], dict[str, int]], None]:
    prebind = getattr(it.runner, "prebind", None)
    if prebind is not None:
        return cast(Callable[[list[Buffer], dict[str, int]], None], prebind(it.bufs, it.inputs))
    runner, fixed, inputs = it.runner, cast("list[Buffer]", it.bufs), it.inputs
    if not inputs:
        return lambda in_bufs, var_vals: runner(fixed, var_vals)

    def call(in_bufs: list[Buffer], var_vals: dict[str, int]) -> None:
        bufs = list(fixed)
        for pos, i in inputs:  # the None entries are exactly the input positions
            bufs[pos] = in_bufs[i]
        runner(bufs, var_vals)
    return call


def _view_key(u: UOp) -> tuple[tuple, UOp] | None:
    """(what a replay must match: the view ops over the buffer, its size, dtype and device; the BUFFER node),
    or None when `u` is not a view of a buffer."""
    got = _view_key_sym(u)
    return None if got is None else got[:2]


def _view_key_sym(u: UOp) -> tuple[tuple, UOp, bool] | None:
    """_view_key, and whether a view op has a symbolic dim (the only way a view of a buffer has a symbolic shape)."""
    chain = []
    sym = False
    while u.op is not Ops.BUFFER:
        if u.op not in _VIEW_OPS:
            return None
        # a symbolic dim matches by its variables, not their values (the replay passes new values)
        if has_sym(u.arg):
            sym = True
            chain.append((u.op, unbind_arg(u.arg, {})))
        else:
            chain.append((u.op, u.arg))
        u = u.src[0]
    return (tuple(chain), u.arg, u.dtype, u.src[1].arg), u, sym


def _describe(t: Any, key: tuple) -> str:
    """An input as an error names it: dtype, shape, device, and the views over its buffer if any."""
    chain, size, _, _ = key
    views = [f"{op.name.lower()}{arg if arg is not None else ''}" for op, arg in reversed(chain)
             if not (op is Ops.RESHAPE and len(chain) == 1)]
    where = f"{t.dtype.name} {t.shape} on {t.device}"
    return where + (f" (a view of {size} elements: {', '.join(views)})" if views else "")


class TinyJit(Generic[R]):
    """Decorate a function whose Tensor work should be captured on call 1 and replayed afterwards (see the
    module docstring). Used on a method, one TinyJit is shared by all instances, as in tinygrad; it replays
    for the instance it captured, and a call on another instance raises JitError (reset() to capture again)."""

    def __init__(self, fxn: Callable[..., R]):
        if not callable(fxn):
            raise TypeError(f"TinyJit wraps a function, not {type(fxn).__name__}")
        self.fxn = fxn
        self.name = getattr(fxn, "__qualname__", repr(fxn))
        functools.update_wrapper(self, fxn)
        self._lock = threading.RLock()  # reentrant: a call inside the function gets the nested-JIT error
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

    # ---- calls --------------------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        if capture.active is not None:
            raise JitError(f"TinyJit({self.name}) called while TinyJit({capture.active}) is capturing; "
                           "nested JITs are not supported (call the inner function undecorated)")
        with self._lock:  # one call at a time: a replay reuses the captured buffers
            try:
                sig = read_signature(args, kwargs)
            except SignatureError as e:
                raise JitError(f"TinyJit({self.name}): {e}") from None
            keys, nodes = self._prepare_inputs(sig)
            if self.captured is not None:
                cap = self.captured
                # (the trees compared here first: an equal one, every replay's case, needs no call to locate a difference)
                why = mismatch(cap.signature, sig) if cap.signature.tree != sig.tree else None
                if why is None and keys != cap.input_keys:
                    why = _input_mismatch(cap, sig, keys)
                if why is not None:
                    raise JitError(f"TinyJit({self.name}) cannot replay this call: {why}; a TinyJit replays the "
                                   "kernels captured for one signature (call reset() to capture again)")
                if profiling.on:  # the replay is a span of the profile, and labels the kernels it runs
                    with profile_events.jit_phase(f"replay of {self.name}"):
                        return self._replay(cap, sig, nodes)
                return self._replay(cap, sig, nodes)
            if self.cnt == 0:
                ret = self.fxn(*args, **kwargs)
                self._realize_outputs(ret)
                self.cnt = 1
                return ret
            if profiling.on:
                with profile_events.jit_phase(f"capture of {self.name}"):
                    return self._capture(args, kwargs, sig, keys, nodes)
            return self._capture(args, kwargs, sig, keys, nodes)

    def _prepare_inputs(self, sig: Signature) -> tuple[tuple, list[UOp]]:
        """Realize the input tensors; their view keys and BUFFER nodes."""
        keys, nodes = [], []
        for t, label in zip(sig.tensors, sig.tensor_labels):
            got = _view_key_sym(t.uop)
            if got is None:
                t.realize()
                if (got := _view_key_sym(t.uop)) is None:
                    raise JitError(f"TinyJit({self.name}): {label} ({t.dtype.name} {t.shape}) is not a view of a "
                                   "buffer after realizing it")
            keys.append(got[0])
            nodes.append(got[1])
            if got[2]:  # a symbolic view: its bound variables are values this call passes, as arguments' are
                self._view_binds(t.uop, label, sig)
        if len(nodes) > 1 and len(set(nodes)) != len(nodes):
            dup = [label for label, n in zip(sig.tensor_labels, nodes) if nodes.count(n) > 1]
            raise JitError(f"TinyJit({self.name}): {' and '.join(dup)} share one buffer; a TinyJit needs distinct "
                           "input buffers (pass a .clone() of one)")
        return tuple(keys), nodes

    def _view_binds(self, u: UOp, label: str, sig: Signature) -> None:
        """Add the variables bound in the symbolic dims of the view `u` to the call's bound variables."""
        while u.op in _VIEW_OPS:
            for name, value in binds_of_arg(u.arg).items():
                old = sig.binds.get(name)
                if old is not None and old.src[1].arg != value:
                    raise JitError(f"TinyJit({self.name}): {label} is a view binding variable {name} to {value}, and "
                                   f"{name} is bound to {old.src[1].arg} elsewhere in this call; a call gives each "
                                   "variable one value")
                if old is None:
                    sig.binds[name] = next(b for b in arg_binds(u.arg) if b.src[0].arg[0] == name)
            u = u.src[0]

    def _realize_outputs(self, ret: Any) -> list[Any]:
        outs = _tensors_in(ret, self.name)
        if outs:
            Tensor.realize_all(*outs)
        return outs

    def _capture(self, args: tuple, kwargs: dict[str, Any], sig: Signature, keys: tuple, nodes: list[UOp]) -> R:
        capture.active, capture.items, capture.var_vals, capture.rng_keys, capture.checks = self.name, [], {}, [], []
        # intermediates that die during the capture lend their memory to later ones (the record holds them all)
        capture.recycle = CaptureRecycler(capture.items, capture.rng_keys, capture.checks)
        try:
            ret = self.fxn(*args, **kwargs)
            outs = self._realize_outputs(ret)
            recorded, var_vals, rng_keys, checks = capture.items, capture.var_vals, capture.rng_keys, capture.checks
        finally:
            capture.active, capture.items, capture.var_vals, capture.rng_keys, capture.checks = None, [], {}, [], []
            capture.recycle = None
        items = _make_items(recorded, [buffer_of(n) for n in nodes])
        written = {id(it.bufs[p]) for it in items for p in _written(it) if it.bufs[p] is not None}
        index = {n: i for i, n in enumerate(nodes)}
        out_of: dict[int, _Out] = {}
        for t in outs:
            got = _view_key(t.uop)
            base = got[1] if got is not None else None
            out_of[id(t)] = _Out(t.uop, t.device, index.get(base) if base is not None else None)
            # a replay rewrites this buffer without the graph that computed it: gradients must not follow it
            if base is not None and id(buffer_of(base)) in written:
                forget_origin(base)
        items = _plan(items, {id(b) for b in rng_keys} | {id(b) for _, b in checks})
        desc = [_describe(t, k) for t, k in zip(sig.tensors, keys)]
        sig.tensors = []  # the capture call's tensors are not needed to check later calls: do not keep them alive
        self.captured = CapturedJit(items, sig, keys, desc, nodes, dict(var_vals), _template(ret, out_of), rng_keys,
                                    checks)
        from tg_core.hcq.jit import link_captured  # hcq: the runs on command-queue devices are linked once
        self.captured.hcq = link_captured(items, [buffer_of(n) for n in nodes])
        self.cnt = 2
        return ret

    def _replay(self, cap: CapturedJit, sig: Signature, nodes: list[UOp]) -> R:
        var_vals, binds = cap.var_vals, sig.binds
        if binds:
            var_vals = dict(var_vals)
            for name, b in binds.items():
                var_vals[name] = b.src[1].arg
        if cap.rng_keys:
            for buf in cap.rng_keys:
                buf.copyin(Tensor._next_rng_key())
        in_bufs: list[Buffer] = []
        for n in nodes:  # buffer_of, its lookup inlined (ref(n) is the node's shared weak reference)
            found = _buffer_refs.get(weakref.ref(n))
            in_bufs.append(found if found is not None else buffer_of(n))
        in_bufs = self._unaliased(in_bufs, cap, sig)
        if cap.hcq is not None:  # hcq: linked batches replay with new input addresses and variables only
            from tg_core.hcq.jit import replay
            replay(cap.hcq, in_bufs, var_vals)
        elif profiling.on:  # each item timed and labelled: through its runner, with its buffers
            for it in cap.items:
                bufs = list(it.bufs)
                for pos, i in it.inputs:
                    bufs[pos] = in_bufs[i]
                profile_events.timed_item(it.runner, cast("list[Buffer]", bufs), var_vals, it.ast)
        else:
            for call in cap._calls if cap._calls is not None else cap.calls:  # (prepared once, on the first replay)
                call(in_bufs, var_vals)
        if cap.checks:  # the check kernels wrote their facts again: the next host read looks at them
            ran_checks(*map(list, zip(*cap.checks)))
        stats["kernels"] += cap.n_kernels
        stats["copies"] += len(cap.items) - cap.n_kernels
        return _rebuild(cap.ret, cap.input_nodes, nodes, var_vals if binds else None)


    def _unaliased(self, in_bufs: list[Buffer], cap: CapturedJit, sig: Signature) -> list[Buffer]:
        """The input buffers, an input held in memory the items write (the previous call's output passed back
        in: `x = f(x)`) replaced by a private copy of it: in place, a kernel would overwrite elements it has
        yet to read, and a later kernel would read the new values."""
        if not cap.written:
            return in_bufs
        out = list(in_bufs)
        for i, b in enumerate(in_bufs):
            if id(b._base if b._base is not None else b) not in cap.written:  # (b.base, inlined)
                continue
            if i in cap.written_inputs:
                raise JitError(f"TinyJit({self.name}): input {sig.tensor_labels[i]} is held in memory this TinyJit "
                               "writes (an output of its previous call), and the function also writes into it; "
                               "pass a .clone() of it")
            if (copy := cap.private.get(i)) is None:
                copy = cap.private[i] = Buffer(b.device, b.size, b.dtype)
            copy.copy_from(b)
            stats["copies"] += 1
            out[i] = copy
        return out


def _input_mismatch(cap: CapturedJit, sig: Signature, keys: tuple) -> str:
    """The first input whose view key differs from the captured one, described."""
    return next(f"input {label} is {_describe(t, new)}, captured as {desc}" for label, t, old, new, desc
                in zip(sig.tensor_labels, sig.tensors, cap.input_keys, keys, cap.input_desc) if old != new)


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
    if isinstance(ret, (tuple, list, dict)):
        return remake(ret, [_template(x, out_of) for x in (ret.values() if isinstance(ret, dict) else ret)])
    return None if ret is None else out_of[id(ret)]


def _rebuild(tpl: Any, old_inputs: list[UOp], new_inputs: list[UOp], var_vals: dict[str, int] | None) -> Any:
    """The return value of a replay; with `var_vals`, its symbolic shapes take this call's variable values."""
    if isinstance(tpl, _Out):
        node = tpl.node if var_vals is None else rebind_graph(tpl.node, var_vals)
        # (the device is the captured tensor's, canonical: the tensor is made without re-checking it)
        if tpl.input_index is None:
            return Tensor._wrap(node, tpl.device)
        i = tpl.input_index
        return Tensor._wrap(node.substitute({old_inputs[i]: new_inputs[i]}), tpl.device)
    if isinstance(tpl, (tuple, list, dict)):
        items = tpl.values() if isinstance(tpl, dict) else tpl
        return remake(tpl, [_rebuild(x, old_inputs, new_inputs, var_vals) for x in items])
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
