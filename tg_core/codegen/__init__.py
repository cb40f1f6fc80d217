"""Codegen: a kernel AST -> a linear program for a renderer.

The stages every kernel goes through, in order (pipeline.py chains them): opts.py -> expander.py -> (uop/symbolic)
-> reduce.py -> lower_index.py -> shifts.py -> ends.py -> linearize.py -> program.py; verify.py checks a result.
lib/ holds the passes only some backends use (multi-core split, GPU dims, heuristics, decompositions, integer pow,
register allocation), which a device or renderer runs in the stage it owns."""
from tg_core.codegen.linearize import LinearizeError, linearize
from tg_core.codegen.opts import Opt, OptError, OptOps, apply_opts
from tg_core.codegen.pipeline import linearize_kernel, lower_kernel
from tg_core.codegen.program import Program
from tg_core.codegen.verify import verify_program

__all__ = ["LinearizeError", "Opt", "OptError", "OptOps", "Program", "apply_opts", "linearize", "linearize_kernel",
           "lower_kernel", "verify_program"]
