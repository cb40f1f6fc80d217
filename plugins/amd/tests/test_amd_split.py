"""split_nested: reductions nested in other reductions become kernels of their own; checked on the reference
interpreter (the parts run in order over the original buffers plus the temporaries) against the unsplit kernel."""
from __future__ import annotations

import numpy as np

from tg_core.devices.python.interpreter import run_kernel
from tg_core.dtype import dtypes
from tg_core.uop import AxisType, Ops, UOp
from tg_amd.split import split_nested

from amd_kernels import kernel


def mlp_loss(B: int = 6, I: int = 5, H: int = 7, C: int = 4) -> UOp:  # noqa: E741  (the dims' usual names)
    """loss = sum_b max_c sum_h relu(sum_i x[b,i] w1[i,h]) w2[h,c]: a scalar over three nested reductions."""
    x, w1, w2 = (UOp.param(i + 1, dtypes.float32.ptr(n)) for i, n in enumerate((B * I, I * H, H * C)))
    out = UOp.param(0, dtypes.float32.ptr(1))
    b, c, h, i = (UOp.range(n, k, AxisType.REDUCE) for k, n in enumerate((B, C, H, I)))
    hid = (x.index(b * I + i).load() * w1.index(i * H + h).load()).reduce(Ops.ADD, i)
    logit = (hid.maximum(0.0) * w2.index(h * C + c).load()).reduce(Ops.ADD, h)
    return kernel(out.index(UOp.const(dtypes.weakint, 0)).store(logit.reduce(Ops.MAX, c).reduce(Ops.ADD, b)),
                  name="loss")


def test_nested_reductions_become_parallel_kernels():
    ast = mlp_loss()
    parts, temps = split_nested(ast)
    assert temps == [(6 * 7, dtypes.float32), (6 * 4, dtypes.float32), (6, dtypes.float32)]
    for part in parts[:-1]:
        (end,) = part.src
        assert end.op is Ops.END and all(r.arg[1] is AxisType.LOOP for r in end.src[1:])
    assert not any(u.op is Ops.REDUCE and u.ranges for u in parts[-1].toposort())  # nothing nested is left
    rng = np.random.default_rng(0)
    bufs = [np.zeros(1, np.float32)] + [rng.standard_normal(n).astype(np.float32) for n in (30, 35, 28)]
    want = np.zeros(1, np.float32)
    run_kernel(ast, [want] + bufs[1:])
    full = bufs + [np.zeros(n, np.float32) for n, _ in temps]
    for part in parts:
        run_kernel(part, full)
    np.testing.assert_allclose(full[0], want, rtol=1e-5)


def test_flat_kernels_are_left_alone():
    a, out = UOp.param(0, dtypes.float32.ptr(64)), UOp.param(1, dtypes.float32.ptr(8))
    r, j = UOp.range(8, 0), UOp.range(8, 1, AxisType.REDUCE)
    ast = kernel(out.index(r).store(a.index(r * 8 + j).load().reduce(Ops.ADD, j)).end(r), name="rowsum")
    assert split_nested(ast) == ([ast], [])


def test_one_part_for_a_reduction_reached_twice():
    """max_c and sum_c of the same nested row sums (as softmax reads its logits): one part, one temporary."""
    a, out = UOp.param(0, dtypes.float32.ptr(4 * 3 * 5)), UOp.param(1, dtypes.float32.ptr(1))
    b = UOp.range(4, 0, AxisType.REDUCE)
    c1, c2 = UOp.range(3, 1, AxisType.REDUCE), UOp.range(3, 2, AxisType.REDUCE)
    k1, k2 = UOp.range(5, 3, AxisType.REDUCE), UOp.range(5, 4, AxisType.REDUCE)
    row = [a.index((b * 3 + c) * 5 + k).load().reduce(Ops.ADD, k) for c, k in ((c1, k1), (c2, k2))]
    total = (row[0].reduce(Ops.MAX, c1) + row[1].reduce(Ops.ADD, c2)).reduce(Ops.ADD, b)
    ast = kernel(out.index(UOp.const(dtypes.weakint, 0)).store(total), name="twice")
    parts, temps = split_nested(ast)
    assert temps[0] == (12, dtypes.float32) and len([n for n, _ in temps if n == 12]) == 1
    src = np.random.default_rng(1).standard_normal(60).astype(np.float32)
    want = np.zeros(1, np.float32)
    run_kernel(ast, [src, want])
    full = [src, np.zeros(1, np.float32)] + [np.zeros(n, np.float32) for n, _ in temps]
    for part in parts:
        run_kernel(part, full)
    np.testing.assert_allclose(full[1], want, rtol=1e-5)
