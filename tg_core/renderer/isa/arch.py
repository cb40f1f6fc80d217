"""What the register allocator needs to know about a target: its register classes, which registers a
function must preserve, how big a spill slot is, and how to write a copy, a spill, a fill and the frame.

An ISA backend subclasses `ArchContext`; everything it returns is `MInst`s of its own ISA, so the
allocator inserts them without knowing the instruction set.
"""
from __future__ import annotations

from collections.abc import Sequence

from tg_core.renderer.isa.machine import Mem, MInst, PReg


class ArchContext:
    """The target description the allocator is parameterized by."""
    # allocatable registers per class, in the order the allocator tries them (caller-saved first, so that
    # callee-saved ones, which cost a save and a restore, are used only under pressure)
    reg_classes: dict[str, tuple[PReg, ...]] = {}
    callee_saved: frozenset[PReg] = frozenset()

    def slot_size(self, cls: str, width: int) -> int:
        """Bytes (and alignment) of a spill slot for a value of `width` bytes in class `cls`."""
        return width

    def move(self, dst: PReg, src: PReg, width: int) -> MInst:
        raise NotImplementedError

    def spill(self, src: PReg, slot: Mem, width: int) -> MInst:
        """Store register `src` (a value of `width` bytes) into `slot`."""
        raise NotImplementedError

    def fill(self, dst: PReg, slot: Mem, width: int) -> MInst:
        raise NotImplementedError

    def frame(self, saved: Sequence[PReg], spill_bytes: int, local_bytes: int = 0) -> Frame:
        """The frame of a function that must preserve `saved` and needs `spill_bytes` of spill slots and
        `local_bytes` of stack arrays."""
        raise NotImplementedError


class Frame:
    """A laid-out stack frame: the code run at entry and before each return, and where frame places are."""

    def __init__(self, prologue: list[MInst], epilogue: list[MInst], size: int):
        self.prologue, self.epilogue, self.size = prologue, epilogue, size

    def resolve(self, mem: Mem) -> Mem:
        """`mem` with its FrameRef replaced by a real address."""
        raise NotImplementedError
