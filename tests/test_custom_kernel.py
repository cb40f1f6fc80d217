"""Tensor.custom_kernel (tensor/custom.py) against numpy: elementwise and reduction kernels on CPU and PYTHON,
in a TinyJit, over a symbolic size, written in place; bad kernels are clear errors. The tg_kernels hook
(tg_core/kernels.py): a test plugin's quant_linear (itself a custom kernel) used by the LLM model, and the
model's own code when the plugin's `supports` says no."""
from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tg_core import Tensor, Variable
from tg_core.device import Device
from tg_core.dtype import AddrSpace, dtypes
from tg_core.engine.jit import TinyJit
from tg_core.kernels import kernel_for
from tg_core.llm.model import LlamaConfig, Transformer
from tg_core.plugins.manager import PluginRegistry
from tg_core.uop.ops import AxisType, Ops
from tg_core.uop.uop import UOp

DEVICES = ["CPU", "PYTHON", "AMD"]  # AMD: the mock GPU (tg-mockgpu); LOOP ranges become workgroups there


def axpb(n, scale: float = 2.0, shift: float = 1.0):
    """A kernel fxn: out[i] = x[i] * scale + shift for i < n (n an int or a bound variable)."""
    def fxn(out: UOp, x: UOp) -> UOp:
        r = UOp.range(n, 0, AxisType.LOOP)
        return out.index(r).store(x.index(r).load() * scale + shift).end(r).sink()
    return fxn


def row_sums(rows: int, cols: int):
    """out[i] = sum_j x[i, j], with a REDUCE range as the scheduler's reductions are written."""
    def fxn(out: UOp, x: UOp) -> UOp:
        i, j = UOp.range(rows, 0, AxisType.LOOP), UOp.range(cols, 1, AxisType.REDUCE)
        total = UOp(Ops.REDUCE, x.dtype.base, (x.index(i * cols + j).load(), j), Ops.ADD)
        return out.index(i).store(total).end(i).sink()
    return fxn


@pytest.mark.parametrize("device", DEVICES)
def test_elementwise_matches_numpy(device):
    x = np.random.default_rng(0).standard_normal(37).astype(np.float32)
    a, out = Tensor(x, device=device), Tensor.zeros(37, device=device).contiguous()
    got = Tensor.custom_kernel(out, a, fxn=axpb(37, 3.0, -0.5))
    assert got[0] is out
    np.testing.assert_allclose(out.numpy(), x * 3.0 - 0.5, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_reduction_matches_numpy(device):
    x = np.random.default_rng(1).standard_normal((5, 24)).astype(np.float32)
    out = Tensor.zeros(5, device=device).contiguous()
    Tensor.custom_kernel(out, Tensor(x, device=device), fxn=row_sums(5, 24))
    np.testing.assert_allclose(out.numpy(), x.sum(1), rtol=1e-5, atol=1e-5)


def abs_max_in_register(rows: int, cols: int):
    """out[i] = max_j |x[i, j]| through a hand-made register accumulator, the form codegen/reduce.py gives a
    REDUCE: DEFINE_REG, an init store, an update inside the reduce loop, a load after its END (ordered by AFTER)."""
    def fxn(out: UOp, x: UOp) -> UOp:
        i, j = UOp.range(rows, 0, AxisType.LOOP), UOp.range(cols, 1, AxisType.REDUCE)
        zero = UOp.const(dtypes.weakint, 0)
        reg = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1, AddrSpace.REG), (), 0)
        init = reg.after(i).index(zero).store(UOp.const(dtypes.float32, 0.0))
        acc = reg.after(init, j).index(zero)
        v = x.index(i * cols + j).load()
        mag = (v < 0).where(-v, v)
        update = acc.store(UOp(Ops.MAX, dtypes.float32, (acc.load(), mag))).end(j)
        return out.index(i).store(reg.after(update).index(zero).load()).end(i).sink()
    return fxn


@pytest.mark.parametrize("device", DEVICES)
def test_register_accumulator_matches_numpy(device):
    x = np.random.default_rng(4).standard_normal((6, 19)).astype(np.float32)
    out = Tensor.zeros(6, device=device).contiguous()
    Tensor.custom_kernel(out, Tensor(x, device=device), fxn=abs_max_in_register(6, 19))
    np.testing.assert_array_equal(out.numpy(), np.abs(x).max(1))  # max and negation are exact


@pytest.mark.parametrize("device", DEVICES)
def test_int_kernel_with_gated_load_exact(device):
    # a gated load (valid i >= 1): out[i] = x[i-1] for i >= 1, else 0; integer, so exact
    x = np.arange(10, dtype=np.int32) * 7

    def shift(out: UOp, xs: UOp) -> UOp:
        r = UOp.range(10, 0, AxisType.LOOP)
        ok = r >= 1
        prev = xs.index(r - 1, ok).load()
        return out.index(r).store(ok.where(prev, UOp.const(dtypes.int32, 0))).end(r).sink()
    out = Tensor.zeros(10, dtype="int32", device=device).contiguous()
    Tensor.custom_kernel(out, Tensor(x, device=device), fxn=shift)
    np.testing.assert_array_equal(out.numpy(), np.concatenate([[0], x[:-1]]))


@pytest.mark.parametrize("device", DEVICES)
def test_in_a_tinyjit_with_three_replays(device):
    @TinyJit
    def step(a: Tensor, out: Tensor) -> Tensor:
        Tensor.custom_kernel(out, a, fxn=axpb(16))
        return out
    out = Tensor.zeros(16, device=device).contiguous().realize()
    rng = np.random.default_rng(2)
    for _ in range(5):  # call 0 eager, call 1 captures, 2..4 replay
        x = rng.standard_normal(16).astype(np.float32)
        step(Tensor(x, device=device), out)
        np.testing.assert_allclose(out.numpy(), x * 2 + 1, rtol=1e-6, atol=1e-6)
    assert len(step.jit_cache) >= 1


def test_symbolic_size_in_a_tinyjit():
    @TinyJit
    def step(a: Tensor, out: Tensor, n: UOp) -> Tensor:
        Tensor.custom_kernel(out, a, fxn=axpb(n, 1.0, 0.5))
        return out
    x = np.arange(16, dtype=np.float32)
    for n in (2, 5, 7, 11, 16):  # eager, capture, then replays at new values of n
        out = Tensor.zeros(16).contiguous().realize()
        step(Tensor(x), out, Variable("n", 1, 16).bind(n))
        np.testing.assert_allclose(out.numpy(), np.where(np.arange(16) < n, x + 0.5, 0))


@pytest.mark.parametrize("device", DEVICES)
def test_symbolic_size_one_kernel_for_every_value(device):
    x = np.arange(16, dtype=np.float32)
    a = Tensor(x, device=device)
    for n in (3, 9, 16):
        out = Tensor.full((16,), -1.0, device=device).contiguous()
        Tensor.custom_kernel(out, a, fxn=axpb(Variable("n", 1, 16).bind(n)))
        want = np.full(16, -1.0, np.float32)
        want[:n] = x[:n] * 2 + 1
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


def test_written_in_place_other_views_and_old_readers():
    base = Tensor.zeros(4, 4).contiguous().realize()
    view = base.reshape(16)               # a view of base's storage: the kernel writes through it
    before = base + 1                     # a lazy value of the old contents
    other = base.permute(1, 0)            # another view sees the result
    Tensor.custom_kernel(view, Tensor(np.arange(16, dtype=np.float32)), fxn=axpb(16))
    want = np.arange(16, dtype=np.float32).reshape(4, 4) * 2 + 1
    np.testing.assert_allclose(base.numpy(), want)
    np.testing.assert_allclose(other.numpy(), want.T)
    np.testing.assert_allclose(before.numpy(), np.ones((4, 4), np.float32))


def test_lazy_output_gets_storage_first():
    out = Tensor.zeros(8) + 5  # a value, not storage: realized into storage of its own, then written
    Tensor.custom_kernel(out, Tensor(np.arange(8, dtype=np.float32)), fxn=axpb(8, 1.0, 0.0))
    np.testing.assert_allclose(out.numpy(), np.arange(8, dtype=np.float32))


def test_bad_kernels_are_clear_errors():
    out, a = Tensor.zeros(4).contiguous(), Tensor.ones(4)
    r = UOp.range(4, 0, AxisType.LOOP)
    with pytest.raises(TypeError, match="must return a kernel AST: a SINK"):
        Tensor.custom_kernel(out, a, fxn=lambda o, x: o.index(r).store(x.index(r).load()).end(r))
    with pytest.raises(TypeError, match="passes fxn 2 buffer params"):
        Tensor.custom_kernel(out, a, fxn=lambda o: o.index(r).store(UOp.const(dtypes.float32, 1)).end(r).sink())

    def third(o: UOp, x: UOp) -> UOp:
        p2 = UOp.param(2, dtypes.float32.ptr(4))
        return o.index(r).store(p2.index(r).load()).end(r).sink()
    with pytest.raises(ValueError, match=r"uses buffer PARAM 2, but it was given 2 buffers"):
        Tensor.custom_kernel(out, a, fxn=third)
    with pytest.raises(ValueError, match="stores nothing"):
        Tensor.custom_kernel(out, a, fxn=lambda o, x: UOp(Ops.SINK, dtypes.void, ()))
    with pytest.raises(TypeError, match="must be a function"):
        Tensor.custom_kernel(out, a, fxn=3)
    np.testing.assert_array_equal(out.numpy(), np.zeros(4, np.float32))  # nothing ran


# ---- the tg_kernels hook, with a test plugin --------------------------------------------------------------

PLUGIN = '''
"""A test plugin offering quant_linear (x @ w.T as a custom kernel) on every device."""
from tg_core.plugin_api import AxisType, Ops, Tensor, UOp, dtypes, hookimpl

CALLS = []
DECODES = []
SUPPORTED = [True]


def matmul_kernel(M, N, K):
    def fxn(out, x, w):
        m, n, k = UOp.range(M, 0, AxisType.LOOP), UOp.range(N, 1, AxisType.LOOP), UOp.range(K, 2, AxisType.REDUCE)
        prod = x.index(m * K + k).load().cast(dtypes.float32) * w.index(n * K + k).load().cast(dtypes.float32)
        return out.index(m * N + n).store(UOp(Ops.REDUCE, dtypes.float32, (prod, k), Ops.ADD)).end(m, n).sink()
    return fxn


class QuantLinear:
    name = "quant_linear"

    def supports(self, x, w, source):
        return SUPPORTED[0] and x.dtype == dtypes.float32 and len(w.shape) == 2 and x.shape[-1] == w.shape[1]

    def build(self, x, w, source):
        CALLS.append((tuple(x.shape), tuple(w.shape)))
        K, N = w.shape[1], w.shape[0]
        M = x.numel() // K
        out = Tensor.zeros(M, N, device=x.device).contiguous()
        Tensor.custom_kernel(out, x.reshape(M, K).contiguous(), w.contiguous(), fxn=matmul_kernel(M, N, K))
        return out.reshape(*x.shape[:-1], N)


class FlashDecode:
    name = "flash_attention_decode"

    def supports(self, q, keys, values, scale):
        return SUPPORTED[0] and q.shape[-2] == 1

    def build(self, q, keys, values, scale):
        DECODES.append(tuple(q.shape))
        s = (q * keys.unsqueeze(2)).sum(-1) * scale            # (B, Hk, G, S): broadcast, not a matmul
        e = (s - s.max(-1, keepdim=True)).exp()
        return ((e.unsqueeze(-1) * values.unsqueeze(2)).sum(-2) / e.sum(-1).unsqueeze(-1)).unsqueeze(-2).contiguous()


@hookimpl
def tg_kernels(device):
    return [QuantLinear(), FlashDecode()]
'''


@pytest.fixture
def kernel_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A plugin distribution written straight to disk (a package, its manifest and its dist-info), found
    besides the installed plugins; the registry is reset around the test."""
    pkg = tmp_path / "tg_test_kernels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "manifest.py").write_text('API = ">=1.0"\nEXTENDS = ["*"]\nHOOKS = "tg_test_kernels.hooks"\n')
    (pkg / "hooks.py").write_text(textwrap.dedent(PLUGIN))
    info = tmp_path / "tg_test_kernels-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tg-test-kernels\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[tg.plugins]\nkernels = tg_test_kernels.manifest\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def install():
        """Use a registry that finds the test plugin too; returns its hooks module."""
        Device.reset(PluginRegistry.create(path=[str(tmp_path), *sys.path]))
        return importlib.import_module("tg_test_kernels.hooks")
    yield install
    Device.reset()
    for m in [m for m in sys.modules if m.startswith("tg_test_kernels")]:
        del sys.modules[m]


def tiny_model(seed: int = 0) -> tuple[Transformer, LlamaConfig]:
    cfg = LlamaConfig("llama", dim=32, n_layers=1, n_heads=4, n_kv_heads=2, head_dim=8, ffn_dim=48, vocab=40,
                      norm_eps=1e-5, rope_base=10000.0, rope_dim=8, max_context=16, context_length=16)
    rng = np.random.default_rng(seed)
    shapes = {"token_embd.weight": (40, 32), "output_norm.weight": (32,), "blk.0.attn_norm.weight": (32,),
              "blk.0.attn_q.weight": (32, 32), "blk.0.attn_k.weight": (16, 32), "blk.0.attn_v.weight": (16, 32),
              "blk.0.attn_output.weight": (32, 32), "blk.0.ffn_norm.weight": (32,), "blk.0.ffn_gate.weight": (48, 32),
              "blk.0.ffn_up.weight": (48, 32), "blk.0.ffn_down.weight": (32, 48)}
    w = {k: Tensor((rng.standard_normal(s) * 0.3).astype(np.float32)) for k, s in shapes.items()}
    return Transformer(cfg, w), cfg


def run_model(model: Transformer) -> list[np.ndarray]:
    out = [model(Tensor([[1, 5, 7]], dtype="int32"), 0).numpy()]
    out.append(model(Tensor([[9]], dtype="int32"), 3).numpy())
    return out


def test_no_plugin_offers_kernels_by_default():
    assert kernel_for("quant_linear", "CPU") is None and kernel_for("flash_attention_decode", None) is None
    with pytest.raises(TypeError, match="kernel name"):
        kernel_for(3, "CPU")  # type: ignore[arg-type]


def test_model_uses_the_plugins_quant_linear(kernel_plugin):
    want = run_model(tiny_model()[0])  # no plugin offers kernels: the model's own Tensor code
    plugin = kernel_plugin()
    offered = kernel_for("quant_linear", "CPU")
    assert offered is not None and offered.name == "quant_linear"
    plugin.SUPPORTED[0] = False
    fallback = run_model(tiny_model()[0])
    # offered, but `supports` said no: the model's own matmuls and attention, bit for bit
    assert plugin.CALLS == [] and plugin.DECODES == []
    for f, w in zip(fallback, want):
        np.testing.assert_array_equal(f, w)
    plugin.SUPPORTED[0] = True
    got = run_model(tiny_model()[0])
    # 7 weight matmuls per layer (q, k, v, output, gate, up, down) and the head, for each of the two calls
    assert len(plugin.CALLS) == 2 * 8
    assert plugin.CALLS[0] == ((1, 3, 32), (32, 32)) and plugin.CALLS[-1] == ((1, 32), (40, 32))
    assert plugin.DECODES == [(1, 2, 2, 1, 8)]  # the one-token call only (the prompt of 3 is not a decode)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
