API = ">=1.0"
EXTENDS = ["MULTI"]
HOOKS = "tg_test_multi.extra"
