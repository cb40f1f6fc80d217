API = ">=1.0,<2"
EXTENDS = ["MULTI"]
HOOKS = "tg_test_broken.plugin"
