"""Read by tg before anything else of this plugin: constants only, no imports.

tg-mockgpu provides no device of its own: it fills tg-amd's `amd_interfaces` hook with the mock interface,
so it is loaded together with the AMD device it extends."""
API = ">=1.0,<2"              # the tg core API versions this plugin is written for
EXTENDS = ["AMD"]             # adds hook implementations to tg-amd's AMD device
HOOKS = "tg_mockgpu.plugin"   # imported when the AMD device is first used
