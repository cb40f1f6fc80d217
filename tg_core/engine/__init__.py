"""Running schedules: buffers for BUFFER nodes, kernels and copies in order."""
from tg_core.engine.realize import buffer_of, realize

__all__ = ["buffer_of", "realize"]
