"""Specs: what a well-formed graph looks like, written as rules, and `type_verify` that checks a graph.

A `Spec` is a PatternMatcher whose rules answer instead of rewrite: a rule's function returns True (the
node is well formed), False (it is not) or None (no opinion; the next rule is asked). The first rule
with an opinion decides; a node no rule has an opinion on is rejected. Every rule carries a sentence
saying what it expects, which is what a rejected graph's error shows.

`program_spec` describes kernel-level graphs (loops, buffers, INDEX/LOAD/STORE, ALU); `kernel_spec` adds
REDUCE, which lowering removes before the program is linearized.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from tg_core.dtype import AddrSpace, DType, PtrDType, dtypes
from tg_core.uop.ops import AxisType, GroupOp, Ops
from tg_core.uop.rewrite import PatternMatcher, RuleFn
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat

Check = Callable[..., bool | None]


class _Check:
    """A rule function together with the sentence that says what it expects."""
    __slots__ = ("fn", "expect")

    def __init__(self, fn: Check, expect: str):
        self.fn, self.expect = fn, expect

    def __call__(self, **kwargs: UOp) -> bool | None:
        return self.fn(**kwargs)


class Spec(PatternMatcher):
    """Rules `(UPat, check, expectation)`; `check` gets the pattern's named nodes and returns True/False/None."""

    def __init__(self, rules: Iterable[tuple[UPat, Check, str]], name: str = "spec"):
        self.rules = list(rules)
        self.name = name
        # the matcher indexes the checks by op and matches their patterns; nothing rewrites with them (a
        # check returns a verdict, not a node), so they pass as its rule functions
        super().__init__([(pat, cast("RuleFn", _Check(fn, expect))) for pat, fn, expect in self.rules])

    def __add__(self, other: PatternMatcher) -> Spec:
        if not isinstance(other, Spec):
            raise TypeError(f"a Spec can only be extended by another Spec, not {type(other).__name__}")
        return Spec(self.rules + other.rules, f"{self.name}+{other.name}")

    def verdict(self, u: UOp) -> tuple[bool | None, str | None]:
        """(True/False, the deciding rule's expectation), or (None, None) when no rule has an opinion."""
        for rule in self.rules_by_op.get(u.op, ()):
            check = cast(_Check, rule.fn)
            for store in rule.pat.match(u, {}):
                ok = check(**store)
                if ok is not None:
                    return bool(ok), check.expect
        return None, None

    def expectations(self, op: Ops) -> list[str]:
        return [cast(_Check, rule.fn).expect for rule in self.rules_by_op.get(op, ())]


def type_verify(uops_or_sink: UOp | Sequence[UOp], spec: Spec | None = None) -> None:
    """Check every node of a graph (a UOp and everything below it) or of a linear program (a list of
    UOps) against `spec` (default: `program_spec`). The first ill-formed node raises a RuntimeError."""
    spec = program_spec if spec is None else spec
    nodes = uops_or_sink.toposort() if isinstance(uops_or_sink, UOp) else uops_or_sink
    for u in nodes:
        ok, expect = spec.verdict(u)
        if not ok:
            raise RuntimeError(_rejection(u, spec, expect))


def _rejection(u: UOp, spec: Spec, expect: str | None) -> str:
    srcs = ", ".join(f"{s.op.name} {s.dtype!r}" for s in u.src)
    arg = f" arg={u.arg!r}" if u.arg is not None else ""
    head = f"{spec.name} rejects {u.op.name} of dtype {u.dtype!r}{arg} with sources ({srcs})"
    if expect is not None:
        return f"{head}: expected {expect}"
    known = spec.expectations(u.op)
    if not known:
        return f"{head}: {spec.name} has no rule for {u.op.name}"
    return f"{head}: no rule accepts it; the rules for {u.op.name} expect: " + "; ".join(known)


# ---- predicates the rules are written in ----------------------------------------------------------------

def _is_value(dt: DType) -> bool:
    return not isinstance(dt, PtrDType) and dt.scalar() is not dtypes.void


def _kind(dt: DType) -> str | None:
    if not _is_value(dt):
        return None
    if dtypes.is_bool(dt):
        return "bool"
    if dtypes.is_int(dt):
        return "int"
    return "float" if dtypes.is_float(dt) else None


def _is_int(dt: DType) -> bool:
    return _kind(dt) == "int"


def _is_void(dt: DType) -> bool:
    return dt == dtypes.void


def _bools_for(dt: DType) -> DType:
    """The dtype of a comparison of two `dt` values: one bool per lane."""
    return dtypes.bool.vec(dt.count)


def _const_fits(value: Any, dt: DType) -> bool:
    s = dt.scalar()
    if s is dtypes.bool:
        return type(value) is bool
    if dtypes.is_int(s):
        return type(value) is int and dtypes.min(s) <= value <= dtypes.max(s)
    return dtypes.is_float(s) and type(value) is float


def _buffer_ptr(dt: DType, space: AddrSpace) -> bool:
    """A pointer to a realizable dtype in `space`, with a known positive size."""
    return (isinstance(dt, PtrDType) and dt.addrspace is space and dt.size > 0
            and _is_value(dt.base) and not dtypes.is_weak(dt.base))


def _pointee_ok(value_dt: DType, index: UOp) -> bool:
    """A LOAD/STORE moves the pointee dtype, or one pointee per lane of a vector index, or (a scalar index) that many
    consecutive pointees from the index on (a contiguous vector access)."""
    if index.op is not Ops.INDEX or not isinstance(index.dtype, PtrDType):
        return False
    base = index.dtype.base
    if base.count != 1 or value_dt.count == 1:
        return value_dt == base
    lanes = index.src[1].dtype.count
    return value_dt == base.vec(lanes) if lanes > 1 else value_dt.scalar() == base


def _arity(u: UOp) -> int:
    if u.op in GroupOp.Unary:
        return 1
    return 2 if u.op in GroupOp.Binary else 3


# ---- value rules ---------------------------------------------------------------------------------------

def _same_dtype_alu(x: UOp, kinds: frozenset[str]) -> bool:
    return len(x.src) == _arity(x) and _kind(x.dtype) in kinds and all(s.dtype == x.dtype for s in x.src)


# ops whose sources and result share one dtype, and the kinds that dtype may be
_SAME_DTYPE_ALU: tuple[tuple[frozenset[Ops], frozenset[str]], ...] = (
    (frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.MULACC, Ops.TRUNC}), frozenset({"int", "float"})),
    (frozenset({Ops.MAX}), frozenset({"int", "float", "bool"})),
    (frozenset({Ops.IDIV, Ops.MOD}), frozenset({"int"})),
    (frozenset({Ops.AND, Ops.OR, Ops.XOR}), frozenset({"int", "bool"})),
    (frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.FDIV, Ops.POW}), frozenset({"float"})),
)


def _names(ops: Iterable[Ops]) -> str:
    return "/".join(sorted(o.name for o in ops))


def _const(x: UOp) -> bool:
    return not x.src and _is_value(x.dtype) and _const_fits(x.arg, x.dtype)


def _vconst(x: UOp) -> bool:
    return (not x.src and _is_value(x.dtype) and x.dtype.count > 1 and isinstance(x.arg, tuple)
            and len(x.arg) == x.dtype.count and all(_const_fits(v, x.dtype) for v in x.arg))


def _define_var(x: UOp) -> bool:
    if x.src or not _is_int(x.dtype) or x.dtype.count != 1 or not isinstance(x.arg, tuple) or len(x.arg) != 3:
        return False
    name, lo, hi = x.arg
    return (isinstance(name, str) and bool(name) and type(lo) is int and type(hi) is int
            and dtypes.min(x.dtype) <= lo <= hi <= dtypes.max(x.dtype))


def _bind(x: UOp, var: UOp, val: UOp) -> bool:
    return _define_var(var) and x.dtype == var.dtype == val.dtype and _const(val) and var.arg[1] <= val.arg <= var.arg[2]


def _loop_index(x: UOp) -> bool:
    return len(x.src) == 1 and _is_int(x.dtype) and x.dtype.count == 1 and x.src[0].dtype == x.dtype


def _range(x: UOp) -> bool:
    return _loop_index(x) and isinstance(x.arg, tuple) and len(x.arg) == 2 and isinstance(x.arg[1], AxisType)


def _special(x: UOp) -> bool:
    return _loop_index(x) and isinstance(x.arg, str)


def _comparison(x: UOp) -> bool:
    a, b = x.src
    return a.dtype == b.dtype and _is_value(a.dtype) and x.dtype == _bools_for(a.dtype)


def _where(x: UOp, c: UOp, a: UOp, b: UOp) -> bool:
    return (_is_value(x.dtype) and a.dtype == b.dtype == x.dtype
            and c.dtype in (dtypes.bool, _bools_for(x.dtype)))


def _shift(x: UOp, a: UOp, b: UOp) -> bool:
    return _is_int(x.dtype) and a.dtype == x.dtype and _is_int(b.dtype) and b.dtype.count == x.dtype.count


def _threefry(x: UOp) -> bool:
    return x.dtype == dtypes.uint64 and len(x.src) == 2 and all(s.dtype == dtypes.uint64 for s in x.src)


def _cast(x: UOp, a: UOp) -> bool:
    return _is_value(x.dtype) and _is_value(a.dtype) and x.dtype.count == a.dtype.count


def _bitcast(x: UOp, a: UOp) -> bool:
    return (_is_value(x.dtype) and _is_value(a.dtype) and not dtypes.is_weak(x.dtype) and not dtypes.is_weak(a.dtype)
            and x.dtype.nbytes == a.dtype.nbytes)


def _vectorize(x: UOp) -> bool:
    return _is_value(x.dtype) and len(x.src) == x.dtype.count > 1 and all(s.dtype == x.dtype.scalar() for s in x.src)


def _gep(x: UOp, a: UOp) -> bool:
    if not _is_value(a.dtype) or a.dtype.count == 1 or not isinstance(x.arg, tuple) or not x.arg:
        return False
    lanes_ok = all(type(i) is int and 0 <= i < a.dtype.count for i in x.arg)
    return lanes_ok and x.dtype == a.dtype.scalar().vec(len(x.arg))


def _lit(op: Ops | Iterable[Ops], **kw: Any) -> UPat:
    return UPat(op, name="x", **kw)


shared_spec = Spec([
    (_lit(Ops.CONST), _const, "no sources and a value of the dtype's kind (bool, int within its range, or float)"),
    (_lit(Ops.VCONST), _vconst, "a vector dtype and one value of its kind per lane"),
    (_lit(Ops.DEFINE_VAR), _define_var, "a scalar int dtype, no sources and arg (name, min, max) with "
                                        "int min <= max inside the dtype's range"),
    (UPat(Ops.BIND, name="x", src=(UPat(Ops.DEFINE_VAR, name="var"), UPat(Ops.CONST, name="val"))), _bind,
     "a DEFINE_VAR and a CONST of its dtype inside its bounds"),
    (_lit(Ops.RANGE), _range, "a scalar int dtype, one source (the end) of the same dtype, arg (axis id, AxisType)"),
    (_lit(Ops.SPECIAL), _special, "a scalar int dtype, one source (the size) of the same dtype, a str name"),
    *[(UPat(ops, name="x"), functools.partial(_same_dtype_alu, kinds=kinds),
       f"{_names(ops)}: sources of the node's own dtype, which is {' or '.join(sorted(kinds))}")
      for ops, kinds in _SAME_DTYPE_ALU],
    (_lit(GroupOp.Comparison, src=(UPat(), UPat())), _comparison,
     "a comparison: two sources of one value dtype and a bool result with one lane per source lane"),
    (UPat(Ops.WHERE, name="x", src=(UPat(name="c"), UPat(name="a"), UPat(name="b"))), _where,
     "WHERE: a bool condition (scalar or one per lane) and two values of the node's dtype"),
    (UPat((Ops.SHL, Ops.SHR), name="x", src=(UPat(name="a"), UPat(name="b"))), _shift,
     "a shift: an int value of the node's dtype shifted by an int amount with as many lanes"),
    (_lit(Ops.THREEFRY), _threefry, "THREEFRY: uint64 result and two uint64 sources"),
    (UPat(Ops.CAST, name="x", src=(UPat(name="a"),)), _cast, "CAST: one value source with the same lane count"),
    (UPat(Ops.BITCAST, name="x", src=(UPat(name="a"),)), _bitcast,
     "BITCAST: one value source of the same size in bytes, neither dtype weak"),
    (_lit(Ops.VECTORIZE), _vectorize, "VECTORIZE: one source of the scalar dtype per lane (at least two)"),
    (UPat(Ops.GEP, name="x", src=(UPat(name="a"),)), _gep,
     "GEP: a vector source, arg a tuple of lanes inside it, the scalar dtype times the number of lanes"),
], "shared_spec")


# ---- memory and control rules ---------------------------------------------------------------------------

def _param(x: UOp) -> bool:
    index = x.arg[0] if isinstance(x.arg, tuple) and len(x.arg) == 2 and isinstance(x.arg[1], str) else x.arg
    typed = _buffer_ptr(x.dtype, AddrSpace.GLOBAL) or _is_value(x.dtype)
    return not x.src and type(index) is int and index >= 0 and typed


def _define_memory(space: AddrSpace) -> Check:
    return lambda x: not x.src and _buffer_ptr(x.dtype, space)


def _index(x: UOp) -> bool:
    if len(x.src) not in (2, 3):
        return False
    buf, idx, *valid = x.src
    if not isinstance(buf.dtype, PtrDType) or not isinstance(x.dtype, PtrDType):
        return False
    same_buffer = x.dtype.addrspace is buf.dtype.addrspace and x.dtype.scalar() == buf.dtype.scalar()
    gate_ok = all(v.dtype in (dtypes.bool, _bools_for(idx.dtype)) for v in valid)
    return same_buffer and _is_int(idx.dtype) and gate_ok


def _load(x: UOp) -> bool:
    if not 1 <= len(x.src) <= 2 or not _pointee_ok(x.dtype, x.src[0]):
        return False
    # the alternative value is what a gated-off load gives, so it needs a gate
    return len(x.src) == 1 or (x.src[1].dtype == x.dtype and len(x.src[0].src) == 3)


def _store(x: UOp) -> bool:
    return _is_void(x.dtype) and len(x.src) == 2 and _pointee_ok(x.src[1].dtype, x.src[0])


def _effects(srcs: Iterable[UOp]) -> bool:
    return all(_is_void(s.dtype) for s in srcs)


def _end(x: UOp) -> bool:
    return (_is_void(x.dtype) and len(x.src) >= 2 and _is_void(x.src[0].dtype)
            and all(s.op in (Ops.RANGE, Ops.IF) for s in x.src[1:]))


def _after(x: UOp) -> bool:
    return (len(x.src) >= 2 and x.dtype == x.src[0].dtype
            and all(_is_void(s.dtype) or s.op is Ops.RANGE for s in x.src[1:]))


def _if(x: UOp) -> bool:
    return _is_void(x.dtype) and len(x.src) >= 1 and x.src[0].dtype == dtypes.bool


memory_spec = Spec([
    (_lit(Ops.PARAM), _param, "no sources, arg an index >= 0 (or (index, name)), and a global buffer pointer "
                              "(known size, realizable dtype) or a scalar value dtype"),
    (_lit(Ops.DEFINE_LOCAL), _define_memory(AddrSpace.LOCAL),
     "no sources and a LOCAL pointer with a known size to a realizable dtype"),
    (_lit(Ops.DEFINE_REG), _define_memory(AddrSpace.REG),
     "no sources and a REG pointer with a known size to a realizable dtype"),
    (_lit(Ops.INDEX), _index, "INDEX: (buffer, index[, valid]) with a pointer buffer, an int index, an optional "
                              "bool valid, and the buffer's pointer dtype"),
    (_lit(Ops.LOAD), _load, "LOAD: (INDEX[, alt]) giving the pointee dtype; an alt value has the load's dtype and "
                            "needs a gated INDEX"),
    (_lit(Ops.STORE), _store, "STORE: (INDEX, value) with the pointee dtype and a void result"),
    (_lit(Ops.BARRIER), lambda x: _is_void(x.dtype) and _effects(x.src), "BARRIER: void, after void effects only"),
], "memory_spec")

control_spec = Spec([
    (_lit(Ops.SINK), lambda x: _is_void(x.dtype) and _effects(x.src), "SINK: void, gathering void effects"),
    (_lit(Ops.GROUP), lambda x: _is_void(x.dtype) and _effects(x.src), "GROUP: void, gathering void effects"),
    (_lit(Ops.END), _end, "END: void, (a void effect, then the RANGEs/IFs it closes, at least one)"),
    (_lit(Ops.AFTER), _after, "AFTER: (value, effects...) with the value's dtype and at least one void effect or RANGE"),
    (_lit(Ops.IF), _if, "IF: void, a scalar bool condition first"),
    (_lit(Ops.NOOP), lambda x: True, "anything"),
    (_lit(Ops.CUSTOM), lambda x: isinstance(x.arg, str), "CUSTOM: a device intrinsic's name as arg (renderers "
                                                         "that know it render it)"),
], "control_spec")

program_spec = Spec(shared_spec.rules + memory_spec.rules + control_spec.rules, "program_spec")


def _reduce(x: UOp) -> bool:
    return (len(x.src) >= 1 and x.dtype == x.src[0].dtype and _is_value(x.dtype)
            and x.arg in (Ops.ADD, Ops.MUL, Ops.MAX) and all(s.op is Ops.RANGE for s in x.src[1:]))


kernel_spec = Spec(program_spec.rules + [
    (_lit(Ops.REDUCE), _reduce, "REDUCE: (value, RANGEs reduced...) of the value's dtype, arg ADD, MUL or MAX"),
], "kernel_spec")
