"""Op and byte estimates of a kernel AST, for the profile summary's GFLOP/s and GB/s.

- **ops**: every ALU op of the kernel's values (not of its index arithmetic: what feeds an INDEX is address math)
  counts once per iteration of the loops it depends on: the product of the sizes of the RANGEs it uses, where a
  REDUCE hides its reduce ranges from what uses its result; a REDUCE is one op (its accumulation) per iteration of
  its body's and its own ranges. A matmul (N, K) @ (K, M) is N*M*K multiplies and N*M*K adds: 2*N*M*K.
- **bytes**: per buffer, what its loads touch plus what its stores touch, each capped at the buffer's size (a
  value read by every iteration of a loop that does not index it is read once: the minimum traffic, as
  roofline models count it).

Range sizes may be symbolic (a bound variable): they are evaluated with the run's variable values. The structure
is computed once per AST; an evaluation once per AST and variable values.
"""
from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field

from tg_core.helpers import prod
from tg_core.uop.evaluate import evaluate
from tg_core.uop.ops import GroupOp, Ops
from tg_core.uop.uop import UOp


@dataclass(frozen=True)
class Terms:
    """ops = sum of prod(range sizes) per term; per buffer access (param index, is store, itemsize, buffer
    elements or None) the iteration products of its indexes."""
    ops: tuple[tuple[UOp, ...], ...]
    accesses: tuple[tuple[int, bool, int, int | None, tuple[tuple[UOp, ...], ...]], ...]
    values: dict[tuple[tuple[str, int], ...], tuple[int, int]] = field(default_factory=dict, compare=False)


_terms: weakref.WeakKeyDictionary[UOp, Terms] = weakref.WeakKeyDictionary()


def _ranges(ast: UOp) -> dict[UOp, frozenset[UOp]]:
    """The RANGEs each node's value depends on (a REDUCE's result does not depend on the ranges it reduces)."""
    rs: dict[UOp, frozenset[UOp]] = {}
    for u in ast.toposort():
        if u.op is Ops.RANGE:
            rs[u] = frozenset((u,)) | (rs[u.src[0]] if u.src else frozenset())
            continue
        deps = frozenset().union(*(rs[s] for s in u.src)) if u.src else frozenset()
        if u.op in (Ops.REDUCE, Ops.END):
            deps = deps - frozenset(u.src[1:])
        rs[u] = deps
    return rs


def _value_nodes(ast: UOp) -> set[UOp]:
    """The nodes computing values (what is stored), not addresses: everything reached from STORE values without
    entering an INDEX."""
    seen: set[UOp] = set()
    stack = [u.src[1] for u in ast.toposort() if u.op is Ops.STORE]
    while stack:
        u = stack.pop()
        if u in seen or u.op is Ops.INDEX:
            continue
        seen.add(u)
        stack.extend(u.src)
    return seen


def _param(index: UOp) -> UOp | None:
    p = index.src[0]
    while p.op is not Ops.PARAM and p.src:
        p = p.src[0]
    return p if p.op is Ops.PARAM else None


def terms(ast: UOp) -> Terms:
    """The estimate of `ast` before its variables have values (cached per AST)."""
    got = _terms.get(ast)
    if got is not None:
        return got
    rs = _ranges(ast)
    size = lambda rset: tuple(r.src[0] for r in sorted(rset, key=lambda r: r.arg))  # noqa: E731
    ops = []
    for u in _value_nodes(ast):
        if u.op in GroupOp.ALU:
            ops.append(size(rs[u]))
        elif u.op is Ops.REDUCE:
            ops.append(size(rs[u.src[0]] | frozenset(u.src[1:])))
    accesses: dict[tuple[int, bool, int, int | None], list[tuple[UOp, ...]]] = {}
    for u in ast.toposort():
        if u.op not in (Ops.LOAD, Ops.STORE) or not u.src or u.src[0].op is not Ops.INDEX:
            continue
        index = u.src[0]
        p = _param(index)
        if p is None:
            continue
        pi = p.arg if isinstance(p.arg, int) else p.arg[0]
        base = p.dtype.base if hasattr(p.dtype, "base") else p.dtype
        elements = getattr(p.dtype, "size", None)
        key = (pi, u.op is Ops.STORE, base.itemsize, elements if isinstance(elements, int) and elements >= 0 else None)
        accesses.setdefault(key, []).append(size(frozenset().union(*(rs[s] for s in index.src[1:]))))
    got = _terms[ast] = Terms(tuple(ops), tuple((*k, tuple(v)) for k, v in accesses.items()))
    return got


def _size(u: UOp, env: Mapping[UOp, int]) -> int:
    return int(u.arg) if u.op is Ops.CONST else int(evaluate(u, env))


def estimate(ast: UOp, var_vals: Mapping[str, int] | None = None) -> tuple[int, int]:
    """(ops, bytes) of one run of the kernel `ast` with these variable values."""
    t = terms(ast)
    vv = var_vals or {}
    key = tuple(sorted(vv.items()))
    got = t.values.get(key)
    if got is not None:
        return got
    env = {u: vv[u.arg[0]] for u in ast.toposort() if u.op is Ops.DEFINE_VAR and u.arg[0] in vv}
    n_ops = sum(prod(_size(s, env) for s in term) for term in t.ops)
    n_bytes = 0
    for _, _, itemsize, elements, idx_terms in t.accesses:
        touched = sum(prod(_size(s, env) for s in term) for term in idx_terms)
        n_bytes += itemsize * (min(touched, elements) if elements is not None else touched)
    got = t.values[key] = (n_ops, n_bytes)
    return got
