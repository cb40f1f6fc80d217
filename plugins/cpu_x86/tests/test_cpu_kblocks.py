"""K blocks of a packed matmul (tg_core/codegen/blocking.py) on both CPU renderers, and the host cache sizes they
are sized from (tg_cpu_x86/caches.py). A small L2 is pretended so that small products are blocked; the results
are checked against numpy at sizes the blocks, the tile rows and the panels do not divide."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.device import Device
from tg_core.plugin_api import CPUTarget, Ops, UOp, cpu_opts, dtypes
from tg_core.testing.kernels import kernel
from tg_core.uop import AxisType
from tg_cpu_x86 import caches
from tg_cpu_x86.caches import Caches, parse_size, read_sysfs

from test_x86_kernels import f32, run_tensor
from x86_harness import renderer_for, runnable

# 16 KB of L2: a panel may hold 8 KB, i.e. 64 rows of 32 columns (AVX-512) or 128 of 16 (AVX2)
SMALL = Caches(l1=32 * 1024, l2=16 * 1024, source="test")


@pytest.fixture
def small_l2(monkeypatch):
    monkeypatch.setattr(caches, "_HOST", SMALL)
    yield
    for dev in ("CPU:X86", "CPU:LLVM"):
        Device[dev].forget_runners()


def test_sysfs_sizes(tmp_path):
    for n, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
                                             (3, "Unified", "105M")]):
        d = tmp_path / f"index{n}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert read_sysfs(tmp_path) == Caches(48 * 1024, 2 * 1024 * 1024, "sysfs")  # no ways listed: 8 assumed
    (tmp_path / "index0" / "ways_of_associativity").write_text("12\n")
    assert read_sysfs(tmp_path) == Caches(48 * 1024, 2 * 1024 * 1024, "sysfs", l1_ways=12)
    assert read_sysfs(tmp_path / "missing") is None
    assert parse_size("4M") == 4 << 20 and parse_size("512") == 512
    with pytest.raises(ValueError, match="K, M or G"):
        parse_size("4 MiB")


def test_this_host_has_sizes():
    c = caches.host_caches()
    assert 4 * 1024 <= c.l1 <= c.l2 and c.l1_ways >= 1


def test_block_depth_from_l2():
    from tg_core.codegen.lib.heuristic import k_depth
    big = CPUTarget(vector_bytes=64, l2_bytes=2 << 20)
    assert k_depth(big, 1024, 32, 4) == 0  # 128 KB: the whole panel
    assert k_depth(big, 8192, 32, 4) == 2048  # the scratch's 256 KB: four equal blocks
    assert k_depth(CPUTarget(l2_bytes=16 * 1024), 300, 32, 4) == 60  # 64 rows fit: five blocks of 60
    assert k_depth(CPUTarget(l2_bytes=16 * 1024), 128, 32, 4) == 64
    assert k_depth(CPUTarget(l2_bytes=16 * 1024), 130, 32, 4) == 44  # 44, 44 and a last block of 42


def _matmul_cases():
    # (rows, K, columns): K not a multiple of the block (a shorter last block), rows not a multiple of the tile,
    # one row tile only (the output loads then name no loop inside the block loop), many panels
    return [(37, 300, 64), (8, 1000, 32), (24, 130, 96), (16, 129, 160)]


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
@pytest.mark.parametrize("m,k,n", _matmul_cases())
def test_x86_blocked_matmul_matches_numpy(small_l2, isa, m, k, n):
    if not runnable(isa):
        pytest.skip(f"this host cannot run {isa} code")
    a, b, bias = f32(m, k), f32(k, n), f32(n)
    got, kernels = run_tensor(Tensor(a) @ Tensor(b), own_opts=True, isa=isa)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    # the K blocks were taken, and the tile is vector code
    text = kernels[-1].asm_str()
    assert "vfmadd231ps" in text and ("zmm" in text) == (isa == "avx512")
    assert any(o.depth for o in renderer_for(isa)._vector_opts(*_matmul_target(m, k, n, isa)))
    if m % 8 == 0:  # an epilogue (bias, relu) is a pass after the blocks: whole row tiles only
        got, _ = run_tensor((Tensor(a) @ Tensor(b) + Tensor(bias)).relu(), own_opts=True, isa=isa)
        np.testing.assert_allclose(got, np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4 * np.sqrt(k))


def matmul_ast(m: int, k: int, n: int) -> UOp:
    """out[i, j] = sum_r a[i, r] * b[r, j], as the scheduler writes a product."""
    a, b, out = UOp.param(1, dtypes.float32.ptr(m * k)), UOp.param(2, dtypes.float32.ptr(k * n)), \
        UOp.param(0, dtypes.float32.ptr(m * n))
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisType.REDUCE)
    acc = (a.index(i * k + r).load() * b.index(r * n + j).load()).reduce(Ops.ADD, r)
    return kernel(out.index(i * n + j).store(acc).end(i, j), name="matmul")


def _matmul_target(m: int, k: int, n: int, isa: str):
    """The product's AST and the arguments X86Renderer.program gives _vector_opts for it, with the small L2."""
    from tg_cpu_x86.x86.renderer import _TARGETS
    lanes, tile, narrow = _TARGETS[isa][0]
    return (matmul_ast(m, k, n), lanes, dataclasses.replace(tile, l2_bytes=SMALL.l2),
            dataclasses.replace(narrow, l2_bytes=SMALL.l2))


@pytest.mark.parametrize("dev", ["CPU:X86", "CPU:LLVM"])
def test_device_blocked_products_match_numpy(small_l2, dev):
    """Through the device (both cores, the heuristic's own choice): deep products and an MLP layer."""
    Device[dev].forget_runners()
    for m, k, n in [(64, 300, 64), (37, 1000, 96)]:
        a, b, bias = f32(m, k), f32(k, n), f32(n)
        ta, tb, tc = (Tensor(x, device=dev) for x in (a, b, bias))
        np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))
        np.testing.assert_allclose((ta @ tb + tc).relu().numpy(), np.maximum(a @ b + bias, 0), rtol=1e-4,
                                   atol=1e-4 * np.sqrt(k))


def test_llvm_tries_whole_narrow_panels_before_blocks():
    """Past the scratch (4096 x 32 floats: 512 KB) LLVM's order takes whole panels one vector wide, X86's K blocks."""
    ast = matmul_ast(8, 4096, 64)
    assert cpu_opts(ast, CPUTarget(vector_bytes=64, blocks_first=False))[0].amt == 16
    first = cpu_opts(ast, CPUTarget(vector_bytes=64))[0]
    assert first.amt == 32 and first.depth == 2048
