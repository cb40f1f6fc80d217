"""KFD events of one GPU: the signal event a queue's RELEASE_MEM interrupt wakes (host sleeps), and the memory-
and hardware-exception events that report GPU faults (amd.md 6).

The process has one 0x8000-byte uncached event page, allocated by the first GPU and passed (by handle) to the
first CREATE_EVENT; other GPUs map it. A signal event's mailbox is event page + slot * 8: a RELEASE_MEM with
INT_SEL 2 writing the event id there and raising an interrupt with ctxid = event id wakes WAIT_EVENTS.
"""
from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from tg_amd.kfd import ioctl as K

if TYPE_CHECKING:
    from tg_amd.kfd.driver import KFDGPU

EVENT_PAGE_SIZE = 0x8000


class GPUMemoryFault(RuntimeError):
    """The KFD memory-exception event fired: a GPU access to an unmapped (or read-only) address."""

    def __init__(self, gpu_id: int, va: int, failure: K.MemoryExceptionFailure):
        self.gpu_id, self.va = gpu_id, va
        kinds = [n for n in ("NotPresent", "ReadOnly", "NoExecute", "imprecise") if getattr(failure, n)]
        super().__init__(f"GPU {gpu_id}: memory fault at {va:#x} ({', '.join(kinds) or 'no reason given'})")


class GPUHardwareException(RuntimeError):
    """The KFD hardware-exception event fired (a GPU reset) on GPU `gpu_id`."""

    def __init__(self, gpu_id: int, message: str):
        self.gpu_id = gpu_id
        super().__init__(message)


class KFDEvents:
    """The signal, memory and hardware-exception events of `gpu`, waited on together."""

    def __init__(self, gpu: KFDGPU):
        self.gpu = gpu
        drv = gpu.driver
        self.page_event: int | None = None   # the event the first CREATE_EVENT (giving the page) also creates
        if drv.event_page is None:
            drv.event_page = gpu.alloc(EVENT_PAGE_SIZE, "gtt")
            self.page_event = gpu.ioctl("CREATE_EVENT", event_page_offset=drv.event_page.handle).event_id
        else:
            gpu.map(drv.event_page)
        self.page = drv.event_page
        sig = gpu.ioctl("CREATE_EVENT", event_type=K.EventType.SIGNAL, auto_reset=1)
        self.signal_id, slot = sig.event_id, sig.event_slot_index
        self.mailbox = self.page.va + slot * 8   # where a RELEASE_MEM writes the event id
        self.memory_id = gpu.ioctl("CREATE_EVENT", event_type=K.EventType.MEMORY).event_id
        self.hw_id = gpu.ioctl("CREATE_EVENT", event_type=K.EventType.HW_EXCEPTION).event_id
        self._data = (K.EventData * 3)()

    def wait(self, timeout_ms: int) -> bool:
        """Sleep until the signal event fires (True) or `timeout_ms` passes (False); a fault reported through the
        memory or hardware-exception event raises GPUMemoryFault / GPUHardwareException."""
        for d, eid in zip(self._data, (self.signal_id, self.memory_id, self.hw_id)):
            ctypes.memset(ctypes.addressof(d), 0, ctypes.sizeof(d))
            d.event_id = eid
        res = self.gpu.ioctl("WAIT_EVENTS", events_ptr=ctypes.addressof(self._data), num_events=3, wait_for_all=0,
                             timeout=timeout_ms)
        mem, hw = self._data[1].memory_exception_data, self._data[2].hw_exception_data
        if mem.gpu_id:
            raise GPUMemoryFault(mem.gpu_id, mem.va, mem.failure)
        if hw.gpu_id:
            raise GPUHardwareException(hw.gpu_id, f"GPU {hw.gpu_id}: hardware exception (reset type {hw.reset_type}, cause "
                                       f"{hw.reset_cause}, memory lost: {bool(hw.memory_lost)})")
        if res.wait_result == K.WAIT_FAIL:
            raise OSError(f"GPU {self.gpu.gpu_id}: KFD WAIT_EVENTS failed")
        return res.wait_result == K.WAIT_COMPLETE

    def set(self) -> None:
        """Fire the signal event from the host (wakes a sleeping waiter)."""
        self.gpu.ioctl("SET_EVENT", event_id=self.signal_id)

    def close(self) -> None:
        for eid in (self.signal_id, self.memory_id, self.hw_id, self.page_event):
            if eid is not None:
                self.gpu.ioctl("DESTROY_EVENT", event_id=eid)
