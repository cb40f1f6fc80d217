"""Strength-reduced addresses (isel.Selector.induction_address): an index affine in its innermost loop is a
pointer set up before the loop and advanced by each iteration; a loop whose counter then only counts ends on a
pointer compare. Values against numpy for the shapes this
produces (negative and non-power-of-two steps, a variable's offset, stack-array panels, gated accesses),
the inner loops free of index arithmetic, and indexes that could wrap in 32 bits left as they were."""
from __future__ import annotations

import numpy as np

from tg_core import Tensor
from tg_core.dtype import dtypes
from tg_core.testing.kernels import kernel
from tg_core.uop import Ops, UOp
from tg_cpu_x86.x86.isel import Selector

from test_x86_kernels import f32, run_tensor
from x86_harness import compile_x86, run_x86


def innermost_loop(k, containing: str = "") -> list[str]:
    """The instructions of the shortest loop (a backward jump's target to the jump) with an instruction
    starting with `containing`."""
    rows = k.assembler.listing()
    loops = []
    for off, _, text in rows:
        op, _, arg = text.partition(" ")
        if op.startswith("j") and arg.isalnum() and int(arg, 0) <= off:  # capstone prints small targets in decimal
            top = int(arg, 0)
            body = [t for o, _, t in rows if top <= o <= off]
            if any(t.startswith(containing) for t in body):
                loops.append((off - top, top, off))
    assert loops, f"the kernel has a loop with {containing!r}"
    _, start, end = min(loops)
    return [text for off, _, text in rows if start <= off <= end]


def test_matmul_inner_loop_has_no_index_arithmetic():
    a, b = f32(32, 64), f32(64, 48)
    got, kernels = run_tensor(Tensor(a) @ Tensor(b), own_opts=True)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    body = innermost_loop(kernels[-1], "vfmadd231ps")
    assert any(t.startswith("vfmadd231ps") for t in body)
    assert not any(t.startswith(("movsxd", "imul", "lea")) for t in body), body
    # no counter left: the loop ends when a pointer reaches its end (one 64-bit compare of two registers)
    cmps = [t for t in body if t.startswith("cmp ")]
    assert len(cmps) == 1 and cmps[0].split()[1].startswith("r") and "0x" not in cmps[0], body
    assert all(t.split()[1].startswith("r") for t in body if t.startswith("add ")), body


def test_negative_and_odd_steps():
    """out[i] = a[60 - 3*i] + a[2*i + 1] * 5: steps of -12 and 8 bytes, pointers from a constant offset."""
    a, out = UOp.param(0, dtypes.float32.ptr(64)), UOp.param(1, dtypes.float32.ptr(20))
    r = UOp.range(20, 0)
    v = a.index(UOp.const(dtypes.int32, 60) - r * 3).load() + a.index(r * 2 + 1).load() * 5.0
    ast = kernel(out.index(r).store(v).end(r), name="steps")
    x, res = f32(64), np.zeros(20, np.float32)
    k = run_x86(ast, [x, res])
    i = np.arange(20)
    np.testing.assert_allclose(res, x[60 - 3 * i] + x[2 * i + 1] * 5, rtol=1e-6)
    assert not any(t.startswith("movsxd") for t in innermost_loop(k))


def test_variable_offset_and_outer_loop_terms():
    """out[j, i] = a[(j*7 + n) + 3*i]: the outer index and a variable are loop-invariant terms (scaled by a
    multiply, 28 bytes), the inner range the pointer's step."""
    a, out = UOp.param(0, dtypes.float32.ptr(200)), UOp.param(1, dtypes.float32.ptr(40))
    n = UOp.variable("n", 0, 50, dtypes.int32)
    j, i = UOp.range(5, 0), UOp.range(8, 1)
    v = a.index(j * 7 + n + i * 3).load()
    ast = kernel(out.index(j * 8 + i).store(v).end(i).end(j), name="offsets")
    x, res = f32(200), np.zeros(40, np.float32)
    run_x86(ast, [x, res], {"n": 13})
    jj, ii = np.meshgrid(np.arange(5), np.arange(8), indexing="ij")
    np.testing.assert_array_equal(res.reshape(5, 8), x[jj * 7 + 13 + ii * 3])


def test_strided_views_padded_panels_and_gates():
    """Reversed and strided slices, padding (gated loads), a transposed matmul and one whose panel is padded
    (gated copies and stores), through the renderer's own linearization."""
    a, b = f32(24, 40), f32(40, 36)
    cases = [
        (lambda a, b: a[::-1, 1::3] * 2 + 1, lambda a, b: a[::-1, 1::3] * 2 + 1),
        (lambda a, b: a.pad(((1, 2), (3, 0))) + 1, lambda a, b: np.pad(a, ((1, 2), (3, 0))) + 1),
        (lambda a, b: a @ b[:, 2:30], lambda a, b: a @ b[:, 2:30]),
        (lambda a, b: a[:, :36] @ b.T[:36, :40], lambda a, b: a[:, :36] @ b.T[:36, :40]),
    ]
    for fn, want in cases:
        got, _ = run_tensor(fn(Tensor(a), Tensor(b)), own_opts=True)
        np.testing.assert_allclose(got, want(a, b), rtol=1e-4, atol=1e-4)


def test_indexes_that_may_wrap_are_not_rewritten():
    """rng*4096 + 1 over a range of 2^20 can exceed int32 where it is computed in 32 bits: the program's
    arithmetic would wrap where a 64-bit pointer sum would not, so such an index is not an affine form
    (codegen widens it to int64 itself, which is rewritten); over 16 iterations it is."""
    a, out = UOp.param(0, dtypes.float32.ptr(1 << 20)), UOp.param(1, dtypes.float32.ptr(1 << 20))
    for n, affine in ((1 << 20, False), (16, True)):
        r = UOp.range(n, 0)
        ast = kernel(out.index(r).store(a.index(r * 4096 + 1).load()).end(r), name="wrap")
        prog, k = compile_x86(ast)
        rng = next(u for u in prog.uops if u.op is Ops.RANGE)
        idx32 = rng * UOp.const(dtypes.int32, 4096) + UOp.const(dtypes.int32, 1)
        assert Selector(prog)._linear(idx32, rng, 1, {}) is affine
        assert "movsxd" not in k.asm_str()


def test_vector_operands_from_memory():
    """A load read by one vector op and a constant are that op's memory operand (sum's loop: one vaddps from
    memory); a load with several users stays in a register."""
    x = f32(16, 64)
    got, kernels = run_tensor(Tensor(x).sum(1), own_opts=True)
    np.testing.assert_allclose(got, x.sum(1), rtol=1e-5)
    body = innermost_loop(kernels[-1], "vaddps")
    assert any(t.startswith("vaddps ymm") and "ymmword ptr [r" in t for t in body), body
    assert not any(t.startswith("vmovups ymm") for t in body), body
    got, kernels = run_tensor(Tensor(x) * Tensor(x) + Tensor(x) * 3, own_opts=True)
    np.testing.assert_allclose(got, x * x + x * 3, rtol=1e-5)
    body = innermost_loop(kernels[-1], "vmulps")
    assert any(t.startswith("vmovups ymm") for t in body) and any("[rip" in t for t in body), body


def test_counter_used_as_a_value_is_kept():
    """out[i] = a[i] + i: the counter is data, so the loop keeps it (and still advances pointers)."""
    a, out = UOp.param(0, dtypes.float32.ptr(40)), UOp.param(1, dtypes.float32.ptr(40))
    r = UOp.range(40, 0)
    ast = kernel(out.index(r).store(a.index(r).load() + r.cast(dtypes.float32)).end(r), name="counter")
    x, res = f32(40), np.zeros(40, np.float32)
    k = run_x86(ast, [x, res])
    np.testing.assert_allclose(res, x + np.arange(40), rtol=1e-6)
    assert any(t.startswith("vcvtsi2ss") for t in innermost_loop(k, "vcvtsi2ss"))
