"""A command buffer with kernels in it: PM4 words plus each dispatch's kernarg segment inline, addressed from the
buffer's base (an int, or a UOp such as the address of the command-buffer placeholder).

- `PM4Stream`: a kernarg segment is the payload of a NOP packet (so the CP skips it), its start aligned by a
  padding NOP before it; the dispatch sequence follows with the segment's address in its user SGPRs. The
  buffer is run by one INDIRECT_BUFFER.
- `AQLStream`: the buffer holds the PM4 runs and, between them, each dispatch's kernarg segment (outside every
  run, so nothing executes it); the ring gets a vendor PM4-IB packet per run and a dispatch packet per kernel,
  in order (aql.py).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tg_amd.interface import KernelSymbol
from tg_amd.queues import aql, pm4
from tg_amd.queues.kernel import dispatch_of
from tg_amd.queues.pm4 import Word

KERNARG_ALIGN = 64            # bytes: what the HSA runtime guarantees a kernarg segment


def _segment(kernel: KernelSymbol, kernargs: Sequence[Word]) -> list[Word]:
    """The kernarg dwords padded to the descriptor's kernarg_size (at least one dword)."""
    size = kernel.descriptor.kernarg_size
    if 4 * len(kernargs) > max(size, 4) or size % 4:
        raise ValueError(f"kernel {kernel.name}: {4 * len(kernargs)} bytes of kernargs for a kernarg_size of {size}"
                         " (a whole number of dwords, at most kernarg_size)")
    return [*kernargs, *([0] * (max(size, 4) // 4 - len(kernargs)))]


class PM4Stream:
    def __init__(self, base: Word, xccs: int = 1):
        self.base, self.xccs = base, xccs
        self.words: list[Word] = []

    def add(self, words: Sequence[Word]) -> None:
        self.words += words

    def kernel(self, kernel: KernelSymbol, image_va: Word, kernargs: Sequence[Word], grid: tuple[Word, Word, Word],
               local: tuple[int, int, int], scratch: Sequence[Word] = (0,), before: Sequence[Word] = (),
               after_dispatch: Sequence[Word] = (), after: Sequence[Word] = (), perfcount: bool = False) -> None:
        """A dispatch with its segment; `before`/`after_dispatch`/`after`: an instrumenter's words
        (queues/instrument.py), `perfcount` its COMPUTE_PERFCOUNT_ENABLE."""
        seg = _segment(kernel, kernargs)
        align = KERNARG_ALIGN // 4
        pad = -(len(self.words) + 1) % align
        if pad:  # a NOP is at least 2 dwords: a 1-dword gap takes one more alignment step
            self.words += pm4.packet("NOP", *([0] * ((pad + align if pad == 1 else pad) - 1)))
        at = self.base + 4 * (len(self.words) + 1)
        self.words += pm4.packet("NOP", *seg)
        d = dispatch_of(kernel, image_va, {"kernarg_segment_ptr": at}, grid, local, scratch)
        self.words += pm4.dispatch(dataclasses.replace(d, perfcount=perfcount), self.xccs, before, after_dispatch)
        self.words += after


class AQLStream:
    def __init__(self, base: Word):
        self.base = base
        self.words: list[Word] = []
        self.packets: list[list[Word]] = []
        self._run = 0           # where the open PM4 run starts (dwords)

    def add(self, words: Sequence[Word]) -> None:
        self.words += words

    def _close(self) -> None:
        if len(self.words) > self._run:
            self.packets.append(aql.pm4_ib(self.base + 4 * self._run, len(self.words) - self._run))
        self._run = len(self.words)

    def kernel(self, kernel: KernelSymbol, image_va: Word, kernargs: Sequence[Word], grid: tuple[Word, Word, Word],
               local: tuple[int, int, int], before: Sequence[Word] = (), after_dispatch: Sequence[Word] = (),
               after: Sequence[Word] = (), perfcount: bool = False) -> None:
        """A dispatch packet; an instrumenter's `before` words end the PM4 run before it, `after_dispatch` and
        `after` start the next (the packet's barrier bit orders them after the dispatch). `perfcount` goes to
        COMPUTE_PERFCOUNT_ENABLE in the run before (the packet processor programs the rest)."""
        if perfcount:
            self.words += pm4.set_sh_reg("COMPUTE_PERFCOUNT_ENABLE", 1)
        self.words += before
        self._close()
        while len(self.words) * 4 % KERNARG_ALIGN:
            self.words.append(0)
        at = self.base + 4 * len(self.words)
        self.words += _segment(kernel, kernargs)
        self.packets.append(aql.kernel_dispatch(kernel, image_va, at, grid, local))
        self._run = len(self.words)
        self.words += [*after_dispatch, *after]

    def finish(self) -> list[list[Word]]:
        """The ring packets, the last PM4 run closed."""
        self._close()
        return self.packets
