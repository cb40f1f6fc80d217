"""Optimizers with tinygrad's signatures. `step()` computes every update from the gradients and the state
before the step and writes the parameters and the optimizer state in one schedule (the gradients, which
read the old parameters, are realized in it too, before the writes)."""
from __future__ import annotations

import numpy as np

from tg_core.dtype import dtypes, to_numpy_dtype
from tg_core.tensor import Tensor
from tg_core.tensor.storage import write
from tg_core.uop.uop import UOp


def _dedup(xs: list[Tensor]) -> list[Tensor]:
    out: list[Tensor] = []
    for x in xs:
        if all(x is not y for y in out):
            out.append(x)
    return out


def _state_like(t: Tensor) -> Tensor:
    # made flat and reshaped: the storage of a 0-d parameter's state is one element, seen with shape ()
    return Tensor(np.zeros(t.numel(), dtype=to_numpy_dtype(t.dtype)), device=t.device).reshape(t.shape)


def _scalar(v: float, device: str) -> Tensor:
    # a realized 0-d tensor, not a constant: it can be assigned (a new learning rate) without a new schedule
    return Tensor(np.array([v], dtype=np.float32), device=device).reshape(())


class Optimizer:
    """Holds the parameters (tensors that require grad; float ones with requires_grad None are switched on) and
    the buffers (tensors that do not, realized with each step). `lr` is a realized 0-d tensor."""

    def __init__(self, params: list[Tensor], lr: float):
        for p in params:
            if p.requires_grad is None and dtypes.is_float(p.dtype):  # ints (counters, indices) stay buffers
                p.requires_grad = True
        self.params = _dedup([p for p in params if p.requires_grad])
        self.buffers = _dedup([p for p in params if not p.requires_grad])
        if not self.params:
            raise ValueError("an optimizer needs at least one tensor that requires grad")
        self.device = self.params[0].device
        self.lr = _scalar(lr, self.device)
        # parameters live in storage from now on, so a step writes them in place
        Tensor.realize_all(*self.params, *self.buffers)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Update every parameter that has a gradient, and the optimizer state, in one schedule."""
        write(self._updates(), others=self.buffers)

    def _updates(self) -> list[tuple[Tensor, UOp]]:
        """(tensor, new value) for every tensor the step writes; the values are built from the state before
        the step. Only UOps leave this method, so no tensor made here outlives it as a reader of old state."""
        raise NotImplementedError

    def _target(self, t: Tensor, value: Tensor) -> tuple[Tensor, UOp]:
        return t, value.detach()._cast_to(t.dtype).uop


class SGD(Optimizer):
    """p -= lr * g with g = grad + weight_decay * p; with momentum, b = momentum * b + g and g = b (or
    g + momentum * b with nesterov): PyTorch's SGD without dampening."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False):
        if nesterov and momentum <= 0:
            raise ValueError("nesterov momentum needs momentum > 0")
        super().__init__(params, lr)
        self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
        self.b = [_state_like(p) for p in self.params] if momentum else []

    def _updates(self) -> list[tuple[Tensor, UOp]]:
        out = []
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g = p.grad.detach() + self.wd * p.detach() if self.wd else p.grad.detach()
            if self.momentum:
                b = self.b[i] * self.momentum + g
                out.append(self._target(self.b[i], b))
                g = g + b * self.momentum if self.nesterov else b
            out.append(self._target(p, p.detach() - g * self.lr))
        return out


class LAMB(Optimizer):
    """Adam moments with bias correction; the update m_hat / (sqrt(v_hat) + eps) + weight_decay * p is scaled
    by the trust ratio |p| / |update| (LAMB) or by 1 (`adam=True`: AdamW's decoupled weight decay)."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
                 weight_decay: float = 0.0, adam: bool = False):
        super().__init__(params, lr)
        self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
        self.b1_t, self.b2_t = _scalar(1.0, self.device), _scalar(1.0, self.device)
        self.m = [_state_like(p) for p in self.params]
        self.v = [_state_like(p) for p in self.params]

    def _updates(self) -> list[tuple[Tensor, UOp]]:
        if all(p.grad is None for p in self.params):
            return []  # no step taken: the bias corrections must not advance
        b1_t, b2_t = self.b1_t * self.b1, self.b2_t * self.b2
        out = [self._target(self.b1_t, b1_t), self._target(self.b2_t, b2_t)]
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g = p.grad.detach().cast(self.m[i].dtype)
            m = self.m[i] * self.b1 + g * (1.0 - self.b1)
            v = self.v[i] * self.b2 + (g * g) * (1.0 - self.b2)
            up = (m / (1.0 - b1_t)) / ((v / (1.0 - b2_t)).sqrt() + self.eps)
            if self.wd:
                up = up + self.wd * p.detach()
            if self.adam:
                ratio: Tensor | float = 1.0
            else:
                r1, r2 = p.detach().square().sum().sqrt(), up.square().sum().sqrt()
                ratio = ((r1 > 0) & (r2 > 0)).where(r1 / r2, 1.0)
            out += [self._target(self.m[i], m), self._target(self.v[i], v),
                    self._target(p, p.detach() - self.lr * ratio * up)]
        return out


def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> LAMB:
    return LAMB(params, lr, b1, b2, eps, 0.0, adam=True)


def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          weight_decay: float = 0.01) -> LAMB:
    return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True)


__all__ = ["Adam", "AdamW", "LAMB", "Optimizer", "SGD"]
