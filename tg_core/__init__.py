"""tg: a small, fast tensor compiler whose backends are plugins."""
from tg_core.device import Buffer, Device
from tg_core.dtype import DType, dtypes
from tg_core.helpers import Context, ContextVar, getenv
from tg_core.uop import GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite

__version__ = "0.1.0"
__all__ = ["Buffer", "Device", "DType", "dtypes", "Context", "ContextVar", "getenv", "GroupOp", "Ops", "PatternMatcher", "UOp", "UPat",
           "graph_rewrite"]
