"""`tg devices --probe`: open each device and run tiny checks on it.

`PROBE_STEPS` is the extension point: each step is (name, function of the opened device) and raises on
failure: buffers round-trip, then a tiny kernel (a fused elementwise op and a sum) runs.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tg_core.device import Buffer, Compiled, Device


def _buffer_roundtrip(dev: Compiled) -> None:
    data = np.arange(64, dtype=np.int32) * 7 - 100
    buf = Buffer.from_numpy(data, dev.device)
    got = buf.numpy()
    if not np.array_equal(got, data):
        raise AssertionError(f"copied in {data[:4]}..., copied out {got[:4]}...")
    if dev.allocator.supports_views:
        view = buf.view(8, "int", offset=16 * 4)
        if not np.array_equal(view.numpy(), data[16:24]):
            raise AssertionError("a view at offset 64 bytes read the wrong elements")
        view.deallocate()
    buf.deallocate()


def _tiny_kernel(dev: Compiled) -> None:
    from tg_core.tensor import Tensor
    data = np.arange(16, dtype=np.float32) - 5
    got = (Tensor(data, device=dev.device) * 2 + 1).sum().item()
    want = float((data * 2 + 1).sum())
    if got != want:
        raise AssertionError(f"sum(x*2+1) over 16 elements gave {got}, expected {want}")


PROBE_STEPS: list[tuple[str, Callable[[Compiled], None]]] = [("buffer copy in/out", _buffer_roundtrip),
                                                             ("tiny kernel", _tiny_kernel)]


@dataclass
class ProbeResult:
    device: str
    ok: bool
    seconds: float
    steps: list[str] = field(default_factory=list)
    error: str = ""


def probe(device: str) -> ProbeResult:
    """Open `device` and run every probe step; never raises."""
    start = time.perf_counter()
    res = ProbeResult(device, False, 0.0)
    try:
        dev = Device[device]
        for name, step in PROBE_STEPS:
            step(dev)
            res.steps.append(name)
        res.ok = True
    except Exception as e:
        res.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    res.seconds = time.perf_counter() - start
    return res
