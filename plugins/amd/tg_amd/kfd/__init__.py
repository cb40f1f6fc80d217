"""tg-amd's KFD interface: the Linux kernel driver for AMD GPUs (/dev/kfd), through a replaceable OS layer.

    ioctl.py     the ioctl argument structs (ctypes), request numbers, flags and types (amd.md 6)
    oslayer.py   OSLayer: the only place OS calls happen (open, read, listdir, ioctl, mmap, munmap, write64);
                 RealOS does them with os/fcntl/libc
    topology.py  the GPU nodes of /sys/devices/virtual/kfd/kfd/topology (gpu_id, properties, gfx target)
    driver.py    KFDDriver (/dev/kfd, version, nodes) and KFDGPU (render node, VM, memory, doorbell pages)
    queues.py    CREATE_QUEUE for PM4, AQL and SDMA: ring, pointer page, EOP buffer, CWSR area, doorbell
    events.py    the signal event (host sleeps) and memory/hardware-exception events (faults)
    select.py    RealOS where /dev/kfd exists, else a mock driver from the `amd_kfd_os()` hook
"""
