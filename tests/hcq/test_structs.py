"""Patched C structs (tg_core/hcq/structs.py) against ctypes.Structure, the independent reference for C layouts."""
from __future__ import annotations

import ctypes

import pytest

from tg_core.dtype import dtypes
from tg_core.hcq import ops as q
from tg_core.hcq.structs import Array, Pointer, Struct
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

CT = {dtypes.bool: ctypes.c_bool, dtypes.int8: ctypes.c_int8, dtypes.uint8: ctypes.c_uint8,
      dtypes.int16: ctypes.c_int16, dtypes.uint16: ctypes.c_uint16, dtypes.int32: ctypes.c_int32,
      dtypes.uint32: ctypes.c_uint32, dtypes.int64: ctypes.c_int64, dtypes.uint64: ctypes.c_uint64,
      dtypes.float32: ctypes.c_float, dtypes.float64: ctypes.c_double}


def ctype_of(t):
    if isinstance(t, Array):
        return ctype_of(t.elem) * t.n
    if isinstance(t, Pointer):
        return ctypes.c_void_p
    if isinstance(t, Struct):
        return to_ctypes(t)
    return CT[t]


def to_ctypes(s: Struct, pack: bool = False) -> type[ctypes.Structure]:
    attrs = {"_fields_": [(f.name, ctype_of(f.type)) for f in s.fields.values()]}
    if pack:
        attrs["_pack_"] = 1
    return type(s.name, (ctypes.Structure,), attrs)


INNER = Struct.c("inner", [("tag", dtypes.uint8), ("value", dtypes.float64), ("n", dtypes.int16)])
LAYOUTS = {
    "scalars": [("a", dtypes.uint8), ("b", dtypes.uint32), ("c", dtypes.uint16), ("d", dtypes.uint64),
                ("e", dtypes.int8)],
    "floats": [("flag", dtypes.bool), ("x", dtypes.float32), ("y", dtypes.float64), ("z", dtypes.int32)],
    "arrays": [("name", Array(dtypes.uint8, 13)), ("words", Array(dtypes.uint32, 3)), ("wide", dtypes.uint64)],
    "nested": [("head", dtypes.uint8), ("inner", INNER), ("ptr", Pointer()), ("pair", Array(INNER, 2)),
               ("tail", dtypes.uint16)],
    "aql_like": [("header", dtypes.uint16), ("setup", dtypes.uint16), ("wg", Array(dtypes.uint16, 3)),
                 ("reserved0", dtypes.uint16), ("grid", Array(dtypes.uint32, 3)), ("private_size", dtypes.uint32),
                 ("group_size", dtypes.uint32), ("kernel_object", dtypes.uint64), ("kernarg", Pointer()),
                 ("reserved2", dtypes.uint64), ("completion_signal", dtypes.uint64)],
}


@pytest.mark.parametrize("packed", [False, True], ids=["aligned", "packed"])
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_c_layout_matches_ctypes(name, packed):
    s = Struct.c(name, LAYOUTS[name], packed=packed)
    ref = to_ctypes(s, pack=packed)
    assert s.size == ctypes.sizeof(ref)
    assert s.align == ctypes.alignment(ref)
    for f in s.fields.values():
        assert f.offset == getattr(ref, f.name).offset, f.name
    if name == "aql_like" and not packed:
        assert s.size == 64 and s.offset("kernarg") == 40  # hsa_kernel_dispatch_packet_t


def test_an_explicit_table_is_checked_and_equals_the_c_layout():
    s = Struct("desc", [("ring", Pointer(), 0), ("size", dtypes.uint32, 8), ("flags", dtypes.uint8, 12),
                        ("doorbell", dtypes.uint64, 16)])
    assert (s.size, s.align) == (24, 8)
    assert {f.name: f.offset for f in s.fields.values()} == \
        {f.name: f.offset for f in Struct.c("desc", [(f.name, f.type) for f in s.fields.values()]).fields.values()}
    assert Struct("padded", [("a", dtypes.uint32, 4)], size=16).size == 16


def test_constant_fields_give_the_bytes_ctypes_gives():
    s = Struct.c("nested", LAYOUTS["nested"])
    vals = {"head": 0xAB, "inner": {"tag": 7, "value": -2.5, "n": -300}, "ptr": 0x1234_5678_9ABC,
            "pair": [{"tag": 1, "value": 1e300}, {"n": 32767}], "tail": 65535}
    got = s.build(s.placeholder("HCQREF"), vals)
    ref = to_ctypes(s)()
    ref.head, ref.inner.tag, ref.inner.value, ref.inner.n = 0xAB, 7, -2.5, -300
    ref.ptr, ref.pair[0].tag, ref.pair[0].value, ref.pair[1].n, ref.tail = 0x1234_5678_9ABC, 1, 1e300, 32767, 65535
    assert got.blob == bytes(ref) and got.patches == ()

    a = Struct.c("arrays", LAYOUTS["arrays"])
    got = a.build(a.placeholder("HCQREF"), {"name": b"queue", "words": [1, 2**32 - 1], "wide": 2**64 - 1})
    ref = to_ctypes(a)((ctypes.c_uint8 * 13)(*b"queue"), (ctypes.c_uint32 * 3)(1, 2**32 - 1), 2**64 - 1)
    assert got.blob == bytes(ref)

    f = Struct.c("floats", LAYOUTS["floats"])
    got = f.build(f.placeholder("HCQREF"), {"flag": True, "x": 0.1, "y": float("inf"), "z": -(2**31)})
    assert got.blob == bytes(to_ctypes(f)(True, 0.1, float("inf"), -(2**31)))


def test_symbolic_fields_are_patch_slots_at_the_ctypes_offsets():
    s = Struct.c("aql_like", LAYOUTS["aql_like"], per_run=["grid[0]", "completion_signal"])
    args = q.placeholder("kernargs", 64, "HCQREF")
    n = UOp.variable("n", 1, 1024, dtypes.uint32)
    sig = q.addr(q.input_ref(0, "HCQREF", 8), 8)
    got = s.build(s.placeholder("HCQREF"), {"header": 0x1502, "grid": [n * 64, 1, 1], "kernarg": q.addr(args),
                                            "kernel_object": q.addr(args, 16) >> 8, "completion_signal": sig})
    ref = to_ctypes(s)
    by_field = {p.field: p for p in got.patches}
    assert list(by_field) == ["grid[0]", "kernel_object", "kernarg", "completion_signal"]
    assert by_field["grid[0]"].offset == ref.grid.offset
    assert by_field["kernel_object"].offset == ref.kernel_object.offset
    assert by_field["kernarg"].offset == ref.kernarg.offset
    assert by_field["completion_signal"].offset == ref.completion_signal.offset
    assert [p.field for p in got.run_patches] == ["grid[0]", "completion_signal"]
    assert [p.dtype for p in got.patches] == [dtypes.uint32] + [dtypes.uint64] * 3
    # the other grid sizes are constants: they land in the blob; a variable there would be a link-time error
    assert got.blob[ref.grid.offset + 4:ref.grid.offset + 12] == (1).to_bytes(4, "little") * 2
    with pytest.raises(ValueError, match=r"field grid\[1\] \(uint\) is patched once at link, but its value depends on "
                                         r"the variable 'n'"):
        s.build(s.placeholder("HCQREF"), {"grid": [n, n, 1], "completion_signal": sig})
    with pytest.raises(ValueError, match=r"completion_signal patched per run but given no value"):
        s.build(s.placeholder("HCQREF"), {"grid": [n]})
    with pytest.raises(ValueError, match=r"field grid \(uint\[3\]\) has elements patched per run; give it a list"):
        s.build(s.placeholder("HCQREF"), {"grid": bytes(4), "completion_signal": sig})


def test_names_are_variables_and_per_run_fields_are_checked():
    s = Struct.c("knl", [("addr", Pointer()), ("count", dtypes.uint32), ("pad", dtypes.uint32)], per_run=["count"])
    mem = s.placeholder("HCQREF")
    got = s.build(mem, {"addr": q.addr(q.placeholder("buf", 16, "HCQREF")), "count": "n"})
    (p,) = got.run_patches
    assert p.value.op is Ops.DEFINE_VAR and p.value.arg == ("n", 0, 2**32 - 1) and p.value.dtype is dtypes.uint32
    assert p.offset == 8
    with pytest.raises(ValueError, match=r"field count \(uint\) is patched per run, but its value 5 is known at link"):
        s.build(mem, {"count": 5})
    with pytest.raises(ValueError, match=r"struct knl: count patched per run but given no value"):
        s.build(mem, {})
    with pytest.raises(ValueError, match=r"field addr \(void\*\) is patched once at link, but its value depends on "
                                         r"the address of input 0"):
        s.build(mem, {"addr": q.addr(q.input_ref(0, "HCQREF", 16)), "count": "n"})
    with pytest.raises(ValueError, match=r"field pad \(uint\) is patched once at link, but its value depends on the "
                                         r"variable 'm'.*per_run"):
        s.build(mem, {"count": "n", "pad": "m"})


def test_pointers_to_patched_structs_nest_and_each_struct_is_written_once():
    leaf = Struct.c("leaf", [("v", dtypes.uint32)])
    mid = Struct.c("mid", [("leaf", Pointer(leaf)), ("x", dtypes.uint32)])
    top = Struct.c("top", [("a", Pointer(mid)), ("b", Pointer(mid)), ("l", Pointer(leaf))])
    lf = leaf.build(leaf.placeholder("HCQREF", key=1), {"v": 7})
    m1 = mid.build(mid.placeholder("HCQREF", key=1), {"leaf": lf, "x": 1})
    m2 = mid.build(mid.placeholder("HCQREF", key=2), {"leaf": lf, "x": 2})
    t = top.build(top.placeholder("HCQREF"), {"a": m1, "b": m2, "l": lf})
    assert [s.layout.name for s in t.tree()] == ["leaf", "mid", "mid", "top"]  # pointed-to first, leaf once
    assert [p.value for p in t.patches] == [q.addr(m1.ref), q.addr(m2.ref), q.addr(lf.ref)]
    stmts = t.stmts()
    blobs = [s for s in stmts if s.op is Ops.INS and s.arg[0] == "blob"]
    assert [b.src[0] for b in blobs] == [lf.ref, m1.ref, m2.ref, t.ref]
    assert len(stmts) == 4 + 2 + 3  # a blob per struct, a store per pointer
    with pytest.raises(TypeError, match=r"field l \(leaf\*\): points to a struct leaf, given a struct mid"):
        top.build(top.placeholder("HCQREF"), {"l": m1})


def test_offsets_by_path():
    s = Struct.c("nested", LAYOUTS["nested"])
    ref = to_ctypes(s)
    inner = to_ctypes(INNER)
    assert s.offset("pair[1].value") == ref.pair.offset + ctypes.sizeof(inner) + inner.value.offset
    with pytest.raises(KeyError, match=r"inner has no field 'nope' \(fields: tag, value, n\)"):
        s.offset("inner.nope")
    with pytest.raises(KeyError, match=r"\[2\] is not an element of struct inner\[2\]"):
        s.offset("pair[2]")


@pytest.mark.parametrize("fields, size, kw, err, match", [
    ([("a", dtypes.uint32, 2)], None, {}, ValueError, r"field a \(uint\) at offset 2 is not aligned to its 4-byte"),
    ([("a", dtypes.uint64, 0), ("b", dtypes.uint32, 4)], None, {}, ValueError,
     r"field b \[4, 8\) overlaps field a \[0, 8\)"),
    ([("a", dtypes.uint8, 0), ("a", dtypes.uint8, 1)], None, {}, ValueError, r"names \['a'\] appear more than once"),
    ([("a", dtypes.uint64, 0)], 4, {}, ValueError, r"size 4 does not hold its fields, which end at byte 8"),
    ([("a", dtypes.uint64, 0)], 12, {}, ValueError, r"size 12 is not a multiple of its alignment 8 \(allowed: 16"),
    ([("a", dtypes.uint8, 0)], None, {"per_run": ["b"]}, ValueError,
     r"per_run names 'b', which is not a field: 'b': s has no field 'b' \(fields: a\)"),
    ([("a", Array(dtypes.uint8, 4), 0)], None, {"per_run": ["a"]}, ValueError,
     r"per_run names 'a', a uchar\[4\]; only a scalar or a pointer is patched per run \(name its elements"),
    ([("a", dtypes.uint8, 0)], None, {"per_run": "a"}, TypeError, r"per_run is a list of field paths, got the string"),
    ([("a", dtypes.bfloat16, 0)], None, {}, TypeError, r"bfloat16, which has no C layout here; scalar types allowed"),
    ([("a", "u32", 0)], None, {}, TypeError, r"has type 'u32'; a field type is a scalar dtype"),
    ([("a", dtypes.uint8, -1)], None, {}, ValueError, r"the offset is a byte offset >= 0, got -1"),
    ([("a b", dtypes.uint8, 0)], None, {}, ValueError, r"a field name is an identifier, got 'a b'"),
    ([], None, {}, ValueError, r"struct s has no bytes"),
])
def test_bad_layouts_say_what_is_wrong(fields, size, kw, err, match):
    with pytest.raises(err, match=match):
        Struct("s", fields, size=size, **kw)


def test_packed_tables_allow_any_offset():
    s = Struct("p", [("a", dtypes.uint8, 0), ("b", dtypes.uint32, 1)], packed=True)
    assert (s.size, s.align) == (5, 1)
    assert s.build(s.placeholder("HCQREF"), {"a": 1, "b": 0x04030201}).blob == bytes([1, 1, 2, 3, 4])


@pytest.mark.parametrize("values, err, match", [
    ({"u8": 256}, ValueError, r"field u8 \(uchar\): 256 does not fit uchar \(allowed: 0..255\)"),
    ({"u8": -1}, ValueError, r"-1 does not fit uchar \(allowed: 0..255\)"),
    ({"i8": -129}, ValueError, r"-129 does not fit char \(allowed: -128..127\)"),
    ({"f32": 1e39}, ValueError, r"field f32 \(float\): 1e\+39 is out of float's range"),
    ({"u8": 1.5}, TypeError, r"an integer field takes an int, a name, a UOp .* got float 1.5"),
    ({"f32": "x"}, TypeError, r"a name stands for an integer variable; a float field takes constants only"),
    ({"u8": UOp.variable("n", 0, 300, dtypes.int32)}, ValueError,
     r"ranges over \[0, 300\], which does not fit uchar \[0, 255\] \(cast it explicitly"),
    ({"u8": UOp.variable("n", 0, 1.5, dtypes.float32)}, TypeError, r"a symbolic value must be an integer, got"),
    ({"arr": [1, 2, 3, 4, 5]}, ValueError, r"field arr \(ushort\[4\]\): 5 elements do not fit its 4"),
    ({"arr": bytes(9)}, ValueError, r"9 bytes do not fit its 8 bytes"),
    ({"arr": 3}, TypeError, r"an array's value is bytes or a sequence of elements, got int"),
    ({"nope": 1}, KeyError, r"struct bad: no field 'nope' \(fields: u8, i8, f32, arr\)"),
])
def test_bad_values_say_what_is_wrong(values, err, match):
    s = Struct.c("bad", [("u8", dtypes.uint8), ("i8", dtypes.int8), ("f32", dtypes.float32),
                         ("arr", Array(dtypes.uint16, 4))])
    with pytest.raises(err, match=match):
        s.build(s.placeholder("HCQREF"), values)


def test_an_explicit_cast_is_a_chosen_truncation():
    s = Struct.c("lo", [("lo", dtypes.uint32)])
    a = q.addr(q.placeholder("program", 256, "HCQREF"))
    with pytest.raises(ValueError, match=r"does not fit uint"):
        s.build(s.placeholder("HCQREF"), {"lo": a >> 8})
    (p,) = s.build(s.placeholder("HCQREF"), {"lo": (a >> 8).cast(dtypes.uint32)}).patches
    assert p.dtype is dtypes.uint32 and not p.per_run


@pytest.fixture
def hcqref():
    from tg_core.device import Device
    from tg_core.hcq.testing import hcqref_registry
    Device.reset(hcqref_registry())
    yield Device["HCQREF"]
    Device.reset()


def test_nested_structs_link_once_and_per_run_fields_change_per_run(hcqref):
    # through the real link (link.py) on the reference device: the pointers and the constant bytes are written
    # once; the run patches are the host program, which writes this run's variable values at every run
    from tg_core.device import Buffer, BufferSpec
    from tg_core.hcq.link import link
    from tg_core.hcq.refdev import at
    leaf = Struct.c("leaf", [("v", dtypes.uint32), ("n", dtypes.uint32)], per_run=["n"])
    inner = Struct.c("inner", [("tag", dtypes.uint8), ("k", dtypes.int64)], per_run=["k"])
    top = Struct.c("top", [("leaf", Pointer(leaf)), ("data", Pointer()), ("count", dtypes.uint32),
                           ("inner", inner)], per_run=["count"])
    data, top_mem = (Buffer("HCQREF", n, dtypes.uint8, BufferSpec(host=True)).ensure_allocated() for n in (64, top.size))
    n = UOp.variable("n", 0, 1000, dtypes.uint32)
    lf = leaf.build(leaf.placeholder("HCQREF"), {"v": 7, "n": "n"})
    t = top.build(q.mem(top_mem), {"leaf": lf, "data": q.addr(q.mem(data), 16), "count": n * 2,
                                   "inner": {"tag": 9, "k": UOp.variable("k", -5, 5, dtypes.int64)}})
    assert [(p.field, p.per_run) for p in t.patches] == [("leaf", False), ("data", False), ("count", True),
                                                         ("inner.k", True)]
    with pytest.raises(ValueError, match=r"struct top: inner.k patched per run but given no value"):
        top.build(q.mem(top_mem), {"leaf": lf, "count": n, "inner": {"tag": 1}})
    linked = link(q.linear(*t.stmts()), ["HCQREF"])
    assert linked.program.nstmts == 3  # leaf.n, top.count, top.inner.k; nothing else runs per run
    ref, ref_leaf = to_ctypes(top), to_ctypes(leaf)
    for nv, kv in ((3, -5), (500, 4)):
        linked.run(var_vals={"n": nv, "k": kv})
        got = ref.from_buffer_copy(hcqref.host_view(top_mem).tobytes())
        assert got.data == hcqref.address(data) + 16
        assert (got.count, got.inner.tag, got.inner.k) == (2 * nv, 9, kv)
        got_leaf = ref_leaf.from_buffer_copy(at(got.leaf, leaf.size).tobytes())
        assert (got_leaf.v, got_leaf.n) == (7, nv)
