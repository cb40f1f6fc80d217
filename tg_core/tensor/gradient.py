"""Reverse-mode automatic differentiation over the tensor graph.

`compute_gradient(root, root_grad, targets)` walks the part of the graph that lies between `root` and the
targets, from the root down, and asks `pm_gradient` for each node's local derivative. A rule gets the node's
output gradient as `ctx` and returns the gradients of the node's sources, packed as the sources of a SINK
(a PatternMatcher rule must return one UOp); `_NO_GRAD` stands for "this source gets nothing". Gradients are
tensor-level UOps with the shape and dtype of the node they belong to, so they are lazy tensors themselves:
higher-order gradients and fusing the backward pass with an optimizer step come for free. A `through` map
adds edges the graph does not have: from a realized buffer to the graph that computed it, so gradients reach
what a tensor was computed from even after it was realized.

Conventions (documented behaviour, tested):
- Only float values carry gradients: a node of int or bool dtype stops the walk (comparisons, casts to int).
- Binary MAX splits a tie equally between its operands (as PyTorch's `maximum` does), so the sum of the
  two gradients is always the output gradient. A MAX reduction divides the gradient evenly among all the
  positions that hold the maximum.
- DETACH stops gradients; CONTIGUOUS, COPY and ASSIGN pass them to the value they hold.
"""
from __future__ import annotations

import math

from tg_core.dtype import dtypes, sum_acc_dtype
from tg_core.helpers import argsort
from tg_core.tensor.args import shape_of
from tg_core.uop.ops import GroupOp, Ops
from tg_core.uop.rewrite import PatternMatcher
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat

# a source that receives no gradient; a NOOP has no shape and is never part of a gradient graph
_NO_GRAD = UOp(Ops.NOOP, dtypes.void)


def _grads(*gs: UOp | None) -> UOp:
    return UOp(Ops.SINK, dtypes.void, tuple(_NO_GRAD if g is None else g for g in gs))


def _full(like: UOp, value: float) -> UOp:
    """A constant with `like`'s dtype and shape: a bare CONST has shape (), and an ALU node takes the shape of
    its first source, so constants are broadcast explicitly to keep every gradient node's shape right."""
    c = UOp.const(like.dtype, value)
    return c.reshape((1,) * like.ndim).expand(like.shape) if like.shape else c


def _sum_to(g: UOp, axes: tuple[int, ...]) -> UOp:
    """`g` summed over `axes` (kept as size 1) in the accumulator dtype, so half gradients do not overflow."""
    acc = sum_acc_dtype(g.dtype)
    return g.cast(acc).reduce_axis(Ops.ADD, axes).cast(g.dtype)


def _max_grad(g: UOp, a: UOp, b: UOp) -> UOp:
    # 1 where a wins, 1/2 on a tie, 0 where b wins
    wins = UOp(Ops.CMPLT, dtypes.bool, (b, a)).cast(a.dtype)
    ties = UOp(Ops.CMPEQ, dtypes.bool, (a, b)).cast(a.dtype)
    return g * (wins + ties * _full(a, 0.5))


def _reduce_max_grad(g: UOp, x: UOp, ret: UOp, axes: tuple[int, ...]) -> UOp:
    acc = sum_acc_dtype(x.dtype)
    # ties are counted in the accumulator dtype: in half, tens of thousands of ties would overflow the count
    mask = UOp(Ops.CMPEQ, dtypes.bool, (x, ret.expand(shape_of(x)))).cast(acc)
    count = mask.reduce_axis(Ops.ADD, axes)
    share = (g.cast(acc) / count).expand(shape_of(x))
    return (mask * share).cast(x.dtype)


def _reduce_prod_grad(g: UOp, x: UOp, axes: tuple[int, ...]) -> UOp:
    """d prod(x) / d x_i is the product of the other elements. `prod / x_i` is wrong when x_i is 0, so zeros are
    counted: with no zero it is prod / x_i; with exactly one zero only that position gets the product of the
    nonzero others; with two or more every derivative is 0."""
    zero = _full(x, 0.0)
    is_zero = UOp(Ops.CMPEQ, dtypes.bool, (x, zero))
    nonzero = is_zero.where(_full(x, 1.0), x)
    prod_nonzero = nonzero.reduce_axis(Ops.MUL, axes).expand(shape_of(x))
    zeros = is_zero.cast(dtypes.int32).reduce_axis(Ops.ADD, axes).expand(shape_of(x))
    none_zero = UOp(Ops.CMPEQ, dtypes.bool, (zeros, _full(zeros, 0)))
    one_zero = UOp(Ops.CMPEQ, dtypes.bool, (zeros, _full(zeros, 1)))
    others = none_zero.where(prod_nonzero / nonzero, (one_zero & is_zero).where(prod_nonzero, zero))
    return g.expand(shape_of(x)) * others


def _cast_grad(g: UOp, u: UOp) -> UOp:
    src = u.src[0]
    return _grads(g.cast(src.dtype) if dtypes.is_float(src.dtype) else None)


def _pow_grad(ctx: UOp, u: UOp) -> UOp:
    g, (a, b) = ctx, u.src
    da = g * b * UOp(Ops.POW, a.dtype, (a, b - _full(b, 1.0)))
    # d/db a^b = a^b ln a; where a^b is 0 (a = 0, b > 0) the limit is 0, not 0 * -inf
    log_a = a.log2() * _full(a, math.log(2))
    db = UOp(Ops.CMPEQ, dtypes.bool, (u, _full(u, 0.0))).where(_full(u, 0.0), g * u * log_a)
    return _grads(da, db)


def _movement_grad(g: UOp, u: UOp) -> UOp:
    src, arg = u.src[0], u.arg
    if u.op is Ops.RESHAPE:
        return _grads(g.reshape(shape_of(src)))
    if u.op is Ops.EXPAND:
        return _grads(_sum_to(g, tuple(i for i, (s, n) in enumerate(zip(shape_of(src), arg)) if s != n)))
    if u.op is Ops.PERMUTE:
        return _grads(g.permute(tuple(argsort(list(arg)))))
    if u.op is Ops.PAD:
        return _grads(g.shrink(tuple((b, b + n) for (b, _), n in zip(arg, shape_of(src)))))
    if u.op is Ops.SHRINK:
        return _grads(g.pad(tuple((s, n - e) for (s, e), n in zip(arg, shape_of(src)))))
    return _grads(g.flip(arg))  # FLIP is its own inverse


def _reduce_grad(g: UOp, u: UOp) -> UOp:
    x = u.src[0]
    op, axes = u.arg
    if op is Ops.ADD:
        return _grads(g.expand(shape_of(x)))
    if op is Ops.MAX:
        return _grads(_reduce_max_grad(g, x, u, axes))
    return _grads(_reduce_prod_grad(g, x, axes))


def _copy_grad(g: UOp, u: UOp) -> UOp:
    src_device = u.src[0].device
    if src_device is None:
        return _grads(None, None)
    return _grads(UOp(Ops.COPY, g.dtype, (g, UOp(Ops.DEVICE, dtypes.void, (), src_device))), None)


_LN2 = math.log(2)

pm_gradient = PatternMatcher([
    (UPat(Ops.ADD, name="u"), lambda ctx, u: _grads(ctx, ctx)),
    (UPat(Ops.SUB, name="u"), lambda ctx, u: _grads(ctx, -ctx)),
    (UPat(Ops.NEG, name="u"), lambda ctx, u: _grads(-ctx)),
    (UPat(Ops.MUL, name="u"), lambda ctx, u: _grads(ctx * u.src[1], ctx * u.src[0])),
    (UPat(Ops.MULACC, name="u"), lambda ctx, u: _grads(ctx * u.src[1], ctx * u.src[0], ctx)),
    (UPat(Ops.FDIV, name="u"), lambda ctx, u: _grads(ctx / u.src[1], -(ctx * u) / u.src[1])),
    (UPat(Ops.MAX, name="u"), lambda ctx, u: _grads(_max_grad(ctx, u.src[0], u.src[1]),
                                                    _max_grad(ctx, u.src[1], u.src[0]))),
    (UPat(Ops.POW, name="u"), _pow_grad),
    (UPat(Ops.EXP2, name="u"), lambda ctx, u: _grads(ctx * u * _full(u, _LN2))),
    (UPat(Ops.LOG2, name="u"), lambda ctx, u: _grads(ctx / (u.src[0] * _full(u, _LN2)))),
    (UPat(Ops.SIN, name="u"), lambda ctx, u: _grads(ctx * (_full(u, math.pi / 2) - u.src[0]).sin())),
    (UPat(Ops.SQRT, name="u"), lambda ctx, u: _grads(ctx / (u * _full(u, 2.0)))),
    (UPat(Ops.RECIPROCAL, name="u"), lambda ctx, u: _grads(-ctx * u * u)),
    (UPat(Ops.WHERE, name="u"), lambda ctx, u: _grads(None, u.src[0].where(ctx, _full(ctx, 0.0)),
                                                      u.src[0].where(_full(ctx, 0.0), ctx))),
    # piecewise constant: the derivative is 0 wherever it exists
    (UPat(Ops.TRUNC, name="u"), lambda ctx, u: _grads(None)),
    (UPat(Ops.CAST, name="u"), lambda ctx, u: _cast_grad(ctx, u)),
    (UPat(GroupOp.Movement, name="u"), lambda ctx, u: _movement_grad(ctx, u)),
    (UPat(Ops.REDUCE_AXIS, name="u"), lambda ctx, u: _reduce_grad(ctx, u)),
    (UPat(Ops.CONTIGUOUS, name="u"), lambda ctx, u: _grads(ctx)),
    (UPat(Ops.DETACH, name="u"), lambda ctx, u: _grads(None)),
    (UPat(Ops.COPY, name="u"), lambda ctx, u: _copy_grad(ctx, u)),
    # ASSIGN(destination, value) holds the value; AFTER(x, *effects) is x
    (UPat(Ops.ASSIGN, name="u"), lambda ctx, u: _grads(None, ctx)),
    (UPat(Ops.AFTER, name="u"), lambda ctx, u: _grads(ctx, *(None for _ in u.src[1:]))),
])


def _carries_grad(u: UOp) -> bool:
    return dtypes.is_float(u.dtype) and u.op is not Ops.DETACH


def _toposort(root: UOp, through: dict[UOp, UOp]) -> list[UOp]:
    """Sources before users, over the sources of each node plus its `through` node; not below a node that
    carries no gradient."""
    out: dict[UOp, None] = {}
    entered: set[UOp] = set()  # being expanded: meeting one again means `through` made a cycle
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        u, ready = stack.pop()
        if u in out:
            continue
        if ready:
            out[u] = None
            continue
        if u in entered:
            raise RuntimeError(f"the graph a realized tensor came from contains that tensor ({u.render()[:80]})")
        entered.add(u)
        stack.append((u, True))
        if _carries_grad(u):
            stack.extend((s, False) for s in reversed(_sources(u, through)) if s not in out)
    return list(out)


def _sources(u: UOp, through: dict[UOp, UOp]) -> tuple[UOp, ...]:
    extra = through.get(u)
    return u.src if extra is None else (*u.src, extra)


def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp],
                     through: dict[UOp, UOp] | None = None) -> dict[UOp, UOp]:
    """The gradient of each target reached from `root`, given `root`'s gradient `root_grad` (same shape and
    dtype as root). Targets that `root` does not depend on (or only through DETACH or non-float values) are
    absent from the result.

    `through` maps a node to the graph that computed its value (a realized tensor to the graph it was
    realized from): the gradient of the node also flows into that graph, while the backward graph still
    reads the node itself wherever it needs the value."""
    if root_grad.shape != root.shape:
        raise ValueError(f"the gradient of the root must have the root's shape {root.shape}, got {root_grad.shape}")
    through = through or {}
    topo = _toposort(root, through)
    # the nodes with a differentiable path to a target: only these are visited and only into them do
    # gradients flow, so the backward graph never grows past what the targets need
    on_path: dict[UOp, bool] = {}
    for u in topo:
        on_path[u] = u in targets or (_carries_grad(u) and any(on_path.get(s, False) for s in _sources(u, through)))
    grads: dict[UOp, UOp] = {root: root_grad}

    def add(s: UOp, sg: UOp) -> None:
        prev = grads.get(s)
        grads[s] = sg if prev is None else prev + sg

    for u in reversed(topo):
        g = grads.get(u)
        if g is None or not on_path[u] or not _carries_grad(u):
            continue
        if u in through and on_path.get(through[u], False):
            add(through[u], g)
        if not any(on_path.get(s, False) for s in u.src):
            continue
        local = pm_gradient.rewrite(u, ctx=g)
        if local is None:
            raise RuntimeError(f"failed to compute the gradient of {u.op}: no rule for it ({u.render()[:120]})")
        if len(local.src) != len(u.src):
            raise RuntimeError(f"the gradient rule for {u.op} gave {len(local.src)} gradients for {len(u.src)} sources")
        for s, sg in zip(u.src, local.src):
            if sg is _NO_GRAD or not on_path.get(s, False):
                continue
            if sg.shape != s.shape or sg.dtype != s.dtype:
                raise RuntimeError(f"the gradient rule for {u.op} gave a {sg.dtype!r} gradient of shape {sg.shape} "
                                   f"for a {s.dtype!r} source of shape {s.shape}")
            add(s, sg)
    return {t: grads[t] for t in targets if t in grads}


__all__ = ["compute_gradient", "pm_gradient"]
