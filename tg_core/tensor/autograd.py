"""Autograd on Tensor: gradient(), backward(), requires_grad, detach, and the no_grad/training flags.

The derivative rules are gradient.py's; this mixin decides what to differentiate. Realizing never changes
gradients: differentiation follows a realized buffer into the graph it was computed from (storage.py keeps
those origins), unless storage that graph read has been assigned since, which is an error (PyTorch's
"modified by an inplace operation"). `backward()` finds the tensors that require grad in the graph through
storage.py's registry of live tensors, as tinygrad does.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, cast

from tg_core.dtype import dtypes
from tg_core.tensor.base import TensorBase
from tg_core.tensor.gradient import compute_gradient
from tg_core.tensor.storage import live_tensors, note_view, origin_of, through_realized, track
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

if TYPE_CHECKING:
    from tg_core.tensor.tensor import Tensor


class _FlagScope(contextlib.ContextDecorator):
    """A scope (`with` or decorator) in which the class-level flag `attr` of `cls` (Tensor) is `mode`:
    `Tensor.train()` sets `training`, `Tensor.test()` sets `no_grad`."""

    def __init__(self, cls: type, attr: str, mode: bool = True):
        self.cls, self.attr, self.mode = cls, attr, mode
        self.saved: list[bool] = []  # a stack: one decorated recursive function enters it repeatedly

    def __enter__(self) -> None:
        self.saved.append(getattr(self.cls, self.attr))
        setattr(self.cls, self.attr, self.mode)

    def __exit__(self, *exc: object) -> None:
        setattr(self.cls, self.attr, self.saved.pop())


def register_new(t: Tensor) -> None:
    """Every new tensor: detached when made under no_grad, then tracked as live."""
    if t.no_grad and dtypes.is_float(t.dtype) and not dtypes.is_weak(t.dtype) \
            and t.uop.op not in (Ops.DETACH, Ops.CONST) and not t._is_realized():
        # made under no_grad: no gradient flows back through this tensor into what it was computed from
        t.uop = UOp(Ops.DETACH, t.dtype, (t.uop,))
    track(t)


class AutogradMixin(TensorBase):
    __slots__ = ()
    # class-level flags, set on Tensor by the scopes of train() and test()
    no_grad: bool = False
    training: bool = False

    @classmethod
    def train(cls, mode: bool = True) -> _FlagScope:
        """A scope (`with Tensor.train():` or a decorator) in which Tensor.training is `mode`."""
        return _FlagScope(cls, "training", mode)

    @classmethod
    def test(cls, mode: bool = True) -> _FlagScope:
        """A scope in which Tensor.no_grad is `mode`: tensors made in it carry no gradient path."""
        return _FlagScope(cls, "no_grad", mode)

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """The gradients of this tensor with respect to `targets`, as lazy tensors (zeros for a target this
        tensor does not depend on). `gradient` is this tensor's own gradient; only a scalar may omit it."""
        if not dtypes.is_float(self.dtype):
            raise RuntimeError(f"only float tensors have gradients; this one is {self.dtype!r}")
        if gradient is None:
            if self.shape != ():
                raise RuntimeError(f"a gradient can be implied only for a scalar: this tensor has shape {self.shape}, "
                                   "so pass gradient= (a tensor of that shape)")
            root_grad = UOp.const(self.dtype, 1.0)
        else:
            g = gradient if isinstance(gradient, TensorBase) else self._operand(gradient)
            if g.shape != self.shape:
                raise RuntimeError(f"the gradient has shape {g.shape} but the tensor has shape {self.shape}")
            root_grad = g._cast_to(self.dtype).uop
        wrt = [origin_of(t.uop) for t in targets]
        through, stale = through_realized([self.uop])
        for graph in stale:
            if any(u in graph.toposort() for u in wrt):
                raise RuntimeError(f"cannot differentiate through a realized {graph.shape} tensor: storage it was "
                                   "computed from has been assigned since")
        grads = compute_gradient(self.uop, root_grad, set(wrt), through)
        return [type(self)(grads[u], device=t.device) if u in grads else t.zeros_like() for t, u in zip(targets, wrt)]

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Add this tensor's gradient with respect to every live tensor in its graph that requires grad to
        that tensor's `.grad` (lazily; an optimizer step realizes them)."""
        through, _ = through_realized([self.uop])
        # the part of the graph gradients flow through: not below DETACH or values that are not floats
        differentiable = lambda n: n.op is not Ops.DETACH and dtypes.is_float(n.dtype)  # noqa: E731
        in_graph: set[UOp] = set()
        stack = [self.uop]
        while stack:
            for n in stack.pop().toposort(gate=differentiable):
                if n not in in_graph:
                    in_graph.add(n)
                    if n in through:
                        stack.append(through[n])
        leaves = [t for t in live_tensors() if t.requires_grad and (t.uop in in_graph or origin_of(t.uop) in in_graph)]
        if not leaves:
            raise RuntimeError(f"backward: no tensor in the graph of this {self.shape} tensor requires grad")
        for t, g in zip(leaves, self.gradient(*leaves, gradient=gradient)):
            t.grad = g if t.grad is None else t.grad + g
        return cast("Tensor", self)

    @property
    def requires_grad(self) -> bool | None:
        """True: gradients flow to this tensor; None: not decided (an optimizer switches it on); False: never."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool | None) -> None:
        if value and not dtypes.is_float(self.dtype):
            # as PyTorch: gradients are defined only for floats, and a silent "nothing requires grad" later hides it
            raise TypeError(f"only floating point tensors can require gradients; this {self.shape} tensor is "
                            f"{self.dtype!r} (cast it to a float dtype first)")
        self._requires_grad = value

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        self.requires_grad = requires_grad
        return cast("Tensor", self)

    def detach(self) -> Tensor:
        """The same value with no gradient path; a view of this tensor: it shares a realized tensor's storage,
        and an assign into it writes into this tensor whether or not it is realized."""
        out = type(self)(UOp(Ops.DETACH, self.dtype, (self.uop,)), device=self.device, requires_grad=False)
        note_view(cast("Tensor", self), out)  # an assign into it writes into this tensor
        return out
