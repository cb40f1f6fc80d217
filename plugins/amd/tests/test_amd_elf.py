"""tg-amd's ELF reader against LLVM's own tools: llvm-readelf-19 (sections, symbols, relocations, section bytes) and
llvm-objdump-19 (the kernel descriptor decoded as .amdhsa directives, instructions) on several compiled kernels."""
from __future__ import annotations

import functools
import re
import shutil
import struct
import subprocess

import pytest

from tg_amd.elf import GFX1100, SHF_ALLOC, ELFError, KernelResourceError, check_resources, load_code_object, read_elf
from tg_amd.interface import DESCRIPTOR_SIZE, KernelDescriptor

from amd_kernels import ABS_IR, LDS_IR, SCRATCH_IR, TABLE_IR, compile_ast, compile_ir, rowmax, saxpy, scaled

READELF, OBJDUMP = "llvm-readelf-19", "llvm-objdump-19"
pytestmark = pytest.mark.skipif(not (shutil.which(READELF) and shutil.which(OBJDUMP)),
                                reason="needs llvm-19's llvm-readelf-19 and llvm-objdump-19 (apt-get install llvm-19)")

KERNELS = {
    "saxpy": lambda: compile_ast(saxpy())[0],
    "rowmax": lambda: compile_ast(rowmax())[0],
    "scaled": lambda: compile_ast(scaled())[0],
    "table": lambda: compile_ir(TABLE_IR),
    "lds": lambda: compile_ir(LDS_IR),
    "scratch": lambda: compile_ir(SCRATCH_IR),
    "abs": lambda: compile_ir(ABS_IR),
}


@functools.cache
def obj(name: str) -> bytes:
    return KERNELS[name]()


def tool(tmp_path, data: bytes, *args: str) -> str:
    path = tmp_path / "k.o"
    path.write_bytes(data)
    return subprocess.run([*args, str(path)], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("name", list(KERNELS))
def test_sections_match_readelf(tmp_path, name):
    out = tool(tmp_path, obj(name), READELF, "-S", "--wide")
    rows = re.findall(r"\[\s*(\d+)\]\s+(\S*)\s+(\S+)\s+([0-9a-f]{16}) ([0-9a-f]{6}) ([0-9a-f]{6}) ([0-9a-f]{2})\s+(\S*)\s+"
                      r"(\d+)\s+(\d+)\s+(\d+)", out)
    elf = read_elf(obj(name))
    assert len(rows) == len(elf.sections)
    types = {"NULL": 0, "PROGBITS": 1, "SYMTAB": 2, "STRTAB": 3, "RELA": 4, "NOTE": 7, "NOBITS": 8}
    for idx, nm, typ, addr, off, size, _es, flg, link, info, align in rows:
        s = elf.sections[int(idx)]
        assert (s.name, s.type, s.addr, s.offset, s.size, s.link, s.info, s.addralign) == (
            nm, types[typ], int(addr, 16), int(off, 16), int(size, 16), int(link), int(info), int(align)), nm
        assert bool(s.flags & SHF_ALLOC) == ("A" in flg)


@pytest.mark.parametrize("name", list(KERNELS))
def test_symbols_match_readelf(tmp_path, name):
    out = tool(tmp_path, obj(name), READELF, "-s", "--wide")
    rows = re.findall(r"^\s*(\d+): ([0-9a-f]{16})\s+(\d+) (\w+)\s+(\w+)\s+(\w+)\s+(\w+) ?(\S*)$", out, re.M)
    elf = read_elf(obj(name))
    assert len(rows) == len(elf.symbols)
    types, binds = {"NOTYPE": 0, "OBJECT": 1, "FUNC": 2, "SECTION": 3}, {"LOCAL": 0, "GLOBAL": 1, "WEAK": 2}
    vis = {"DEFAULT": 0, "INTERNAL": 1, "HIDDEN": 2, "PROTECTED": 3}
    for num, value, size, typ, bind, v, ndx, nm in rows:
        s = elf.symbols[int(num)]
        shndx = {"UND": 0, "ABS": 0xFFF1}.get(ndx, None)
        assert (elf.display_name(s), s.value, s.size, s.type, s.bind, s.other) == (nm, int(value, 16), int(size), types[typ],
                                                                      binds[bind], vis[v])
        assert s.shndx == (shndx if shndx is not None else int(ndx))


@pytest.mark.parametrize("name", list(KERNELS))
def test_relocations_match_readelf(tmp_path, name):
    out = tool(tmp_path, obj(name), READELF, "-r", "--wide")
    elf = read_elf(obj(name))
    sections = re.split(r"Relocation section '", out)[1:]
    theirs = []
    for block in sections:
        target = block.split("'")[0].removeprefix(".rela")
        for off, typ, sym, addend in re.findall(r"^([0-9a-f]{16})\s+[0-9a-f]{16} (R_AMDGPU_\w+)\s+[0-9a-f]{16} (\S+) \+ ([0-9a-f]+)",
                                                block, re.M):
            theirs.append((target, int(off, 16), typ, sym, int(addend, 16)))
    names = {1: "ABS32_LO", 2: "ABS32_HI", 3: "ABS64", 4: "REL32", 5: "REL64", 6: "ABS32", 10: "REL32_LO",
             11: "REL32_HI", 13: "RELATIVE64"}
    ours = [(elf.sections[r.section].name, r.offset, f"R_AMDGPU_{names[r.type]}", elf.display_name(elf.symbols[r.symbol]),
             r.addend)
            for r in elf.relocations]
    assert ours == theirs and ours


def descriptor_directives(tmp_path, data: bytes) -> dict[str, dict[str, int]]:
    """llvm-objdump's decoding of every kernel descriptor: kernel -> {directive or comment name: value}."""
    out = tool(tmp_path, data, OBJDUMP, "-D", "--mcpu=gfx1100", "-j", ".rodata")
    kernels = {}
    for name, body in re.findall(r"\.amdhsa_kernel (\S+)\n(.*?)\.end_amdhsa_kernel", out, re.S):
        fields = dict(re.findall(r"\.amdhsa_(\w+) (\d+)", body))
        fields.update(re.findall(r"; ([A-Z_0-9]+) (\d+)", body))
        kernels[name] = {k: int(v) for k, v in fields.items()}
    return kernels


# objdump directive -> our decoded field
_DIRECTIVES = {
    "group_segment_fixed_size": lambda d: d.group_segment_fixed_size,
    "private_segment_fixed_size": lambda d: d.private_segment_fixed_size,
    "kernarg_size": lambda d: d.kernarg_size,
    "next_free_vgpr": lambda d: d.vgprs(),
    "float_round_mode_32": lambda d: d.float_round_mode_32,
    "float_round_mode_16_64": lambda d: d.float_round_mode_16_64,
    "float_denorm_mode_32": lambda d: d.float_denorm_mode_32,
    "float_denorm_mode_16_64": lambda d: d.float_denorm_mode_16_64,
    "dx10_clamp": lambda d: d.dx10_clamp,
    "ieee_mode": lambda d: d.ieee_mode,
    "workgroup_processor_mode": lambda d: d.wgp_mode,
    "memory_ordered": lambda d: d.mem_ordered,
    "forward_progress": lambda d: d.fwd_progress,
    "enable_private_segment": lambda d: d.enable_private_segment,
    "system_sgpr_workgroup_id_x": lambda d: d.enable_sgpr_workgroup_id[0],
    "system_sgpr_workgroup_id_y": lambda d: d.enable_sgpr_workgroup_id[1],
    "system_sgpr_workgroup_id_z": lambda d: d.enable_sgpr_workgroup_id[2],
    "system_sgpr_workgroup_info": lambda d: d.enable_sgpr_workgroup_info,
    "system_vgpr_workitem_id": lambda d: d.enable_vgpr_workitem_id,
    "user_sgpr_dispatch_ptr": lambda d: d.enables("dispatch_ptr"),
    "user_sgpr_queue_ptr": lambda d: d.enables("queue_ptr"),
    "user_sgpr_kernarg_segment_ptr": lambda d: d.enables("kernarg_segment_ptr"),
    "user_sgpr_dispatch_id": lambda d: d.enables("dispatch_id"),
    "user_sgpr_private_segment_size": lambda d: d.enables("private_segment_size"),
    "wavefront_size32": lambda d: d.wavefront32,
    "uses_dynamic_stack": lambda d: d.uses_dynamic_stack,
    "SHARED_VGPR_COUNT": lambda d: d.shared_vgpr_count,
    "INST_PREF_SIZE": lambda d: d.inst_pref_size,
}


@pytest.mark.parametrize("name", list(KERNELS))
def test_descriptor_matches_objdump(tmp_path, name):
    data = obj(name)
    theirs = descriptor_directives(tmp_path, data)
    code = load_code_object(data)
    assert set(theirs) == set(code.kernels)
    for kname, fields in theirs.items():
        desc = code.kernel(kname).descriptor
        checked = [f for f in _DIRECTIVES if f in fields]
        assert len(checked) >= 25, f"objdump printed too few known directives: {sorted(fields)}"
        for f in checked:
            assert int(_DIRECTIVES[f](desc)) == fields[f], f"{kname}: {f}"


@pytest.mark.parametrize("name", list(KERNELS))
def test_descriptor_bytes_and_entry(tmp_path, name):
    """The descriptor is the 64 bytes readelf dumps at the .kd symbol, with the entry offset relocated to point at
    the kernel's code (llvm-objdump's address of the kernel symbol, in our image)."""
    data = obj(name)
    elf = read_elf(data)
    code = load_code_object(data)
    hexdump = tool(tmp_path, data, READELF, "-x", ".rodata")
    raw = bytes.fromhex("".join("".join(line.split()[1:5]) for line in hexdump.splitlines() if line.startswith("0x")))
    for k in code.kernels.values():
        sym = elf.symbol(k.name + ".kd")
        file_bytes = raw[sym.value:sym.value + DESCRIPTOR_SIZE]
        assert struct.unpack_from("<q", file_bytes, 16)[0] == 0  # unrelocated in the file
        assert k.descriptor.to_bytes()[:16] + k.descriptor.to_bytes()[24:] == file_bytes[:16] + file_bytes[24:]
        assert KernelDescriptor.from_bytes(file_bytes).compute_pgm_rsrc2 == k.descriptor.compute_pgm_rsrc2
        assert code.image[k.descriptor_offset:k.descriptor_offset + 64] == k.descriptor.to_bytes()
        assert k.descriptor_offset + k.descriptor.kernel_code_entry_byte_offset == k.code_offset
        text = elf.section(".text")
        image = bytearray(code.image[k.code_offset:k.code_offset + text.size])  # .text is placed first
        for r in elf.relocations:
            if r.section == text.index:  # patched words are checked in test_constant_table_relocations
                image[r.offset:r.offset + 4] = text.data[r.offset:r.offset + 4]
        assert image == text.data
        assert k.code_size == elf.symbol(k.name).size


def test_user_and_system_sgprs():
    """The SGPR layout is read from the descriptor, never assumed: gfx1100 pads the user SGPRs (amd.md 1.2)."""
    for name, want_sys in [("saxpy", {"workgroup_id_x": 15}), ("rowmax", {"workgroup_id_x": 14, "workgroup_id_y": 15})]:
        d = next(iter(load_code_object(obj(name)).kernels.values())).descriptor
        assert d.user_sgprs == {"kernarg_segment_ptr": 0}
        assert d.system_sgprs == want_sys and d.wavefront32


def test_constant_table_relocations(tmp_path):
    """REL32_LO/HI literals: s_getpc_b64's result (the next instruction's address) plus the 64-bit literal pair
    is where the table's bytes are in our image."""
    data = obj("table")
    dis = tool(tmp_path, data, OBJDUMP, "-d", "--mcpu=gfx1100")
    getpc = int(re.search(r"s_getpc_b64.*// ([0-9A-F]+):", dis).group(1), 16)
    code = load_code_object(data)
    elf = read_elf(data)
    lo_rel, hi_rel = sorted((r for r in elf.relocations if r.type in (10, 11)), key=lambda r: r.type)
    text_at = code.kernels["table_lookup"].code_offset  # .text is placed at its symbol's section offset
    lo = struct.unpack_from("<I", code.image, text_at + lo_rel.offset)[0]
    hi = struct.unpack_from("<I", code.image, text_at + hi_rel.offset)[0]
    target = (text_at + getpc + 4 + (hi << 32 | lo)) & (2**64 - 1)
    table = struct.pack("<8I", 3, 1, 4, 1, 5, 9, 2, 6)
    assert code.image[target:target + 32] == table
    assert code.image.count(table) == 1


def test_lds_and_scratch_sizes():
    lds = load_code_object(obj("lds")).kernel("lds_reverse").descriptor
    assert lds.group_segment_fixed_size == 256 * 4 and not lds.enable_private_segment
    scratch = load_code_object(obj("scratch")).kernel("scratch_pick").descriptor
    assert scratch.private_segment_fixed_size >= 64 * 4 and scratch.enable_private_segment


def _patched(data: bytes, field_offset: int, fmt: str, value: int) -> bytes:
    """`data` with one descriptor field of its first kernel overwritten in the file."""
    elf = read_elf(data)
    kd = next(s for s in elf.symbols if s.name.endswith(".kd"))
    at = elf.sections[kd.shndx].offset + kd.value + field_offset
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def test_too_much_lds_is_refused():
    bad = _patched(obj("lds"), 0, "<I", 65536 + 512)
    with pytest.raises(KernelResourceError, match=r"lds_reverse.*LDS bytes per workgroup: needs 66048, the target has 65536"):
        load_code_object(bad)


def test_too_much_scratch_is_refused():
    bad = _patched(obj("scratch"), 4, "<I", 1 << 20)
    with pytest.raises(KernelResourceError, match=r"scratch bytes per work-item: needs 1048576, the target has 262136"):
        load_code_object(bad)


def test_too_many_vgprs_is_refused():
    d = load_code_object(obj("saxpy")).kernel("saxpy").descriptor
    bad = _patched(obj("saxpy"), 48, "<I", (d.compute_pgm_rsrc1 & ~0x3F) | 40)  # 41 granules of 8
    with pytest.raises(KernelResourceError, match=r"VGPRs per work-item: needs 328, the target has 256"):
        load_code_object(bad)


def test_bad_files():
    with pytest.raises(ELFError, match="not an ELF"):
        load_code_object(b"MZ" + bytes(100))
    data = bytearray(obj("saxpy"))
    data[18:20] = (62).to_bytes(2, "little")  # EM_X86_64
    with pytest.raises(ELFError, match="e_machine is 62"):
        load_code_object(bytes(data))


def test_too_many_sgprs_is_refused():
    """SGPRs are counted by the metadata note (RDNA allocates them per wave, the descriptor has no count)."""
    k = load_code_object(obj("saxpy")).kernel("saxpy")
    assert k.metadata[".sgpr_count"] <= 108
    with pytest.raises(KernelResourceError, match=r"saxpy does not fit gfx1100: SGPRs: needs 120, the target has 108"):
        check_resources("saxpy", k.descriptor, {**k.metadata, ".sgpr_count": 120}, GFX1100)


def test_absolute_relocation_is_applied_at_the_load_address():
    """ABS64 (a pointer in constant data) is kept for image_at(base): the slot then holds base + the table's offset."""
    code = load_code_object(obj("abs"))
    (rel,) = code.absolute_relocations
    table = struct.pack("<4I", 11, 22, 33, 44)
    assert rel.type == 3 and code.image[rel.value:rel.value + 16] == table
    assert code.image[rel.offset:rel.offset + 8] == bytes(8)
    for base in (0, 0x7F10_0000_0000):
        image = code.image_at(base)
        assert struct.unpack_from("<Q", image, rel.offset)[0] == base + rel.value
    with pytest.raises(ValueError, match="256-byte aligned"):
        code.image_at(0x1080)


def test_unsupported_relocation_type_is_named():
    data = bytearray(obj("saxpy"))
    rela = read_elf(bytes(data)).section(".rela.rodata")
    struct.pack_into("<I", data, rela.offset + 8, 7)  # r_info's type: R_AMDGPU_GOTPCREL, which needs a GOT
    with pytest.raises(ELFError, match=r"relocation type 7 at \.rodata\+0x10 is not supported; tg-amd applies .*REL64 \(5\)"):
        load_code_object(bytes(data))
