API = ">=1.0,<2"
DEVICE = {"TYPO": 1}
HOOKS = "tg_test_broken.plugin"
