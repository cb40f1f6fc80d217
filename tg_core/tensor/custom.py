"""Custom kernels: a kernel AST written by hand over the buffers of some tensors, run as its own kernel item.

`custom_kernel(*tensors, fxn=f)` calls `f` with one PARAM per tensor (`UOp.param(i, dtype.ptr(size))`, the
tensor's whole storage buffer, as the scheduler's kernel ASTs address buffers) and expects a kernel AST back:
a SINK of STOREs/ENDs over RANGEs, in the IR the scheduler emits (see docs/architecture.md "Kernel ASTs and
programs"). The kernel writes the tensors in place, as `assign` does (tensor/storage.py `write`): live lazy
values that read those buffers are computed from the old contents first, then the kernel runs, at once; every
view of the storage sees the result. Being an ordinary exec item it is recorded and replayed by TinyJit, and
bound variables (BIND) in the AST become DEFINE_VARs the kernel takes at run time (the schedule cache strips
their values), so one compile serves every value.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING

from tg_core.dtype import PtrDType
from tg_core.tensor.storage import storage_of, write
from tg_core.uop.ops import KernelInfo, Ops
from tg_core.uop.uop import UOp

if TYPE_CHECKING:
    from tg_core.tensor.tensor import Tensor

KernelFn = Callable[..., UOp]


def custom_kernel(*tensors: Tensor, fxn: KernelFn) -> tuple[Tensor, ...]:
    """Run the kernel `fxn(*params)` builds over these tensors' storage; returns the tensors (written in place)."""
    if not tensors:
        raise ValueError("custom_kernel needs at least one tensor: its buffers are the kernel's parameters")
    if not callable(fxn):
        raise TypeError(f"custom_kernel's fxn must be a function of the {len(tensors)} buffer params returning a "
                        f"kernel AST (a SINK), not {type(fxn).__name__}")
    devices = {t.device for t in tensors}
    if len(devices) != 1 or isinstance(next(iter(devices)), tuple):
        raise ValueError(f"custom_kernel's tensors must all be on one (unsharded) device, got {sorted(map(str, devices))}")
    bufs = []
    for i, t in enumerate(tensors):
        if storage_of(t.uop) is None:
            t.realize()  # a lazy value gets storage of its own first; the kernel writes into it
        base = storage_of(t.uop)
        if base is None:
            raise ValueError(f"custom_kernel's tensor {i} (shape {t.shape}) has no storage to write into")
        bufs.append(base)
    params = [UOp.param(i, b.dtype.ptr(b.arg)) for i, b in enumerate(bufs)]
    try:
        inspect.signature(fxn).bind(*params)
    except TypeError as e:
        raise TypeError(f"custom_kernel passes fxn {len(params)} buffer params (one per tensor), but it does not take "
                        f"them: {e}") from None
    ast = fxn(*params)
    write([], calls=[UOp(Ops.CALL, ast.dtype, (check_ast(ast, params, _fn_name(fxn)), *bufs))])
    return tensors


def check_ast(ast: object, params: list[UOp], name: str) -> UOp:
    """`ast` as a kernel AST over `params` (named when its SINK has no KernelInfo), or a clear error."""
    if not isinstance(ast, UOp) or ast.op is not Ops.SINK:
        got = ast.op if isinstance(ast, UOp) else type(ast).__name__
        raise TypeError(f"custom_kernel's fxn {name} must return a kernel AST: a SINK of STOREs (or ENDs of them), "
                        f"got {got}")
    nodes = ast.toposort()
    for n in nodes:
        if n.op is Ops.PARAM and isinstance(n.dtype, PtrDType):
            i = n.arg
            if not isinstance(i, int) or not 0 <= i < len(params):
                raise ValueError(f"custom_kernel's fxn {name} uses buffer PARAM {i}, but it was given {len(params)} "
                                 f"buffers (PARAM 0..{len(params) - 1}, one per tensor)")
            if n is not params[i]:
                raise TypeError(f"custom_kernel's fxn {name} uses PARAM {i} as {n.dtype!r}; the tensor's buffer is "
                                f"{params[i].dtype!r}: use the param it was passed")
        if n.op in (Ops.BUFFER, Ops.ASSIGN, Ops.COPY, Ops.CONTIGUOUS):
            raise TypeError(f"custom_kernel's fxn {name} returned tensor-level {n.op} in its kernel AST; a kernel reads "
                            "and writes buffers only through the params it is passed (param.index(i).load())")
    if not any(n.op is Ops.STORE for n in nodes):
        raise ValueError(f"custom_kernel's fxn {name} returned a kernel that stores nothing: its outputs are written "
                         "with STORE (param.index(i).store(value))")
    if not isinstance(ast.arg, KernelInfo):
        ast = UOp(Ops.SINK, ast.dtype, ast.src, KernelInfo(f"custom_{name}"))
    return ast


def _fn_name(fxn: KernelFn) -> str:
    name = getattr(fxn, "__name__", type(fxn).__name__)
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "kernel"


__all__ = ["check_ast", "custom_kernel"]
