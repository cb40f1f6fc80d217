"""Test helpers shared by core's and the plugins' tests: which devices open here, devices configured for a test
module, the allreduce algorithms, and races between threads."""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator

import numpy as np

from tg_core.device import Device


def why_unavailable(device: str) -> str | None:
    """None when `device` opens; else the first line of why not (no interface plugin, one that cannot run here)."""
    try:
        Device[device]
    except Exception as e:  # any failure to open is a reason to skip, said in the skip message
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return None


# Context settings that pick each allreduce algorithm, and numpy's reduction for each op the collectives take
ALLREDUCE_ALGOS: dict[str, dict[str, int]] = {"naive": {"RING": 0, "ALL2ALL": 0}, "ring": {"RING": 2, "ALL2ALL": 0},
                                              "all2all": {"ALL2ALL": 2}}
REDUCE_NP: dict[str, Callable[..., np.ndarray]] = {"sum": np.sum, "prod": np.prod, "max": np.max}


def configured_devices(**devices: dict[str, object]) -> Callable[[], Iterator[None]]:
    """A generator function for a module fixture: `Device.configure(devices=...)` before the module's tests and
    `Device.reset()` after, e.g. `pytest.fixture(scope="module", autouse=True)(configured_devices(CPU={"count": 4}))`."""
    def configure() -> Iterator[None]:
        Device.configure(devices=devices)
        yield
        Device.reset()
    return configure


def run_in_threads(work: Callable[[int], None], threads: int = 4) -> None:
    """Run `work(k)` for k in range(threads) at once, switching threads as often as the interpreter allows so that
    races show within a few hundred rounds; the first exception any thread raised is raised here."""
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            work(k)
        except BaseException as e:  # reported by the calling thread
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        started = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
        for t in started:
            t.start()
        for t in started:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    if errors:
        raise errors[0]
