"""The reference interpreter: runs a kernel AST exactly, with numpy doing whole ranges at once.

Every RANGE of the kernel is an axis of one iteration space; a value is a numpy array that broadcasts over
the axes of the ranges it depends on (a scalar when it depends on none), so an elementwise op is one numpy
call for the whole kernel and a REDUCE is one numpy reduction over its ranges' axes. Integer semantics are
those of `uop/alu.py` (truncating division, wrapping ints). Large kernels run in chunks of their first
output range so that no intermediate grows past a few million elements.

Hand-written kernels (custom kernels) also use per-thread registers (DEFINE_REG), workgroup memory (DEFINE_LOCAL)
and BARRIERs. A DEFINE_* buffer is one copy per thread: an array with an axis for each range computed at once
(none for a LOCAL range in the case of LDS, which the work-items of a workgroup share), so a store of a value
broadcasting over some ranges writes every copy. Computing a whole range at once already orders a BARRIER: every
lane's stores before it are done before any lane's loads after it. A REDUCE range whose END holds a store into a
register or LDS (an accumulator updated in a loop, a tile staged per iteration) is not computed at once but
iterated, its body run once per value (`_Plan.loops`), since each iteration reads what the previous one stored.

This is the PYTHON device's runtime (device.py beside it) and the oracle the other backends are tested against.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tg_core.dtype import DType, dtypes, to_numpy_dtype
from tg_core.uop.alu import float_to_int_range
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

CHUNK_ELEMENTS = 1 << 22


@functools.cache
def _np_dtype(dt: DType) -> np.dtype:
    if dt.scalar() is dtypes.weakint:
        return np.dtype(np.int64)
    if dt.scalar() is dtypes.weakfloat:
        return np.dtype(np.float64)
    if dtypes.is_fp8(dt) or dt.scalar() is dtypes.bfloat16:
        raise NotImplementedError(f"the reference interpreter does not compute in {dt!r} yet")
    return to_numpy_dtype(dt)


def _idiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a), np.asarray(b)
    safe = np.where(b == 0, 1, b)
    q = a // safe
    q = q + ((a - q * safe != 0) & ((a < 0) != (safe < 0)))  # floor -> truncation
    return np.where(b == 0, 0, q)


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(np.asarray(b) == 0, 0, a - _idiv(a, b) * b)


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind not in "iu" or b.dtype.kind not in "iu":
        return np.power(a, b)
    # numpy refuses negative integer exponents; alu.py truncates the real power: only 1 and -1 stay non-zero
    neg = b < 0
    pos = np.power(a, np.where(neg, 0, b).astype(b.dtype))
    if not neg.any():
        return pos
    inv = np.where(a == 1, 1, np.where(a == -1, 1 - 2 * (b & 1), 0))
    return np.where(neg, inv, pos)


def _shift(fn: Callable, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(np.asarray(b) < 0, 0, fn(a, np.maximum(b, 0)))


_ALU: dict[Ops, Callable[..., np.ndarray]] = {
    Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.divide, Ops.IDIV: _idiv, Ops.MOD: _mod,
    Ops.MAX: np.maximum, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal,
    Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor,
    Ops.SHL: lambda a, b: _shift(np.left_shift, a, b), Ops.SHR: lambda a, b: _shift(np.right_shift, a, b),
    Ops.WHERE: np.where, Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.SQRT: np.sqrt,
    Ops.RECIPROCAL: lambda a: np.divide(1, a), Ops.TRUNC: np.trunc, Ops.NEG: np.negative, Ops.POW: _pow,
    Ops.MULACC: lambda a, b, c: a * b + c,
}
_REDUCE = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum}


def _cast(x: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    nd = _np_dtype(dst)
    if dtypes.is_bool(dst):
        return np.not_equal(x, 0)
    if dtypes.is_float(src) and dtypes.is_int(dst):
        # undefined in C; alu.py fixes it at 0. The bounds are exact in float64 (in the source's own dtype a
        # bound like int32's MAX rounds onto a value outside the range)
        if dst.scalar() is dtypes.weakint:
            x = np.where(np.isfinite(x), x, 0)
        else:
            lo, hi = float_to_int_range(src, dst)
            wide = np.asarray(x, np.float64)
            x = np.where((lo < wide) & (wide < hi), x, 0)
        x = np.trunc(x)
    return np.asarray(x).astype(nd)


class _Plan:
    """What a kernel's runs share: its nodes in order, its ranges as axes, constant range sizes, and the
    accesses whose index range analysis keeps within [0, bound) (their run-time bounds check is skipped
    when the buffer has at least `bound` elements)."""

    def __init__(self, ast: UOp):
        self.order = list(ast.toposort())
        self.ranges = sorted((u for u in self.order if u.op is Ops.RANGE), key=lambda r: repr(r.arg[0]))
        self.axis = {r: i for i, r in enumerate(self.ranges)}
        self.first = next((r for r in self.ranges if r.arg[1].name in ("LOOP", "GLOBAL")), None)
        self.variables = [u for u in self.order if u.op is Ops.DEFINE_VAR]
        self.sizes = {r: r.src[0].arg for r in self.ranges if r.src[0].op is Ops.CONST} \
            if all(r.src[0].op is Ops.CONST for r in self.ranges) else None
        self.loops = _sequential_loops(self.order)
        inside = {n for body in self.loops.values() for n in body[1]}
        self.top = [u for u in self.order if u not in inside]
        self.proven: dict[UOp, int] = {}
        for u in self.order:
            if u.op is Ops.INDEX and len(u.src) == 2 and u.src[1].vmin >= 0:
                self.proven[u] = int(u.src[1].vmax) + 1  # an index's bounds are ints
            # a dtype it cannot compute in (bfloat16: loaded as raw bits) fails the kernel when it is built,
            # not half way through a run, and never as a cast of raw bits
            if u.op in _ALU or u.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.REDUCE, Ops.CAST, Ops.BITCAST):
                _np_dtype(u.dtype)
                if u.op is Ops.CAST:
                    _np_dtype(u.src[0].dtype)


def _memory(u: UOp) -> UOp | None:
    """The DEFINE_REG or DEFINE_LOCAL an INDEX's buffer is (through AFTERs), or None for a kernel argument."""
    base = u.src[0]
    while base.op is Ops.AFTER:
        base = base.src[0]
    return base if base.op in (Ops.DEFINE_REG, Ops.DEFINE_LOCAL) else None


def _sequential_loops(order: list[UOp]) -> dict[UOp, tuple[list[UOp], list[UOp]]]:
    """END -> (its REDUCE ranges to iterate, the nodes to run once per iteration in order) for every END whose body
    stores into a register or LDS. A body excludes the nodes of loops nested in it (they run in their own)."""
    loops: dict[UOp, tuple[list[UOp], list[UOp]]] = {}
    for e in order:
        if e.op is not Ops.END:
            continue
        rngs = [r for r in e.src[1:] if r.op is Ops.RANGE and r.arg[1].name == "REDUCE"]
        if not rngs:
            continue
        inner = e.src[0].toposort()
        if not any(n.op is Ops.STORE and n.src[0].op is Ops.INDEX and _memory(n.src[0]) is not None for n in inner):
            continue
        body = [n for n in inner if n.op is not Ops.RANGE and any(r in n.ranges for r in rngs)]
        loops[e] = (rngs, body)
    for e, (rngs, body) in loops.items():  # a nested loop's nodes run inside it, not in every enclosing body
        nested = {n for e2 in body if e2 in loops for n in loops[e2][1]}
        loops[e] = (rngs, [n for n in body if n not in nested])
    return loops


class _Memory:
    """A register array or an LDS buffer: `size` elements per copy, one copy per combination of the ranges in
    `shape` (1 on an axis the copies are shared over)."""

    def __init__(self, size: int, dtype: np.dtype, shape: list[int]):
        self.size = size
        self.arr = np.zeros([size, *shape], dtype)
        self.grid = [np.arange(n).reshape([n if a == i else 1 for a in range(len(shape))]) if n > 1 else 0
                     for i, n in enumerate(shape)]

    def where(self, idx: np.ndarray, *more: Any) -> tuple[np.ndarray, ...]:
        """The element index and every copy axis, broadcast together with `more` (the value, the gate)."""
        return tuple(np.broadcast_arrays(np.asarray(idx), *self.grid, *(np.asarray(m) for m in more)))


@functools.lru_cache(maxsize=1024)
def _plan(ast: UOp) -> _Plan:
    return _Plan(ast)


class _Run:
    def __init__(self, ast: UOp, bufs: list[np.ndarray], var_vals: Mapping[str, int]):
        self.ast, self.bufs, self.var_vals = ast, bufs, var_vals
        plan = self.plan = _plan(ast)
        self.order, self.ranges, self.axis = plan.order, plan.ranges, plan.axis

    def run(self) -> None:
        first = self.plan.first
        if self.plan.sizes is not None:
            sizes = self.plan.sizes
        else:
            env = {u: self.var_vals[u.arg[0]] for u in self.plan.variables}
            sizes = {r: int(r.src[0].evaluate(env)) for r in self.ranges}
        self.sizes = sizes
        if first is None:
            self._execute(None, 0, 0)
            return
        total = math.prod(max(n, 1) for n in sizes.values())
        n = sizes[first]
        chunk = max(1, min(n, n * CHUNK_ELEMENTS // max(total, 1)))
        for start in range(0, n, chunk):
            self._execute(first, start, min(n, start + chunk))

    def _execute(self, chunked: UOp | None, start: int, end: int) -> None:
        # a node's value: an array; an INDEX's is the tuple (buffer, indices[, gate]) its LOAD/STORE unpacks
        vals: dict[UOp, Any] = {}  # (Any: the two kinds of value do not share operations)
        self._chunk = (chunked, start, end)
        self._nodes(self.plan.top, vals)

    def _loop(self, e: UOp, vals: dict[UOp, Any]) -> None:
        """A sequential END: its body run once per value of its REDUCE ranges (the first outermost)."""
        rngs, body = self.plan.loops[e]
        nd = len(self.ranges)
        sizes = [int(vals[r.src[0]]) for r in rngs]
        for point in np.ndindex(*sizes):
            for r, v in zip(rngs, point):
                vals[r] = np.full([1] * nd, v, dtype=np.int64)
            self._nodes(body, vals)

    def _define(self, u: UOp, vals: dict[UOp, Any]) -> _Memory:
        # a copy per thread: every range computed at once gets an axis (its current length), except that LDS is
        # shared by a workgroup's LOCAL ranges and iterated ranges are one value at a time
        seq = {r for rngs, _ in self.plan.loops.values() for r in rngs}
        chunked, start, end = self._chunk
        shape = [1] * len(self.ranges)
        for r, a in self.axis.items():
            if r in seq or (u.op is Ops.DEFINE_LOCAL and r.arg[1].name == "LOCAL"):
                continue
            shape[a] = max(end - start if r is chunked else self.sizes[r], 1)
        return _Memory(u.ptrdtype.size, _np_dtype(u.dtype.base), shape)

    def _nodes(self, nodes: list[UOp], vals: dict[UOp, Any]) -> None:
        chunked, start, end = self._chunk
        nd = len(self.ranges)
        for u in nodes:
            op = u.op
            if op is Ops.END and u in self.plan.loops:
                self._loop(u, vals)
            elif op is Ops.RANGE:
                n = int(vals[u.src[0]])
                ar = np.arange(start, end) if u is chunked else np.arange(n)
                shape = [1] * nd
                shape[self.axis[u]] = len(ar)
                vals[u] = ar.reshape(shape)
            elif op is Ops.CONST:
                vals[u] = np.asarray(u.arg, dtype=_np_dtype(u.dtype))
            elif op is Ops.DEFINE_VAR:
                if u.arg[0] not in self.var_vals:
                    raise ValueError(f"kernel {self.ast.arg} needs a value for the variable {u.arg[0]}")
                vals[u] = np.asarray(self.var_vals[u.arg[0]], dtype=_np_dtype(u.dtype))
            elif op is Ops.PARAM:
                vals[u] = self.bufs[u.arg if isinstance(u.arg, int) else u.arg[0]]
            elif op is Ops.INDEX:
                vals[u] = tuple(vals[s] for s in u.src)
            elif op is Ops.LOAD:
                buf, idx, *gate = vals[u.src[0]]
                vals[u] = self._load(buf, idx, gate[0] if gate else None, u)
            elif op is Ops.STORE:
                self._store(*vals[u.src[0]], vals[u.src[1]], u)
            elif op is Ops.REDUCE:
                vals[u] = self._reduce(u, vals)
            elif op is Ops.CAST:
                vals[u] = _cast(vals[u.src[0]], u.src[0].dtype, u.dtype)
            elif op is Ops.BITCAST:
                vals[u] = np.ascontiguousarray(vals[u.src[0]]).view(_np_dtype(u.dtype))
            elif op in _ALU:
                with np.errstate(all="ignore"):
                    r = _ALU[op](*(vals[s] for s in u.src))
                vals[u] = np.asarray(r).astype(_np_dtype(u.dtype), copy=False)
            elif op in (Ops.DEFINE_REG, Ops.DEFINE_LOCAL):
                vals[u] = self._define(u, vals)
            elif op is Ops.AFTER:
                vals[u] = vals[u.src[0]]
            elif op in (Ops.END, Ops.SINK, Ops.NOOP, Ops.GROUP, Ops.BARRIER):
                pass
            elif op is Ops.CUSTOM:
                raise NotImplementedError(f"the reference interpreter has no device intrinsic {u.arg!r} (in kernel "
                                          f"{self.ast.arg}); intrinsics run on the devices whose renderers know them")
            else:
                raise NotImplementedError(f"the reference interpreter cannot run {op} (in kernel {self.ast.arg})")

    def _load(self, buf: np.ndarray | _Memory, idx: np.ndarray, valid: np.ndarray | None, u: UOp):
        if isinstance(buf, _Memory):
            where = buf.where(idx if valid is None else np.where(valid, idx, 0))
            self._check_bounds(buf.size, where[0], None, u)
            out = buf.arr[where]
            return out if valid is None else np.where(valid, out, np.zeros((), out.dtype))
        if valid is None:
            if self.plan.proven.get(u.src[0], math.inf) > buf.size:
                self._check_bounds(buf, idx, None, u)
            return buf[idx]
        safe = np.where(valid, idx, 0)
        self._check_bounds(buf, safe, valid, u)
        return np.where(valid, buf[safe], np.zeros((), buf.dtype))

    def _store(self, buf: np.ndarray | _Memory, idx: np.ndarray, *rest) -> None:
        value, u = rest[-2], rest[-1]
        valid = rest[0] if len(rest) == 3 else None
        if isinstance(buf, _Memory):
            *where, val_b, keep = buf.where(idx, value, True if valid is None else valid)
            where, val_b = [w[keep] for w in where], val_b[keep]
            self._check_bounds(buf.size, where[0], None, u)
            buf.arr[tuple(where)] = val_b
            return
        if valid is None:
            idx_b, val_b = np.broadcast_arrays(idx, value)
        else:  # the gate may vary over ranges the index and value do not (one lane of a workgroup stores)
            idx_b, val_b, keep = np.broadcast_arrays(idx, value, valid)
            idx_b, val_b = idx_b[keep], val_b[keep]
        if valid is not None or self.plan.proven.get(u.src[0], math.inf) > buf.size:
            self._check_bounds(buf, idx_b, None, u)
        buf[idx_b.ravel()] = val_b.ravel()

    def _check_bounds(self, buf: np.ndarray | int, idx: np.ndarray, valid, u: UOp | None) -> None:
        size = buf if isinstance(buf, int) else buf.size
        if np.size(idx) and (np.min(idx) < 0 or np.max(idx) >= size):
            bad = int(np.min(idx)) if np.min(idx) < 0 else int(np.max(idx))
            raise IndexError(f"kernel {self.ast.arg.name if self.ast.arg else ''}: index {bad} out of bounds for a "
                             f"buffer of {size} elements ({u.src[0].src[1].render()[:120] if u is not None else ''})")

    def _reduce(self, u: UOp, vals: dict[UOp, np.ndarray]) -> np.ndarray:
        value = vals[u.src[0]]
        axes = tuple(self.axis[r] for r in u.src[1:])
        full = list(np.shape(value)) if np.ndim(value) else [1] * len(self.ranges)
        if len(full) < len(self.ranges):
            full = [1] * (len(self.ranges) - len(full)) + full
        for r in u.src[1:]:
            full[self.axis[r]] = np.shape(vals[r])[self.axis[r]]
        value = np.broadcast_to(value, full)
        with np.errstate(all="ignore"):
            out = _REDUCE[u.arg].reduce(value, axis=axes, keepdims=True)
        return out.astype(_np_dtype(u.dtype), copy=False)


def plan_kernel(ast: UOp) -> None:
    """Plan `ast` now (a runner is built before anything runs): NotImplementedError for a dtype the interpreter
    cannot compute in."""
    _plan(ast)


def run_kernel(ast: UOp, bufs: list[np.ndarray], var_vals: Mapping[str, int] | None = None) -> None:
    """Execute the kernel AST `ast` on flat numpy arrays (PARAM i is bufs[i]); outputs are written in place."""
    if ast.op is not Ops.SINK:
        raise TypeError(f"run_kernel needs a kernel SINK, got {ast.op}")
    _Run(ast, bufs, var_vals or {}).run()
