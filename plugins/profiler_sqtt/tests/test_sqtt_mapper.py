"""The instruction mapper on the real captures (the plus kernel's instructions, checked against llvm-objdump) and on
synthetic traces of a compiled loop kernel (branches taken and not, s_delay_alu, two waves, another unit)."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import sqtt_reference as ref

pytest.importorskip("tg_amd")
pytest.importorskip("tg_mockgpu")

from tg_amd.compiler import AMDCompiler  # noqa: E402
from tg_profiler_sqtt.mapper import KernelCode, MappingError, kernel_code, map_instructions  # noqa: E402
from tg_profiler_sqtt.sqtt import decode  # noqa: E402

OBJDUMP = "llvm-objdump-19"


def program(run: str) -> bytes:
    meta = ref.run_meta(run)
    return (ref.CAPTURES / run / meta["programs"][0]["file"]).read_bytes()


def objdump(elf: bytes, tmp_path) -> dict[int, str]:
    """Instruction text by address, from LLVM's disassembler (the independent oracle)."""
    path = tmp_path / "k.elf"
    path.write_bytes(elf)
    out = subprocess.run([OBJDUMP, "-d", "--mcpu=gfx1100", str(path)], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    lines = re.findall(r"^\s+(\S.*?)\s+// ([0-9A-F]{12}):", out, re.M)
    return {int(addr, 16): text for text, addr in lines}


@pytest.mark.parametrize("run", [r for r in ref.RUNS if r.startswith("plus")])
def test_plus_maps_onto_its_real_instructions(run, tmp_path):
    code = kernel_code(program(run))
    assert code.name == "E_3"
    waves = [se for se in range(6) if decode(ref.stream(run, se)).count("WAVESTART")]
    assert len(waves) == 1
    mapped = list(map_instructions(ref.stream(run, waves[0]), code))
    pcs = [pc for _, _, pc in mapped]
    # straight-line code: every instruction once, in order, from the entry to s_endpgm
    assert pcs[0] == code.entry and pcs == sorted(set(pcs)) and len(pcs) == 12
    assert mapped[-1][0].kind == "WAVEEND" and mapped[-1][1] == "s_endpgm"
    kinds = [p.kind for p, _, _ in mapped]
    assert kinds.count("VALUINST") == 2 and kinds.count("INST") == 5 and kinds.count("IMMEDIATE") == 4
    if shutil.which(OBJDUMP) is None:
        pytest.skip(f"needs {OBJDUMP} for the text check (apt-get install llvm-19)")
    llvm = objdump(program(run), tmp_path)
    # each PC is the next instruction LLVM sees (nothing skipped), and the texts agree
    assert pcs == sorted(a for a in llvm if code.entry <= a <= pcs[-1])
    assert [text for _, text, _ in mapped] == [llvm[pc] for pc in pcs]


@pytest.mark.parametrize("run", ref.RUNS)
def test_only_the_wave_se_maps(run):
    code = kernel_code(program(run))
    for s in ref.run_meta(run)["sqtt"]:
        trace = decode(ref.stream(run, s["se"]))
        mapped = list(map_instructions(trace, code))
        assert len(mapped) == (0 if not trace.count("WAVESTART") else 1 if run.startswith("empty") else 12)
        if run.startswith("empty") and mapped:  # the empty kernel is its s_endpgm
            assert [(p.kind, text, pc) for p, text, pc in mapped] == [("WAVEEND", "s_endpgm", code.entry)]


# ---- synthetic traces of a compiled kernel --------------------------------------------------------------------

LOOP = """target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @loop(ptr addrspace(1) noalias %out, i32 %n) "amdgpu-flat-work-group-size"="1,32" {
entry:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %tf = uitofp i32 %t to float
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%i1, %loop]
  %acc = phi float [0.0, %entry], [%acc1, %loop]
  %m = fmul float %acc, %tf
  %acc1 = fadd float %m, 1.0
  %i1 = add i32 %i, 1
  %c = icmp slt i32 %i1, %n
  br i1 %c, label %loop, label %done
done:
  %p = getelementptr float, ptr addrspace(1) %out, i32 %t
  store float %acc1, ptr addrspace(1) %p
  ret void
}
"""


@pytest.fixture(scope="module")
def loop() -> KernelCode:
    return kernel_code(AMDCompiler().compile(LOOP))


def walk(code: KernelCode, trips: int) -> list[tuple[int, bool | None]]:
    """The (pc, branch taken) path of a wave through `code`: backward branches taken until the loop ran `trips`
    times, forward ones not; s_delay_alu left out (it issues no packet)."""
    from tg_mockgpu.rdna3.decode import branch_target
    path, pc, taken_back = [], code.entry, 0
    while True:
        inst = code.instruction(pc)
        if inst.op.startswith(("s_branch", "s_cbranch")):
            target = branch_target(inst)
            taken = inst.op == "s_branch" or (target < pc and taken_back < trips - 1)
            taken_back += taken and target < pc
            path.append((pc, taken))
            pc = target if taken else pc + inst.size
            continue
        if inst.op != "s_delay_alu":
            path.append((pc, None))
        if inst.op == "s_endpgm":
            return path
        pc += inst.size


def packet_for(code: KernelCode, pc: int, taken: bool | None, wave: int, simd: int = 0) -> tuple[str, int]:
    """The packet the hardware writes when `wave` issues the instruction at `pc` (amd.md section 9's classes)."""
    inst = code.instruction(pc)
    if inst.op == "s_endpgm":
        return "WAVEEND", ref.packet_bits("WAVEEND", wave=wave, simd=simd, delta=1)
    if taken is not None:
        return "INST", ref.packet_bits("INST", wave=wave, op=0x3 if taken else 0x4, delta=2)
    if inst.enc == "SOPP":
        return "IMMEDIATE", ref.packet_bits("IMMEDIATE", wave=wave, delta=1)
    if inst.enc.startswith("VOP"):
        return "VALUINST", ref.packet_bits("VALUINST", wave=wave, delta=1)
    op = {"SMEM": 0x1, "SOP1": 0x0, "SOP2": 0x0, "SOPC": 0x0, "SOPK": 0x0}.get(inst.enc)
    if op is None:
        op = 0x24 if "store" in inst.op else 0x21
    return "INST", ref.packet_bits("INST", wave=wave, op=op, delta=1)


def start(wave: int, simd: int = 0) -> tuple[str, int]:
    return "WAVESTART", ref.packet_bits("WAVESTART", wave=wave, simd=simd, delta=1)


@pytest.mark.parametrize("trips", [1, 2, 5])
def test_loop_follows_taken_and_not_taken_branches(loop, trips):
    path = walk(loop, trips)
    items = [ref.header(), start(0)] + [packet_for(loop, pc, taken, 0) for pc, taken in path]
    mapped = list(map_instructions(ref.encode(items), loop))
    assert [pc for _, _, pc in mapped] == [pc for pc, _ in path]
    texts = [text for _, text, _ in mapped]
    assert texts.count("v_mul_f32_e32 v1, v1, v2") == trips and texts[-1] == "s_endpgm"
    assert "s_delay_alu" not in " ".join(texts)


def test_two_waves_interleaved_and_another_unit_ignored(loop):
    # waves 0 and 1 of the traced unit run the loop 2 and 3 times, their packets interleaved; a wave of SIMD 1
    # (not traced: only its start and end are in the stream) comes and goes in between
    a, b = walk(loop, 2), walk(loop, 3)
    items = [ref.header(), start(0), start(1), start(4, simd=1)]
    # both waves are at their first instruction, an s_clause: one IMMEDIATE_MASK stands for both
    assert loop.instruction(a[0][0]).enc == "SOPP"
    items.append(("IMMEDIATE_MASK", ref.packet_bits("IMMEDIATE_MASK", mask=0b11, delta=1)))
    for i in range(1, max(len(a), len(b))):
        for wave, path in ((0, a), (1, b)):
            if i < len(path):
                items.append(packet_for(loop, *path[i], wave))
        if i == 5:
            items.append(("WAVEEND", ref.packet_bits("WAVEEND", wave=4, simd=1, delta=1)))
    mapped = list(map_instructions(ref.encode(items), loop))
    assert [(m.packet.kind, m.wave) for m in mapped[:2]] == [("IMMEDIATE_MASK", 0), ("IMMEDIATE_MASK", 1)]
    by_wave: dict[int, list[int]] = {0: [], 1: []}
    for m in mapped:
        by_wave[m.wave].append(m.pc)
    assert by_wave == {0: [pc for pc, _ in a], 1: [pc for pc, _ in b]}


# ---- disagreement is an error -------------------------------------------------------------------------------------

def test_wrong_packet_class(loop):
    items = [ref.header(), start(0), ("VALUINST", ref.packet_bits("VALUINST", wave=0))]
    with pytest.raises(MappingError, match=r"VALUINST at nibble offset 24 \(wave 0\) is not 's_clause 0x1' at PC "
                                           r"offset 0x0 of loop: expected an instruction encoded as VINTERP or VOP1"):
        list(map_instructions(ref.encode(items), loop))


def test_branch_without_jump_packet(loop):
    path = walk(loop, 2)
    items = [ref.header(), start(0)] + [packet_for(loop, pc, None, 0) for pc, _ in path]  # branches as IMMEDIATE
    with pytest.raises(MappingError, match="s_cbranch_scc1 .* expected a JUMP or JUMP_NO packet for a branch"):
        list(map_instructions(ref.encode(items), loop))


def test_early_waveend(loop):
    items = [ref.header(), start(0), ("WAVEEND", ref.packet_bits("WAVEEND", wave=0))]
    with pytest.raises(MappingError, match=r"WAVEEND at nibble offset 24 \(wave 0\) is not 's_clause 0x1' .* "
                                           "expected s_endpgm"):
        list(map_instructions(ref.encode(items), loop))


def test_instruction_of_a_wave_that_never_started(loop):
    items = [ref.header(), start(0), ("IMMEDIATE", ref.packet_bits("IMMEDIATE", wave=3))]
    with pytest.raises(MappingError, match="IMMEDIATE at nibble offset 24 is an instruction of wave 3, which has no "
                                           "WAVESTART"):
        list(map_instructions(ref.encode(items), loop))


def test_kernel_names():
    elf = program(ref.RUNS[0])
    with pytest.raises(ValueError, match="no kernel 'nope' in the code object; kernels: E"):
        kernel_code(elf, "nope")
    assert kernel_code(elf, "E").entry == kernel_code(elf).entry
