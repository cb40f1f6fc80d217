"""Read by tg before anything else of this plugin: constants only, no imports."""
API = ">=1.0,<2"            # the tg core API versions this plugin is written for
DEVICES = {"CPU": 50}       # above PYTHON (0): a native CPU is the default when installed
HOOKS = "tg_cpu_x86.plugin"  # imported only when the CPU device is first used
