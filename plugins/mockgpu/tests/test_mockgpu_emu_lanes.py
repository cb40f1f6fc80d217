"""Cross-lane and byte-permute instructions the LLM kernels use, against per-lane Python references written from the
RDNA3 ISA's pseudocode: ds_swizzle_b32 (QDMode and bitmask mode, every LLVM spelling and raw offsets),
ds_bpermute_b32 / ds_permute_b32 and v_perm_b32 (every selector value), with inactive lanes under EXEC.

Each case runs two waves; lane l loads data[l] into v2, addr[l] into v3, sel[l] into v5 and active[l] into v6,
sets EXEC to the lanes whose active word is nonzero (v_cmpx), runs the instruction into v4 (which starts as a
sentinel, so inactive lanes must keep it), restores EXEC and stores v4."""
from __future__ import annotations

import numpy as np
import pytest
from mockgpu_helpers import Runner, asm_kernel, assemble, ir_kernel, needs_llvm_mc

from tg_mockgpu.rdna3.decode import decode_all
from tg_mockgpu.rdna3.disasm import disasm

pytestmark = needs_llvm_mc

u32 = np.uint32
N = 64
SENTINEL = 0xDEADBEEF
KERNEL = """
s_load_b256 s[4:11], s[0:1], 0x0
s_load_b64 s[12:13], s[0:1], 0x20
v_lshlrev_b32 v1, 2, v0
v_mov_b32 v4, 0xdeadbeef
s_waitcnt lgkmcnt(0)
global_load_b32 v2, v1, s[6:7]
global_load_b32 v3, v1, s[8:9]
global_load_b32 v5, v1, s[10:11]
global_load_b32 v6, v1, s[12:13]
s_waitcnt vmcnt(0)
v_cmpx_ne_u32_e32 0, v6
{inst}
s_waitcnt lgkmcnt(0)
s_mov_b32 exec_lo, -1
global_store_b32 v1, v4, s[4:5]
"""


@pytest.fixture(scope="module")
def gpu():
    r = Runner()
    yield r
    r.close()


def run(gpu: Runner, inst: str, data, addr=None, sel=None, active=None) -> np.ndarray:
    cols = [data, np.zeros(N) if addr is None else addr, np.zeros(N) if sel is None else sel,
            np.ones(N) if active is None else active]
    bufs = [gpu.buffer(np.zeros(N, u32))] + [gpu.buffer(np.asarray(c, np.int64).astype(u32)) for c in cols]
    try:
        gpu.run(asm_kernel(KERNEL.format(inst=inst), vgprs=8), (1, 1, 1), (N, 1, 1), *bufs)
        return gpu.read(bufs[0], u32, N)
    finally:
        for b in bufs:
            gpu.gpu.free(b)


def swizzle_ref(offset: int, data: np.ndarray, active: np.ndarray) -> list[int]:
    """ds_swizzle_b32 per the ISA: each lane's source lane within its wave, 0 from an inactive source, the
    sentinel (unchanged v4) in an inactive lane."""
    out = []
    for lane in range(N):
        i, base = lane % 32, lane - lane % 32
        if offset & 0x8000:
            j = (i & ~3) + ((offset >> (2 * (i % 4))) & 3)
        else:
            j = ((i & (offset & 31)) | ((offset >> 5) & 31)) ^ ((offset >> 10) & 31)
        if not active[lane]:
            out.append(SENTINEL)
        else:
            out.append(int(data[base + j]) if active[base + j] else 0)
    return out


SWIZZLES = {   # LLVM's spelling -> the offset it encodes
    "swizzle(QUAD_PERM,3,2,1,0)": 0x801B, "swizzle(QUAD_PERM,1,1,3,0)": 0x8035, "swizzle(SWAP,1)": 0x041F,
    "swizzle(SWAP,16)": 0x401F, "swizzle(REVERSE,16)": 0x3C1F, "swizzle(REVERSE,4)": 0x0C1F,
    "swizzle(BROADCAST,8,5)": 0x00B8, "swizzle(BROADCAST,32,31)": 0x03E0, 'swizzle(BITMASK_PERM,"01pip")': 0x0907,
    "0x9234": 0x9234, "0xffff": 0xFFFF, "0": 0, "0x7fff": 0x7FFF,
}


@pytest.mark.parametrize("spelling", SWIZZLES)
@pytest.mark.parametrize("partial", [False, True])
def test_ds_swizzle(gpu, spelling, partial):
    rng = np.random.default_rng(len(spelling) + partial)
    data = rng.integers(0, 2**32, N)
    active = rng.integers(0, 2, N) if partial else np.ones(N, int)
    got = run(gpu, f"ds_swizzle_b32 v4, v2 offset:{spelling}", data, active=active)
    assert got.tolist() == swizzle_ref(SWIZZLES[spelling], data, active)


def test_ds_swizzle_random_offsets(gpu):
    rng = np.random.default_rng(9)
    data = rng.integers(0, 2**32, N)
    active = rng.integers(0, 2, N)
    for offset in rng.integers(0, 1 << 16, 12).tolist():
        got = run(gpu, f"ds_swizzle_b32 v4, v2 offset:{offset}", data, active=active)
        assert got.tolist() == swizzle_ref(offset, data, active), hex(offset)


def test_xor_butterfly_reduction(gpu):
    """The wave reduction the decode kernels use: five swizzle xor steps (16, 8, 4, 2, 1) with adds sum 32 lanes."""
    steps = "\n".join(f"ds_swizzle_b32 v7, v4 offset:swizzle(SWAP,{k})\ns_waitcnt lgkmcnt(0)\nv_add_nc_u32 v4, v4, v7"
                      for k in (16, 8, 4, 2, 1))
    data = np.random.default_rng(1).integers(0, 1 << 20, N)
    got = run(gpu, "v_mov_b32 v4, v2\n" + steps, data)
    assert got.tolist() == [int(data[:32].sum())] * 32 + [int(data[32:].sum())] * 32


def permute_ref(backward: bool, offset: int, data, addr, active) -> list[int]:
    out = [SENTINEL if not active[lane] else 0 for lane in range(N)]
    for lane in range(N):
        base = lane - lane % 32
        other = base + ((int(addr[lane]) + offset) // 4) % 32
        if backward:
            if active[lane]:
                out[lane] = int(data[other]) if active[other] else 0
        elif active[lane] and active[other]:   # ascending lanes: the highest source lane wins
            out[other] = int(data[lane])
    return out


@pytest.mark.parametrize("op", ["ds_bpermute_b32", "ds_permute_b32"])
@pytest.mark.parametrize("offset", [0, 8, 124])
@pytest.mark.parametrize("partial", [False, True])
def test_ds_permutes(gpu, op, offset, partial):
    """Byte addresses / 4 modulo 32 (high bits and the low two bits ignored); collisions in ds_permute_b32."""
    rng = np.random.default_rng(offset + partial + len(op))
    data = rng.integers(0, 2**32, N)
    addr = rng.integers(0, 2**32, N)
    addr[:8] = 4 * 7 + 1        # several lanes name lane 7 (permute: the highest of them wins)
    active = rng.integers(0, 2, N) if partial else np.ones(N, int)
    offs = f" offset:{offset}" if offset else ""
    got = run(gpu, f"{op} v4, v3, v2{offs}", data, addr=addr, active=active)
    assert got.tolist() == permute_ref(op == "ds_bpermute_b32", offset, data, addr, active)


def perm_ref(s0: int, s1: int, sel: int) -> int:
    """V_PERM_B32 per the ISA: byte k of the result from selector byte k over the 8 bytes {s0, s1} (s1 low)."""
    both = (s0 << 32) | s1
    out = 0
    for k in range(4):
        s = (sel >> (8 * k)) & 0xFF
        if s <= 7:
            b = (both >> (8 * s)) & 0xFF
        elif s <= 11:   # 8..11: the sign of bytes 1, 3, 5, 7 replicated
            b = 0xFF if (both >> (16 * (s - 8) + 15)) & 1 else 0
        elif s == 12:
            b = 0
        else:
            b = 0xFF
        out |= b << (8 * k)
    return out


def test_v_perm_every_selector(gpu):
    rng = np.random.default_rng(4)
    selectors = np.arange(256)
    for rep in range(4):     # 64 lanes x 4 runs x 4 bytes: every selector value in every byte position
        a, b = rng.integers(0, 2**32, N), rng.integers(0, 2**32, N)
        a[:8], b[:8] = 0x80808080, 0x7F00FF80          # sign bits set and clear
        sel = np.array([sum(int(selectors[(lane * 4 + k + 64 * rep + 17 * k) % 256]) << (8 * k) for k in range(4))
                        for lane in range(N)])
        active = rng.integers(0, 2, N)
        got = run(gpu, "v_perm_b32 v4, v2, v3, v5", a, addr=b, sel=sel, active=active)
        want = [perm_ref(int(x), int(y), int(s)) if act else SENTINEL for x, y, s, act in zip(a, b, sel, active)]
        assert got.tolist() == want


def test_lane_encodings_round_trip_through_llvm_mc():
    """llvm-mc's bytes decode to the op and offset written and print back as llvm-mc spells them."""
    for spelling, offset in SWIZZLES.items():
        if not spelling.startswith("swizzle"):
            continue
        line = f"ds_swizzle_b32 v4, v2 offset:{spelling}"
        (inst,) = decode_all(assemble(line))
        assert inst.op == "ds_swizzle_b32" and inst.fields["offset0"] | inst.fields["offset1"] << 8 == offset
        assert disasm(inst) == line
    for line in ("ds_bpermute_b32 v4, v3, v2 offset:8", "ds_permute_b32 v4, v3, v2", "v_perm_b32 v4, v2, v3, v5"):
        (inst,) = decode_all(assemble(line))
        assert disasm(inst) == line


LANE_IR = """target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.ds.swizzle(i32, i32)
declare i32 @llvm.amdgcn.ds.bpermute(i32, i32)
declare i32 @llvm.amdgcn.perm(i32, i32, i32)
define amdgpu_kernel void @k(ptr addrspace(1) %out, ptr addrspace(1) %pd, ptr addrspace(1) %pa, ptr addrspace(1) %ps) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %qd = getelementptr i32, ptr addrspace(1) %pd, i32 %t
  %qa = getelementptr i32, ptr addrspace(1) %pa, i32 %t
  %qs = getelementptr i32, ptr addrspace(1) %ps, i32 %t
  %d = load i32, ptr addrspace(1) %qd
  %a = load i32, ptr addrspace(1) %qa
  %s = load i32, ptr addrspace(1) %qs
  %sw = call i32 @llvm.amdgcn.ds.swizzle(i32 %d, i32 SWIZZLE)
  %bp = call i32 @llvm.amdgcn.ds.bpermute(i32 %a, i32 %sw)
  %r = call i32 @llvm.amdgcn.perm(i32 %bp, i32 %d, i32 %s)
  %qo = getelementptr i32, ptr addrspace(1) %out, i32 %t
  store i32 %r, ptr addrspace(1) %qo
  ret void
}
"""


@pytest.mark.parametrize("offset", [0x041F, 0x801B, 0x0907])
def test_lane_builtins_from_llvm(gpu, offset):
    """llvm.amdgcn.ds.swizzle, ds.bpermute and perm chained, as LLVM compiles them for gfx1100, against the
    references above (all lanes active)."""
    co = ir_kernel(LANE_IR.replace("SWIZZLE", str(offset)))
    sym = co.kernel("k")
    ops = {i.op for i in decode_all(co.image[sym.code_offset:sym.code_offset + sym.code_size])}
    assert {"ds_swizzle_b32", "ds_bpermute_b32", "v_perm_b32"} <= ops
    rng = np.random.default_rng(offset)
    data, addr, sel = (rng.integers(0, 2**32, N) for _ in range(3))
    ones = np.ones(N, int)
    bufs = [gpu.buffer(np.zeros(N, u32))] + [gpu.buffer(np.asarray(x, np.int64).astype(u32)) for x in (data, addr, sel)]
    try:
        gpu.run(co, (1, 1, 1), (N, 1, 1), *bufs)
        got = gpu.read(bufs[0], u32, N)
    finally:
        for b in bufs:
            gpu.gpu.free(b)
    sw = swizzle_ref(offset, data, ones)
    bp = permute_ref(True, 0, sw, addr, ones)
    assert got.tolist() == [perm_ref(x, int(y), int(s)) for x, y, s in zip(bp, data, sel)]
