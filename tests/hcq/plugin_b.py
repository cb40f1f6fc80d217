"""Test plugin "b" extending HCQREF: its pm_encode encodes a `store` as the value + 1 (so that which plugin's rule won
is visible in memory)."""
from __future__ import annotations

from tests.hcq.plugin_a import encode_store
from tg_core.plugins.hookspecs import hookimpl
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import PatternMatcher
from tg_core.uop.upat import UPat


@hookimpl
def tg_pm_encode(device: str):
    return PatternMatcher([(UPat(Ops.INS, name="x"), lambda x: encode_store(x, 1))])
