API = ">=99.0,<100"
DEVICES = {"OLDDEV": 50}
HOOKS = "tg_test_incompatible.plugin"
