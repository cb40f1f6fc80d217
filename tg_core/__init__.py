"""tg: a small, fast tensor compiler whose backends are plugins."""
from tg_core.device import Buffer, Device
from tg_core.dtype import DType, dtypes
from tg_core.helpers import Context, ContextVar, getenv
from tg_core.uop import GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite

__version__ = "0.1.0"

# tinygrad's spelling: Variable("start_pos", 0, 1023).bind(5) is a symbolic int (tg_core/uop/sint.py)
Variable = UOp.variable


def __getattr__(name: str):
    # Tensor pulls in numpy and the scheduler: imported on first use so that `import tg_core` stays light
    if name == "Tensor":
        from tg_core.tensor import Tensor
        return Tensor
    if name in ("TinyJit", "JitError"):
        from tg_core.engine import jit
        return getattr(jit, name)
    raise AttributeError(f"module 'tg_core' has no attribute {name!r}")


__all__ = ["Buffer", "Device", "DType", "dtypes", "Context", "ContextVar", "Tensor", "TinyJit", "JitError", "getenv",
           "GroupOp", "Ops", "PatternMatcher", "UOp", "UPat", "Variable", "graph_rewrite"]
