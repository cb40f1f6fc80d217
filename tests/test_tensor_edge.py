"""Bad and edge-case inputs to the Tensor API (issue 10): dtype promotion, NaN and signed zeros in
elementwise ops, out-of-range indices (at once when known on the host, through a device-side check
otherwise), and argument validation. Values are checked against numpy or exact references on every
device; AMD (the mock GPU's emulator) runs a few small cases."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tg_core import Tensor, dtypes

DEVICES = ["PYTHON", "CPU:X86", "CPU:LLVM"]
WITH_AMD = DEVICES + ["AMD"]


def same(got: np.ndarray, want) -> None:
    """Equal values, NaN where NaN, and the same sign of every zero."""
    want = np.asarray(want, dtype=got.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)
    if got.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got[got == 0]), np.signbit(want[want == 0]))


# ---- promotion ----------------------------------------------------------------------------------------------

def test_int64_with_uint64_is_a_clear_type_error():
    a, b = Tensor(np.array([1], np.int64)), Tensor(np.array([1], np.uint64))
    with pytest.raises(TypeError, match="no common dtype for int64 and uint64.*cast an operand"):
        a + b
    with pytest.raises(TypeError, match="int8 and uint64"):
        Tensor(np.array([1], np.int8)) < b
    assert (a.cast(dtypes.float64) + b).dtype is dtypes.float64
    assert (b + 1).dtype is dtypes.uint64 and (b + Tensor(np.array([1], np.uint8))).dtype is dtypes.uint64


# ---- NaN and signed zeros ----------------------------------------------------------------------------------

SPECIAL = np.array([np.nan, -0.0, 0.0, -2.5, 3.0, np.inf, -np.inf, -0.4, 0.4, -0.5, 7.0], np.float32)
UNARY = {
    "relu": lambda x: np.where(np.isnan(x) | (x > 0), x, np.float32(0)),
    "sign": np.sign,
    "abs": np.abs,
    "relu6": lambda x: np.where(np.isnan(x), x, np.clip(np.where(x > 0, x, np.float32(0)), 0, 6)),
    "round": np.round,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
}


@pytest.mark.parametrize("device", WITH_AMD)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_nan_and_signed_zero(device: str, op: str):
    if device == "AMD" and op not in ("relu", "sign", "abs"):
        pytest.skip("AMD runs a few small cases")
    got = getattr(Tensor(SPECIAL, device=device), op)().numpy()
    same(got, UNARY[op](SPECIAL))


@pytest.mark.parametrize("device", DEVICES)
def test_nan_propagates_through_max_min_clamp(device: str):
    a = np.array([np.nan, 1.0, np.nan, -3.0], np.float32)
    b = np.array([0.0, np.nan, np.nan, 2.0], np.float32)
    x, y = Tensor(a, device=device), Tensor(b, device=device)
    same(x.maximum(y).numpy(), np.maximum(a, b))
    same(x.minimum(y).numpy(), np.minimum(a, b))
    same(x.clip(-1, 0.5).numpy(), np.clip(a, -1, 0.5))
    same(x.max().numpy(), np.max(a))
    same(x.min().numpy(), np.min(a))
    same(Tensor(a[1:], device=device).relu().numpy(), np.array([1.0, np.nan, 0.0], np.float32))
    same(x.sigmoid().isnan().numpy(), np.isnan(a))
    same(Tensor([np.nan, -0.0, 2.0], device=device).sign().numpy(), np.array([np.nan, 0.0, 1.0], np.float32))


def test_int_sign_and_abs_keep_their_dtype():
    x = Tensor(np.array([-3, 0, 5], np.int32))
    assert x.sign().dtype is dtypes.int32 and x.abs().dtype is dtypes.int32
    same(x.sign().numpy(), [-1, 0, 1])
    same(x.abs().numpy(), [3, 0, 5])
    same(Tensor([True, False]).sign().numpy(), [True, False])


# ---- out-of-range indices ------------------------------------------------------------------------------------

def _lazy(values: list[int], device: str) -> Tensor:
    """Indices computed by a kernel (not known on the host when an op uses them)."""
    return Tensor(np.array(values, np.int32) - 1, device=device) + 1


HOST_CASES = {
    "getitem": (lambda d: Tensor.arange(12, device=d).reshape(3, 4)[Tensor([7], device=d)],
                "index 7 is out of bounds for axis 0 with size 3"),
    "getitem_negative": (lambda d: Tensor.arange(12, device=d).reshape(3, 4)[:, Tensor([-5], device=d)],
                         "index -5 is out of bounds for axis 1 with size 4"),
    "getitem_list": (lambda d: Tensor.arange(12, device=d).reshape(3, 4)[[0, 3]],
                     "index 3 is out of bounds for axis 0 with size 3"),
    "getitem_const": (lambda d: Tensor.arange(5, device=d)[Tensor.full((2,), 9, device=d)],
                      "index 9 is out of bounds for axis 0 with size 5"),
    "gather": (lambda d: Tensor([[1, 2], [3, 4]], device=d).gather(0, Tensor([[5, 0]], device=d)),
               r"gather: index 5 is out of bounds for dim 0 with size 2 \(allowed: 0 to 1\)"),
    "gather_negative": (lambda d: Tensor([[1, 2], [3, 4]], device=d).gather(1, Tensor([[-1], [0]], device=d)),
                        "gather: index -1 is out of bounds for dim 1 with size 2"),
    "scatter": (lambda d: Tensor.zeros(3, device=d).scatter(0, Tensor([1, 3], device=d), 1.0),
                "scatter: index 3 is out of bounds for dim 0 with size 3"),
    "one_hot": (lambda d: Tensor([-1, 3], device=d).one_hot(3), r"one_hot: class 3 is out of range for num_classes=3"),
    "one_hot_negative": (lambda d: Tensor([-1, 2], device=d).one_hot(3), "one_hot: class -1 is out of range"),
    "one_hot_auto": (lambda d: Tensor([-2, 1], device=d).one_hot(),
                     "one_hot: class -2 is out of range for num_classes=2"),
    "cross_entropy": (lambda d: Tensor.zeros(2, 3, device=d).cross_entropy(Tensor([0, 3], device=d)),
                      "cross_entropy: target 3 is out of bounds for 3 classes"),
    "sparse_xent": (lambda d: Tensor.zeros(2, 3, device=d).sparse_categorical_crossentropy(Tensor([-2, 1], device=d)),
                    r"target -2 is out of bounds for 3 classes \(allowed: 0 to 2, or ignore_index=-1\)"),
}


@pytest.mark.parametrize("case", sorted(HOST_CASES))
def test_host_known_bad_index_raises_when_built(case: str):
    build, msg = HOST_CASES[case]
    with pytest.raises(IndexError, match=msg):
        build("PYTHON")


def test_embedding_rejects_out_of_range_and_negative_indices():
    from tg_core import nn
    emb = nn.Embedding(4, 2)
    with pytest.raises(IndexError, match=r"Embedding: index 5 is out of range for 4 embeddings \(allowed: 0 to 3\)"):
        emb(Tensor([5, -1]))
    with pytest.raises(IndexError, match="Embedding: index -1 is out of range"):
        emb(Tensor([0, -1]))
    with pytest.raises(TypeError, match="Embedding needs int indices"):
        emb(Tensor([0.0]))
    same(emb(Tensor([3, 0])).numpy(), emb.weight.numpy()[[3, 0]])


@pytest.mark.parametrize("device", WITH_AMD)
def test_lazy_bad_index_is_reported_at_the_next_host_read(device: str):
    x = Tensor.arange(12, device=device).reshape(3, 4)
    y = x[_lazy([1, 7], device)]  # built without error: the indices are not known yet
    with pytest.raises(IndexError, match=r"index 7 is out of bounds for axis 0 with size 3 .*device-side check"):
        y.numpy()
    # reported once; valid lazy indices (negative ones count from the end) give numpy's values
    same(x[_lazy([2, -3, -1], device)].numpy(), np.arange(12).reshape(3, 4)[[2, -3, -1]])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("read", ["numpy", "item", "tolist", "synchronize", "other"])
def test_device_side_check_reports_at_every_kind_of_host_read(device: str, read: str):
    table = Tensor(np.arange(8, dtype=np.float32), device=device)
    bad = table.gather(0, _lazy([2, 9], device)).sum()
    bad.realize()  # the kernel runs; its check's facts are written beside it
    with pytest.raises(IndexError, match="gather: index 9 is out of bounds for dim 0 with size 8"):
        if read == "synchronize":
            Tensor.synchronize(device)
        elif read == "other":  # any host read reports it, as CUDA reports an assert at the next sync
            Tensor([1], device=device).numpy()
        else:
            getattr(bad, read)()
    assert bad.item() == 2.0  # what the kernel computed; the error was reported once


def _embedding(device: str):
    from tg_core import nn
    emb = nn.Embedding(4, 2)
    emb.weight = emb.weight.to(device)
    return emb


@pytest.mark.parametrize("device", DEVICES)
def test_lazy_index_ops_check_on_device(device: str):
    cases = [
        (lambda: Tensor.zeros(3, device=device).scatter(0, _lazy([0, 4], device), 1.0), "scatter: index 4"),
        (lambda: _lazy([0, -1], device).one_hot(2), "one_hot: class -1"),
        (lambda: _embedding(device)(_lazy([1, 4], device)), "Embedding: index 4"),
        (lambda: Tensor.zeros(2, 3, device=device).sparse_categorical_crossentropy(_lazy([-1, 3], device)),
         "target 3 is out of bounds for 3 classes"),
    ]
    for build, msg in cases:
        out = build()
        with pytest.raises(IndexError, match=msg):
            out.numpy()
    ok = Tensor.zeros(2, 3, device=device).sparse_categorical_crossentropy(_lazy([-1, 2], device))
    assert math.isclose(ok.item(), math.log(3), rel_tol=1e-6)  # ignore_index=-1 is allowed


def test_unrealized_bad_index_raises_nothing():
    # the op never ran: no kernel, no error (its check is dropped with it)
    Tensor.arange(4)[_lazy([9], Tensor([0]).device)]
    assert Tensor([1.0]).item() == 1.0


def test_setitem_with_out_of_range_index():
    x = Tensor.zeros(4).contiguous().realize()
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 0 with size 4"):
        x[Tensor([1, 4])] = 1.0
    x[_lazy([1, -5], x.device)] = 1.0  # assign runs at once; the check reports at the next read
    with pytest.raises(IndexError, match="index -5 is out of bounds for axis 0 with size 4"):
        x.numpy()


def test_device_side_check_inside_tinyjit_reports_on_replay():
    from tg_core import TinyJit
    table = Tensor(np.arange(6, dtype=np.float32)).realize()

    @TinyJit
    def f(i: Tensor) -> Tensor:
        return table[i * 1].sum()

    good = np.array([0, 5], np.int32)
    for _ in range(3):  # eager, capture, replay
        assert f(Tensor(good)).item() == 5.0
    f(Tensor(np.array([1, 6], np.int32)))
    with pytest.raises(IndexError, match="index 6 is out of bounds for axis 0 with size 6"):
        Tensor.synchronize()
    assert f(Tensor(good)).item() == 5.0
