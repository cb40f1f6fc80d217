"""The compute queue's instrumentation points (tg_amd/queues/instrument.py), seen from the mock's command
processor: an instrumenter's words run around each dispatch in the order the contract states, PERFCOUNT_ENABLE
follows its flag, every submit is asked and `synchronized` runs after synchronize; the results stay right."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core.device import Device
from tg_amd.queues import pm4
from tg_mockgpu.cp import pm4 as mock_pm4


class Marks:
    """Instruments every submit with NOP packets whose payload names the point and the dispatch's index."""
    name = "test-marks"

    def __init__(self, perfcount: bool) -> None:
        self.perfcount, self.submits, self.syncs = perfcount, 0, 0

    def submit(self, device, queue, batch):
        self.submits += 1
        outer = self

        class Inst:
            perfcount = outer.perfcount

            def before(self, site):
                return pm4.packet("NOP", 0xB0 + site.index)

            def after_dispatch(self, site):
                return pm4.packet("NOP", 0xD0 + site.index)

            def after(self, site):
                return pm4.packet("NOP", 0xA0 + site.index)

            def end(self):
                return pm4.packet("NOP", 0xE0)

            def host(self):
                return []
        return Inst()

    def synchronized(self, device):
        self.syncs += 1


@pytest.mark.parametrize("perfcount", [False, True])
def test_words_run_around_each_dispatch(monkeypatch, perfcount):
    from tg_core.tensor import Tensor
    seen: list[tuple[str, list[int]]] = []
    execute = mock_pm4.PM4Queue._execute

    def record(self, f, name, p, active, bad):
        seen.append((name, list(p)))
        return execute(self, f, name, p, active, bad)
    monkeypatch.setattr(mock_pm4.PM4Queue, "_execute", record)
    dev = Device["AMD"]
    marks = Marks(perfcount)
    monkeypatch.setattr(dev, "_instrumenters", [marks])
    a = np.arange(64, dtype=np.float32)
    x = Tensor(a, device="AMD").realize()
    seen.clear()
    out = ((x * 3).contiguous() + 1).sum().numpy()  # two kernels or more in one realize
    assert out == pytest.approx(float((a * 3 + 1).sum()))
    names = [n if n != "NOP" else f"NOP:{p[0]:#x}" for n, p in seen if n in ("NOP", "ACQUIRE_MEM", "DISPATCH_DIRECT")]
    dispatches = [i for i, n in enumerate(names) if n == "DISPATCH_DIRECT"]
    assert len(dispatches) >= 2 and marks.submits >= 1
    for i in dispatches:
        # ACQUIRE_MEM, before, ..., DISPATCH_DIRECT, after_dispatch, ... after (CS_PARTIAL_FLUSH is an EVENT_WRITE)
        assert names[i - 2] == "ACQUIRE_MEM" and names[i - 1].startswith("NOP:0xb"), names
        k = names[i - 1][-1]
        assert names[i + 1] == f"NOP:0xd{k}" and names[i + 2] == f"NOP:0xa{k}", names
    assert "NOP:0xe0" in names[dispatches[-1]:]
    # START_X/Y/Z, NUM_THREAD_X/Y/Z, PIPELINESTAT_ENABLE, PERFCOUNT_ENABLE are written by one SET_SH_REG
    start_x = pm4.set_sh_reg("COMPUTE_START_X", 0)[1]
    runs = [p for n, p in seen if n == "SET_SH_REG" and p[0] == start_x]
    assert len(runs) == len(dispatches) and all(len(p) == 9 and p[8] == int(perfcount) for p in runs), runs
    syncs = marks.syncs
    dev.synchronize()
    assert marks.syncs == syncs + 1


def test_no_instrumenter_is_offered_unless_profiling_asks_for_one():
    # tg-profiler-sqtt implements amd_dispatch_instrumenters, but offers its instrumenter only with PMC=1 or SQTT=1
    import os
    if any(os.environ.get(k, "0") not in ("", "0") for k in ("PMC", "SQTT")):
        pytest.skip("PMC or SQTT is set in this environment")
    assert [i.name for i in Device["AMD"].instrumenters()] == []
