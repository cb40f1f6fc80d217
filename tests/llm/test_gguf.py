"""tg_core.llm.gguf and dequant: GGUF files written by gguf-py's GGUFWriter, read back by tg, checked against
gguf-py's GGUFReader and, for every type, dequantized bit-exactly as `gguf.quants.dequantize` does."""
from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402

from tg_core.dtype import dtypes  # noqa: E402
from tg_core.llm.dequant import BLOCK_TYPES, GGMLType, dequantize  # noqa: E402
from tg_core.llm.gguf import GGUFError, GGUFFile, GGUFValueType  # noqa: E402
from tg_core.schedule.rangeify import create_schedule  # noqa: E402
from tg_core.tensor import Tensor  # noqa: E402

# where each block type keeps its float16 scale fields (random bytes there would make NaN and inf scales)
F16_FIELDS = {Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2), Q.Q8_0: (0,), Q.Q2_K: (80, 82),
              Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,), Q.IQ4_NL: (0,), Q.IQ4_XS: (0,),
              Q.MXFP4: ()}
QUANTIZABLE = (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.MXFP4)


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def _random_blocks(qtype: Q, n: int, rng: np.random.Generator) -> np.ndarray:
    _, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n, nbytes), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = rng.uniform(-3, 3, size=(n, 1)).astype(np.float16).view(np.uint8)
    return raw


def test_every_block_type_is_in_the_table():
    assert {GGMLType(int(t)) for t in F16_FIELDS} == set(BLOCK_TYPES)
    for t in F16_FIELDS:
        assert gguf.GGML_QUANT_SIZES[t] == BLOCK_TYPES[GGMLType(int(t))][:2]


@pytest.mark.filterwarnings("ignore:overflow encountered")  # gguf-py itself, at the exponent 255
@pytest.mark.parametrize("qtype", list(F16_FIELDS), ids=lambda t: t.name)
def test_dequant_random_bytes_bit_exact(qtype):
    raw = _random_blocks(qtype, 48, np.random.default_rng(int(qtype)))
    if qtype is Q.MXFP4:  # every shared exponent, the denormal ones (0, 1) and 255 included
        raw[:, 0] = np.arange(48) * 5 + 10
        raw[:3, 0] = (0, 1, 255)
    ref = gguf.quants.dequantize(raw, qtype).reshape(-1)
    got = dequantize(Tensor(raw), int(qtype)).numpy()
    assert _bits_equal(got, ref)


@pytest.mark.parametrize("qtype", QUANTIZABLE, ids=lambda t: t.name)
def test_dequant_quantized_data_bit_exact(qtype):
    x = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)
    raw = gguf.quants.quantize(x, qtype)
    ref = gguf.quants.dequantize(raw, qtype)
    got = dequantize(Tensor(raw), int(qtype)).numpy().reshape(8, 256)
    assert _bits_equal(got, ref)
    assert np.abs(got - x).max() < 0.25 * np.abs(x).max()  # a quantization of x, not noise


def test_q8_0_hand_block():
    d = np.array([2.0], dtype=np.float16).view(np.uint8)
    qs = np.concatenate([np.arange(1, 17), -np.arange(1, 17)]).astype(np.int8).view(np.uint8)
    got = dequantize(Tensor(np.concatenate([d, qs])), int(Q.Q8_0)).numpy()
    np.testing.assert_array_equal(got, 2.0 * qs.view(np.int8))


def test_q4_0_hand_block():
    d = np.array([0.5], dtype=np.float16).view(np.uint8)
    lo, hi = np.arange(16), 15 - np.arange(16)
    qs = (lo | (hi << 4)).astype(np.uint8)
    got = dequantize(Tensor(np.concatenate([d, qs])), int(Q.Q4_0)).numpy()
    np.testing.assert_array_equal(got, 0.5 * (np.concatenate([lo, hi]) - 8))


def test_mxfp4_scale_one_gives_the_table():
    codes = np.arange(32) % 16
    qs = (codes[:16] | (codes[16:] << 4)).astype(np.uint8)
    got = dequantize(Tensor(np.concatenate([[128], qs]).astype(np.uint8)), int(Q.MXFP4)).numpy()
    table = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)
    np.testing.assert_array_equal(got, np.tile(table, 2))


def test_iq4_nl_hand_block():
    d = np.array([1.0], dtype=np.float16).view(np.uint8)
    qs = (np.arange(16) | (np.arange(16)[::-1] << 4)).astype(np.uint8)
    got = dequantize(Tensor(np.concatenate([d, qs])), int(Q.IQ4_NL)).numpy()
    k = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)
    np.testing.assert_array_equal(got, np.concatenate([k, k[::-1]]))


# ---- files ------------------------------------------------------------------------------------------------

def _write(path, build, arch="llama"):
    w = gguf.GGUFWriter(str(path), arch)
    build(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def test_metadata_of_every_value_type(tmp_path):
    def build(w):
        w.add_uint8("t.u8", 200)
        w.add_int8("t.i8", -100)
        w.add_uint16("t.u16", 60000)
        w.add_int16("t.i16", -30000)
        w.add_uint32("t.u32", 4_000_000_000)
        w.add_int32("t.i32", -2_000_000_000)
        w.add_float32("t.f32", 1.5)
        w.add_bool("t.bool", True)
        w.add_string("t.str", "héllo ✓")
        w.add_uint64("t.u64", 2**63 + 5)
        w.add_int64("t.i64", -2**62)
        w.add_float64("t.f64", 1 / 3)
        w.add_array("t.ints", [1, 2, 3])
        w.add_array("t.strs", ["a", "", "ünï"])
        w.add_array("t.nested", [[1, 2], [3]])
        w.add_tensor("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    f = GGUFFile(_write(tmp_path / "m.gguf", build))
    m, vt = f.metadata, f.value_types
    assert f.version == 3 and m["general.architecture"] == "llama"
    expect = {"t.u8": 200, "t.i8": -100, "t.u16": 60000, "t.i16": -30000, "t.u32": 4_000_000_000,
              "t.i32": -2_000_000_000, "t.f32": 1.5, "t.bool": True, "t.str": "héllo ✓", "t.u64": 2**63 + 5,
              "t.i64": -2**62, "t.f64": 1 / 3, "t.ints": [1, 2, 3], "t.strs": ["a", "", "ünï"],
              "t.nested": [[1, 2], [3]]}
    for k, v in expect.items():
        assert m[k] == v, k
    assert vt["t.u8"] is GGUFValueType.UINT8 and vt["t.f64"] is GGUFValueType.FLOAT64
    assert vt["t.strs"] == (GGUFValueType.ARRAY, GGUFValueType.STRING)
    assert vt["t.nested"] == (GGUFValueType.ARRAY, GGUFValueType.ARRAY)
    # the same keys and scalar values as gguf-py's own reader
    r = gguf.GGUFReader(f.path)
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        if field.types[0] != gguf.GGUFValueType.ARRAY or field.types[-1] != gguf.GGUFValueType.ARRAY:
            if len(field.types) == 1:
                assert m[name] == pytest.approx(field.contents()), name


@pytest.mark.parametrize("alignment", [None, 64, 256])
def test_tensor_infos_offsets_and_raw_bytes(tmp_path, alignment):
    rng = np.random.default_rng(2)
    arrays = {"a": rng.standard_normal((3, 5)).astype(np.float32),
              "b": rng.standard_normal((4, 64)).astype(np.float16),
              "c": gguf.quants.quantize(rng.standard_normal((6, 64)).astype(np.float32), Q.Q4_1),
              "d": rng.standard_normal(7).astype(np.float32)}

    def build(w):
        if alignment:
            w.add_custom_alignment(alignment)
        for name, a in arrays.items():
            w.add_tensor(name, a, raw_dtype=Q.Q4_1 if name == "c" else None)
    f = GGUFFile(_write(tmp_path / "t.gguf", build))
    r = gguf.GGUFReader(f.path)
    assert f.alignment == (alignment or 32) and f.data_start == r.data_offset
    assert list(f.tensors) == [t.name for t in r.tensors]
    for t in r.tensors:
        info = f.tensors[t.name]
        assert info.ne == tuple(int(x) for x in t.shape) and info.ggml_type == int(t.tensor_type)
        assert info.offset == t.data_offset and info.n_bytes == t.n_bytes and info.offset % f.alignment == 0
        np.testing.assert_array_equal(f.raw(t.name).view(np.uint8).reshape(-1), np.asarray(t.data).view(np.uint8).reshape(-1))
    assert f.tensors["c"].shape == (6, 64) and f.tensors["c"].type_name == "Q4_1"
    np.testing.assert_array_equal(f.tensor("a").numpy(), arrays["a"])
    np.testing.assert_array_equal(f.tensor("b").numpy(), arrays["b"].astype(np.float32))
    np.testing.assert_array_equal(f.tensor("d").numpy(), arrays["d"])
    assert _bits_equal(f.tensor("c").numpy(), gguf.quants.dequantize(arrays["c"], Q.Q4_1))


def test_bf16_tensor(tmp_path):
    x = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    raw = gguf.quants.quantize(x, Q.BF16)
    f = GGUFFile(_write(tmp_path / "bf.gguf", lambda w: w.add_tensor("x", raw, raw_dtype=Q.BF16)))
    assert f.tensor("x").dtype is dtypes.float32
    assert _bits_equal(f.tensor("x").numpy(), gguf.quants.dequantize(raw, Q.BF16))


def test_unsupported_type_names_tensor_and_type(tmp_path):
    raw = np.zeros((2, 66), dtype=np.uint8)  # one IQ2_XXS block of 256 per row
    f = GGUFFile(_write(tmp_path / "iq.gguf", lambda w: w.add_tensor("blk.0.attn_q.weight", raw, raw_dtype=Q.IQ2_XXS)))
    with pytest.raises(NotImplementedError, match=r"'blk\.0\.attn_q\.weight'.*IQ2_XXS.*supported: F32"):
        f.tensor("blk.0.attn_q.weight")


@pytest.mark.parametrize("damage, message", [
    (lambda b: b"GGUG" + b[4:], "magic"),
    (lambda b: b[:4] + (7).to_bytes(4, "little") + b[8:], "version 7"),
    (lambda b: b[:40], "truncated"),
    (lambda b: b"", "empty file"),
])
def test_malformed_files_are_clear_errors(tmp_path, damage, message):
    good = _write(tmp_path / "g.gguf", lambda w: w.add_tensor("w", np.ones(8, dtype=np.float32)))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(damage(open(good, "rb").read()))
    with pytest.raises(GGUFError, match=message):
        GGUFFile(bad)


def test_tensor_past_the_end_is_an_error(tmp_path):
    good = _write(tmp_path / "g.gguf", lambda w: w.add_tensor("w", np.ones(64, dtype=np.float32)))
    data = open(good, "rb").read()
    (tmp_path / "cut.gguf").write_bytes(data[:-16])
    with pytest.raises(GGUFError, match="'w'.*runs past the end"):
        GGUFFile(tmp_path / "cut.gguf")


@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q4_K, Q.Q6_K, Q.IQ4_XS], ids=lambda t: t.name)
def test_dequant_fuses_into_the_matmul(qtype):
    """x @ W.T over a quantized W is one kernel whose buffers are the packed bytes, x and the output: no
    float copy of the weight is made."""
    out_f, in_f = 64, 512
    blk, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = _random_blocks(qtype, out_f * in_f // blk, np.random.default_rng(4))
    w = dequantize(Tensor(raw), int(qtype)).reshape(out_f, in_f)
    x = Tensor(np.random.default_rng(5).standard_normal((2, in_f)).astype(np.float32))
    y = x @ w.T
    items, _ = create_schedule([y.uop])
    kernels = [ast for ast, _ in items if ast.op.name != "COPY"]
    assert len(kernels) == 1
    sizes = [b.arg for _, bufs in items for b in bufs]  # a BUFFER node's arg is its element count
    assert all(n < out_f * in_f for n in sizes), sizes
    ref = x.numpy() @ gguf.quants.dequantize(raw, qtype).reshape(out_f, in_f).T
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-3)


def test_cpu_weights_are_the_file_map_and_other_devices_copy(tmp_path):
    """On CPU a weight's bytes are the map's pages (no copy in RAM); a device that cannot adopt host memory
    (PYTHON) gets a copy; both dequantize to the same values, and the file cannot be written through either."""
    from tg_core.engine.realize import buffer_of
    rng = np.random.default_rng(4)
    q = gguf.quants.quantize(rng.standard_normal((8, 64)).astype(np.float32), Q.Q4_1)
    f = GGUFFile(_write(tmp_path / "w.gguf", lambda w: w.add_tensor("w", q, raw_dtype=Q.Q4_1)))
    raw = f.raw("w")
    assert not raw.flags.writeable
    cpu, py = f.raw_tensor("w", "CPU"), f.raw_tensor("w", "PYTHON")
    assert buffer_of(cpu.uop.src[0]).opaque.addr == raw.ctypes.data  # in place
    assert buffer_of(py.uop.src[0]).allocator.adopt_host(raw.reshape(-1)) is None
    want = gguf.quants.dequantize(q, Q.Q4_1)
    assert _bits_equal(f.tensor("w", "CPU").numpy(), want) and _bits_equal(f.tensor("w", "PYTHON").numpy(), want)
    np.testing.assert_array_equal(py.numpy().reshape(-1), raw.reshape(-1))
    with pytest.raises(BufferError):  # a weight still uses the map: closing it is refused, not a dangling pointer
        f.close()
