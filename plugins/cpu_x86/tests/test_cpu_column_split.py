"""A packed matmul split across cores by its columns (heuristic.core_axis, threads.split_cores' `axis`): which
kernels are, and that the split products compute what numpy does on the CPU device's two cores."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.device import Device
from tg_core.plugin_api import CPUTarget, Ops, UOp, core_axis, dtypes, split_cores
from tg_core.testing.kernels import kernel
from tg_core.uop import AxisType

AVX512 = CPUTarget(vector_bytes=64, auto_vectorize=False)


def matmul_ast(m: int, k: int, n: int, bias: bool = False) -> UOp:
    a, b, out = UOp.param(1, dtypes.float32.ptr(m * k)), UOp.param(2, dtypes.float32.ptr(k * n)), \
        UOp.param(0, dtypes.float32.ptr(m * n))
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisType.REDUCE)
    acc = (a.index(i * k + r).load() * b.index(r * n + j).load()).reduce(Ops.ADD, r)
    if bias:
        acc = acc + UOp.param(3, dtypes.float32.ptr(n)).index(j).load()
    return kernel(out.index(i * n + j).store(acc).end(i, j), name="matmul")


def test_columns_when_every_core_gets_whole_panels():
    ast = matmul_ast(256, 784, 1024, bias=True)
    j = core_axis(ast, AVX512, 2)
    assert j is not None and j.arg[0] == 1
    split = split_cores(ast, 2, axis=j)
    # core c's columns: a 512-column range offset by 512*c
    assert any(u.op is Ops.RANGE and u.arg[0] == 1 and u.src[0].op is Ops.CONST and u.src[0].arg == 512
               for u in split.toposort())
    # 96 columns are not two cores' whole 32-column panels; one core; an elementwise kernel: rows as before
    assert core_axis(matmul_ast(256, 64, 96), AVX512, 2) is None
    assert core_axis(ast, AVX512, 1) is None
    x, y = UOp.param(0, dtypes.float32.ptr(64 * 64)), UOp.param(1, dtypes.float32.ptr(64 * 64))
    i, jj = UOp.range(64, 0), UOp.range(64, 1)
    assert core_axis(kernel(y.index(i * 64 + jj).store(x.index(i * 64 + jj).load() * 2).end(i, jj)), AVX512, 2) is None
    # an axis that is not a parallel range of the kernel is ignored: the outermost is split
    rows = split_cores(ast, 2, axis=UOp.range(7, 99))
    assert any(u.op is Ops.RANGE and u.arg[0] == 0 and u.src[0].op is Ops.CONST and u.src[0].arg == 128
               for u in rows.toposort())


@pytest.mark.parametrize("dev", ["CPU:X86", "CPU:LLVM"])
@pytest.mark.parametrize("shape", [(256, 784, 1024), (37, 300, 128), (8, 2500, 64)])
def test_split_products_match_numpy(shape, dev):
    if Device[dev].threads < 2:
        pytest.skip("the CPU device runs on one core here")
    m, k, n = shape
    rng = np.random.default_rng(5)
    a, b, bias = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n), (n,)))
    ta, tb, tc = (Tensor(x, device=dev) for x in (a, b, bias))
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    np.testing.assert_allclose((ta @ tb + tc).relu().numpy(), np.maximum(a @ b + bias, 0), rtol=1e-4,
                               atol=1e-4 * np.sqrt(k))


def test_llvm_splits_columns_with_ranged_variables():
    """CPU:LLVM names the same columns as X86, and gives core_id its bounds as a `range` attribute (without it
    the SLP vectorizer left the column-split tile scalar); core's base LLVM renderer adds no attribute."""
    pytest.importorskip("llvmlite.binding")
    from tg_core.codegen import linearize_kernel
    from tg_core.renderer.llvmir import LLVMRenderer
    from tg_cpu_x86.llvm import CPULLVMRenderer
    r = CPULLVMRenderer()
    ast = matmul_ast(256, 784, 1024, bias=True)
    j = r.core_axis(ast, 2)
    assert j is not None and j.arg[0] == 1 and r.core_axis(matmul_ast(256, 64, 96), 2) is None
    split = split_cores(ast, 2, axis=j)
    prog = linearize_kernel(split, True, r.opts_for(split), r.extra_matcher)
    assert "i32 range(i32 0, 2) %var.core_id" in r.render(prog)
    plain = linearize_kernel(split, True, (), None)
    assert "range(" not in LLVMRenderer().render(plain) and "i32 %var.core_id" in LLVMRenderer().render(plain)
