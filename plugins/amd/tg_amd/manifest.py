"""Read by tg before anything else of this plugin: constants only, no imports."""
API = ">=1.0,<2"           # the tg core API versions this plugin is written for
DEVICES = {"AMD": 5}       # below CPU: until the KFD interface exists, AMD is the (slow) mock GPU emulator
HOOKS = "tg_amd.plugin"    # imported only when the AMD device is first used (or `tg devices` lists plugins)
