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


# every op on the CPU devices and the reference; the mock GPU (slow) runs the ones the issue named
@pytest.mark.parametrize("device,op", [(d, op) for d in WITH_AMD for op in sorted(UNARY)
                                       if d != "AMD" or op in ("relu", "sign", "abs")])
def test_unary_nan_and_signed_zero(device: str, op: str):
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


# ---- argument validation -------------------------------------------------------------------------------------

BAD_ARGS = {
    "sum float axis": (lambda a: a.sum(0.5), TypeError, r"axis must be an int, got 0\.5 \(float\)"),
    "sum duplicate axis": (lambda a: a.sum((0, 0)), ValueError, r"axis \(0, 0\) names axis 0 more than once"),
    "sum duplicate via negative": (lambda a: a.sum((1, -1)), ValueError, "names axis 1 more than once"),
    "sum bool axis": (lambda a: a.sum(True), TypeError, "axis must be an int, got True"),
    "sum str axis": (lambda a: a.sum("0"), TypeError, "axis must be an int, got '0'"),
    "sum out of range": (lambda a: a.sum(2), IndexError, r"axis 2 is out of range .*\(allowed: -2 to 1\)"),
    "max duplicate": (lambda a: a.max((1, 1)), ValueError, "names axis 1 more than once"),
    "mean duplicate": (lambda a: a.mean((0, 0)), ValueError, "names axis 0 more than once"),
    "prod float": (lambda a: a.prod(0.5), TypeError, "axis must be an int"),
    "any float": (lambda a: a.any(0.5), TypeError, "axis must be an int"),
    "min float": (lambda a: a.min(0.5), TypeError, "axis must be an int"),
    "std duplicate": (lambda a: a.std((0, 0)), ValueError, "more than once"),
    "logsumexp duplicate": (lambda a: a.logsumexp((0, 0)), ValueError, "more than once"),
    "softmax float": (lambda a: a.softmax(0.5), TypeError, "axis must be an int"),
    "argmax float": (lambda a: a.argmax(0.5), TypeError, "axis must be an int"),
    "cumsum float": (lambda a: a.cumsum(0.5), TypeError, "axis must be an int"),
    "permute float": (lambda a: a.permute(0, 1.0), TypeError, "axis must be an int, got 1.0"),
    "flip duplicate": (lambda a: a.flip((0, 0)), ValueError, "names axis 0 more than once"),
    "flip float": (lambda a: a.flip(0.5), TypeError, "axis must be an int"),
    "expand float": (lambda a: a.expand(2.0, 3), TypeError,
                     r"expand: the shape \(2\.0, 3\): each entry must be an int"),
    "expand fewer axes": (lambda a: a.expand(3), ValueError, "fewer axes"),
    "shrink float": (lambda a: a.shrink(((0.5, 1), None)), TypeError, "shrink: .* must be an int, got 0.5"),
    "shrink rank": (lambda a: a.shrink(((0, 1),)), ValueError, "one .start, end. or None per axis"),
    "pad float": (lambda a: a.pad(((0.5, 1), None)), TypeError, "pad: .* must be an int, got 0.5"),
    "transpose float": (lambda a: a.transpose(0, 0.5), TypeError, "dim1 must be an int"),
    "squeeze duplicate": (lambda a: a.squeeze((0, 0)), ValueError, r"dim \(0, 0\) names axis 0 more than once"),
    "unsqueeze float": (lambda a: a.unsqueeze(0.5), TypeError, "unsqueeze: dim must be an int"),
    "flatten float": (lambda a: a.flatten(0.5), TypeError, "start_dim must be an int"),
    "cat float dim": (lambda a: a.cat(a, dim=0.5), TypeError, "dim must be an int"),
    "split float": (lambda a: a.split(1.5), TypeError, "split: the split size must be an int"),
    "split negative": (lambda a: a.split([3, -1], 1), ValueError, "must be >= 0"),
    "chunk float": (lambda a: a.chunk(1.5), TypeError, "chunk: the number of chunks must be an int"),
    "repeat float": (lambda a: a.repeat(2.0, 1), TypeError, "repeat: the repeat counts .* must be an int"),
    "repeat negative": (lambda a: a.repeat(-1, 1), ValueError, "repeat: .* must be >= 0"),
    "gather float dim": (lambda a: a.gather(0.5, Tensor([[0]])), TypeError, "dim must be an int"),
    "size float": (lambda a: a.size(0.5), TypeError, "dim must be an int"),
    "cast None": (lambda a: a.cast(None), TypeError, "a dtype is a DType .* got None"),
    "cast int": (lambda a: a.cast(5), TypeError, "a dtype is a DType .* got 5"),
    "eye float": (lambda a: Tensor.eye(2.0), TypeError, "eye: n must be an int"),
    "arange str": (lambda a: Tensor.arange("3"), TypeError, r"arange: stop must be an int or a float, got '3'"),
    "arange None step": (lambda a: Tensor.arange(0, 3, None), TypeError, "arange: step must be an int or a float"),
    "one_hot float": (lambda a: Tensor([1]).one_hot(2.0), ValueError, "num_classes is a non-negative int"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGS))
def test_bad_arguments_fail_when_the_op_is_built(case: str):
    build, err, msg = BAD_ARGS[case]
    with pytest.raises(err, match=msg):
        build(Tensor.ones(2, 3))


def test_a_bad_reduce_no_longer_breaks_a_later_assign():
    a = Tensor.ones(2, 3).contiguous().realize()
    with pytest.raises(TypeError, match="axis must be an int"):
        a.sum(0.5)
    a.assign(Tensor.full((2, 3), 2.0))
    same(a.numpy(), np.full((2, 3), 2.0, np.float32))


def test_iterating_a_0d_tensor_is_a_type_error():
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        list(Tensor(3.0))
    assert [t.item() for t in Tensor([1, 2])] == [1, 2]
    assert [t.shape for t in Tensor.ones(2, 3)] == [(3,), (3,)]


def test_big_python_ints_widen_the_same_in_lists_and_scalars():
    assert Tensor([2 ** 40]).dtype is dtypes.int64 is Tensor(2 ** 40).dtype
    same(Tensor([2 ** 40, -3]).numpy(), np.array([2 ** 40, -3], np.int64))
    assert Tensor([1, 2]).dtype is dtypes.int32
    for bad in (2 ** 63, -2 ** 63 - 1, 2 ** 70):
        with pytest.raises(OverflowError, match="does not fit in"):
            Tensor(bad)
        with pytest.raises(OverflowError, match="do not fit in int64"):
            Tensor([1, bad])
    with pytest.raises(OverflowError, match=r"300 does not fit in dtypes.uchar \(range 0 to 255\)"):
        Tensor(300, dtype=dtypes.uint8)
    with pytest.raises(OverflowError, match="does not fit"):
        Tensor.full((2,), -1, dtype=dtypes.uint32)
    assert Tensor(2 ** 64 - 1, dtype=dtypes.uint64).item() == 2 ** 64 - 1


def test_numpy_scalars_keep_their_kind():
    # np.int64(3) is an int: arange of it counts in ints (it was a float arange), and in a list it keeps its dtype
    assert Tensor.arange(np.int64(3)).dtype is dtypes.int32
    same(Tensor.arange(np.int64(3)).numpy(), np.arange(3, dtype=np.int32))
    same(Tensor.arange(np.float32(2.5)).numpy(), np.arange(2.5, dtype=np.float32))
    assert Tensor([np.int64(1), 2]).dtype is dtypes.int64 and Tensor([np.float16(1.5)]).dtype is dtypes.float16
    same(Tensor([np.uint8(3), np.uint8(250)]).numpy(), np.array([3, 250], np.uint8))


@pytest.mark.parametrize("device", WITH_AMD)
def test_arange_past_int32_is_int64(device: str):
    t = Tensor.arange(2 ** 31, 2 ** 31 + 3, device=device)
    assert t.dtype is dtypes.int64
    same(t.numpy(), np.arange(2 ** 31, 2 ** 31 + 3))
    same(Tensor.arange(0, 2 ** 33, 2 ** 31, device=device).numpy(), np.arange(0, 2 ** 33, 2 ** 31))
    same(Tensor.arange(5, -2 ** 32, -2 ** 31, device=device).numpy(), np.arange(5, -2 ** 32, -2 ** 31))
    assert Tensor.arange(2 ** 31 - 1, device=device).dtype is dtypes.int32


@pytest.mark.parametrize("device", DEVICES)
def test_arange_float64_is_computed_in_float64(device: str):
    # start + i*step in float64, within an ulp (a fused multiply-add rounds once); it was float32, then cast
    for start, stop, step in ((0, 1, 0.1), (-3, 7, 0.7), (1e9, 1e9 + 1, 0.125)):
        got = Tensor.arange(start, stop, step, dtype=dtypes.float64, device=device).numpy()
        want = np.array([start + i * step for i in range(len(np.arange(start, stop, step)))])
        assert got.dtype == np.float64 and got.shape == want.shape
        # a fused i*step + start rounds once, Python's twice: an ulp of the terms' size apart at most
        terms = np.abs(np.arange(len(want)) * step) + abs(start)
        assert np.all(np.abs(got - want) <= np.spacing(terms)), (got, want)


FLOAT_TO_INT = np.array([np.inf, -np.inf, np.nan, 1e10, -1e10, 2.7, -2.7, -0.9, 255.5, 256.0, -128.5, -129.0,
                         2147483520.0, 2.0 ** 31, -2.0 ** 31, 2.0 ** 63, -2.0 ** 63], np.float64)


@pytest.mark.parametrize("device", ["CPU:X86", "CPU:LLVM", "AMD"])
def test_float_to_int_cast_has_one_result_on_every_device(device: str):
    """NaN, infinities and values past the int's range are undefined in C; alu.py defines them, and every
    device must give the reference device's value. In-range values truncate."""
    for src in (np.float32, np.float64) if device != "AMD" else (np.float32,):
        x = FLOAT_TO_INT.astype(src)
        for dst in (dtypes.int32, dtypes.uint8, dtypes.int8, dtypes.int64, dtypes.uint32):
            got, ref = Tensor(x, device=device).cast(dst).numpy(), Tensor(x, device="PYTHON").cast(dst).numpy()
            same(got, ref)
            info = np.iinfo(ref.dtype)
            fits = np.array([math.isfinite(v) and info.min <= math.trunc(v) <= info.max for v in x.tolist()])
            same(ref[fits], np.array([math.trunc(v) for v in x[fits].tolist()], ref.dtype))
    assert Tensor(math.inf, device=device).int().item() == Tensor([math.inf], device=device).int().item()
    with pytest.raises(OverflowError, match="cannot convert float infinity to integer"):
        int(Tensor([math.inf], device=device))  # Python's int() of the float value, as for a numpy float


@pytest.mark.parametrize("device", DEVICES)
def test_narrow_negative_indices_do_not_wrap(device: str):
    # -1 + n in an int8 index would wrap for n = 1000
    x = Tensor(np.arange(1000, dtype=np.int32), device=device)
    idx = np.array([-1, -128, 5, 127], np.int8)
    same(x[Tensor(idx, device=device)].numpy(), np.arange(1000, dtype=np.int32)[idx])
    same(x[Tensor(np.array([999], np.uint16), device=device)].numpy(), [999])


@pytest.mark.parametrize("no_grad", [False, True])
def test_python_int_operands_must_fit_the_tensor_dtype(no_grad: bool):
    x = Tensor(np.array([1, 200], np.uint8))
    with Tensor.test(no_grad):
        for build, v in ((lambda: x + 300, 300), (lambda: x < -1, -1), (lambda: x.maximum(256), 256),
                         (lambda: Tensor(np.array([1], np.int8)) * 1000, 1000)):
            with pytest.raises(OverflowError, match=f"the Python int {v} does not fit in"):
                build()
        same((x + 55).numpy(), np.array([56, 255], np.uint8))  # in range: wraps like the dtype does
        same((-x).numpy(), -np.array([1, 200], np.uint8))  # an unsigned int negates modulo 2**8
