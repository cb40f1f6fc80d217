"""tg-mockgpu's mock KFD driver: the OS layer tg-amd's KFD interface (tg_amd/kfd/) runs on where no /dev/kfd exists.

    topology.py  the sysfs topology of N mock gfx1100s (CPU node 0, GPU nodes 1..N)
    vm.py        the address space (VRAM in GPUMemory pages, GTT memfds, USERPTR) and each GPU's GPUView
    queue.py     MockQueue: a created queue and its doorbell hook
    engines.py   Engines: each queue's command processor, run by doorbells and waits; queue faults
    driver.py    MockKFD: files, ioctls, mmaps, doorbells, events

For the command processors (PM4, AQL, SDMA; tg_mockgpu/cp/, not here): the seam is
  - `MockKFD.queues` (queue_id -> MockQueue) and `MockKFD.gpus[i].queues` (doorbell slot -> MockQueue);
  - `MockQueue`: `kind` ("pm4" | "aql" | "sdma"), `ring` (GPU VA) and `ring_size` (bytes), `rptr`/`wptr` (GPU VAs
    of 64-bit pointers; PM4 and AQL count in dwords/packets as the hardware does, SDMA in bytes: the mock stores
    what the engine writes), `read_wptr()`, `read_rptr()`, `write_rptr(v)`, `ring_bytes(offset, n)` (wrapping),
    `xcc_id`, `eop`, `cwsr`, and `mem`, the GPU's `GPUView` (read/write/read64/write64 of VAs mapped on it;
    `PageFault` otherwise);
  - `queue.on_doorbell = fn(queue, value)`: called on each host doorbell store, after the value landed (CREATE_QUEUE
    sets it to the Engines' doorbell, which runs the queue's processor; a test may replace it);
  - `MockKFD.add_wait_hook(fn)`: called at the start of every WAIT_EVENTS (a host sleep), to run stalled queues;
  - `MockKFD.interrupt(event_id)`: an end-of-pipe interrupt with ctxid = event id (RELEASE_MEM INT_SEL 2);
  - `MockKFD.report_fault(gpu_index, va, write)`: a GPU page fault, returned by the next WAIT_EVENTS on a MEMORY
    event (the KFD interface raises GPUMemoryFault from it);
  - `MockKFD.queue_fault(gpu_index, text, page)`: a queue fault (a page fault -> MEMORY event, else HW_EXCEPTION);
    `MockKFD.fault_detail(gpu_id)` returns and clears the oldest fault text of that GPU (None when there is none);
  - `MockGPU.sdma_traffic` (and each `SDMAQueue.traffic`): bytes its SDMA engines copied, by (source, destination)
    location (memory kind, owning GPU); `MockKFD.peer_copies()`: the VRAM-to-VRAM bytes between GPUs.
"""
