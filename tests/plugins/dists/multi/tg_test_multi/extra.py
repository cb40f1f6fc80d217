"""Extends MULTI: one more renderer, one more encode rule, one more profiler."""
from tg_core.plugins import hookimpl
from tg_core.uop import Ops, PatternMatcher, UOp, UPat


class ExtraRenderer:
    name = "EXTRA"


@hookimpl
def tg_renderers(device):
    return [ExtraRenderer]


@hookimpl
def tg_pm_encode(device):
    return PatternMatcher([(UPat(Ops.CONST, arg=1, name="x"), lambda x: UOp.const(x.dtype, 20)),
                           (UPat(Ops.CONST, arg=2, name="x"), lambda x: UOp.const(x.dtype, 30))])


@hookimpl
def tg_profilers(device):
    return ["extra-profiler"]
