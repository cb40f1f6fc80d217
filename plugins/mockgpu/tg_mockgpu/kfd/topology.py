"""The sysfs files the mock KFD driver answers: a CPU node 0 and one node per mock GPU (a 7900 XTX, gfx1100)."""
from __future__ import annotations

TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"
FIRST_RENDER_MINOR = 128

# per XCC: 96 CUs of 2 SIMDs (a 7900 XTX), 16 waves per SIMD, 64 KiB LDS
GPU_PROPERTIES = {"cpu_cores_count": 0, "simd_count": 192, "simd_per_cu": 2, "array_count": 12,
                  "simd_arrays_per_engine": 2, "cu_per_simd_array": 8, "max_waves_per_simd": 16,
                  "lds_size_in_kb": 64, "max_slots_scratch_cu": 32, "wave_front_size": 32,
                  "gfx_target_version": 110000, "vendor_id": 4098, "device_id": 29772}
CPU_PROPERTIES = {"cpu_cores_count": 2, "simd_count": 0, "gfx_target_version": 0}


def gpu_id_of(index: int) -> int:
    return 0x1000 + index  # non-zero, distinct, not the index (so code must not confuse the two)


def gpu_properties(index: int, xccs: int) -> dict[str, int]:
    props = dict(GPU_PROPERTIES, simd_count=GPU_PROPERTIES["simd_count"] * xccs, num_xcc=xccs,
                 drm_render_minor=FIRST_RENDER_MINOR + index)
    return props


def render_node(index: int) -> str:
    return f"/dev/dri/renderD{FIRST_RENDER_MINOR + index}"


def sysfs_files(gpus: int, xccs: int) -> dict[str, str]:
    """Path -> text of every file the mock answers (directories are the paths' prefixes)."""
    def props(d: dict[str, int]) -> str:
        return "".join(f"{k} {v}\n" for k, v in d.items())
    files = {f"{TOPOLOGY}/0/gpu_id": "0\n", f"{TOPOLOGY}/0/properties": props(CPU_PROPERTIES)}
    for i in range(gpus):
        files[f"{TOPOLOGY}/{i + 1}/gpu_id"] = f"{gpu_id_of(i)}\n"
        files[f"{TOPOLOGY}/{i + 1}/properties"] = props(gpu_properties(i, xccs))
    return files
