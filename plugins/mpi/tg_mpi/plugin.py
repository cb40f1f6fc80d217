"""The hooks of tg-mpi: the options of `MPI` (what each rank trains on, the timeout, the bucket size) and this
process's data-parallel group for `tg demo --data-parallel`."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tg_core.plugin_api import DataParallel, DeviceSpec, DeviceUnavailable, Option, hookimpl

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_BUCKET_BYTES = 1 << 22


class MPIOptions:
    """`MPI` names the options of tg-mpi in the config (devices.MPI.*) and in `TG_MPI_*`; tensors live on each rank's
    local device (`tg_mpi.world.device`), so opening `MPI` as a device is refused with where to look instead."""

    def __init__(self, device: str, options: Mapping[str, Any]) -> None:
        raise DeviceUnavailable(f"{device} holds no tensors: tg-mpi's collectives take tensors of any device "
                                f"(tg_mpi.allreduce(t)); each rank's own device is tg_mpi.world.device "
                                f"(devices.MPI.device)")


@hookimpl
def tg_devices() -> list[DeviceSpec]:
    return [DeviceSpec("MPI", MPIOptions, description="tg-mpi: collectives over the ranks of an MPI job (not a device "
                                                      "for tensors; these are its options)",
                       options={
                           "device": Option(str, "auto", "the device each rank uses: a device string, where "
                                                         "{local_rank} and {rank} are replaced ('AMD:{local_rank}'); "
                                                         "auto: the default device, one GPU per rank on a host"),
                           "timeout": Option(float, DEFAULT_TIMEOUT_S, "seconds a collective waits for the other "
                                                                       "ranks before it fails naming those missing",
                                             minimum=0.1),
                           "bucket_bytes": Option(int, DEFAULT_BUCKET_BYTES, "small tensors reduced together are "
                                                                             "fused into messages of up to this "
                                                                             "size; 0: one message per tensor",
                                                  minimum=0),
                       })]


@hookimpl
def tg_data_parallel() -> DataParallel | None:
    from tg_mpi.group import get_world
    return get_world()
