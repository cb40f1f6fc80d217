"""Hook implementations of tg-profiler-sqtt.

None yet, on purpose: the profiler's queue hooks (a slot per profiled dispatch, PMC and SQTT programming around
it, readback at synchronize) need hook specs tg-amd's command queues do not define yet (issue 14). What this
plugin offers today is its decoders, used directly: `tg_profiler_sqtt.sqtt`, `.mapper` and `.pmc`."""
