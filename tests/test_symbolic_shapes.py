"""Symbolic shapes (issue 15 item 3): a bound variable in shrink, slicing, pad, reshape, empty/zeros and arange,
checked against numpy for several values; one compiled kernel per shape class, counted through the device's
runner builds; the KV-cache pattern of a decode step eagerly and under TinyJit; the errors of bad input."""
from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

import tg_core
from tg_core.device import Device
from tg_core.engine.jit import JitError, TinyJit
from tg_core.schedule import cache
from tg_core.tensor import Tensor
from tg_core.uop.uop import UOp

_NO_CPU = pytest.mark.skipif(importlib.util.find_spec("tg_cpu_x86") is None, reason="tg-cpu-x86 is not installed")
_NO_LLVM = pytest.mark.skipif(importlib.util.find_spec("llvmlite") is None, reason="llvmlite is not installed")
_NO_AMD = pytest.mark.skipif(importlib.util.find_spec("tg_amd") is None, reason="tg-amd is not installed")
DEVICES = ["PYTHON", pytest.param("CPU:X86", marks=_NO_CPU), pytest.param("CPU:LLVM", marks=[_NO_CPU, _NO_LLVM])]
# the decode step also on a command-queue device: AMD (the mock GPU when there is no /dev/kfd), whose launch dims
# are expressions over the variables computed by its host program
KV_DEVICES = [*DEVICES, pytest.param("AMD", marks=_NO_AMD)]
RNG = np.random.default_rng(15)
_names = itertools.count()


@pytest.fixture(params=DEVICES)
def dev(request) -> str:
    return request.param


def var(lo: int, hi: int) -> UOp:
    """A variable of a name no other test uses: its kernels are new ASTs, so their compiles are counted here."""
    return UOp.variable(f"v{next(_names)}", lo, hi)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@contextmanager
def counting_builds(device: str) -> Iterator[list[int]]:
    """Counts the kernels `device` builds (codegen + compile: `Compiled.build_runner`, what `get_runner` calls on
    a miss of its runner cache)."""
    d = Device[Device.canonicalize(device)]
    count = [0]
    original = d.build_runner

    def counted(ast: UOp):
        count[0] += 1
        return original(ast)
    d.build_runner = counted  # type: ignore[method-assign]
    try:
        yield count
    finally:
        del d.build_runner


# ---- the ops, against numpy -------------------------------------------------------------------------------

def test_variable_is_exported():
    assert tg_core.Variable("start_pos", 0, 1023).bind(5).src[1].arg == 5


def test_shrink(dev):
    x = rand(3, 10, 4)
    t = Tensor(x, device=dev)
    v = var(0, 6)
    for i in (0, 2, 6):
        b = v.bind(i)
        np.testing.assert_allclose(t.shrink((None, (b, b + 4), None)).numpy(), x[:, i:i + 4])
        np.testing.assert_allclose(t.shrink((None, (0, b + 1), (1, 3))).numpy(), x[:, :i + 1, 1:3])
        np.testing.assert_allclose((t.shrink((None, (b, 10), None)) * 2).numpy(), x[:, i:] * 2)


def test_slicing(dev):
    x = rand(10, 5)
    t = Tensor(x, device=dev)
    v = var(0, 8)
    for i in (0, 3, 8):
        b = v.bind(i)
        np.testing.assert_allclose(t[b:b + 2].numpy(), x[i:i + 2])
        np.testing.assert_allclose(t[:b + 1].numpy(), x[:i + 1])
        np.testing.assert_allclose(t[b].numpy(), x[i])
        np.testing.assert_allclose(t[1:b + 2, 2:].numpy(), x[1:i + 2, 2:])
        np.testing.assert_allclose(t[:, None][:b + 1, :, 1].numpy(), x[:, None][:i + 1, :, 1])
        # a slice of a slice: the symbolic axis is sliced again
        np.testing.assert_allclose(t[:b + 2][1:].numpy(), x[:i + 2][1:])


def test_pad(dev):
    x = rand(2, 6)
    t = Tensor(x, device=dev)
    v = var(0, 5)
    for i in (0, 1, 5):
        b = v.bind(i)
        np.testing.assert_allclose(t.pad(((0, 0), (b, 1))).numpy(), np.pad(x, ((0, 0), (i, 1))))
        np.testing.assert_allclose(t.pad((None, (0, b)), value=2.5).numpy(), np.pad(x, ((0, 0), (0, i)), constant_values=2.5))
        # a symbolic slice padded back to a static size: the shape is concrete again
        padded = t[:, :b + 1].pad((None, (0, 5 - b)))
        assert padded.shape == (2, 6)
        np.testing.assert_allclose(padded.numpy(), np.pad(x[:, :i + 1], ((0, 0), (0, 5 - i))))


def test_reshape(dev):
    x = rand(8, 6)
    t = Tensor(x, device=dev)
    v = var(1, 8)
    for i in (1, 4, 8):
        b = v.bind(i)
        s = t[:b]
        np.testing.assert_allclose(s.reshape(b, 2, 3).numpy(), x[:i].reshape(i, 2, 3))
        np.testing.assert_allclose(s.reshape(-1).numpy(), x[:i].reshape(-1))
        np.testing.assert_allclose(s.reshape(b * 3, 2).numpy(), x[:i].reshape(i * 3, 2))
        np.testing.assert_allclose(s.reshape(-1, 3).sum(1).numpy(), x[:i].reshape(-1, 3).sum(1), rtol=1e-5)
        # a realized symbolic tensor reshaped: its buffer is read through the bound size
        r = (s * 1).realize()
        np.testing.assert_allclose(r.reshape(2, b, 3).numpy(), x[:i].reshape(2, i, 3))


def test_empty_zeros_full(dev):
    v = var(0, 7)
    for i in (0, 3, 7):
        b = v.bind(i)
        np.testing.assert_array_equal(Tensor.zeros(b + 1, 3, device=dev).numpy(), np.zeros((i + 1, 3), np.float32))
        np.testing.assert_array_equal(Tensor.full((2, b), 4, device=dev).numpy(), np.full((2, i), 4))
        np.testing.assert_allclose(Tensor.ones(b + 1, 2, device=dev).sum().numpy(), 2 * (i + 1))
        e = Tensor.empty(b + 1, 2, device=dev)
        assert e.shape[1] == 2
        vals = np.arange((i + 1) * 2, dtype=np.float32).reshape(i + 1, 2)
        e.assign(Tensor(np.pad(vals, ((0, 7 - i), (0, 0))), device=dev)[:b + 1])
        np.testing.assert_array_equal(e.numpy(), vals)


def test_arange(dev):
    v = var(0, 9)
    for i in (0, 4, 9):
        b = v.bind(i)
        np.testing.assert_array_equal(Tensor.arange(b + 1, device=dev).numpy(), np.arange(i + 1))
        np.testing.assert_array_equal(Tensor.arange(b, b + 4, device=dev).numpy(), np.arange(i, i + 4))
        np.testing.assert_array_equal(Tensor.arange(2, b + 2, 3, device=dev).numpy(), np.arange(2, i + 2, 3))
        np.testing.assert_allclose(Tensor.arange(b + 2, dtype="float32", device=dev).numpy(),
                                   np.arange(i + 2, dtype=np.float32))
        assert Tensor.arange(b + 1, device=dev).dtype is tg_core.dtypes.int32


def test_math_over_a_symbolic_axis(dev):
    """What attention over a KV cache does: matmul, softmax, mean, broadcasting with a symbolic axis, and a
    symbolic int as an operand (positions + start_pos, a causal mask offset)."""
    q, k = rand(2, 3, 4), rand(2, 9, 4)
    tq, tk = Tensor(q, device=dev), Tensor(k, device=dev)
    v = var(0, 8)
    for i in (0, 5, 8):
        b = v.bind(i)
        kk = k[:, :i + 1]
        s = q @ kk.transpose(0, 2, 1)
        e = np.exp(s - s.max(-1, keepdims=True))
        ref = (e / e.sum(-1, keepdims=True)) @ kk
        got = (tq @ tk[:, :b + 1].transpose(-1, -2)).softmax(-1) @ tk[:, :b + 1]
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(tk[:, :b + 1].mean(1).numpy(), kk.mean(1), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(tk[:, :b + 1].max(1).numpy(), kk.max(1))
        np.testing.assert_array_equal((Tensor.arange(3, device=dev) + b).numpy(), np.arange(3) + i)
        np.testing.assert_allclose((tk[0, 0] * b).numpy(), k[0, 0] * i, rtol=1e-6)
        mask = Tensor.ones(3, b + 3, device=dev).triu(b + 1)
        np.testing.assert_array_equal(mask.numpy(), np.triu(np.ones((3, i + 3)), i + 1))


# ---- one kernel per shape class ---------------------------------------------------------------------------

def test_one_compile_for_every_value(dev):
    x = rand(4, 12)
    t = Tensor(x, device=dev).realize()
    v = var(0, 10)
    with counting_builds(dev) as builds:
        got = (t[:, :v.bind(0) + 1] * 3).sum(1).numpy()
        np.testing.assert_allclose(got, (x[:, :1] * 3).sum(1), rtol=1e-5)
        first = builds[0]
        assert first >= 1  # a new variable: its kernels are new
        hits = cache.stats["hits"]
        for i in range(1, 11):
            got = (t[:, :v.bind(i) + 1] * 3).sum(1).numpy()
            np.testing.assert_allclose(got, (x[:, :i + 1] * 3).sum(1), rtol=1e-5, atol=1e-6)
        assert builds[0] == first, "a new value of the variable compiled a new kernel"
        assert cache.stats["hits"] >= hits + 10  # and reused the schedule of the first value
    # the control: the same ops with plain ints compile a kernel per value (so the counter does count)
    with counting_builds(dev) as builds:
        for i in (3, 4):
            (t[:, :i + 1] * 3.5).sum(1).numpy()
        assert builds[0] >= 2


# ---- the KV cache of a decode step ------------------------------------------------------------------------

H, MAX, D = 2, 12, 4


def _attend_ref(q: np.ndarray, keys: np.ndarray) -> np.ndarray:
    s = q @ keys.transpose(0, 2, 1) / np.sqrt(D)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ keys


def _decode_step(cache_t: Tensor, new: Tensor, q: Tensor, sp: UOp) -> Tensor:
    cache_t[:, sp:sp + 1].assign(new)
    keys = cache_t[:, :sp + 1]
    return ((q @ keys.transpose(-1, -2)) / np.sqrt(D)).softmax(-1) @ keys


@pytest.mark.parametrize("dev", KV_DEVICES)
def test_kv_cache(dev):
    """Written with cache[:, sp:sp+1].assign(new), read with cache[:, :sp+1]: every start_pos, one set of kernels."""
    kv = Tensor.zeros(H, MAX, D, device=dev).contiguous().realize()
    ref = np.zeros((H, MAX, D), np.float32)
    start_pos = var(0, MAX - 1)
    with counting_builds(dev) as builds:
        for sp in range(MAX):
            new, q = rand(H, 1, D), rand(H, 1, D)
            out = _decode_step(kv, Tensor(new, device=dev), Tensor(q, device=dev), start_pos.bind(sp))
            ref[:, sp:sp + 1] = new
            np.testing.assert_allclose(out.numpy(), _attend_ref(q, ref[:, :sp + 1]), rtol=1e-5, atol=1e-5)
            if sp == 0:
                first = builds[0]
        assert first >= 2 and builds[0] == first
    np.testing.assert_array_equal(kv.numpy(), ref)


@pytest.mark.parametrize("dev", KV_DEVICES)
def test_kv_cache_under_tinyjit(dev):
    """The decode step jitted: a replay passes the new start_pos, and the returned view of the cache has the
    shape of this call's value."""
    kv = Tensor.zeros(H, MAX, D, device=dev).contiguous().realize()
    ref = np.zeros((H, MAX, D), np.float32)
    start_pos = var(0, MAX - 1)

    @TinyJit
    def step(new: Tensor, q: Tensor, sp: UOp) -> tuple[Tensor, Tensor]:
        return _decode_step(kv, new, q, sp), kv[:, :sp + 1] * 1

    with counting_builds(dev) as builds:
        compiled = 0
        for sp in range(MAX):
            new, q = rand(H, 1, D), rand(H, 1, D)
            before = dict(cache.stats)
            out, keys = step(Tensor(new, device=dev), Tensor(q, device=dev), start_pos.bind(sp))
            ref[:, sp:sp + 1] = new
            if sp >= 2:  # replays schedule and compile nothing
                assert cache.stats == before
                assert builds[0] == compiled
            compiled = builds[0]
            np.testing.assert_allclose(out.numpy(), _attend_ref(q, ref[:, :sp + 1]), rtol=1e-5, atol=1e-5)
            assert keys.shape[0] == H and keys.shape[2] == D
            np.testing.assert_array_equal(keys.numpy(), ref[:, :sp + 1])
    assert step.cnt == 2 and any(start_pos.arg[0] in it.var_names for it in step.jit_cache)


def test_kv_cache_on_the_reference_hcq_device():
    """HCQREF (tg_core/hcq/refdev.py): a replay of linked batches patches the new start_pos into them."""
    from tg_core.hcq.testing import hcqref_registry
    Device.reset(hcqref_registry())
    try:
        test_kv_cache_under_tinyjit("HCQREF")
    finally:
        Device.reset()


def test_cat_and_gradients_through_symbolic_views(dev):
    x = rand(8, 3)
    v = var(0, 6)
    for i in (0, 3, 6):
        b = v.bind(i)
        t = Tensor(x, device=dev, requires_grad=True)
        got = t[:b + 1].cat(t[b + 1:b + 2] * 2, dim=0)
        np.testing.assert_allclose(got.numpy(), np.concatenate([x[:i + 1], x[i + 1:i + 2] * 2]))
        (t[:b + 1] * 3).sum().backward()
        ref = np.zeros_like(x)
        ref[:i + 1] = 3
        np.testing.assert_allclose(t.grad.numpy(), ref)


def test_tinyjit_symbolic_input_view():
    """A symbolic view passed in: a replay with another value matches it (its variables, not their values)."""
    x = rand(6, 3)
    t = Tensor(x, device="PYTHON").realize()
    v = var(0, 5)
    f = TinyJit(lambda a: a * 2)
    for i in (1, 2, 4, 5):
        np.testing.assert_allclose(f(t[:v.bind(i) + 1]).numpy(), x[:i + 1] * 2)
    w = var(0, 5)
    with pytest.raises(JitError, match="captured as"):
        f(t[:w.bind(1) + 1])


# ---- bad input --------------------------------------------------------------------------------------------

def test_bind_checks_the_value():
    v = UOp.variable("start_pos", 0, 1023)
    assert v.bind(7).unbind() == (v, 7)
    with pytest.raises(TypeError, match="only a bound variable"):
        v.unbind()
    with pytest.raises(ValueError, match=r"start_pos=1024: outside its range \[0, 1023\]"):
        v.bind(1024)
    with pytest.raises(ValueError, match=r"start_pos=-1"):
        v.bind(-1)
    with pytest.raises(TypeError, match="takes an int"):
        v.bind(2.5)
    with pytest.raises(TypeError, match="takes an int"):
        v.bind(True)


def test_bounds_must_hold_for_every_value():
    t = Tensor(rand(8, 3), device="PYTHON")
    v = var(0, 7)
    b = v.bind(2)
    with pytest.raises(IndexError, match="not inside the axis for every value"):
        t[:b + 2]  # b + 2 reaches 9 > 8 for b = 7, though 4 fits now
    with pytest.raises(IndexError, match="can be out of bounds"):
        t[b + 1]
    with pytest.raises(IndexError, match="step 1"):
        t[b:8:2]
    with pytest.raises(ValueError, match="0 <= start <= end <= size"):
        t.shrink(((b, 3), None))
    with pytest.raises(ValueError, match=">= 0 for every value"):
        t.pad(((0, b - 3), None))
    with pytest.raises(ValueError, match="symbolic amounts pad in mode 'constant' only"):
        t.pad(((0, b), None), mode="reflect")
    with pytest.raises(ValueError, match="cannot reshape"):
        t[:b + 1].reshape(2, -1)  # 3*(b+1) elements are not pairs for every b
    with pytest.raises(TypeError, match="contains CMPLT"):
        t.shrink(((0, (b < 3).where(b, 3)), None))


def test_numpy_needs_bound_variables():
    v = var(1, 4)
    e = Tensor.zeros(v, 2, device="PYTHON")  # an unbound variable: a shape without a value
    with pytest.raises(ValueError, match=rf"unbound variable {v.arg[0]} \(range \[1, 4\]\).*bind it"):
        e.numpy()
    with pytest.raises(ValueError, match=rf"unbound variable {v.arg[0]} \(range \[1, 4\]\)"):
        (e + 1).realize()


def test_mismatched_variables():
    t = Tensor(rand(8, 3), device="PYTHON")
    a, c = var(0, 6), var(0, 6)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        t[:a.bind(2) + 1] + t[:c.bind(2) + 1]  # equal now, but not for every value
    with pytest.raises(ValueError, match="bound to both 2 and 3"):
        (t[:a.bind(2)].sum() + t[:a.bind(3)].sum()).numpy()
    with pytest.raises(JitError, match="binds variable"):
        f = TinyJit(lambda x, n: x[:n + 1] * 1)
        for i in range(3):
            f(t, a.bind(i))
        f(t, c.bind(1))


def test_a_variable_of_a_strong_int_dtype(dev):
    """An int32 variable in a shape is computed exactly (cast at the leaf): (v + 2) - v is the dim 2."""
    x = rand(8, 3)
    v = UOp.variable(f"v{next(_names)}", 0, 6, tg_core.dtypes.int32)
    for i in (0, 4, 6):
        b = v.bind(i)
        s = Tensor(x, device=dev)[b:b + 2]
        assert s.shape == (2, 3)
        np.testing.assert_allclose(s.sum(0).numpy(), x[i:i + 2].sum(0), rtol=1e-6)


def test_shapes_print_on_one_line():
    b = var(0, 6).bind(2)
    t = Tensor(rand(8, 3), device="PYTHON")[:b + 1]
    assert repr(t).count("\n") == 0 and f"{b.src[0].arg[0]}=2+1" in repr(t)
    with pytest.raises(ValueError, match=r"shapes \(<sint .*=2\+1\)>, 3\) and"):
        t + Tensor(rand(4, 3), device="PYTHON")


@pytest.mark.parametrize("dev", KV_DEVICES)
def test_prefill_with_two_variables(dev):
    """A chunked prefill under TinyJit: the chunk length T and start_pos are both variables; the chunk is the
    first T rows of a padded input, written at start_pos, attending over the cache with a causal mask of shape
    (T, start_pos+T) (lower-right aligned)."""
    sp_v, t_v = var(0, 16), var(1, 4)
    maxc, d = 24, 4
    kv = Tensor.zeros(maxc, d, device=dev).contiguous().realize()
    ref = np.zeros((maxc, d), np.float32)
    xs = Tensor(np.zeros((4, d), np.float32), device=dev).contiguous().realize()

    @TinyJit
    def prefill(x: Tensor, sp: UOp, t: UOp) -> Tensor:
        xt = x[:t]
        kv[sp:sp + t].assign(xt)
        keys = kv[:sp + t]
        mask = Tensor.ones(t, sp + t, dtype="bool", device=dev).tril(sp)
        return ((xt @ keys.T) + mask.logical_not().where(-1e9, 0.0)).softmax(-1) @ keys

    pos = 0
    for n in (3, 1, 4, 2, 3, 1):
        x = rand(4, d)
        xs.assign(Tensor(x, device=dev))
        got = prefill(xs, sp_v.bind(pos), t_v.bind(n)).numpy()
        ref[pos:pos + n] = x[:n]
        keys = ref[:pos + n]
        s = np.where(np.tril(np.ones((n, pos + n), bool), pos), x[:n] @ keys.T, -1e9)
        e = np.exp(s - s.max(-1, keepdims=True))
        np.testing.assert_allclose(got, (e / e.sum(-1, keepdims=True)) @ keys, rtol=1e-5, atol=1e-5)
        pos += n
    assert prefill.cnt == 2


def test_symbolic_reshapes_do_not_divide_by_the_variable():
    """matmul's reshapes of a symbolic view (inserting axes of 1) keep its indices: re-splitting a flat index would
    divide by the variable for every element (the decode step ran 30-50x slower)."""
    from tg_core.schedule.cache import schedule
    from tg_core.uop.ops import Ops
    kv = Tensor(rand(2, 16, 4), device="PYTHON").realize()
    b = var(0, 15).bind(6)
    keys = kv[:, :b + 1]
    out = (Tensor(rand(2, 1, 4), device="PYTHON") @ keys.transpose(-1, -2)).softmax(-1) @ keys
    items, _, var_vals = schedule([out.uop])
    assert list(var_vals.values()) == [6]
    for ast, _ in items:
        for u in ast.toposort():
            if u.op in (Ops.IDIV, Ops.MOD):
                assert not any(n.op is Ops.DEFINE_VAR for n in u.src[1].toposort()), u.render()
    np.testing.assert_allclose(out.numpy().shape, (2, 1, 4))


def test_model_ops_over_a_symbolic_sequence(dev):
    """What a model does with a chunk of T tokens at start_pos: an embedding of tokens[:, :T], the reshape to
    heads and back, and the rotary table sliced at [start_pos, start_pos+T) (both bounds symbolic)."""
    from tg_core.nn import Embedding
    t_v, sp_v = var(1, 8), var(0, 20)
    emb = Embedding(50, 12)
    emb.weight = emb.weight.to(dev).realize()
    w = emb.weight.numpy()
    toks = RNG.integers(0, 50, (2, 8)).astype(np.int32)
    freqs = rand(32, 6)
    for n, sp in ((3, 0), (8, 5), (1, 20)):
        t, s = t_v.bind(n), sp_v.bind(sp)
        x = emb(Tensor(toks, device=dev)[:, :t])
        ref = w[toks[:, :n]]
        np.testing.assert_allclose(x.numpy(), ref, rtol=1e-6)
        h = x.reshape(2, t, 2, 6).transpose(1, 2)
        ref_h = ref.reshape(2, n, 2, 6).transpose(0, 2, 1, 3)
        np.testing.assert_allclose((h * Tensor(freqs, device=dev)[s:s + t]).numpy(), ref_h * freqs[sp:sp + n], rtol=1e-5)
        np.testing.assert_allclose(h.transpose(1, 2).reshape(2, t, 12).numpy(), ref, rtol=1e-6)


def test_ops_that_need_an_int_say_so():
    b = var(0, 6).bind(2)
    t = Tensor(rand(8, 3), device="PYTHON")
    with pytest.raises(TypeError, match=r"split: the split size must be an int, got the UOp .*symbolic int"):
        t.split(b)
    with pytest.raises(TypeError, match="UOp"):
        t[:b + 1].split(2)  # splitting a symbolic axis needs its size as an int
    with pytest.raises(TypeError, match="eye: n must be an int, got the UOp"):
        Tensor.eye(b)


def test_scaled_dot_product_attention_over_a_symbolic_cache(dev):
    """PyTorch's attention with keys and values cache[..., :start_pos+1, :], also with fewer KV heads (GQA)."""
    q, k = rand(2, 2, 1, 4), rand(2, 2, 16, 4)
    v = var(0, 15)

    def ref(keys: np.ndarray) -> np.ndarray:
        keys = np.repeat(keys, 2 // keys.shape[1], axis=1)
        s = q @ keys.transpose(0, 1, 3, 2) / 2
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ keys
    for i in (0, 7, 15):
        b = v.bind(i)
        kk = Tensor(k, device=dev)[:, :, :b + 1]
        got = Tensor(q, device=dev).scaled_dot_product_attention(kk, kk)
        np.testing.assert_allclose(got.numpy(), ref(k[:, :, :i + 1]), rtol=1e-5, atol=1e-5)
        g = Tensor(k[:, :1], device=dev)[:, :, :b + 1]
        got = Tensor(q, device=dev).scaled_dot_product_attention(g, g, enable_gqa=True)
        np.testing.assert_allclose(got.numpy(), ref(k[:, :1, :i + 1]), rtol=1e-5, atol=1e-5)
