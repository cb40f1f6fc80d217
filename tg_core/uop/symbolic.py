"""Symbolic simplification: the rules every pass runs to keep index math small.

`symbolic_simple` folds constants, removes identities and decides values fixed by range analysis.
`symbolic` adds the algebra of integer index expressions: sums are kept in a canonical linear form
(like terms combined, the constant last), constants are distributed through products, and div/mod by
constants are folded using ranges (`divmod.py`). Integer division and remainder are C's (truncating);
every rule that would only hold for floor semantics checks that its operands are non-negative first.
"""
from __future__ import annotations

from tg_core.dtype import dtypes
from tg_core.uop.alu import bitcast_const, cast_const, exec_alu, python_alu
from tg_core.uop.divmod import fold_divmod, fold_int_compare
from tg_core.uop.linear import fold_linear_sum
from tg_core.uop.ops import GroupOp, Ops
from tg_core.uop.rewrite import PatternMatcher
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat
from tg_core.uop.vrange import fill as fill_bounds

_CONST = Ops.CONST  # a module constant: Ops.X goes through EnumType.__getattr__'s hook on Python 3.11
_INTS = tuple({dtypes.weakint, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16,
               dtypes.uint32, dtypes.uint64})


def _fold_alu(x: UOp) -> UOp | None:
    """An ALU op on constants is a constant."""
    if x.op not in python_alu or x.dtype.count != 1:
        return None
    return UOp.const(x.dtype, exec_alu(x.op, x.dtype, tuple(s.arg for s in x.src), tuple(s.dtype for s in x.src)))


def _fold_by_range(x: UOp) -> UOp | None:
    """An integer or bool value whose range is a single point is that constant."""
    mm = x._minmax  # the cached bounds read directly (vmin and vmax are two property calls on every int node)
    lo, hi = mm if mm is not None else fill_bounds(x)
    return UOp.const(x.dtype, lo) if lo == hi and x.dtype.count == 1 else None


def _fold_cast(x: UOp, c: UOp) -> UOp | None:
    if x.dtype.count != 1:
        return None
    return UOp.const(x.dtype, cast_const(c.arg, c.dtype, x.dtype))


def _fold_bitcast(x: UOp, c: UOp) -> UOp | None:
    if x.dtype.count != 1 or x.dtype.itemsize != c.dtype.itemsize or dtypes.is_weak(x.dtype) or dtypes.is_weak(c.dtype):
        return None
    try:
        return UOp.const(x.dtype, bitcast_const(c.arg, c.dtype, x.dtype))
    except TypeError:
        return None  # fp8 and friends have no Python bit pattern conversion: leave the BITCAST for the device


def _lossless(inner: UOp, mid: UOp) -> bool:
    """Casting `inner` to `mid`'s dtype keeps every value (so a following cast can skip the middle)."""
    a, b = inner.dtype, mid.dtype
    if dtypes.is_int(a) and dtypes.is_int(b) and not dtypes.is_weak(a):
        return dtypes.min(b) <= dtypes.min(a) and dtypes.max(a) <= dtypes.max(b)
    if dtypes.is_bool(a):
        return not dtypes.is_bool(b)
    if dtypes.is_float(a) and dtypes.is_float(b) and not dtypes.is_weak(a) and not dtypes.is_fp8(b):
        ea, ma = dtypes.finfo(a)
        eb, mb = dtypes.finfo(b)
        return ea <= eb and ma <= mb
    return False


def _double_cast(x: UOp, mid: UOp, inner: UOp) -> UOp | None:
    if _lossless(inner, mid):
        return inner.cast(x.dtype)
    return None


def _commute_const(x: UOp, a: UOp, b: UOp) -> UOp | None:
    """Constants go on the right of commutative ops, so one rule form catches both orders. (The pattern
    names the constant on the left: matching tests that in place, where a function taking the node would be
    called on every commutative node.)"""
    return None if b.op is _CONST else UOp(x.op, x.dtype, (b, a), x.arg)


def _not(x: UOp) -> UOp:
    return UOp(Ops.CMPNE, x.dtype, (x, UOp.const(x.dtype, True)))


_simple_rules = PatternMatcher([
    # constants
    (UPat(GroupOp.ALU, src=UPat(Ops.CONST), name="x"), _fold_alu),
    (UPat(Ops.CAST, src=(UPat(Ops.CONST, name="c"),), name="x"), _fold_cast),
    (UPat(Ops.BITCAST, src=(UPat(Ops.CONST, name="c"),), name="x"), _fold_bitcast),
    (UPat(Ops.CAST, src=(UPat(Ops.CAST, src=(UPat.var("inner"),), name="mid"),), name="x"), _double_cast),
    (UPat(Ops.CAST, name="x"), lambda x: x.src[0] if x.src[0].dtype is x.dtype else None),
    (UPat(Ops.BITCAST, name="x"), lambda x: x.src[0] if x.src[0].dtype is x.dtype else None),
    (UPat(GroupOp.Commutative - {Ops.CMPNE, Ops.CMPEQ}, src=(UPat(Ops.CONST, name="a"), UPat(name="b")), name="x"),
     _commute_const),
    # identities
    (UPat.var("x") + 0, lambda x: x if not dtypes.is_float(x.dtype) else None),  # float: x + 0 turns -0.0 into 0.0
    (UPat.var("x") * 1, lambda x: x),
    (UPat.var("x", _INTS) * 0, lambda x: x.const_like(0)),
    (UPat.var("x", _INTS) // 0, lambda x: x.const_like(0)),  # alu.py defines x/0 and x%0 as 0
    (UPat.var("x", _INTS) % 0, lambda x: x.const_like(0)),
    (UPat.var("x", _INTS) // 1, lambda x: x),
    (UPat.var("x", _INTS) // -1, lambda x: x * -1),
    (UPat.var("x", _INTS) % 1, lambda x: x.const_like(0)),
    (UPat.var("x", _INTS) % -1, lambda x: x.const_like(0)),
    (UPat.var("x").maximum(UPat.var("x")), lambda x: x),
    (UPat.var("x", (dtypes.bool, *_INTS)) & UPat.var("x"), lambda x: x),
    (UPat.var("x", (dtypes.bool, *_INTS)) | UPat.var("x"), lambda x: x),
    (UPat.var("x", (dtypes.bool, *_INTS)) ^ UPat.var("x"), lambda x: x.const_like(0)),
    (UPat.var("x", dtypes.bool) & True, lambda x: x),
    (UPat.var("x", dtypes.bool) & False, lambda x: x.const_like(False)),
    (UPat.var("x", dtypes.bool) | False, lambda x: x),
    (UPat.var("x", dtypes.bool) | True, lambda x: x.const_like(True)),
    (UPat.var("x", dtypes.bool).ne(False), lambda x: x),
    (UPat.var("x", dtypes.bool).eq(True), lambda x: x),
    (UPat.var("x", dtypes.bool).eq(False), _not),
    (UPat.var("x", dtypes.bool).ne(True).ne(True), lambda x: x),
    (UPat.var("x", _INTS) < UPat.var("x"), lambda x: UOp.const(dtypes.bool, False)),
    (UPat.var("x", _INTS).ne(UPat.var("x")), lambda x: UOp.const(dtypes.bool, False)),
    (UPat.var("x", _INTS).eq(UPat.var("x")), lambda x: UOp.const(dtypes.bool, True)),
    # selection
    (UPat(Ops.WHERE, src=(UPat(Ops.CONST, name="c"), UPat.var("a"), UPat.var("b"))), lambda c, a, b: a if c.arg else b),
    (UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var("a"), UPat.var("a"))), lambda c, a: a),
    (UPat(Ops.WHERE, src=(UPat.var("c").ne(True), UPat.var("a"), UPat.var("b"))), lambda c, a, b: c.where(b, a)),
])

# values fixed by range analysis. It goes after every other rule: computing a range walks everything below a
# node that has no range yet, and the algebra rules usually shrink that first (node-first, the rule on a
# 10^5-term sum would otherwise range-analyze the whole unsimplified sum before flattening it)
_by_range = PatternMatcher([
    (UPat(GroupOp.ALU | {Ops.CAST}, dtype=(dtypes.bool, *_INTS), name="x"), _fold_by_range),
])

symbolic_simple = _simple_rules + _by_range


def _max_by_range(x: UOp) -> UOp | None:
    a, b = x.src
    if not dtypes.is_int(x.dtype):
        return None
    if a.vmin >= b.vmax:
        return a
    if b.vmin >= a.vmax:
        return b
    return None


def _and_mask(x: UOp, c: UOp) -> UOp | None:
    """x & (2**k - 1) is x when x already lies in [0, 2**k)."""
    m = c.arg
    if m >= 0 and (m + 1) & m == 0 and x.vmin >= 0 and x.vmax <= m:
        return x
    return None


def _mul_const(x: UOp, c: UOp) -> UOp | None:
    """(a*c1)*c2 -> a*(c1*c2); (a+b)*c -> a*c + b*c, so sums stay sums of scaled terms."""
    if x.op is Ops.MUL and x.src[1].op is Ops.CONST:
        return UOp(Ops.MUL, x.dtype, (x.src[0], UOp.const(x.dtype, x.src[1].arg * c.arg)))
    if x.op is Ops.ADD:
        return UOp(Ops.ADD, x.dtype, (x.src[0] * c, x.src[1] * c))
    return None


symbolic = _simple_rules + PatternMatcher([
    (UPat(Ops.ADD, dtype=_INTS, name="x"), fold_linear_sum),
    (UPat(Ops.MUL, dtype=_INTS, src=(UPat((Ops.MUL, Ops.ADD), name="x"), UPat.cvar("c", vec=False))), _mul_const),
    (UPat((Ops.IDIV, Ops.MOD), dtype=_INTS, src=(UPat.var(), UPat.cvar(vec=False)), name="x"), fold_divmod),
    (UPat((Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ), src=(UPat.var(dtype=_INTS), UPat.cvar(vec=False)), name="x"), fold_int_compare),
    (UPat(Ops.MAX, name="x"), _max_by_range),
    (UPat.var("x", _INTS) & UPat.cvar("c", vec=False), _and_mask),
]) + _by_range


def simplify(u: UOp) -> UOp:
    """`u` with `symbolic` applied to a fixed point. Nodes are visited before their sources: reading a
    sum flattens the whole linear subexpression below it, so its inner ADDs never need a visit of their
    own (several times faster than sources-first on long sums; both reach a fixed point)."""
    from tg_core.uop.rewrite import graph_rewrite
    return graph_rewrite(u, symbolic, bottom_up=True)
