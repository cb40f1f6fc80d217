"""UPat: patterns over UOp graphs.

`UPat(op, dtype, src, arg, name)` matches a node whose fields agree with every field given. `src` is
  - a tuple: the sources, in order (with `allow_any_len=True`, extra sources are allowed),
  - a list: the sources in any order (used for commutative ops; each permutation is tried),
  - a single UPat: every source matches it.
A `name` binds the matched node; the same name used twice must bind the same node.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from tg_core.dtype import DType, dtypes
from tg_core.uop.ops import GroupOp, Ops
from tg_core.uop.uop import UOp

_ORDERED, _PERMUTED, _REPEATED = 0, 1, 2
_CONST_SET = frozenset({Ops.CONST})


def _as_set(x: Any, kind: type) -> frozenset | None:
    if x is None:
        return None
    if isinstance(x, kind):
        return frozenset((x,))
    return frozenset(x)


class UPat:
    __slots__ = ("op", "dtype", "arg", "name", "src", "src_kind", "allow_any_len", "trivial", "early_any", "early_all",
                 "early_consts")

    def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
                 src: UPat | tuple[UPat, ...] | list[UPat] | None = None, arg: Any = None, name: str | None = None,
                 allow_any_len: bool = False):
        self.op = _as_set(op, Ops)
        self.dtype = _as_set(dtype, DType)
        self.arg = arg
        self.name = name
        self.allow_any_len = allow_any_len
        self.src: tuple[UPat, ...] | None
        if src is None:
            self.src, self.src_kind = None, _ORDERED
        elif isinstance(src, UPat):
            self.src, self.src_kind = (src,), _REPEATED
        elif isinstance(src, list):
            self.src, self.src_kind = tuple(src), _PERMUTED
        elif isinstance(src, tuple):
            self.src, self.src_kind = src, _ORDERED
        else:
            raise TypeError(f"UPat src must be a UPat, tuple or list of UPats, got {type(src).__name__}")
        # a pattern that only names a node (maybe with an op) needs no matching work beyond the op lookup
        self.trivial = self.arg is None and self.src is None  # at most an op, a dtype and a name
        # cheap necessary conditions on a node's direct sources, checked before any matching:
        # early_any: for each set, some source's op is in it; early_all: every source's op is in it
        # early_consts: for each value, some source is a CONST equal to it
        self.early_any: tuple[frozenset, ...] = ()
        self.early_all: frozenset | None = None
        self.early_consts: tuple = ()
        if self.src is not None and self.src_kind is _REPEATED:
            self.early_all = self.src[0].op
        elif self.src is not None:
            self.early_any = tuple(p.op for p in self.src if p.op is not None)
            self.early_consts = tuple(p.arg for p in self.src if p.op == _CONST_SET and p.arg is not None)

    # ---- construction helpers -------------------------------------------------------------------------

    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None, vec: bool = True) -> UPat:
        """A constant (or, with vec, a vector constant)."""
        return UPat((Ops.CONST, Ops.VCONST) if vec else Ops.CONST, dtype, name=name)

    @staticmethod
    def const(dtype: DType | Iterable[DType] | None, value: Any) -> UPat:
        return UPat(Ops.CONST, dtype, arg=value)

    def named(self, name: str) -> UPat:
        return UPat(self.op, self.dtype, self._src_arg(), self.arg, name, self.allow_any_len)

    def _src_arg(self) -> Any:
        if self.src is None:
            return None
        return {_ORDERED: self.src, _PERMUTED: list(self.src), _REPEATED: self.src[0] if self.src else None}[self.src_kind]

    def or_casted(self, name: str | None = None) -> UPat:
        """This pattern, or a CAST of it."""
        return UPat.any(self if name is None else self.named(name), UPat(Ops.CAST, name=name, src=(self,)))

    @staticmethod
    def any(*pats: UPat) -> UPat:
        return _UPatAny(pats)

    def alu(self, op: Ops, *srcs: UPat) -> UPat:
        pats = (self, *srcs)
        return UPat(op, dtypes.bool if op in GroupOp.Comparison else None,
                    list(pats) if op in GroupOp.Commutative else pats)

    def _bin(self, op: Ops, x: Any, reverse: bool = False) -> UPat:
        other = x if isinstance(x, UPat) else UPat.const(None, x)
        return (other if reverse else self).alu(op, self if reverse else other)

    def __add__(self, x): return self._bin(Ops.ADD, x)
    def __radd__(self, x): return self._bin(Ops.ADD, x, True)
    def __mul__(self, x): return self._bin(Ops.MUL, x)
    def __rmul__(self, x): return self._bin(Ops.MUL, x, True)
    def __floordiv__(self, x): return self._bin(Ops.IDIV, x)
    def __mod__(self, x): return self._bin(Ops.MOD, x)
    def __truediv__(self, x): return self._bin(Ops.FDIV, x)
    def __and__(self, x): return self._bin(Ops.AND, x)
    def __or__(self, x): return self._bin(Ops.OR, x)
    def __xor__(self, x): return self._bin(Ops.XOR, x)
    def __lt__(self, x): return self._bin(Ops.CMPLT, x)
    def __lshift__(self, x): return self._bin(Ops.SHL, x)
    def __rshift__(self, x): return self._bin(Ops.SHR, x)
    def ne(self, x): return self._bin(Ops.CMPNE, x)
    def eq(self, x): return self._bin(Ops.CMPEQ, x)
    def maximum(self, x): return self._bin(Ops.MAX, x)
    def where(self, x, y): return UPat(Ops.WHERE, src=(self, x, y))
    def cast(self, dtype=None, name=None): return UPat(Ops.CAST, dtype, (self,), name=name)

    # ---- matching -------------------------------------------------------------------------------------

    def match(self, u: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
        """Every way this pattern matches `u`, as binding dicts extending `store`."""
        if self.op is not None and u.op not in self.op:
            return []
        if self.dtype is not None and u.dtype not in self.dtype and u.dtype.scalar() not in self.dtype:
            return []
        if self.arg is not None and (self.arg != u.arg or type(self.arg) is not type(u.arg) and not _num_eq(self.arg, u.arg)):
            return []
        if self.name is not None:
            bound = store.get(self.name)
            if bound is not None:
                if bound is not u:
                    return []
            else:
                store = {**store, self.name: u}
        if self.src is None:
            return [store]
        usrc = u.src
        if self.src_kind is _REPEATED:
            stores = [store]
            for s in usrc:
                stores = [r for st in stores for r in self.src[0].match(s, st)]
                if not stores:
                    return []
            return stores
        n = len(self.src)
        if len(usrc) != n and not (self.allow_any_len and len(usrc) >= n):
            return []
        orders = (self.src,) if self.src_kind is _ORDERED else _permutations(self.src)
        out: list[dict[str, UOp]] = []
        for pats in orders:
            stores = [store]
            for p, s in zip(pats, usrc):
                stores = [r for st in stores for r in p.match(s, st)]
                if not stores:
                    break
            out.extend(stores)
        return out

    def __repr__(self) -> str:
        parts = []
        if self.op is not None:
            parts.append("|".join(sorted(o.name for o in self.op)))
        if self.dtype is not None:
            parts.append("dtype=" + "|".join(sorted(repr(d) for d in self.dtype)))
        if self.arg is not None:
            parts.append(f"arg={self.arg!r}")
        if self.name is not None:
            parts.append(f"name={self.name!r}")
        if self.src is not None:
            inner = ", ".join(repr(s) for s in self.src)
            parts.append({_ORDERED: f"src=({inner})", _PERMUTED: f"src=[{inner}]", _REPEATED: f"src={inner}..."}[self.src_kind])
        return f"UPat({', '.join(parts)})"


def _num_eq(a: Any, b: Any) -> bool:
    # 1 == 1.0 == True in Python; a pattern constant matches a node constant of the same kind only
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and type(a) is not bool and type(b) is not bool


_perm_cache: dict[tuple, tuple] = {}


def _permutations(src: tuple[UPat, ...]) -> tuple[tuple[UPat, ...], ...]:
    r = _perm_cache.get(src)
    if r is None:
        r = _perm_cache[src] = tuple(itertools.permutations(src))
    return r


class _UPatAny(UPat):
    """Matches if any of its alternatives matches."""
    __slots__ = ("alternatives",)

    def __init__(self, alternatives: tuple[UPat, ...]):
        super().__init__()
        ops = [a.op for a in alternatives if a.op is not None]
        self.op = None if len(ops) < len(alternatives) else frozenset().union(*ops)
        self.alternatives = alternatives
        self.trivial = False
        self.early_any, self.early_all, self.early_consts = (), None, ()

    def named(self, name: str) -> UPat:
        # the base class would rebuild a plain UPat from the union of ops and drop the alternatives
        out = _UPatAny(self.alternatives)
        out.name = name
        return out

    def match(self, u: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
        if self.name is not None:
            bound = store.get(self.name)
            if bound is not None and bound is not u:
                return []
            store = {**store, self.name: u}
        return [r for a in self.alternatives for r in a.match(u, store)]

    def __repr__(self) -> str:
        name = f", name={self.name!r}" if self.name is not None else ""
        return f"UPat.any({', '.join(repr(a) for a in self.alternatives)}{name})"
