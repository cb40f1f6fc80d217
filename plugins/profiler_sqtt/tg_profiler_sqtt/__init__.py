"""tg-profiler-sqtt: AMD SQ thread traces (SQTT) and performance counters (PMC) for tg's AMD device.

`sqtt.decode` turns a trace stream into packets, `mapper.map_instructions` walks each traced wave through its
kernel's code object, `pmc.decode_pmc` turns a counter readback into per-counter totals. Imports nothing heavy:
core reads the manifest of every installed plugin through this package."""
