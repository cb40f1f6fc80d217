"""Codegen libraries: passes and tools only some backends use, outside the pipeline every kernel goes through.

A device or renderer calls them from the stage it owns (see docs/architecture.md, "From Tensor.realize to the
device call"):

- threads.py    CPU: split a kernel's outermost parallel range (or a full reduction) across cores (AST prep)
- gpudims.py    GPU: parallel ranges -> workgroup/workitem ids and the launch dims (AST prep)
- heuristic.py  CPU renderers: which opts (upcast, unroll, register tiles) to ask the pipeline for
- decomp.py     renderers without a math library: transcendentals as plain ALU ops (an extra_matcher)
- intpow.py     renderers without an integer pow: POW as multiplies (an extra_matcher)
- regalloc.py   renderers of machine code: linear-scan register allocation over tg_core.renderer.isa
"""
