"""The world: this process's rank among the job's, their number, and the device this rank computes on.

Under a launcher (mpiexec/mpirun of MPICH or Open MPI, or a PMI-based scheduler such as Slurm's srun) the world
is MPI's COMM_WORLD; started without one it is a world of one rank and MPI is not even imported, so tg-mpi code
runs unchanged as a single process."""
from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from tg_core.plugin_api import Device, Tensor

# set by the launchers of MPICH (PMI_RANK), Open MPI (OMPI_COMM_WORLD_RANK), PMIx-based ones and Slurm
LAUNCHER_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE")
HOST_DEVICES = ("CPU", "PYTHON")  # one per process: every rank of a host uses the host's device


def launched() -> bool:
    return any(v in os.environ for v in LAUNCHER_VARS)


def options() -> dict[str, Any]:
    return dict(Device.registry.device_options("MPI"))


def pick_device(setting: str, rank: int, local_rank: int) -> str:
    """The device string of a rank: `setting` with {rank} and {local_rank} replaced; 'auto' is the default device
    for host devices and `TYPE:{local_rank}` for others (one GPU per rank on each host)."""
    if setting == "auto":
        base = Device.DEFAULT.split(":")[0]
        return Device.canonicalize(base if base in HOST_DEVICES else f"{base}:{local_rank}")
    try:
        name = setting.format(rank=rank, local_rank=local_rank)
    except (KeyError, IndexError, ValueError) as e:
        raise ValueError(f"devices.MPI.device {setting!r}: allowed are a device string, 'auto', and the "
                         f"placeholders {{rank}} and {{local_rank}} ({type(e).__name__}: {e})") from None
    return Device.canonicalize(name)


class World:
    """One rank of the job. `comm` is an mpi4py communicator, or None for a world of one."""

    def __init__(self, comm: Any, local_rank: int, device: str, timeout: float, bucket_bytes: int) -> None:
        self.comm = comm
        self.rank: int = comm.rank if comm is not None else 0
        self.size: int = comm.size if comm is not None else 1
        self.local_rank = local_rank
        self.device = device
        self.timeout = timeout
        self.bucket_bytes = bucket_bytes
        self.seq = 0  # collectives issued so far: each one's messages carry its own tag
        self.lock = threading.Lock()

    def __repr__(self) -> str:
        return f"World(rank={self.rank}, size={self.size}, local_rank={self.local_rank}, device={self.device!r})"

    def next_tag(self) -> int:
        self.seq += 1
        return (self.seq % 16384) * 2  # even: data; +1: the header of the same collective

    # ---- tg_core's DataParallel contract (`tg demo --data-parallel`) ----

    def broadcast_parameters(self, params: Sequence[Tensor]) -> None:
        from tg_mpi.collectives import broadcast
        for p in params:
            p.assign(broadcast(p, 0, world=self)).realize()

    def distributed(self, opt: Any) -> Any:
        from tg_mpi.optim import DistributedOptimizer
        return DistributedOptimizer(opt, world=self)

    def mean(self, x: float) -> float:
        from tg_mpi.collectives import host_allreduce
        return float(host_allreduce(np.array([x], dtype=np.float64), "mean", "mean", self)[0])

    def all_equal(self, params: Sequence[Tensor]) -> bool:
        """Whether every rank holds bit-identical values of `params`: their bytes' digests compared across ranks."""
        import hashlib
        h = hashlib.sha256()
        for p in params:
            h.update(np.ascontiguousarray(p.numpy()).tobytes())
        digest = np.frombuffer(h.digest(), dtype=np.uint8).astype(np.int64)
        from tg_mpi.collectives import host_allreduce
        lo = host_allreduce(digest.copy(), "max", "all_equal", self)
        return bool(np.array_equal(lo, digest) and np.array_equal(-host_allreduce(-digest, "max", "all_equal", self),
                                                                    digest))


_world: World | None = None
_init_lock = threading.Lock()


def init(device: str | None = None) -> World:
    """Join the MPI job (under a launcher) or make a world of one, pick this rank's device (`device`, else
    devices.MPI.device) and make it tg's default device. Called by the first use of `tg_mpi.world` or a
    collective; calling it again returns the same world (a different `device` then is an error)."""
    global _world
    with _init_lock:
        if _world is not None:
            if device is not None and Device.canonicalize(device) != _world.device:
                raise ValueError(f"tg_mpi.init: the world is already set up on {_world.device}, asked for {device!r}")
            return _world
        opts = options()
        comm, local_rank = None, 0
        if launched():
            from mpi4py import MPI
            comm = MPI.COMM_WORLD.Dup()  # our own context: a user's MPI messages never match ours
            local_rank = comm.Split_type(MPI.COMM_TYPE_SHARED).rank
        rank = comm.rank if comm is not None else 0
        dev = pick_device(device if device is not None else opts["device"], rank, local_rank)
        Device[dev]  # opens it: a device this rank cannot use fails here, naming it
        Device.DEFAULT = dev
        _world = World(comm, local_rank, dev, float(opts["timeout"]), int(opts["bucket_bytes"]))
        return _world


def get_world() -> World:
    return _world if _world is not None else init()
