"""The KFD ioctls tg uses: their argument structs (ctypes, the kernel's layout) and request numbers (amd.md 6).

A request number is dir << 30 | size << 16 | 'K' << 8 | nr, with dir 1 = write (to the kernel), 2 = read,
3 = both (Linux's _IOC encoding); the size is the struct's, so a struct of the wrong size gives a request the
driver does not know. `IOCTLS` maps each name to its `Ioctl` (nr, direction, struct); `request_of(name)`
computes the number from them.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

IOC_WRITE, IOC_READ = 1, 2
IOC_MAGIC = ord("K")


def ioc(direction: int, nr: int, size: int) -> int:
    """Linux's _IOC(dir, 'K', nr, size)."""
    return direction << 30 | size << 16 | IOC_MAGIC << 8 | nr


class _Struct(ctypes.Structure):
    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{n}={getattr(self, n)}" for n, *_ in self._fields_
                                                     if not n.startswith("pad")) + ")"


u32, u64 = ctypes.c_uint32, ctypes.c_uint64


class GetVersionArgs(_Struct):
    _fields_ = [("major_version", u32), ("minor_version", u32)]


class CreateQueueArgs(_Struct):
    _fields_ = [("ring_base_address", u64), ("write_pointer_address", u64), ("read_pointer_address", u64),
                ("doorbell_offset", u64), ("ring_size", u32), ("gpu_id", u32), ("queue_type", u32),
                ("queue_percentage", u32), ("queue_priority", u32), ("queue_id", u32),
                ("eop_buffer_address", u64), ("eop_buffer_size", u64), ("ctx_save_restore_address", u64),
                ("ctx_save_restore_size", u32), ("ctl_stack_size", u32), ("sdma_engine_id", u32), ("pad", u32)]


class DestroyQueueArgs(_Struct):
    _fields_ = [("queue_id", u32), ("pad", u32)]


class CreateEventArgs(_Struct):
    _fields_ = [("event_page_offset", u64), ("event_trigger_data", u32), ("event_type", u32), ("auto_reset", u32),
                ("node_id", u32), ("event_id", u32), ("event_slot_index", u32)]


class EventIdArgs(_Struct):
    """destroy_event, set_event and reset_event take the same 8 bytes."""
    _fields_ = [("event_id", u32), ("pad", u32)]


class WaitEventsArgs(_Struct):
    _fields_ = [("events_ptr", u64), ("num_events", u32), ("wait_for_all", u32), ("timeout", u32),
                ("wait_result", u32)]


class AcquireVMArgs(_Struct):
    _fields_ = [("drm_fd", u32), ("gpu_id", u32)]


class AllocMemoryArgs(_Struct):
    _fields_ = [("va_addr", u64), ("size", u64), ("handle", u64), ("mmap_offset", u64), ("gpu_id", u32),
                ("flags", u32)]


class FreeMemoryArgs(_Struct):
    _fields_ = [("handle", u64)]


class MapMemoryArgs(_Struct):
    """map_memory_to_gpu and unmap_memory_from_gpu: the handle and an array of gpu ids (u32) to (un)map it on."""
    _fields_ = [("handle", u64), ("device_ids_array_ptr", u64), ("n_devices", u32), ("n_success", u32)]


class RuntimeEnableArgs(_Struct):
    _fields_ = [("r_debug", u64), ("mode_mask", u32), ("capabilities_mask", u32)]


# ---- event data (what WAIT_EVENTS reads and fills per event) ----

class MemoryExceptionFailure(_Struct):
    _fields_ = [("NotPresent", u32), ("ReadOnly", u32), ("NoExecute", u32), ("imprecise", u32)]


class MemoryExceptionData(_Struct):
    _fields_ = [("failure", MemoryExceptionFailure), ("va", u64), ("gpu_id", u32), ("ErrorType", u32)]


class HWExceptionData(_Struct):
    _fields_ = [("reset_type", u32), ("reset_cause", u32), ("memory_lost", u32), ("gpu_id", u32)]


class _EventUnion(ctypes.Union):
    _fields_ = [("memory_exception_data", MemoryExceptionData), ("hw_exception_data", HWExceptionData),
                ("last_event_age", u64)]


class EventData(_Struct):
    """kfd_event_data, 48 bytes: the exception (or signal age) union, an extension pointer, the event id."""
    _anonymous_ = ("u",)
    _fields_ = [("u", _EventUnion), ("kfd_event_data_ext", u64), ("event_id", u32), ("pad", u32)]


@dataclass(frozen=True)
class Ioctl:
    name: str
    nr: int
    direction: int   # IOC_WRITE, IOC_READ or both
    args: type[ctypes.Structure]

    @property
    def request(self) -> int:
        return ioc(self.direction, self.nr, ctypes.sizeof(self.args))


_RW = IOC_READ | IOC_WRITE
IOCTLS: dict[str, Ioctl] = {i.name: i for i in (
    Ioctl("GET_VERSION", 0x01, IOC_READ, GetVersionArgs),
    Ioctl("CREATE_QUEUE", 0x02, _RW, CreateQueueArgs),
    Ioctl("DESTROY_QUEUE", 0x03, _RW, DestroyQueueArgs),
    Ioctl("CREATE_EVENT", 0x08, _RW, CreateEventArgs),
    Ioctl("DESTROY_EVENT", 0x09, IOC_WRITE, EventIdArgs),
    Ioctl("SET_EVENT", 0x0A, IOC_WRITE, EventIdArgs),
    Ioctl("RESET_EVENT", 0x0B, IOC_WRITE, EventIdArgs),
    Ioctl("WAIT_EVENTS", 0x0C, _RW, WaitEventsArgs),
    Ioctl("ACQUIRE_VM", 0x15, IOC_WRITE, AcquireVMArgs),
    Ioctl("ALLOC_MEMORY_OF_GPU", 0x16, _RW, AllocMemoryArgs),
    Ioctl("FREE_MEMORY_OF_GPU", 0x17, IOC_WRITE, FreeMemoryArgs),
    Ioctl("MAP_MEMORY_TO_GPU", 0x18, _RW, MapMemoryArgs),
    Ioctl("UNMAP_MEMORY_FROM_GPU", 0x19, _RW, MapMemoryArgs),
    Ioctl("RUNTIME_ENABLE", 0x25, _RW, RuntimeEnableArgs),
)}
BY_NR: dict[int, Ioctl] = {i.nr: i for i in IOCTLS.values()}


def request_of(name: str) -> int:
    if name not in IOCTLS:
        raise KeyError(f"no KFD ioctl {name!r}; known: {', '.join(IOCTLS)}")
    return IOCTLS[name].request


# ---- constants ----

class AllocFlags:
    """ALLOC_MEMORY_OF_GPU flags (KFD_IOC_ALLOC_MEM_FLAGS_*)."""
    VRAM = 1 << 0
    GTT = 1 << 1
    USERPTR = 1 << 2
    DOORBELL = 1 << 3
    MMIO_REMAP = 1 << 4
    CONTIGUOUS = 1 << 23
    EXT_COHERENT = 1 << 24
    UNCACHED = 1 << 25
    COHERENT = 1 << 26
    AQL_QUEUE_MEM = 1 << 27
    NO_SUBSTITUTE = 1 << 28
    PUBLIC = 1 << 29
    EXECUTABLE = 1 << 30
    WRITABLE = 1 << 31


class QueueType:
    COMPUTE = 0          # PM4
    SDMA = 1
    COMPUTE_AQL = 2
    SDMA_XGMI = 3
    SDMA_BY_ENG_ID = 4


class EventType:
    SIGNAL = 0
    HW_EXCEPTION = 3
    MEMORY = 8


WAIT_COMPLETE, WAIT_TIMEOUT, WAIT_FAIL = 0, 1, 2
MAX_QUEUE_PERCENTAGE = 100
MAX_QUEUE_PRIORITY = 15
RUNTIME_ENABLE_MIN_VERSION = (1, 14)   # RUNTIME_ENABLE exists from KFD 1.14 on
