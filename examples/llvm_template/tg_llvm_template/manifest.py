"""Read by tg before anything else of this plugin: constants only, no imports."""
API = ">=1.0,<2"                 # the tg core API versions this plugin is written for
DEVICES = {"HOSTJIT": 1}         # device name -> default-device priority (PYTHON is 0, the CPU plugin's CPU 50)
HOOKS = "tg_llvm_template.plugin"  # imported only when a HOSTJIT device is first used
