"""Read by tg before anything else of this plugin: constants only, no imports."""
API = ">=1.0,<2"               # the tg core API versions this plugin is written for
DEVICES = {"TEMPLATE": 10}     # device name -> priority when tg picks the default device (PYTHON is 0)
HOOKS = "tg_template.plugin"   # imported only when a TEMPLATE device is first used
