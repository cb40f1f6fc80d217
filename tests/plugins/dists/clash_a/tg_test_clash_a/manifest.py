API = ">=1.0,<2"
DEVICES = {"CLASH": 5}
HOOKS = "tg_test_clash_a.plugin"
