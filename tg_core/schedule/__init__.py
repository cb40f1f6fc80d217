"""Scheduling: from a tensor graph to the kernels (and copies) that realize it."""
from tg_core.schedule.rangeify import create_schedule

__all__ = ["create_schedule"]
