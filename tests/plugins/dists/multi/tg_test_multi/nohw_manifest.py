API = ">=1.0,<2"
DEVICES = {"NOHW": 90}
HOOKS = "tg_test_multi.nohw"
