"""The movement, loss, einsum and attention ops of issue 15 (group 2) against numpy: forward values and
gradients (central finite differences of the numpy reference in float64), on the PYTHON reference device
and the default device; sdpa's kernel count; bad arguments."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import tg_core.engine.realize  # noqa: F401  (the module, for its stats: the package exports a function of that name)
from tg_core import Device, Tensor, dtypes

DEVICES = ["PYTHON", Device.DEFAULT]
RNG = np.random.default_rng(2)
STATS = sys.modules["tg_core.engine.realize"].stats


def numgrad(ref, x: np.ndarray, w: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """d/dx of sum(ref(x) * w), by central differences."""
    g = np.zeros_like(x, dtype=np.float64)
    flat, gf = x.astype(np.float64).reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        keep = flat[i]
        flat[i] = keep + h
        up = (ref(flat.reshape(x.shape)) * w).sum()
        flat[i] = keep - h
        down = (ref(flat.reshape(x.shape)) * w).sum()
        flat[i] = keep
        gf[i] = (up - down) / (2 * h)
    return g


def check(ours, ref, x: np.ndarray, device: str, rtol=1e-5, atol=1e-6, grad_tol=1e-4):
    """ours(Tensor) against ref(ndarray), the value and the gradient of sum(out * w)."""
    t = Tensor(x.astype(np.float32), device=device, requires_grad=True)
    out = ours(t)
    expect = ref(x.astype(np.float64))
    np.testing.assert_allclose(out.numpy(), expect, rtol=rtol, atol=atol)
    w = RNG.normal(size=expect.shape)
    (out * Tensor(w.astype(np.float32), device=device)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), numgrad(ref, x, w), rtol=grad_tol, atol=grad_tol)


X34 = RNG.normal(size=(3, 4))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["roll1", "roll-neg", "roll-2d", "roll-flat", "rep-int", "rep-list", "rep-flat",
                                  "diag2d", "diag2d-neg", "diagonal3d", "unfold", "unfold-dim0"])
def test_movement_ops(case, device):
    x3 = RNG.normal(size=(2, 3, 4))
    cases = {
        "roll1": (lambda t: t.roll(1, 1), lambda a: np.roll(a, 1, 1), X34),
        "roll-neg": (lambda t: t.roll(-5, 0), lambda a: np.roll(a, -5, 0), X34),
        "roll-2d": (lambda t: t.roll((2, -1), (1, 0)), lambda a: np.roll(a, (2, -1), (1, 0)), X34),
        "roll-flat": (lambda t: t.roll(3), lambda a: np.roll(a, 3), X34),
        "rep-int": (lambda t: t.repeat_interleave(2, 1), lambda a: np.repeat(a, 2, 1), X34),
        "rep-list": (lambda t: t.repeat_interleave([2, 0, 1], 0), lambda a: np.repeat(a, [2, 0, 1], 0), X34),
        "rep-flat": (lambda t: t.repeat_interleave(2), lambda a: np.repeat(a, 2), X34),
        "diag2d": (lambda t: t.diag(1), lambda a: np.diag(a, 1), X34),
        "diag2d-neg": (lambda t: t.diag(-2), lambda a: np.diag(a, -2), X34),
        "diagonal3d": (lambda t: t.diagonal(1, 2, 0), lambda a: np.diagonal(a, 1, 2, 0), x3),
        "unfold": (lambda t: t.unfold(-1, 2, 1),
                   lambda a: np.lib.stride_tricks.sliding_window_view(a, 2, axis=-1), x3),
        "unfold-dim0": (lambda t: t.unfold(0, 2, 2),
                        lambda a: np.lib.stride_tricks.sliding_window_view(a, 2, axis=0)[::2], X34),
    }
    ours, ref, x = cases[case]
    check(ours, ref, x, device)


@pytest.mark.parametrize("device", DEVICES)
def test_diag_of_a_vector_meshgrid(device):
    v = np.array([1.0, -2.0, 3.0])
    for k in (0, 2, -1):
        check(lambda t, k=k: t.diag(k), lambda a, k=k: np.diag(a, k), v, device)
    assert Tensor(np.zeros(0, np.float32), device=device).diag().shape == (0, 0)
    np.testing.assert_array_equal(Tensor([True, False], device=device).diag().numpy(), np.diag([True, False]))
    a, b, c = np.arange(3), np.arange(4) * 10, np.array([5, 6])
    for indexing in ("ij", "xy"):
        got = Tensor(a, device=device).meshgrid(Tensor(b, device=device), Tensor(c, device=device), indexing=indexing)
        for g, r in zip(got, np.meshgrid(a, b, c, indexing=indexing)):
            np.testing.assert_array_equal(g.numpy(), r)
    assert Tensor(a, device=device).meshgrid()[0].numpy().tolist() == [0, 1, 2]


NP_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", list(NP_MODE))
def test_pad_modes(mode, device):
    x = RNG.normal(size=(2, 3, 4))
    check(lambda t: t.pad((2, 1, 0, 2), mode=mode),
          lambda a: np.pad(a, ((0, 0), (0, 2), (2, 1)), mode=NP_MODE[mode]), x, device)
    check(lambda t: t.pad(((1, 1), None, (3, 0)), mode=mode),
          lambda a: np.pad(a, ((1, 1), (0, 0), (3, 0)), mode=NP_MODE[mode]), x, device)


def test_pad_mode_errors():
    t = Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"pad mode 'reflect': padding \(3, 0\) of axis 1 \(size 3\).*at most 2"):
        t.pad((3, 0), mode="reflect")
    with pytest.raises(ValueError, match=r"pad mode 'circular': padding \(0, 4\).*at most 3"):
        t.pad((0, 4), mode="circular")
    with pytest.raises(ValueError, match=r"pad mode 'wrap' is not one of 'constant', 'reflect'"):
        t.pad((1, 1), mode="wrap")
    with pytest.raises(ValueError, match=r"pad mode 'replicate' takes no value \(got value=1\)"):
        t.pad((1, 1), mode="replicate", value=1)
    with pytest.raises(ValueError, match=r"padding \(-1, 0\) of axis 1 is negative"):
        t.pad((-1, 0), mode="replicate")
    with pytest.raises(ValueError, match=r"padding \(1, 1\) of axis 0 \(size 0\)"):
        Tensor(np.zeros((0, 2), np.float32)).pad(((1, 1), None), mode="replicate")


def _log_softmax(a, axis):
    m = a.max(axis, keepdims=True)
    return a - m - np.log(np.exp(a - m).sum(axis, keepdims=True))


def _nll(x, y, weight, ignore, reduction, ax=1):
    c = x.shape[ax]
    w = np.ones(c) if weight is None else weight
    xm = np.moveaxis(x, ax, -1)
    keep = y != ignore
    ys = np.where(keep, y, 0)
    picked = np.take_along_axis(xm, ys[..., None], -1)[..., 0]
    wt = np.where(keep, w[ys], 0)
    loss = -picked * wt
    return {"none": loss, "sum": loss.sum(), "mean": loss.sum() / wt.sum()}[reduction]


@pytest.mark.parametrize("device", DEVICES)
def test_nll_loss(device):
    x = _log_softmax(RNG.normal(size=(5, 4)), 1)
    y = np.array([0, 3, 1, -100, 3])
    wt = np.array([1.0, 2.0, 0.5, 3.0])
    for weight in (None, wt):
        for reduction in ("mean", "sum", "none"):
            tw = None if weight is None else Tensor(weight.astype(np.float32), device=device)
            check(lambda t, tw=tw, r=reduction: t.nll_loss(Tensor(y, device=device), tw, reduction=r),
                  lambda a, w=weight, r=reduction: _nll(a, y, w, -100, r), x, device)
    x3 = RNG.normal(size=(2, 3, 4))
    y3 = RNG.integers(0, 3, (2, 4))
    check(lambda t: t.nll_loss(Tensor(y3, device=device), ignore_index=1),
          lambda a: _nll(a, y3, None, 1, "mean"), x3, device)
    check(lambda t: t.nll_loss(Tensor(2, device=device)), lambda a: -a[2], np.array([0.1, 0.2, 0.7]), device)


def test_nll_loss_errors():
    x = Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(IndexError, match=r"nll_loss: target 3 is out of bounds for 3 classes \(allowed: 0 to 2, or "
                                         r"ignore_index=-100\)"):
        x.nll_loss(Tensor([0, 3]))
    with pytest.raises(ValueError, match=r"target of shape \(3,\) does not fit input \(2, 3\) \(expected \(2,\)\)"):
        x.nll_loss(Tensor([0, 1, 2]))
    with pytest.raises(TypeError, match=r"targets are class indices and must be ints, got dtypes.float"):
        x.nll_loss(Tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"weight of shape \(2,\) must have one entry per class, \(3,\)"):
        x.nll_loss(Tensor([0, 1]), weight=Tensor([1.0, 2.0]))


@pytest.mark.parametrize("device", DEVICES)
def test_binary_crossentropy_logits_pos_weight(device):
    x = RNG.normal(size=(4, 3)) * 3
    y = (RNG.random((4, 3)) > 0.5).astype(np.float64)
    pw = np.array([0.5, 2.0, 3.0])

    def ref(a, pw=pw):
        log_sig = -np.logaddexp(0, -a)
        return -(pw * y * log_sig + (1 - y) * (log_sig - a))
    ty = Tensor(y.astype(np.float32), device=device)
    check(lambda t: t.binary_crossentropy_logits(ty, "none", pos_weight=Tensor(pw.astype(np.float32), device=device)),
          ref, x, device)
    check(lambda t: t.binary_crossentropy_logits(ty), lambda a: ref(a, 1.0).mean(), x, device)
    # no overflow for large logits
    big = Tensor([[100.0, -100.0]], device=device).binary_crossentropy_logits(Tensor([[0.0, 1.0]], device=device),
                                                                               "none", pos_weight=Tensor([2.0, 2.0], device=device))
    np.testing.assert_allclose(big.numpy(), [[100.0, 200.0]], rtol=1e-6)


EINSUM = [("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("ij->ji", [(2, 3)]), ("ii->i", [(3, 3)]),
          ("ii", [(3, 3)]), ("...j,jk->...k", [(2, 5, 3), (3, 4)]), ("i,j->ij", [(3,), (4,)]),
          ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]), ("bhld,bhsd->bhls", [(1, 2, 3, 4), (1, 2, 5, 4)]),
          ("i,i->", [(4,), (4,)]), ("ij,ij,ij->i", [(2, 3), (2, 3), (2, 3)]), ("iij->j", [(2, 2, 3)]),
          ("a...,...->a...", [(2, 3), (1,)])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("formula, shapes", EINSUM, ids=[f for f, _ in EINSUM])
def test_einsum(formula, shapes, device):
    xs = [RNG.normal(size=s) for s in shapes]
    rest = [Tensor(a.astype(np.float32), device=device) for a in xs[1:]]
    check(lambda t: Tensor.einsum(formula, t, *rest), lambda a: np.einsum(formula, a, *xs[1:]), xs[0], device,
          rtol=1e-5, atol=1e-5)


def test_einsum_takes_a_list_and_rejects_bad_formulas():
    a, b = Tensor(np.ones((2, 3), np.float32)), Tensor(np.ones((3, 4), np.float32))
    assert Tensor.einsum("ij,jk->ik", [a, b]).numpy().tolist() == [[3.0] * 4] * 2
    with pytest.raises(ValueError, match=r"einsum 'ij->ik': the output names each input subscript at most once"):
        Tensor.einsum("ij->ik", a)
    with pytest.raises(ValueError, match=r"einsum 'ij,jk' names 2 operands, got 1"):
        Tensor.einsum("ij,jk", a)
    with pytest.raises(ValueError, match=r"subscripts 'ijk' do not fit an operand of shape \(2, 3\)"):
        Tensor.einsum("ijk", a)
    with pytest.raises(ValueError, match=r"subscript 'j' has sizes 3 and 4"):
        Tensor.einsum("ij,kj->ik", a, b)
    with pytest.raises(ValueError, match=r"subscripts are letters with at most one '...' per operand, got 'i1'"):
        Tensor.einsum("i1", a)


def _sdpa_ref(q, k, v, mask=None, causal=False, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        mask = np.tril(np.ones(s.shape[-2:], bool))
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("device", DEVICES)
def test_scaled_dot_product_attention(device):
    q, k, v = (RNG.normal(size=(1, 2, 3, 4)) for _ in range(3))
    k, v = k[:, :, :3], v[:, :, :3]
    T = lambda a: Tensor(a.astype(np.float32), device=device)  # noqa: E731
    bool_mask = RNG.random((3, 3)) > 0.3
    bool_mask[:, 0] = True
    float_mask = RNG.normal(size=(2, 3, 3))
    for kw, refkw in (({}, {}), ({"is_causal": True}, {"causal": True}), ({"scale": 0.3}, {"scale": 0.3}),
                      ({"attn_mask": T(float_mask)}, {"mask": float_mask}),
                      ({"attn_mask": Tensor(bool_mask, device=device)}, {"mask": bool_mask})):
        check(lambda t, kw=kw: t.scaled_dot_product_attention(T(k), T(v), **kw),
              lambda a, r=refkw: _sdpa_ref(a, k, v, **r), q, device)
        check(lambda t, kw=kw: T(q).scaled_dot_product_attention(t, T(v), **kw),
              lambda a, r=refkw: _sdpa_ref(q, a, v, **r), k, device)
        check(lambda t, kw=kw: T(q).scaled_dot_product_attention(T(k), t, **kw),
              lambda a, r=refkw: _sdpa_ref(q, k, a, **r), v, device)


@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_grouped_query_attention_and_dropout(device):
    q, k, v = RNG.normal(size=(2, 4, 3, 5)), RNG.normal(size=(2, 2, 3, 5)), RNG.normal(size=(2, 2, 3, 5))
    T = lambda a: Tensor(a.astype(np.float32), device=device)  # noqa: E731
    got = T(q).scaled_dot_product_attention(T(k), T(v), enable_gqa=True).numpy()
    np.testing.assert_allclose(got, _sdpa_ref(q, np.repeat(k, 2, 1), np.repeat(v, 2, 1)), rtol=1e-5, atol=1e-6)
    # dropout applies whenever dropout_p > 0 (PyTorch's function does not look at a training flag): with v the
    # identity, the output is the kept attention weights scaled by 1/(1-p)
    Tensor.manual_seed(0)
    qq, eye = T(np.zeros((64, 8))), T(np.eye(64))
    out = qq.scaled_dot_product_attention(T(np.zeros((64, 8))), eye, dropout_p=0.25).numpy()
    kept = out != 0
    assert 0.65 < kept.mean() < 0.85
    np.testing.assert_allclose(out[kept], 1 / 64 / 0.75, rtol=1e-5)


def test_sdpa_forward_is_two_kernels():
    q, k, v = (Tensor(RNG.normal(size=(2, 4, 16, 8)).astype(np.float32)).realize() for _ in range(3))
    for kw in ({}, {"is_causal": True}):
        before = STATS["kernels"]
        q.scaled_dot_product_attention(k, v, **kw).realize()
        assert STATS["kernels"] - before <= 2, kw


def test_sdpa_errors():
    q = Tensor(np.zeros((1, 4, 3, 5), np.float32))
    kv = Tensor(np.zeros((1, 3, 3, 5), np.float32))
    with pytest.raises(ValueError, match=r"with enable_gqa the query's 4 heads must be a multiple of the key's and "
                                         r"value's, got 3 and 3"):
        q.scaled_dot_product_attention(kv, kv, enable_gqa=True)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1.0"):
        q.scaled_dot_product_attention(q, q, dropout_p=1.0)
    with pytest.raises(ValueError, match=r"pass attn_mask or is_causal=True, not both"):
        q.scaled_dot_product_attention(q, q, attn_mask=Tensor(True), is_causal=True)
    with pytest.raises(ValueError, match=r"query \(1, 4, 3, 5\), key \(1, 4, 3, 4\) and value"):
        q.scaled_dot_product_attention(Tensor(np.zeros((1, 4, 3, 4), np.float32)), q)
    with pytest.raises(ValueError, match=r"key needs at least 2 dims"):
        q.scaled_dot_product_attention(Tensor([1.0]), q)


def test_movement_errors():
    t = Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"roll: shifts \(1, 2\) and dims \(0,\) must have the same length"):
        t.roll((1, 2), (0,))
    with pytest.raises(IndexError, match=r"dim 2 is out of range"):
        t.roll(1, 2)
    with pytest.raises(ValueError, match=r"repeat_interleave: 2 repeat counts for dim 1 of size 3"):
        t.repeat_interleave([1, 2], 1)
    with pytest.raises(ValueError, match=r"repeat_interleave: repeats must be >= 0, got -1"):
        t.repeat_interleave(-1, 0)
    with pytest.raises(ValueError, match=r"meshgrid: indexing is 'ij' or 'xy', got 'yx'"):
        t.reshape(-1).meshgrid(indexing="yx")
    with pytest.raises(ValueError, match=r"meshgrid needs 0-d or 1-d tensors, got one of shape \(2, 3\)"):
        t.meshgrid()
    with pytest.raises(ValueError, match=r"diagonal needs two different dims"):
        t.diagonal(0, 1, -1)
    with pytest.raises(ValueError, match=r"diag needs a 1-D or 2-D tensor, got shape \(1, 2, 3\)"):
        t.reshape(1, 2, 3).diag()
    with pytest.raises(ValueError, match=r"unfold: size 4 is larger than dimension 1 of size 3"):
        t.unfold(1, 4, 1)
    with pytest.raises(ValueError, match=r"unfold: step must be >= 1, got 0"):
        t.unfold(1, 2, 0)
    assert t.diagonal(5).shape == (0,)
    assert Tensor(np.arange(6.0).reshape(2, 3)).diagonal(-1).numpy().tolist() == [3.0]
    assert Tensor([1, 2, 3]).repeat_interleave([0, 0, 0], 0).shape == (0,)
    assert Tensor([[1, 2]], dtype=dtypes.int32).roll(1, 1).numpy().tolist() == [[2, 1]]
