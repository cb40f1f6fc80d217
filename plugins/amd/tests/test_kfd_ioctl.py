"""The KFD ioctl structs and request numbers against amd.md 6 (the numbers are written here from the reference, not
read from tg_amd's constants), and the flag values."""
from __future__ import annotations

import ctypes

import pytest

from tg_amd.kfd import ioctl as K

# name: (request, struct size), from amd.md 6's table (and kfd_ioctl.h for the event ioctls it leaves out)
REFERENCE = {
    "GET_VERSION": (0x80084B01, 8), "CREATE_QUEUE": (0xC0604B02, 96), "DESTROY_QUEUE": (0xC0084B03, 8),
    "CREATE_EVENT": (0xC0204B08, 32), "DESTROY_EVENT": (0x40084B09, 8), "SET_EVENT": (0x40084B0A, 8),
    "RESET_EVENT": (0x40084B0B, 8), "WAIT_EVENTS": (0xC0184B0C, 24), "ACQUIRE_VM": (0x40084B15, 8),
    "ALLOC_MEMORY_OF_GPU": (0xC0284B16, 40), "FREE_MEMORY_OF_GPU": (0x40084B17, 8),
    "MAP_MEMORY_TO_GPU": (0xC0184B18, 24), "UNMAP_MEMORY_FROM_GPU": (0xC0184B19, 24),
    "RUNTIME_ENABLE": (0xC0104B25, 16),
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_request_numbers_and_sizes(name):
    request, size = REFERENCE[name]
    assert K.request_of(name) == request
    assert ctypes.sizeof(K.IOCTLS[name].args) == size
    assert K.BY_NR[request & 0xFF].name == name


def test_every_ioctl_is_checked_here():
    assert set(K.IOCTLS) == set(REFERENCE)


# struct: {field: offset}, amd.md 6
OFFSETS = {
    K.GetVersionArgs: {"major_version": 0, "minor_version": 4},
    K.AcquireVMArgs: {"drm_fd": 0, "gpu_id": 4},
    K.AllocMemoryArgs: {"va_addr": 0, "size": 8, "handle": 16, "mmap_offset": 24, "gpu_id": 32, "flags": 36},
    K.FreeMemoryArgs: {"handle": 0},
    K.MapMemoryArgs: {"handle": 0, "device_ids_array_ptr": 8, "n_devices": 16, "n_success": 20},
    K.CreateQueueArgs: {"ring_base_address": 0, "write_pointer_address": 8, "read_pointer_address": 16,
                        "doorbell_offset": 24, "ring_size": 32, "gpu_id": 36, "queue_type": 40,
                        "queue_percentage": 44, "queue_priority": 48, "queue_id": 52, "eop_buffer_address": 56,
                        "eop_buffer_size": 64, "ctx_save_restore_address": 72, "ctx_save_restore_size": 80,
                        "ctl_stack_size": 84, "sdma_engine_id": 88},
    K.CreateEventArgs: {"event_page_offset": 0, "event_trigger_data": 8, "event_type": 12, "auto_reset": 16,
                        "node_id": 20, "event_id": 24, "event_slot_index": 28},
    K.WaitEventsArgs: {"events_ptr": 0, "num_events": 8, "wait_for_all": 12, "timeout": 16, "wait_result": 20},
    K.EventData: {"kfd_event_data_ext": 32, "event_id": 40},
    K.MemoryExceptionData: {"va": 16, "gpu_id": 24},
}


@pytest.mark.parametrize("struct", list(OFFSETS), ids=lambda s: s.__name__)
def test_field_offsets(struct):
    assert {f: getattr(struct, f).offset for f in OFFSETS[struct]} == OFFSETS[struct]


def test_event_data_is_48_bytes_and_packs_a_fault():
    assert ctypes.sizeof(K.EventData) == 48
    d = K.EventData(event_id=7)
    d.memory_exception_data.gpu_id, d.memory_exception_data.va = 0x1234, 0xDEAD_B000
    raw = bytes(d)
    assert int.from_bytes(raw[16:24], "little") == 0xDEAD_B000 and int.from_bytes(raw[24:28], "little") == 0x1234
    assert int.from_bytes(raw[40:44], "little") == 7


def test_flags_and_types():
    F = K.AllocFlags
    assert (F.VRAM, F.GTT, F.USERPTR, F.DOORBELL, F.MMIO_REMAP) == (1, 2, 4, 8, 16)
    assert (F.CONTIGUOUS, F.EXT_COHERENT, F.UNCACHED, F.COHERENT, F.AQL_QUEUE_MEM, F.NO_SUBSTITUTE, F.PUBLIC,
            F.EXECUTABLE, F.WRITABLE) == tuple(1 << b for b in range(23, 32))
    assert (K.QueueType.COMPUTE, K.QueueType.SDMA, K.QueueType.COMPUTE_AQL) == (0, 1, 2)
    assert (K.EventType.SIGNAL, K.EventType.HW_EXCEPTION, K.EventType.MEMORY) == (0, 3, 8)


def test_unknown_ioctl_name():
    with pytest.raises(KeyError, match="no KFD ioctl 'CREATE_QUEUES'; known: GET_VERSION"):
        K.request_of("CREATE_QUEUES")
