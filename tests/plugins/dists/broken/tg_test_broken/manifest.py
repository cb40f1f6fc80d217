API = ">=1.0,<2"
DEVICES = {"BROKEN": 100}
HOOKS = "tg_test_broken.plugin"
