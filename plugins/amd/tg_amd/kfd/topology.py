"""KFD's topology in sysfs: one directory per node (the CPU and each GPU), read through the OS layer.

/sys/devices/virtual/kfd/kfd/topology/nodes/<n>/gpu_id is 0 for a CPU node; `properties` holds "key value"
lines (simd_count, gfx_target_version, drm_render_minor, num_xcc, ...; amd.md 6).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tg_amd.kfd.oslayer import OSLayer

TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"
# what tg-amd reads from a GPU node's properties (a mock must provide these)
REQUIRED_PROPERTIES = ("simd_count", "simd_per_cu", "max_waves_per_simd", "lds_size_in_kb", "gfx_target_version",
                       "drm_render_minor", "num_xcc")


def gfx_target(version: int) -> str:
    """gfx_target_version (major * 10000 + minor * 100 + stepping) as the LLVM target name: 110000 -> gfx1100,
    90010 -> gfx90a (minor and stepping are hex digits)."""
    major, minor, stepping = version // 10000, version // 100 % 100, version % 100
    if version <= 0 or minor > 15 or stepping > 15:
        raise ValueError(f"gfx_target_version {version} is not major*10000 + minor*100 + stepping with minor and "
                         "stepping below 16")
    return f"gfx{major}{minor:x}{stepping:x}"


def parse_properties(text: str, path: str) -> dict[str, int]:
    props = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise ValueError(f"{path}:{lineno}: expected 'key integer', got {line!r}")
        props[parts[0]] = int(parts[1])
    return props


@dataclass(frozen=True)
class KFDNode:
    """A GPU node of the topology."""
    node: int                       # the node directory's number
    gpu_id: int
    properties: dict[str, int] = field(compare=False)

    @property
    def arch(self) -> str:
        return gfx_target(self.properties["gfx_target_version"])

    @property
    def render_node(self) -> str:
        return f"/dev/dri/renderD{self.properties['drm_render_minor']}"

    @property
    def xccs(self) -> int:
        return max(1, self.properties.get("num_xcc", 1))

    @property
    def cus(self) -> int:
        """Compute units of one XCC."""
        return self.properties["simd_count"] // self.properties["simd_per_cu"] // self.xccs


def read_gpu_nodes(os_layer: OSLayer) -> list[KFDNode]:
    """The GPU nodes, by node number; a node missing a property tg-amd needs is an error naming the file."""
    nodes = []
    for name in sorted((n for n in os_layer.listdir(TOPOLOGY) if n.isdigit()), key=int):
        base = f"{TOPOLOGY}/{name}"
        gpu_id = int(os_layer.read(f"{base}/gpu_id").strip() or 0)
        if gpu_id == 0:
            continue  # a CPU node
        props = parse_properties(os_layer.read(f"{base}/properties"), f"{base}/properties")
        missing = [k for k in REQUIRED_PROPERTIES if k not in props]
        if missing:
            raise ValueError(f"{base}/properties lacks {', '.join(missing)} (tg-amd reads {', '.join(REQUIRED_PROPERTIES)})")
        nodes.append(KFDNode(int(name), gpu_id, props))
    return nodes
