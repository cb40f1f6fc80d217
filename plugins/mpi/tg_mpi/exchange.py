"""Point-to-point exchanges with a deadline: every collective is built from these, so a rank that died or never
came makes the others fail naming it and the collective, instead of waiting forever in a blocking MPI call."""
from __future__ import annotations

import time
from typing import Any

import numpy as np


class CollectiveError(RuntimeError):
    """A collective that could not complete: a rank missing past the timeout, or ranks that disagree."""


def exchange(comm: Any, sends: dict[int, np.ndarray], recvs: dict[int, np.ndarray], tag: int, what: str,
             timeout: float) -> None:
    """Send `sends[peer]` to each peer and receive `recvs[peer]` from each, all at once (non-blocking requests),
    polling until all are done or `timeout` seconds passed. The error names the peers whose data never came."""
    reqs = [comm.Irecv(buf, source=peer, tag=tag) for peer, buf in recvs.items()]
    peers = list(recvs)
    reqs += [comm.Isend(buf, dest=peer, tag=tag) for peer, buf in sends.items()]
    deadline = time.monotonic() + timeout
    pause = 0.0
    from mpi4py import MPI
    while not MPI.Request.Testall(reqs):
        if time.monotonic() > deadline:
            missing = [p for p, r in zip(peers, reqs) if not r.Test()]
            for r in reqs:
                if not r.Test():
                    r.Cancel()
            raise CollectiveError(f"tg_mpi {what} on rank {comm.rank}: no data from rank{'s' * (len(missing) > 1)} "
                                  f"{', '.join(map(str, missing)) or '(sends pending)'} within {timeout:g} s "
                                  f"(devices.MPI.timeout / TG_MPI_TIMEOUT): it died or did not call {what}")
        # a short sleep once the first polls failed: a waiting rank must not take a core from one still computing
        time.sleep(pause)
        pause = min(1e-3, pause + 1e-5)
