API = ">=1.0,<2"
DEVICES = {"MULTI": 7}
HOOKS = "tg_test_multi.plugin"
