"""tg-mpi: tg's collectives across the processes (ranks) of an MPI job, on one host or many.

    import tg_mpi
    tg_mpi.world.rank, tg_mpi.world.size, tg_mpi.world.device   # started by mpiexec, or a world of one
    g = tg_mpi.allreduce(t, op="mean")                           # t: a Tensor on any device

Imports nothing heavy: core reads the manifest of every installed plugin through this package, so the world
(and mpi4py) are set up on first use."""
from __future__ import annotations

from typing import Any

_EXPORTS = {"init": "group", "get_world": "group", "World": "group", "CollectiveError": "exchange",
            "allreduce": "collectives", "allreduce_many": "collectives", "broadcast": "collectives",
            "all_gather": "collectives", "reduce_scatter": "collectives", "Work": "collectives",
            "DistributedOptimizer": "optim"}


def __getattr__(name: str) -> Any:
    if name == "world":
        from tg_mpi.group import get_world
        return get_world()
    if name in _EXPORTS:
        import importlib
        return getattr(importlib.import_module(f"tg_mpi.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'tg_mpi' has no attribute {name!r}; it offers world, {', '.join(_EXPORTS)}")


__all__ = ["world", *_EXPORTS]
