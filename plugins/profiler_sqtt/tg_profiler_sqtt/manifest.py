"""Read by tg before anything else of this plugin: constants only, no imports.

tg-profiler-sqtt provides no device of its own: it profiles tg-amd's AMD device through hooks."""
API = ">=1.2,<2"                   # the tg core API versions this plugin is written for
EXTENDS = ["AMD"]                  # adds hook implementations to tg-amd's AMD device
HOOKS = "tg_profiler_sqtt.plugin"  # imported when the AMD device is first used
