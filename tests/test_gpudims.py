"""gpudims: parallel ranges -> workgroup/workitem ids. The rewritten kernel is checked by turning every id back
into a loop over all its values (what a GPU launch does) and running it on the reference interpreter."""
import numpy as np
import pytest

from tg_core.codegen.lib.gpudims import add_gpudims, parallel_ranges
from tg_core.devices.python.interpreter import run_kernel
from tg_core.dtype import dtypes
from tg_core.uop import AxisType, KernelInfo, Ops, UOp
from tg_core.uop.rewrite import substitute


def kernel(*effects: UOp, name: str = "k") -> UOp:
    return UOp(Ops.SINK, dtypes.void, effects, KernelInfo(name))


def as_loops(ast: UOp) -> UOp:
    """Every SPECIAL id as a LOOP range over its size, enclosing every effect: the launch as a loop nest."""
    specials = sorted((u for u in ast.toposort() if u.op is Ops.SPECIAL), key=lambda u: u.arg)
    rngs = {s: UOp.range(s.src[0], 100 + i) for i, s in enumerate(specials)}
    ast = substitute(ast, rngs)
    loops = tuple(rngs.values())
    effects = [e.replace(src=(e.src[0], *loops, *e.src[1:])) if e.op is Ops.END else
               UOp(Ops.END, dtypes.void, (e, *loops)) if loops else e for e in ast.src]
    return ast.replace(src=tuple(effects))


def saxpy(n) -> UOp:
    out, a = UOp.param(0, dtypes.float32.ptr(4096)), UOp.param(1, dtypes.float32.ptr(4096))
    i = UOp.range(n, 0)
    return kernel(out.index(i).store(a.index(i).load() * 2.0 + 1.0).end(i))


@pytest.mark.parametrize("n, local, groups, gated", [(1000, 256, 4, True), (1024, 256, 4, False), (384, 128, 3, False),
                                                     (40, 40, 1, False), (257, 256, 2, True)])
def test_one_range(n, local, groups, gated):
    ast, launch = add_gpudims(saxpy(n))
    (g, _, _), loc = launch.evaluate({})
    assert loc == (local, 1, 1) and g == groups
    assert any(u.op is Ops.INDEX and len(u.src) == 3 for u in ast.toposort()) == gated
    assert not any(u.op is Ops.RANGE for u in ast.toposort())
    a = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    out = np.full(4096, -7, np.float32)
    run_kernel(as_loops(ast), [out, a])
    np.testing.assert_array_equal(out[:n], a[:n] * 2 + 1)
    assert (out[n:] == -7).all(), "work-items past the end must not store"


def test_symbolic_size():
    n = UOp.variable("n", 1, 4096)
    ast, launch = add_gpudims(saxpy(n))
    for nv in (1, 255, 256, 3000):
        (g, gy, gz), loc = launch.evaluate({"n": nv})
        assert (g * loc[0] >= nv > (g - 1) * loc[0]) and (gy, gz) == (1, 1)


def test_three_parallel_ranges_and_a_reduction():
    """(b, r, c) with a reduction over j: c -> x, r -> workgroup y, b -> workgroup z; the loop stays a loop."""
    B, R, C, J = 3, 5, 300, 4
    a, out = UOp.param(0, dtypes.int32.ptr(B * R * C * J)), UOp.param(1, dtypes.int32.ptr(B * R * C))
    b, r, c = UOp.range(B, 0), UOp.range(R, 1), UOp.range(C, 2)
    j = UOp.range(J, 3, AxisType.REDUCE)
    flat = (b * R + r) * C + c
    ast = kernel(out.index(flat).store(a.index(flat * J + j).load().reduce(Ops.ADD, j)).end(b, r, c))
    assert parallel_ranges(ast) == [b, r, c]
    new, launch = add_gpudims(ast)
    assert launch.evaluate({}) == ((2, R, B), (256, 1, 1))
    src = np.arange(B * R * C * J, dtype=np.int32)
    got = np.zeros(B * R * C, np.int32)
    run_kernel(as_loops(new), [src, got])
    np.testing.assert_array_equal(got, src.reshape(-1, J).sum(1))


def test_only_ranges_shared_by_every_effect():
    """Two stores: one inside (i, k), one inside i only. Only i is parallel; k stays a loop."""
    a, o1, o2 = (UOp.param(p, dtypes.int32.ptr(64)) for p in range(3))
    i, k = UOp.range(8, 0), UOp.range(8, 1)
    ast = kernel(o1.index(i * 8 + k).store(a.index(i * 8 + k).load() + 1).end(i, k),
                 o2.index(i).store(a.index(i).load() * 3).end(i))
    assert parallel_ranges(ast) == [i]
    new, launch = add_gpudims(ast)
    assert launch.evaluate({}) == ((1, 1, 1), (8, 1, 1))
    assert [u for u in new.toposort() if u.op is Ops.RANGE] == [k]
    src = np.arange(64, dtype=np.int32)
    g1, g2 = np.zeros(64, np.int32), np.zeros(64, np.int32)
    run_kernel(as_loops(new), [src, g1, g2])
    np.testing.assert_array_equal(g1, src + 1)
    np.testing.assert_array_equal(g2[:8], src[:8] * 3)


def test_scalar_kernel_runs_once():
    out = UOp.param(0, dtypes.int32.ptr(1))
    ast = kernel(out.index(UOp.const(dtypes.weakint, 0)).store(UOp.const(dtypes.int32, 5)))
    new, launch = add_gpudims(ast)
    assert new is ast and launch.evaluate({}) == ((1, 1, 1), (1, 1, 1))


def test_bad_input():
    with pytest.raises(TypeError, match="SINK"):
        add_gpudims(UOp.const(dtypes.int32, 1))
    with pytest.raises(ValueError, match="positive"):
        add_gpudims(saxpy(10), max_local=0)


def test_whole_tensor_reduction_is_shared_by_a_workgroup():
    """A scalar kernel's big reduction: 256 work-items each reduce a strided part, combine through LDS after a
    barrier, and only work-item 0 stores; elements past N give the identity and their loads are gated."""
    n = 100_003
    a, out = UOp.param(0, dtypes.float32.ptr(n)), UOp.param(1, dtypes.float32.ptr(1))
    r = UOp.range(n, 0, AxisType.REDUCE)
    zero = UOp.const(dtypes.weakint, 0)
    ast = kernel(out.index(zero).store(a.index(r).load().reduce(Ops.MAX, r)))
    new, launch = add_gpudims(ast)
    assert launch.evaluate({}) == ((1, 1, 1), (256, 1, 1))
    nodes = new.toposort()
    lds = [u for u in nodes if u.op is Ops.DEFINE_LOCAL]
    assert len(lds) == 1 and lds[0].dtype.size == 256
    assert sum(u.op is Ops.BARRIER for u in nodes) == 1
    reds = sorted((u for u in nodes if u.op is Ops.REDUCE), key=lambda u: u.src[1].src[0].arg)
    assert [u.src[1].src[0].arg for u in reds] == [256, (n + 255) // 256]  # the combine, the strided partials
    assert all(len(u.src[0].src) == 3 for u in nodes if u.op is Ops.STORE and u.src[0].src[0] is out)  # gated
    loads = [u for u in nodes if u.op is Ops.INDEX and u.src[0] is a]
    assert loads and all(len(u.src) == 3 for u in loads)


def test_small_reductions_stay_on_one_work_item():
    a, out = UOp.param(0, dtypes.float32.ptr(100)), UOp.param(1, dtypes.float32.ptr(1))
    r = UOp.range(100, 0, AxisType.REDUCE)
    ast = kernel(out.index(UOp.const(dtypes.weakint, 0)).store(a.index(r).load().reduce(Ops.ADD, r)))
    new, launch = add_gpudims(ast)
    assert new is ast and launch.local_size == (1, 1, 1)


def test_reduction_over_two_ranges_splits_the_larger():
    a, out = UOp.param(0, dtypes.int32.ptr(40 * 100)), UOp.param(1, dtypes.int32.ptr(1))
    r0, r1 = UOp.range(40, 0, AxisType.REDUCE), UOp.range(100, 1, AxisType.REDUCE)
    ast = kernel(out.index(UOp.const(dtypes.weakint, 0)).store(a.index(r0 * 100 + r1).load().reduce(Ops.ADD, r0, r1)))
    new, launch = add_gpudims(ast)
    assert launch.local_size == (100, 1, 1)  # the 100-range is shared by 100 work-items; the 40-range stays a loop
    partial = next(u for u in new.toposort() if u.op is Ops.REDUCE and r0 in u.src[1:])
    assert [int(r.src[0].arg) for r in partial.src[1:]] == [1, 40]


def test_reductions_of_long_rows_are_shared_by_a_workgroup_per_row():
    """out[r, c] = x[r, c] - max_j x[r, j]: the max does not depend on c, so each row gets a workgroup that shares
    it, and c becomes a strided loop in each work-item instead of 3001 work-items each recomputing the max."""
    R, C = 4, 3001
    x, out = UOp.param(0, dtypes.float32.ptr(R * C)), UOp.param(1, dtypes.float32.ptr(R * C))
    r, c, j = UOp.range(R, 0), UOp.range(C, 1), UOp.range(C, 2, AxisType.REDUCE)
    m = x.index(r * C + j).load().reduce(Ops.MAX, j)
    ast = kernel(out.index(r * C + c).store(x.index(r * C + c).load() - m).end(r, c))
    new, launch = add_gpudims(ast)
    assert launch.evaluate({}) == ((R, 1, 1), (256, 1, 1))
    nodes = new.toposort()
    assert sum(u.op is Ops.BARRIER for u in nodes) == 1
    loops = [u for u in nodes if u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP]
    assert len(loops) == 1 and loops[0].src[0].arg == (C + 255) // 256
    end = next(u for u in new.src if u.op is Ops.END)
    assert end.src[1:] == (loops[0],) and len(end.src[0].src[0].src) == 3  # the store is gated: 256 does not divide C
    assert {u.arg for u in nodes if u.op is Ops.SPECIAL} == {"gidx0", "lidx0"}


def test_reductions_that_depend_on_the_innermost_range_keep_the_usual_mapping():
    a, out = UOp.param(0, dtypes.float32.ptr(64 * 2048)), UOp.param(1, dtypes.float32.ptr(64))
    i, j = UOp.range(64, 0), UOp.range(2048, 1, AxisType.REDUCE)
    ast = kernel(out.index(i).store(a.index(i * 2048 + j).load().reduce(Ops.ADD, j)).end(i))
    new, launch = add_gpudims(ast)
    assert launch.local_size == (64, 1, 1) and not any(u.op is Ops.BARRIER for u in new.toposort())
