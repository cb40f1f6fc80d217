"""Codegen: a kernel AST -> a linear program for a renderer (opts, index simplification, REDUCE lowering,
weakint lowering, linearization)."""
from tg_core.codegen.linearize import LinearizeError, linearize
from tg_core.codegen.opts import Opt, OptError, OptOps, apply_opts
from tg_core.codegen.program import Program, linearize_kernel, lower_kernel
from tg_core.codegen.verify import verify_program

__all__ = ["LinearizeError", "Opt", "OptError", "OptOps", "Program", "apply_opts", "linearize", "linearize_kernel",
           "lower_kernel", "verify_program"]
