"""Data-parallel training: an optimizer whose step first averages the gradients over the ranks."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tg_core.plugin_api import Tensor
from tg_mpi.collectives import allreduce_many

if TYPE_CHECKING:
    from tg_mpi.group import World


class DistributedOptimizer:
    """`opt` (any tg optimizer) with `step()` preceded by the mean of every parameter's gradient over the ranks,
    fused into buckets (one message per `bucket_bytes`). Each rank trains on its slice of a batch; with equal
    slices the step equals one process's step on the whole batch, and since the averaged gradients are
    bit-identical on every rank, so are the weights after it (given the same device type on every rank)."""

    def __init__(self, opt: Any, world: World | None = None, bucket_bytes: int | None = None) -> None:
        from tg_mpi.group import get_world
        if not hasattr(opt, "params") or not hasattr(opt, "step"):
            raise TypeError(f"DistributedOptimizer wraps a tg optimizer (with params and step), got {type(opt).__name__}")
        self.opt, self.world, self.bucket_bytes = opt, world if world is not None else get_world(), bucket_bytes

    @property
    def params(self) -> list[Tensor]:
        return self.opt.params

    def zero_grad(self) -> None:
        self.opt.zero_grad()

    def step(self) -> None:
        with_grad = [p for p in self.opt.params if p.grad is not None]
        if not with_grad:
            raise RuntimeError("DistributedOptimizer.step: no parameter has a gradient (call backward() first)")
        if self.world.size > 1:
            Tensor.realize_all(*(p.grad for p in with_grad))
            means = allreduce_many([p.grad for p in with_grad], "mean", world=self.world,
                                   bucket_bytes=self.bucket_bytes)
            for p, g in zip(with_grad, means):
                p.grad = g
        self.opt.step()

    def __getattr__(self, name: str) -> Any:  # lr and the optimizer's state, as the wrapped one has them
        return getattr(self.opt, name)
