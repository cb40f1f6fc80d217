"""The mock GPU's command processors: the engines that read AMD rings (docs/architecture.md, "AMD queues").

- `memory.py`: the memory protocol they are written against (read/write bytes at a GPU VA), page-wise helpers,
  and `PagedMemory`, a plain memory whose every access must stay inside one 4 KiB page;
- `pm4.py`: the PM4 compute processor (ring -> INDIRECT_BUFFERs -> packets, register state, PRED_EXEC over the
  part's XCCs, waits that stall and resume);
- `sdma.py`: the SDMA copy engine (copies page by page, fences, polls, timestamps, traps);
- `launch.py`: DISPATCH_DIRECT on the RDNA3 emulator from the register state the packets built.
- `perf.py`: the performance monitor the packets program (PMC counters, SQTT per SE), fed by `work.py` (what a
  dispatch executed, where and when: placement and cycle model) and `sqtt_enc.py` (the RDNA3 trace packets).

A processor runs when told to (`run(doorbell)`: the doorbell callback of a queue, or a host wait): it executes
packets from its read pointer up to the doorbell value and returns, leaving its place at a wait that is not yet
satisfied. A malformed or unknown packet raises `PacketError` naming the queue, the dword offset, the header and
the opcode.
"""
from tg_mockgpu.cp.memory import PacketError

__all__ = ["PacketError"]
