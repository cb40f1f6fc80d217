"""Index validation: prove that every buffer access of a kernel stays inside its buffer (CHECK_OOB=1).

Range analysis (vmin/vmax) proves most indices in bounds for free. The rest are translated to z3 and
proven: the solver looks for values of the kernel's variables that put the index outside
[0, size) while the INDEX's `valid` gate holds; finding none is the proof, finding some is a
counterexample for the error message.

The z3 model follows tg's exact integer semantics (alu.py): strong ints wrap to their dtype, IDIV
truncates toward zero, MOD has the sign of the dividend, division by zero gives 0. Floats are not
modeled: an int or bool computed from a float is a fresh unknown, so an index that depends on float
values is only proven when something else (a clamp, a gate) bounds it.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tg_core.dtype import DType, PtrDType, dtypes
from tg_core.helpers import CHECK_OOB
from tg_core.uop.ops import GroupOp, Ops
from tg_core.uop.uop import UOp

# a proof that takes longer than this is reported as not proven rather than hanging compilation
Z3_TIMEOUT_MS = 10_000
_MAX_NAME = 60


def _import_z3() -> Any:
    try:
        import z3
    except ImportError as e:
        raise ImportError("index validation (CHECK_OOB=1) needs the z3 solver, which is not installed; "
                          "install it with: pip install 'tg-core[validate]'") from e
    return z3


# ---- public API ------------------------------------------------------------------------------------------

def validate_index(sink: UOp) -> None:
    """Prove every buffer INDEX in the graph below `sink` in bounds; raise RuntimeError on the first that
    is not (with a counterexample). Buffers whose pointer dtype has no size (-1) are not checked."""
    prover: _Prover | None = None
    for u in sink.toposort():
        if u.op is Ops.LOAD and u.dtype.count > 1 and u.src[0].op is Ops.INDEX and u.src[0].src[1].dtype.count == 1:
            # a contiguous vector load reads its index's element and the count - 1 after it: its last must fit too
            u = u.src[0].replace(src=(u.src[0].src[0], u.src[0].src[1] + (u.dtype.count - 1), *u.src[0].src[2:]))
        if u.op is not Ops.INDEX or _in_bounds_by_range(u):
            continue
        if prover is None:
            prover = _Prover()  # one solver (and z3 import) for all the indices that need it
        prover.prove(u)


def check_index(index: UOp) -> None:
    """Prove one INDEX in bounds (the per-access form of `validate_index`, for passes that make INDEXes)."""
    if index.op is not Ops.INDEX:
        raise TypeError(f"check_index needs an INDEX, got {index.op}")
    if not _in_bounds_by_range(index):
        _Prover().prove(index)


def check_oob(sink: UOp) -> None:
    """`validate_index(sink)` when CHECK_OOB is set, else nothing: the hook a pipeline calls."""
    if CHECK_OOB:
        validate_index(sink)


# ---- what an INDEX accesses ------------------------------------------------------------------------------

def _root_buffer(index: UOp) -> UOp:
    buf = index.src[0]
    while buf.op is Ops.AFTER:  # a buffer ordered after a BARRIER or a STORE is still that buffer
        buf = buf.src[0]
    return buf


def _buffer_name(buf: UOp) -> str:
    if buf.op is Ops.PARAM:
        return buf.render()
    if isinstance(buf.arg, str):
        return buf.arg
    return buf.op.name.lower() + ("" if buf.arg is None else str(buf.arg))


def _size(index: UOp) -> int:
    """The number of elements the INDEX's buffer holds; -1 when it is unknown or not a buffer."""
    ptr = index.src[0].dtype
    return ptr.size if isinstance(ptr, PtrDType) else -1


def _in_bounds_by_range(index: UOp) -> bool:
    """True when no solver is needed: the size is unknown, the gate is never true, or vmin/vmax suffice."""
    size = _size(index)
    if size < 0:
        return True
    idx = index.src[1]
    if not dtypes.is_int(idx.dtype):
        raise RuntimeError(f"INDEX into {_buffer_name(_root_buffer(index))} has a non-integer index "
                           f"{idx.render()} of {idx.dtype!r}")
    if len(index.src) > 2 and not index.src[2].vmax:
        return True
    return idx.vmin >= 0 and idx.vmax < size


# ---- the z3 model ----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Int:
    """An int as a z3 term, with bounds known from its construction (used to skip needless wrapping)."""
    expr: Any
    lo: int | float
    hi: int | float


@dataclass(frozen=True, slots=True)
class _Bool:
    expr: Any


class _Unmodeled:
    """Floats, pointers and void: values the model does not track."""


_UNMODELED = _Unmodeled()
_Term = _Int | _Bool | _Unmodeled


def _modeled(dt: DType) -> bool:
    return not isinstance(dt, PtrDType) and (dtypes.is_int(dt) or dtypes.is_bool(dt))


def _descend(u: UOp) -> bool:
    # a LOAD's value is an unknown whatever its address, and unmodeled values need no sources
    return u.op is not Ops.LOAD and _modeled(u.dtype)


def _lane_count(u: UOp) -> int:
    return u.dtype.count if _modeled(u.dtype) else 1


def _int_bounds(dt: DType) -> tuple[int | float, int | float]:
    # weak ints are unbounded; their nominal dtype range is a convenience of range analysis only
    return (-math.inf, math.inf) if dt.scalar() is dtypes.weakint else (dtypes.min(dt), dtypes.max(dt))


def _hull(*vals: int | float) -> tuple[int | float, int | float]:
    if any(isinstance(v, float) and math.isnan(v) for v in vals):
        return -math.inf, math.inf  # 0 * inf: the bound is lost, not the value
    return min(vals), max(vals)


def _floordiv_bound(x: int | float, d: int) -> int | float:
    return x if math.isinf(x) else x // d


def _display(u: UOp) -> str:
    name = u.arg[0] if u.op is Ops.DEFINE_VAR else u.render()
    return name if len(name) <= _MAX_NAME else name[:_MAX_NAME - 3] + "..."


class _Z3Model:
    """UOps as z3 terms, one per vector lane. Variables (DEFINE_VAR, RANGE, SPECIAL, loaded values, values
    from floats) become z3 constants whose bounds are facts kept with the node that made them, so a proof
    only assumes the facts of the nodes its index depends on (an empty loop elsewhere proves nothing)."""

    def __init__(self, z3: Any):
        self.z3 = z3
        self.terms: dict[UOp, list[_Term]] = {}
        self.facts: dict[UOp, list[Any]] = {}
        self.leaves: dict[UOp, list[tuple[str, Any]]] = {}
        self._fresh_count = 0

    def scope(self, *roots: UOp) -> dict[UOp, None]:
        """The nodes whose values `roots` depend on, translated, each after its sources."""
        out: dict[UOp, None] = {}
        for root in roots:
            out.update(root.toposort(gate=_descend))
        for u in out:
            if u not in self.terms:
                self.terms[u] = [self._translate(u, lane) for lane in range(_lane_count(u))]
        return out

    def term(self, u: UOp, lane: int = 0) -> _Term:
        if u not in self.terms:
            self.scope(u)
        ts = self.terms[u]
        return ts[lane] if len(ts) > 1 else ts[0]

    # ---- variables ----

    def _name(self, u: UOp, lane: int) -> str:
        return _display(u) + (f"[{lane}]" if _lane_count(u) > 1 else "")

    def fresh_int(self, u: UOp, lane: int, lo: int | float, hi: int | float) -> _Int:
        name = self._name(u, lane)
        # the counter keeps distinct nodes apart even when they print the same
        v = self.z3.Int(f"{name}!{self._fresh_count}")
        self._fresh_count += 1
        facts = self.facts.setdefault(u, [])
        if not math.isinf(lo):
            facts.append(v >= int(lo))
        if not math.isinf(hi):
            facts.append(v <= int(hi))
        self.leaves.setdefault(u, []).append((name, v))
        return _Int(v, lo, hi)

    def fresh_bool(self, u: UOp, lane: int) -> _Bool:
        name = self._name(u, lane)
        v = self.z3.Bool(f"{name}!{self._fresh_count}")
        self._fresh_count += 1
        self.leaves.setdefault(u, []).append((name, v))
        return _Bool(v)

    def fresh(self, u: UOp, lane: int, lo: int | float | None = None, hi: int | float | None = None) -> _Term:
        """An unknown value of `u`'s dtype, by default anywhere in the dtype's range."""
        if dtypes.is_bool(u.dtype):
            return self.fresh_bool(u, lane)
        dlo, dhi = _int_bounds(u.dtype)
        return self.fresh_int(u, lane, dlo if lo is None else lo, dhi if hi is None else hi)

    def wrap(self, dt: DType, expr: Any, lo: int | float, hi: int | float) -> _Int:
        """`expr` as a value of `dt`: strong ints wrap modulo 2**bits into the dtype's range."""
        dlo, dhi = _int_bounds(dt)
        if dlo <= lo and hi <= dhi:
            return _Int(expr, lo, hi)
        return _Int((expr - dlo) % (dhi - dlo + 1) + dlo, dlo, dhi)

    # ---- translation ----

    def _translate(self, u: UOp, lane: int) -> _Term:
        dt, op = u.dtype, u.op
        if not _modeled(dt):
            return _UNMODELED
        if op is Ops.CONST or op is Ops.VCONST:
            v = u.arg if op is Ops.CONST else u.arg[lane]
            return _Bool(self.z3.BoolVal(v)) if dtypes.is_bool(dt) else _Int(self.z3.IntVal(v), v, v)
        if op is Ops.DEFINE_VAR:
            return self.fresh_int(u, lane, u.arg[1], u.arg[2])
        if op is Ops.RANGE or op is Ops.SPECIAL:
            return self._loop_index(u, lane)
        if op is Ops.BIND or op is Ops.AFTER:
            return self.term(u.src[0], lane)
        if op is Ops.VECTORIZE:
            return self.term(u.src[lane])
        if op is Ops.GEP:
            return self.term(u.src[0], u.arg[lane])
        if op is Ops.LOAD or op is Ops.PARAM:
            return self.fresh(u, lane, u.vmin, u.vmax)
        srcs = [self.term(s, lane) for s in u.src]
        out: _Int | _Bool | _Unmodeled | None
        if op is Ops.CAST or op is Ops.BITCAST:
            out = _convert(self, u, lane, srcs[0])
        elif op in GroupOp.Comparison:
            out = _compare(self, u, lane, *srcs)
        elif op is Ops.WHERE:
            out = _where(self, *srcs)
        else:
            kind, rules = (_Bool, _BOOL_RULES) if dtypes.is_bool(dt) else (_Int, _INT_RULES)
            rule = rules.get(op)
            out = rule(self, u, lane, *srcs) if rule is not None and all(isinstance(s, kind) for s in srcs) else None
        # anything else is an unknown value of its dtype: sound, just not precise
        return out if out is not None else self.fresh(u, lane)

    def _loop_index(self, u: UOp, lane: int) -> _Term:
        end = self.term(u.src[0])
        if not isinstance(end, _Int):
            return self.fresh(u, lane)
        r = self.fresh_int(u, lane, 0, max(0, end.hi - 1))
        self.facts[u].append(r.expr < end.expr)
        return r


# ---- op semantics: each takes the model, the node, the lane and the source terms -------------------------

def _convert(m: _Z3Model, u: UOp, lane: int, s: _Term) -> _Term:
    """CAST and BITCAST between ints and bools: the same here, as ints of one size have one bit pattern per
    value. From a float the result is unknown."""
    if isinstance(s, _Unmodeled):
        return m.fresh(u, lane)
    if isinstance(s, _Bool):
        if dtypes.is_bool(u.dtype):
            return s
        return _Int(m.z3.If(s.expr, 1, 0), 0, 1)
    if dtypes.is_bool(u.dtype):
        return _Bool(s.expr != 0)
    return m.wrap(u.dtype, s.expr, s.lo, s.hi)


def _compare(m: _Z3Model, u: UOp, lane: int, a: _Term, b: _Term) -> _Term:
    if isinstance(a, _Int) and isinstance(b, _Int):
        return _Bool({Ops.CMPLT: a.expr < b.expr, Ops.CMPNE: a.expr != b.expr, Ops.CMPEQ: a.expr == b.expr}[u.op])
    if isinstance(a, _Bool) and isinstance(b, _Bool):
        z3 = m.z3
        return _Bool({Ops.CMPLT: z3.And(z3.Not(a.expr), b.expr), Ops.CMPNE: z3.Xor(a.expr, b.expr),
                      Ops.CMPEQ: a.expr == b.expr}[u.op])
    return m.fresh_bool(u, lane)  # a float comparison: either answer is possible


def _where(m: _Z3Model, c: _Term, a: _Term, b: _Term) -> _Term | None:
    if not isinstance(c, _Bool):
        return None
    if isinstance(a, _Int) and isinstance(b, _Int):
        return _Int(m.z3.If(c.expr, a.expr, b.expr), min(a.lo, b.lo), max(a.hi, b.hi))
    if isinstance(a, _Bool) and isinstance(b, _Bool):
        return _Bool(m.z3.If(c.expr, a.expr, b.expr))
    return None


def _add(m: _Z3Model, u: UOp, lane: int, a: _Int, b: _Int) -> _Int:
    return m.wrap(u.dtype, a.expr + b.expr, a.lo + b.lo, a.hi + b.hi)


def _sub(m: _Z3Model, u: UOp, lane: int, a: _Int, b: _Int) -> _Int:
    return m.wrap(u.dtype, a.expr - b.expr, a.lo - b.hi, a.hi - b.lo)


def _mul(m: _Z3Model, u: UOp, lane: int, a: _Int, b: _Int) -> _Int:
    return m.wrap(u.dtype, a.expr * b.expr, *_hull(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi))


def _mulacc(m: _Z3Model, u: UOp, lane: int, a: _Int, b: _Int, c: _Int) -> _Int:
    lo, hi = _hull(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi)
    return m.wrap(u.dtype, a.expr * b.expr + c.expr, lo + c.lo, hi + c.hi)


def _neg(m: _Z3Model, u: UOp, lane: int, a: _Int) -> _Int:
    return m.wrap(u.dtype, -a.expr, -a.hi, -a.lo)


def _max(m: _Z3Model, u: UOp, lane: int, a: _Int, b: _Int) -> _Int:
    return _Int(m.z3.If(a.expr >= b.expr, a.expr, b.expr), max(a.lo, b.lo), max(a.hi, b.hi))


def _trunc_parts(m: _Z3Model, a: _Int, b: _Int, euclid: Callable[[Any, Any], Any]) -> Any:
    """z3's div and mod are Euclidean; for a >= 0 they agree with C's truncating ones, and for a < 0
    C's are the negation of the Euclidean ones applied to -a. Division by zero gives 0, as in alu.py."""
    z3 = m.z3
    if a.lo >= 0:
        out = euclid(a.expr, b.expr)
    else:
        out = z3.If(a.expr >= 0, euclid(a.expr, b.expr), -euclid(-a.expr, b.expr))
    return z3.If(b.expr == 0, 0, out) if b.lo <= 0 <= b.hi else out


def _idiv(m: _Z3Model, u: UOp, lane: int, a: _Int, b: _Int) -> _Int:
    q = _trunc_parts(m, a, b, lambda x, y: x / y)
    big = max(abs(a.lo), abs(a.hi))
    lo, hi = (0, a.hi) if a.lo >= 0 and b.lo >= 0 else (-big, big)  # |x // y| <= |x|, except MIN // -1 wraps
    return m.wrap(u.dtype, q, lo, hi)


def _mod(m: _Z3Model, u: UOp, lane: int, a: _Int, b: _Int) -> _Int:
    r = _trunc_parts(m, a, b, lambda x, y: x % y)
    # |x % y| < |y| and |x % y| <= |x|, with the sign of x; x % 0 is 0
    top = max(abs(b.lo), abs(b.hi), 1) - 1
    lo = 0 if a.lo >= 0 else max(a.lo, -top)
    hi = 0 if a.hi <= 0 else min(a.hi, top)
    return _Int(r, lo, hi)


def _const_of(t: _Int) -> int | None:
    return int(t.lo) if t.lo == t.hi else None


def _shl(m: _Z3Model, u: UOp, lane: int, a: _Int, b: _Int) -> _Int | None:
    c = _const_of(b)
    if c is None:
        return None
    if c < 0:
        return _Int(m.z3.IntVal(0), 0, 0)  # a negative shift is undefined; alu.py gives 0
    f = 1 << c
    return m.wrap(u.dtype, a.expr * f, a.lo * f, a.hi * f)


def _shr(m: _Z3Model, u: UOp, lane: int, a: _Int, b: _Int) -> _Int | None:
    c = _const_of(b)
    if c is None:
        return None
    if c < 0:
        return _Int(m.z3.IntVal(0), 0, 0)
    f = 1 << c
    return _Int(a.expr / f, _floordiv_bound(a.lo, f), _floordiv_bound(a.hi, f))  # div by f > 0 floors, like >>


def _and(m: _Z3Model, u: UOp, lane: int, a: _Int, b: _Int) -> _Int | None:
    for x, mask in ((a, b), (b, a)):
        c = _const_of(mask)
        if c is not None and c >= 0 and (c + 1) & c == 0:
            return _Int(x.expr % (c + 1), 0, c)  # in two's complement x & (2**k - 1) is x mod 2**k
    tops = [t.hi for t in (a, b) if t.lo >= 0]
    return m.fresh_int(u, lane, 0, min(tops)) if tops else None


def _or_xor(m: _Z3Model, u: UOp, lane: int, a: _Int, b: _Int) -> _Int | None:
    if a.lo >= 0 and b.lo >= 0 and not math.isinf(max(a.hi, b.hi)):
        return m.fresh_int(u, lane, 0, (1 << int(max(a.hi, b.hi)).bit_length()) - 1)
    return None


def _identity(m: _Z3Model, u: UOp, lane: int, a: _Int) -> _Int:
    return a


_INT_RULES: dict[Ops, Callable[..., _Int | None]] = {
    Ops.ADD: _add, Ops.SUB: _sub, Ops.MUL: _mul, Ops.MULACC: _mulacc, Ops.NEG: _neg, Ops.MAX: _max,
    Ops.IDIV: _idiv, Ops.MOD: _mod, Ops.SHL: _shl, Ops.SHR: _shr, Ops.AND: _and, Ops.OR: _or_xor,
    Ops.XOR: _or_xor, Ops.TRUNC: _identity,
}


def _bool_rule(fn: Callable[..., Any]) -> Callable[..., _Bool]:
    return lambda m, u, lane, *srcs: _Bool(fn(m.z3)(*(s.expr for s in srcs)))


# bools as alu.py computes them: ADD is OR and MUL is AND once the result is made a bool again
_BOOL_RULES: dict[Ops, Callable[..., _Bool | None]] = {
    Ops.AND: _bool_rule(lambda z3: z3.And), Ops.MUL: _bool_rule(lambda z3: z3.And),
    Ops.OR: _bool_rule(lambda z3: z3.Or), Ops.ADD: _bool_rule(lambda z3: z3.Or), Ops.MAX: _bool_rule(lambda z3: z3.Or),
    Ops.XOR: _bool_rule(lambda z3: z3.Xor), Ops.NEG: _bool_rule(lambda z3: z3.Not),
}


# ---- proving ---------------------------------------------------------------------------------------------

class _Prover:
    def __init__(self) -> None:
        self.z3 = _import_z3()
        self.model = _Z3Model(self.z3)
        self.solver = self.z3.Solver()
        self.solver.set("timeout", Z3_TIMEOUT_MS)

    def prove(self, index: UOp) -> None:
        z3, model = self.z3, self.model
        buf, size = _root_buffer(index), _size(index)
        idx, valid = index.src[1], (index.src[2] if len(index.src) > 2 else None)
        scope = model.scope(idx) if valid is None else model.scope(idx, valid)
        facts = [f for u in scope for f in model.facts.get(u, ())]
        for lane in range(idx.dtype.count):
            i = model.term(idx, lane)
            gate = None if valid is None else model.term(valid, lane)
            if not isinstance(i, _Int) or gate is not None and not isinstance(gate, _Bool):
                raise RuntimeError(f"CHECK_OOB: cannot model the index {idx.render()} of {_buffer_name(buf)}")
            self.solver.push()
            try:
                self.solver.add(*facts)
                if gate is not None:
                    self.solver.add(gate.expr)
                self.solver.add(z3.Or(i.expr < 0, i.expr >= size))
                result = self.solver.check()
                if result == z3.unsat:
                    continue
                where = _describe_access(index, buf, size, lane)
                if result == z3.sat:
                    raise RuntimeError(f"CHECK_OOB: {where} can go out of bounds: "
                                       f"{self._counterexample(scope, i)}")
                raise RuntimeError(f"CHECK_OOB: {where} could not be proven in bounds: z3 gave up "
                                   f"({self.solver.reason_unknown()}); simplify the index or run without CHECK_OOB")
            finally:
                self.solver.pop()

    def _counterexample(self, scope: dict[UOp, None], i: _Int) -> str:
        sol = self.solver.model()
        values = [f"{name}={_show(self.z3, sol.eval(v, model_completion=True))}"
                  for u in scope for name, v in self.model.leaves.get(u, ())]
        at = ", ".join(values) if values else "(no variables)"
        return f"with {at} the index is {_show(self.z3, sol.eval(i.expr, model_completion=True))}"


def _describe_access(index: UOp, buf: UOp, size: int, lane: int) -> str:
    idx = index.src[1]
    text = f"index {idx.render()}" + (f" (lane {lane})" if idx.dtype.count > 1 else "")
    if len(index.src) > 2:
        text += f" gated by {index.src[2].render()}"
    return f"{text} into {_buffer_name(buf)} ({index.src[0].dtype!r}, size {size}, valid indices 0..{size - 1})"


def _show(z3: Any, v: Any) -> str:
    if z3.is_int_value(v):
        return str(v.as_long())
    if z3.is_true(v) or z3.is_false(v):
        return str(z3.is_true(v))
    return str(v)
