"""nn layers against numpy, optimizers against hand-computed numpy updates, a small training run, state
dicts and the safetensors format (header bytes checked, files written by hand read back)."""
from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest

import tg_core.tensor.storage as storage_module
from tg_core.dtype import dtypes
from tg_core.nn import Conv2d, Embedding, LayerNorm, Linear
from tg_core.nn.optim import LAMB, SGD, Adam, AdamW
from tg_core.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_load_metadata, safe_save
from tg_core.tensor import Tensor

RNG = np.random.default_rng(1)


# ---- layers --------------------------------------------------------------------------------------------

def test_linear_forward_and_init():
    Tensor.manual_seed(0)
    layer = Linear(16, 8)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert w.shape == (8, 16) and b.shape == (8,)
    bound = 1 / math.sqrt(16)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert np.abs(w).max() > 0.8 * bound and abs(w.mean()) < 0.05  # uniform over the whole range
    x = RNG.standard_normal((3, 16)).astype(np.float32)
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), x @ w.T + b, rtol=1e-5, atol=1e-6)
    assert Linear(4, 2, bias=False).bias is None


def _conv_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, padding: int, groups: int) -> np.ndarray:
    n, cin, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh, ow = (h + 2 * padding - kh) // stride + 1, (wd + 2 * padding - kw) // stride + 1
    out = np.zeros((n, cout, oh, ow))
    per = cout // groups
    for o in range(cout):
        g = o // per
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg, i * stride:i * stride + kh, j * stride:j * stride + kw]
                out[:, o, i, j] = (patch * w[o]).sum((1, 2, 3))
    return out + b.reshape(1, -1, 1, 1)


@pytest.mark.parametrize("stride, padding, groups", [(1, 0, 1), (2, 1, 1), (1, 1, 2)])
def test_conv2d_forward_and_init(stride, padding, groups):
    conv = Conv2d(4, 6, 3, stride=stride, padding=padding, groups=groups)
    w, b = conv.weight.numpy(), conv.bias.numpy()
    assert w.shape == (6, 4 // groups, 3, 3)
    scale = 1 / math.sqrt(4 // groups * 9)
    assert np.abs(w).max() <= scale and np.abs(b).max() <= scale
    assert np.abs(w).max() > 0.7 * scale
    x = RNG.standard_normal((2, 4, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(conv(Tensor(x)).numpy(), _conv_ref(x, w, b, stride, padding, groups),
                               rtol=1e-4, atol=1e-5)


def test_conv2d_bad_groups():
    with pytest.raises(ValueError, match="groups"):
        Conv2d(3, 4, 3, groups=2)


def test_layernorm():
    ln = LayerNorm(4)
    np.testing.assert_array_equal(ln.weight.numpy(), np.ones(4))
    np.testing.assert_array_equal(ln.bias.numpy(), np.zeros(4))
    ln.weight, ln.bias = Tensor([1.0, 2.0, 3.0, 4.0]), Tensor([0.5, 0.0, -0.5, 1.0])
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * [1, 2, 3, 4] + [0.5, 0, -0.5, 1]
    np.testing.assert_allclose(ln(Tensor(x)).numpy(), ref, rtol=1e-4, atol=1e-5)
    ln2 = LayerNorm((2, 3), elementwise_affine=False)
    x2 = RNG.standard_normal((2, 2, 3)).astype(np.float32)
    flat = x2.reshape(2, 6)
    ref2 = ((flat - flat.mean(1, keepdims=True)) / np.sqrt(flat.var(1, keepdims=True) + 1e-5)).reshape(2, 2, 3)
    np.testing.assert_allclose(ln2(Tensor(x2)).numpy(), ref2, rtol=1e-4, atol=1e-5)
    assert ln2.weight is None
    with pytest.raises(ValueError, match="LayerNorm"):
        ln(Tensor(np.ones((2, 3), dtype=np.float32)))


def test_embedding_forward_and_gradient():
    emb = Embedding(5, 3)
    w = emb.weight.numpy()
    bound = math.sqrt(6 / 8)
    assert w.shape == (5, 3) and np.abs(w).max() <= bound
    idx = np.array([[1, 4], [1, 0]])
    np.testing.assert_allclose(emb(Tensor(idx)).numpy(), w[idx], rtol=1e-6)
    emb.weight.requires_grad = True
    emb(Tensor(idx)).sum().backward()
    np.testing.assert_allclose(emb.weight.grad.numpy(), np.array([1, 2, 0, 0, 1])[:, None] * np.ones((1, 3)))


# ---- optimizers ----------------------------------------------------------------------------------------

def _quadratic_grad(w: np.ndarray, a: np.ndarray) -> np.ndarray:
    return 2 * a * w  # gradient of sum(a * w^2)


def _run(opt_cls, steps: int = 3, **kwargs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w0 = np.array([1.0, -2.0, 0.5], dtype=np.float32)
    a = np.array([1.0, 0.5, 3.0], dtype=np.float32)
    w = Tensor(w0, requires_grad=True)
    opt = opt_cls([w], **kwargs)
    for _ in range(steps):
        opt.zero_grad()
        (Tensor(a) * w * w).sum().backward()
        opt.step()
    return w.numpy(), w0.astype(np.float64), a.astype(np.float64)


@pytest.mark.parametrize("kwargs", [dict(lr=0.1), dict(lr=0.1, weight_decay=0.2), dict(lr=0.05, momentum=0.9),
                                    dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1)])
def test_sgd_matches_numpy(kwargs):
    got, w, a = _run(SGD, **kwargs)
    lr, mom = kwargs["lr"], kwargs.get("momentum", 0.0)
    wd, nest = kwargs.get("weight_decay", 0.0), kwargs.get("nesterov", False)
    b = np.zeros_like(w)
    for _ in range(3):
        g = _quadratic_grad(w, a) + wd * w
        if mom:
            b = mom * b + g
            g = g + mom * b if nest else b
        w = w - lr * g
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def _adam_ref(w, a, lr, b1, b2, eps, wd, steps=3):
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t in range(1, steps + 1):
        g = _quadratic_grad(w, a)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        up = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps) + wd * w
        w = w - lr * up
    return w


def test_adam_matches_numpy():
    got, w, a = _run(Adam, lr=0.1)
    np.testing.assert_allclose(got, _adam_ref(w, a, 0.1, 0.9, 0.999, 1e-8, 0.0), rtol=1e-5, atol=1e-6)


def test_adamw_matches_numpy():
    got, w, a = _run(AdamW, lr=0.1, b1=0.8, b2=0.99, weight_decay=0.1)
    np.testing.assert_allclose(got, _adam_ref(w, a, 0.1, 0.8, 0.99, 1e-8, 0.1), rtol=1e-5, atol=1e-6)


def test_lamb_matches_numpy():
    got, w, a = _run(LAMB, steps=2, lr=0.1, weight_decay=0.01)
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t in (1, 2):
        g = _quadratic_grad(w, a)
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        up = (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-6) + 0.01 * w
        w = w - 0.1 * (np.linalg.norm(w) / np.linalg.norm(up)) * up
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_step_is_one_schedule(monkeypatch):
    calls = []
    real = storage_module.prepare  # a write schedules (and builds) through prepare, then runs

    def counting(targets, **kwargs):
        calls.append(len(targets))
        return real(targets, **kwargs)
    w1 = Tensor(np.ones((3, 2), dtype=np.float32), requires_grad=True)
    w2 = Tensor(np.ones((2,), dtype=np.float32), requires_grad=True)
    opt = Adam([w1, w2], lr=0.01)
    opt.zero_grad()
    x = Tensor(np.ones((4, 3), dtype=np.float32))
    ((x @ w1) @ w2).square().mean().backward()
    monkeypatch.setattr(storage_module, "prepare", counting)
    opt.step()
    assert len(calls) == 1
    # the grads (which read the old weights) are realized in that schedule, and keep their values
    assert w1.grad._is_realized() and w2.grad._is_realized()


def test_step_skips_params_without_grad_and_zero_grad():
    a, b = Tensor([1.0], requires_grad=True), Tensor([2.0], requires_grad=True)
    opt = SGD([a, b], lr=0.5)
    (a * 3).sum().backward()
    opt.step()
    np.testing.assert_allclose(a.numpy(), [-0.5])
    np.testing.assert_allclose(b.numpy(), [2.0])
    opt.zero_grad()
    assert a.grad is None and b.grad is None


def test_learning_rate_is_a_tensor():
    w = Tensor([1.0], requires_grad=True)
    opt = SGD([w], lr=0.1)
    opt.lr.assign(1.0)
    (w * 2).sum().backward()
    opt.step()
    np.testing.assert_allclose(w.numpy(), [-1.0])


def test_optimizer_takes_requires_grad_none_and_keeps_buffers():
    p, buf = Tensor([1.0]), (Tensor([5.0]) * 2).requires_grad_(False)
    opt = SGD([p, buf], lr=0.1)
    assert p.requires_grad is True and opt.params == [p] and opt.buffers == [buf]
    (p * p).sum().backward()
    opt.step()
    assert buf._is_realized()
    np.testing.assert_allclose(buf.numpy(), [10.0])
    np.testing.assert_allclose(p.numpy(), [0.8])


def test_scalar_parameter():
    w = Tensor(np.array([2.0], dtype=np.float32)).reshape(()).requires_grad_()
    opt = Adam([w], lr=0.1)
    (w * w).backward()
    opt.step()
    assert w.shape == () and abs(w.item() - 1.9) < 1e-5


def test_train_linear_regression():
    Tensor.manual_seed(3)
    xs = np.linspace(-1, 1, 32, dtype=np.float32).reshape(-1, 1)
    ys = 3 * xs + 2
    model = Linear(1, 1)
    opt = SGD(get_parameters(model), lr=0.3)
    x, y = Tensor(xs), Tensor(ys)
    for _ in range(60):
        opt.zero_grad()
        loss = (model(x) - y).square().mean()
        loss.backward()
        opt.step()
    assert loss.item() < 1e-4
    np.testing.assert_allclose(model.weight.numpy(), [[3.0]], atol=1e-2)
    np.testing.assert_allclose(model.bias.numpy(), [2.0], atol=1e-2)


@pytest.mark.slow
def test_train_xor_mlp():
    Tensor.manual_seed(0)
    l1, l2 = Linear(2, 8), Linear(8, 1)
    opt = Adam(get_parameters([l1, l2]), lr=0.05)
    x = Tensor(np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32))
    y = Tensor(np.array([[0], [1], [1], [0]], dtype=np.float32))
    for _ in range(150):
        opt.zero_grad()
        loss = (l2(l1(x).tanh()) - y).square().mean()
        loss.backward()
        opt.step()
    assert loss.item() < 0.01


# ---- state dicts ----------------------------------------------------------------------------------------

class _Net:
    def __init__(self) -> None:
        self.l1 = Linear(3, 4)
        self.blocks = [LayerNorm(4), {"proj": Linear(4, 2, bias=False)}]
        self.me = self  # cycles do not recurse forever
        self.lib = np  # nor do modules


def test_get_state_dict_and_parameters():
    net = _Net()
    sd = get_state_dict(net)
    assert list(sd) == ["l1.weight", "l1.bias", "blocks.0.weight", "blocks.0.bias", "blocks.1.proj.weight"]
    assert sd["l1.weight"] is net.l1.weight
    net.tied = net.l1.weight
    assert len(get_parameters(net)) == 5


def test_load_state_dict():
    a, b = _Net(), _Net()
    for t in get_parameters(b):
        t.realize()
    old = b.l1.weight
    load_state_dict(b, get_state_dict(a))
    assert b.l1.weight is old  # loaded into the same tensors, so optimizers holding them see the values
    for k, v in get_state_dict(a).items():
        np.testing.assert_array_equal(get_state_dict(b)[k].numpy(), v.numpy())
    sd = get_state_dict(a)
    del sd["l1.bias"]
    with pytest.raises(KeyError, match="l1.bias"):
        load_state_dict(b, sd)
    with pytest.warns(UserWarning, match="l1.bias"):
        load_state_dict(b, sd, strict=False)
    bad = get_state_dict(a) | {"l1.weight": Tensor(np.zeros((2, 2), dtype=np.float32))}
    with pytest.raises(ValueError, match="Shape mismatch in layer `l1.weight`"):
        load_state_dict(b, bad)
    with pytest.raises(KeyError, match="extra"):
        load_state_dict(b, get_state_dict(a) | {"extra": Tensor([1.0])})
    consumed = dict(get_state_dict(a))
    load_state_dict(b, consumed, consume=True)
    assert consumed == {}


def test_load_state_dict_casts():
    lin = Linear(2, 2)
    sd = {"weight": Tensor(np.eye(2)), "bias": Tensor(np.array([1.0, 2.0]))}
    load_state_dict(lin, sd)
    assert lin.weight.dtype is dtypes.float32
    np.testing.assert_array_equal(lin.bias.numpy(), [1.0, 2.0])


# ---- safetensors -------------------------------------------------------------------------------------------

def test_safetensors_round_trip_and_header(tmp_path):
    fn = str(tmp_path / "m.safetensors")
    arrays = {
        "f32": RNG.standard_normal((2, 3)).astype(np.float32), "f16": np.array([1.5, -2.0], dtype=np.float16),
        "f64": np.array([[math.pi]]), "i64": np.array([-(2 ** 40), 7], dtype=np.int64),
        "u8": np.array([0, 255], dtype=np.uint8), "b": np.array([True, False, True]),
        "scalar": np.array([3], dtype=np.int32).reshape(()),
    }
    safe_save({k: Tensor(v).reshape(v.shape) for k, v in arrays.items()}, fn, metadata={"format": "pt"})
    raw = open(fn, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    header = json.loads(raw[8:8 + n])
    assert header["__metadata__"] == {"format": "pt"}
    assert header["f32"] == {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}
    assert [header[k]["dtype"] for k in arrays] == ["F32", "F16", "F64", "I64", "U8", "BOOL", "I32"]
    assert header["scalar"]["shape"] == []
    data = raw[8 + n:]
    end = 0
    for k, v in arrays.items():
        begin, stop = header[k]["data_offsets"]
        assert begin == end and data[begin:stop] == v.astype(v.dtype.newbyteorder("<")).tobytes()
        end = stop
    assert end == len(data)
    loaded = safe_load(fn)
    assert list(loaded) == list(arrays)
    for k, v in arrays.items():
        assert loaded[k].dtype is Tensor(v).dtype
        np.testing.assert_array_equal(loaded[k].numpy(), v)
    meta, start = safe_load_metadata(fn)
    assert start == 8 + n and meta["u8"]["dtype"] == "U8"


def test_safe_load_reads_a_file_written_by_hand(tmp_path):
    fn = str(tmp_path / "hand.safetensors")
    a = np.arange(6, dtype="<i4").reshape(3, 2)
    b = np.array([0.25, -1.0], dtype="<f4")
    head = json.dumps({"b": {"dtype": "F32", "shape": [2], "data_offsets": [24, 32]},
                       "a": {"dtype": "I32", "shape": [3, 2], "data_offsets": [0, 24]}}).encode()
    with open(fn, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + a.tobytes() + b.tobytes())
    loaded = safe_load(fn)
    np.testing.assert_array_equal(loaded["a"].numpy(), a)
    np.testing.assert_array_equal(loaded["b"].numpy(), b)


def test_safe_load_truncated(tmp_path):
    fn = str(tmp_path / "bad.safetensors")
    with open(fn, "wb") as f:
        f.write(struct.pack("<Q", 100) + b"{}")
    with pytest.raises(ValueError, match="not a safetensors file: header length 100 exceeds file size 10"):
        safe_load(fn)


def test_model_round_trip_through_safetensors(tmp_path):
    fn = str(tmp_path / "net.safetensors")
    a, b = _Net(), _Net()
    safe_save(get_state_dict(a), fn)
    load_state_dict(b, safe_load(fn))
    x = Tensor(RNG.standard_normal((2, 3)).astype(np.float32))
    np.testing.assert_array_equal(b.blocks[1]["proj"](b.blocks[0](b.l1(x))).numpy(),
                                  a.blocks[1]["proj"](a.blocks[0](a.l1(x))).numpy())


def test_step_without_gradients_changes_nothing():
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = Adam([w], lr=0.1)
    opt.step()
    np.testing.assert_allclose(w.numpy(), [1.0, 2.0])
    assert opt.b1_t.item() == 1.0
    SGD([w], lr=0.1, momentum=0.9).step()
    np.testing.assert_allclose(w.numpy(), [1.0, 2.0])


def test_loss_read_after_step_is_the_loss_before_it():
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = SGD([w], lr=0.1)
    loss = (w * w).sum()
    loss.backward()
    opt.step()  # loss (still lazy) reads w: it is computed from the old w in the step's schedule
    assert loss.item() == 5.0
    np.testing.assert_allclose(w.numpy(), [0.8, 1.6])
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0])
