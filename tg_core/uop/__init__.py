"""The IR: one node type (UOp), patterns over it (UPat), and rules applied by graph_rewrite."""
from tg_core.uop.ops import AxisType, GroupOp, KernelInfo, Ops
from tg_core.uop.rewrite import PatternMatcher, RewriteError, graph_rewrite, substitute
from tg_core.uop.uop import UOp
from tg_core.uop.upat import UPat

__all__ = ["AxisType", "GroupOp", "KernelInfo", "Ops", "UOp", "UPat", "PatternMatcher", "RewriteError", "graph_rewrite", "substitute"]
