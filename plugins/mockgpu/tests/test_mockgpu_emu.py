"""The RDNA3 emulator on hand-written gfx1100 assembly (llvm-mc-19), checked against numpy: the initial wave state the
descriptor asks for, EXEC for partial waves, divergent branches, scalar/vector carries, VOPD, LDS with barriers,
scratch, page faults and unimplemented instructions."""
import numpy as np
import pytest
from mockgpu_helpers import KERNARG_PTR, WAVE32, Runner, asm_kernel, needs_llvm_mc

from tg_mockgpu.emu.machine import EmulatorError, GPUFault

pytestmark = needs_llvm_mc

# v[0:1] = 64-bit address of element (global id) of the buffer whose pointer is at kernarg offset `arg`
# (global id = s2 * 64 + v0; kernarg pointer in s[0:1], workgroup id x in s2)
ADDR = """
s_load_b64 s[4:5], s[0:1], {arg}
v_lshl_or_b32 v10, s2, 6, v0
v_ashrrev_i32_e32 v11, 31, v10
v_lshlrev_b64 v[12:13], 2, v[10:11]
s_waitcnt lgkmcnt(0)
v_add_co_u32 v{lo}, vcc_lo, s4, v12
v_add_co_ci_u32_e32 v{hi}, vcc_lo, s5, v13, vcc_lo
"""


def addr(arg: int, lo: int) -> str:
    return ADDR.format(arg=arg, lo=lo, hi=lo + 1)


@pytest.fixture
def gpu():
    r = Runner()
    yield r
    r.close()


def test_elementwise_partial_wave(gpu):
    """out = a * b + 1 over 64-wide groups; the grid is rounded up and the kernel masks lanes >= n itself."""
    code = addr(8, 2) + addr(16, 4) + addr(0, 6) + """
    s_load_b32 s6, s[0:1], 24
    s_waitcnt lgkmcnt(0)
    v_cmp_gt_u32_e32 vcc_lo, s6, v10
    s_and_saveexec_b32 s7, vcc_lo
    s_cbranch_execz .Lend
    global_load_b32 v2, v[2:3], off
    global_load_b32 v3, v[4:5], off
    s_waitcnt vmcnt(0)
    v_fmac_f32_e32 v3, 0.5, v2
    v_mul_f32_e32 v2, v2, v3
    v_add_f32_e32 v2, 1.0, v2
    global_store_b32 v[6:7], v2, off
    .Lend:
    """
    n = 1000
    a, b = np.random.default_rng(0).standard_normal((2, n)).astype(np.float32)
    out = gpu.buffer(np.zeros(n, np.float32))
    gpu.run(asm_kernel(code, vgprs=16), (-(-n // 64), 1, 1), (64, 1, 1), out, gpu.buffer(a), gpu.buffer(b), n)
    want = a * (b + np.float32(0.5) * a) + np.float32(1)
    np.testing.assert_array_equal(gpu.read(out, np.float32, n), want)


def test_exec_for_partial_workgroup(gpu):
    """A 40-item workgroup is two waves, the second with 8 live lanes: stores of dead lanes must not happen."""
    code = addr(0, 2) + """
    v_mov_b32 v4, 7
    global_store_b32 v[2:3], v4, off
    """
    out = gpu.buffer(np.zeros(128, np.int32))
    gpu.run(asm_kernel(code, vgprs=16), (2, 1, 1), (40, 1, 1), out)
    got = gpu.read(out, np.int32, 128)
    want = np.zeros(128, np.int32)
    want[0:40] = 7
    want[64:104] = 7     # group 1 starts at 64 (the kernel strides groups by 64)
    np.testing.assert_array_equal(got, want)


def test_initial_state_honours_the_descriptor(gpu):
    """Enable dispatch ptr, queue ptr, kernarg ptr and dispatch id (8 user SGPRs, padded to 12), workgroup ids x/y/z
    (s12..s14) and packed work-item ids. Workgroup (0,0,0) stores s0..s11 and fields of the dispatch packet; every
    workgroup stores its ids at its own slot, and every lane its v0 at its own slot."""
    code = """
    s_load_b64 s[20:21], s[4:5], 0x0
    s_load_b32 s22, s[0:1], 0x4           // dispatch packet: workgroup_size_x | y << 16
    s_load_b32 s23, s[0:1], 0xc           // grid_size_x
    s_load_b64 s[24:25], s[0:1], 0x28     // kernarg_address
    s_mul_i32 s26, s14, 3                 // flat workgroup index x + 2 * (y + 3 * z)
    s_add_u32 s26, s26, s13
    s_lshl_b32 s26, s26, 1
    s_add_u32 s26, s26, s12
    s_mul_i32 s27, s26, 12                // its id slot (3 dwords) at 256 + 12 * index
    s_waitcnt lgkmcnt(0)
    v_mov_b32 v1, s27
    v_mov_b32 v2, s12
    global_store_b32 v1, v2, s[20:21] offset:256
    v_mov_b32 v2, s13
    global_store_b32 v1, v2, s[20:21] offset:260
    v_mov_b32 v2, s14
    global_store_b32 v1, v2, s[20:21] offset:264
    v_bfe_u32 v3, v0, 10, 10              // y
    v_bfe_u32 v4, v0, 20, 10              // z
    v_and_b32 v5, 0x3ff, v0               // x
    v_lshl_add_u32 v3, v4, 1, v3          // y + 2 z
    v_lshl_add_u32 v3, v3, 2, v5          // x + 4 (y + 2 z)
    s_mul_i32 s28, s26, 24                // lanes of workgroup i at 1024 + 4 * (24 i + flat id)
    v_add_nc_u32 v3, s28, v3
    v_lshlrev_b32 v3, 2, v3
    global_store_b32 v3, v0, s[20:21] offset:1024
    s_cmp_eq_u32 s26, 0
    s_cbranch_scc0 .Lend
    v_mov_b32 v1, 0
    """ + "".join(f"v_mov_b32 v2, s{i}\nglobal_store_b32 v1, v2, s[20:21] offset:{4 * i}\n" for i in range(12)) + """
    v_mov_b32 v2, s22
    global_store_b32 v1, v2, s[20:21] offset:64
    v_mov_b32 v2, s23
    global_store_b32 v1, v2, s[20:21] offset:68
    v_mov_b32 v2, s24
    global_store_b32 v1, v2, s[20:21] offset:72
    v_mov_b32 v2, s25
    global_store_b32 v1, v2, s[20:21] offset:76
    .Lend:
    """
    props = (1 << 1) | (1 << 2) | KERNARG_PTR | (1 << 4) | WAVE32
    co = asm_kernel(code, vgprs=8, user_sgprs=12, tgid=(1, 1, 1), tidig=2, props=props, kernarg_size=8)
    out = gpu.buffer(np.zeros(1024 + 4 * 24 * 24, np.uint32))
    gpu.run(co, (2, 3, 4), (4, 2, 3), out)
    got = gpu.read(out, np.uint32, 256 + 24 * 24)
    pair = lambda i: int(got[i]) | int(got[i + 1]) << 32  # noqa: E731
    assert pair(2) == gpu.gpu.queue
    assert pair(4) == pair(18)                                     # kernarg ptr == the packet's kernarg_address
    assert pair(6) == gpu.gpu.dispatch_id
    assert got[8:12].tolist() == [0, 0, 0, 0]                     # padding up to USER_SGPR_COUNT
    assert got[16] == 4 | (2 << 16) and got[17] == 2 * 4          # packet: workgroup size x/y, grid x in items
    ids = got[64:64 + 24 * 3].reshape(24, 3)
    assert ids.tolist() == [[x, y, z] for z in range(4) for y in range(3) for x in range(2)]
    lanes = got[256:].reshape(24, 24)
    want = [x | (y << 10) | (z << 20) for z in range(3) for y in range(2) for x in range(4)]
    assert (lanes == np.array(want, np.uint32)).all()


def test_divergent_loop_and_branches(gpu):
    """Each lane loops v0 % 7 times adding its id, then takes one of two branches by parity: waves diverge and
    reconverge, and some waves skip the loop entirely."""
    code = addr(0, 2) + """
    v_and_b32 v4, 7, v10                  // trip count (0..7)
    v_mov_b32 v5, 0                       // accumulator
    s_mov_b32 s8, exec_lo
    v_cmp_ne_u32_e32 vcc_lo, 0, v4
    s_and_saveexec_b32 s9, vcc_lo
    s_cbranch_execz .Ldone
    .Lloop:
    v_add_nc_u32 v5, v5, v10
    v_add_nc_u32 v4, -1, v4
    v_cmp_ne_u32_e32 vcc_lo, 0, v4
    s_and_b32 exec_lo, exec_lo, vcc_lo
    s_cbranch_execnz .Lloop
    .Ldone:
    s_mov_b32 exec_lo, s8
    v_and_b32 v6, 1, v10
    v_cmp_eq_u32_e32 vcc_lo, 1, v6
    s_and_saveexec_b32 s9, vcc_lo
    s_cbranch_execz .Leven
    v_mul_lo_u32 v5, v5, 3                // odd lanes: * 3
    .Leven:
    s_xor_b32 exec_lo, s9, exec_lo        // the other lanes
    s_cbranch_execz .Lstore
    v_sub_nc_u32 v5, 0, v5                // even lanes: negate
    .Lstore:
    s_mov_b32 exec_lo, s8
    global_store_b32 v[2:3], v5, off
    """
    n = 64 * 9
    out = gpu.buffer(np.zeros(n, np.int32))
    gpu.run(asm_kernel(code, vgprs=16), (9, 1, 1), (64, 1, 1), out)
    i = np.arange(n)
    acc = (i & 7) * i
    want = np.where(i & 1, acc * 3, -acc)
    np.testing.assert_array_equal(gpu.read(out, np.int32, n), want)


def test_scalar_carry_chain_and_64bit_math(gpu):
    """s_add_u32/s_addc_u32 and v_add_co_u32/v_add_co_ci_u32 carries, v_mad_u64_u32 and 64-bit shifts."""
    code = addr(0, 2) + """
    s_mov_b32 s10, 0xffffffff
    s_mov_b32 s11, 5
    s_add_u32 s10, s10, 2                 // carry into the high word
    s_addc_u32 s11, s11, 0
    v_mov_b32 v4, s10
    v_mov_b32 v5, s11
    v_mad_u64_u32 v[6:7], null, v10, 0x10001, v[4:5]
    v_lshrrev_b64 v[6:7], 3, v[6:7]
    global_store_b64 v[2:3], v[6:7], off
    """
    out = gpu.buffer(np.zeros(128, np.uint64))
    co = asm_kernel(code.replace("v_lshlrev_b64 v[12:13], 2", "v_lshlrev_b64 v[12:13], 3"), vgprs=16)
    gpu.run(co, (2, 1, 1), (64, 1, 1), out)
    i = np.arange(128, dtype=np.uint64)
    want = (i * np.uint64(0x10001) + np.uint64(0x5FFFFFFFF + 2)) >> np.uint64(3)
    np.testing.assert_array_equal(gpu.read(out, np.uint64, 128), want)


def test_vopd_reads_before_writes(gpu):
    """v_dual_mov_b32 v1, v2 :: v_dual_mov_b32 v2, v1 swaps: both halves read their sources first."""
    code = addr(0, 2) + """
    v_mov_b32 v6, 11
    v_mov_b32 v7, 22
    v_dual_mov_b32 v6, v7 :: v_dual_mov_b32 v7, v6
    v_dual_mul_f32 v8, v6, v7 :: v_dual_lshlrev_b32 v9, 4, v6
    v_mad_u32_u24 v6, v7, 1000, v6
    v_mad_u32_u24 v6, v9, 1000000, v6
    global_store_b32 v[2:3], v6, off
    """
    out = gpu.buffer(np.zeros(64, np.uint32))
    gpu.run(asm_kernel(code, vgprs=16), (1, 1, 1), (64, 1, 1), out)
    assert (gpu.read(out, np.uint32, 64) == 22 + 11 * 1000 + (22 << 4) * 1000000).all()


def test_lds_with_barrier_reverses_the_workgroup(gpu):
    """256 work-items (8 waves) store to LDS, meet at s_barrier, then read the mirrored slot: a wave that ran ahead
    without waiting would read zeros. Odd waves first take a detour so the waves reach the barrier at different
    times."""
    code = addr(0, 2) + """
    v_lshlrev_b32 v4, 2, v0               // byte offset of this item
    v_mul_lo_u32 v5, v0, 3
    v_lshrrev_b32 v6, 5, v0
    v_and_b32 v6, 1, v6
    v_cmp_eq_u32_e32 vcc_lo, 1, v6
    s_and_saveexec_b32 s9, vcc_lo
    s_cbranch_execz .Lstore
    v_add_nc_u32 v5, 1000, v5             // odd waves: a different value, later
    .Lstore:
    s_or_b32 exec_lo, exec_lo, s9
    ds_store_b32 v4, v5
    s_waitcnt lgkmcnt(0)
    s_barrier
    buffer_gl0_inv                        // what LLVM's workgroup acquire fence emits: coherent memory, no-ops
    buffer_gl1_inv
    v_sub_nc_u32 v7, 0x3fc, v4            // (255 - id) * 4
    ds_load_b32 v8, v7
    s_waitcnt lgkmcnt(0)
    global_store_b32 v[2:3], v8, off
    """
    n = 256 * 3
    out = gpu.buffer(np.zeros(n, np.int32))
    co = asm_kernel(code.replace("v_lshl_or_b32 v10, s2, 6, v0", "v_lshl_or_b32 v10, s2, 8, v0"), vgprs=16, lds=1024)
    gpu.run(co, (3, 1, 1), (256, 1, 1), out)
    t = 255 - np.arange(256)
    val = t * 3 + np.where((t >> 5) & 1, 1000, 0)
    np.testing.assert_array_equal(gpu.read(out, np.int32, n), np.tile(val, 3))


def test_scratch_is_private_per_lane(gpu):
    """Each lane writes its id to two private slots and reads them back swapped."""
    code = addr(0, 2) + """
    v_mov_b32 v4, 0
    v_add_nc_u32 v5, 100, v10
    scratch_store_b32 v4, v10, off offset:0
    scratch_store_b32 v4, v5, off offset:4
    scratch_load_b32 v6, v4, off offset:4
    scratch_load_b32 v7, off, off offset:0
    s_waitcnt vmcnt(0)
    v_sub_nc_u32 v6, v6, v7
    global_store_b32 v[2:3], v6, off
    """
    out = gpu.buffer(np.zeros(128, np.int32))
    co = asm_kernel(code.replace("scratch_store_b32 v4,", "scratch_store_b32 v4,").replace(
        "scratch_load_b32 v6, v4, off", "scratch_load_b32 v6, v4, off"), vgprs=16, scratch=16)
    gpu.run(co, (2, 1, 1), (64, 1, 1), out)
    assert (gpu.read(out, np.int32, 128) == 100).all()


def test_page_fault_names_address_instruction_wave_and_lane(gpu):
    """Lane 37 of the grid (wave 1 of workgroup 0, lane 5) stores one element past the buffer's page."""
    code = addr(0, 2) + """
    v_cmp_eq_u32_e32 vcc_lo, 37, v10
    v_cndmask_b32_e64 v4, 0, 0x1000, vcc_lo
    v_add_co_u32 v2, vcc_lo, v2, v4
    v_add_co_ci_u32_e32 v3, vcc_lo, 0, v3, vcc_lo
    global_store_b32 v[2:3], v10, off
    """
    out = gpu.buffer(np.zeros(64, np.int32))     # one page; 37 * 4 + 4096 is in the guard page after it
    with pytest.raises(GPUFault) as e:
        gpu.run(asm_kernel(code, vgprs=16), (1, 1, 1), (64, 1, 1), out)
    msg = str(e.value)
    assert f"{out.va + 37 * 4 + 4096:#x}" in msg and "write" in msg
    assert "global_store_b32 v[2:3], v10, off" in msg and "kernel k" in msg
    assert "workgroup (0, 0, 0) wave 1 lane 5" in msg


def test_unimplemented_instruction_is_an_error(gpu):
    co = asm_kernel("v_cubeid_f32 v0, v1, v2, v3")
    with pytest.raises(EmulatorError, match=r"unimplemented instruction v_cubeid_f32 v0, v1, v2, v3 "
                                            r"\(0xD60C0000 0x040E0501\) at 0x[0-9a-f]+ in kernel k"):
        gpu.run(co, (1, 1, 1), (32, 1, 1))


def test_launch_limits_are_checked(gpu):
    with pytest.raises(ValueError, match="70000 bytes of LDS; gfx1100 has 65536"):
        gpu.run(asm_kernel("s_nop 0", lds=70000), (1, 1, 1), (32, 1, 1))
    with pytest.raises(ValueError, match="1056 work-items; gfx1100 allows at most 1024"):
        gpu.run(asm_kernel("s_nop 0"), (1, 1, 1), (32, 33, 1))
    with pytest.raises(EmulatorError, match="wave64"):
        gpu.run(asm_kernel("s_nop 0", props=KERNARG_PTR), (1, 1, 1), (32, 1, 1))


def test_float_modes_other_than_the_emulated_ones_are_refused(gpu):
    """The emulator keeps denormals and rounds to nearest even; a descriptor asking for flushing or another
    rounding (RSRC1 bits 12-19) is an error naming the fields, not results computed in the wrong mode."""
    from dataclasses import replace

    from tg_amd.interface import CodeObject
    co = asm_kernel("s_nop 0")
    ks = co.kernel("k")
    for bits, field in [(0b01 << 16, "FLOAT_DENORM_MODE_32 1"), (0b00 << 18 | 3 << 16, "_16_64 0"),
                        (1 << 12 | 3 << 16 | 3 << 18, "FLOAT_ROUND_MODE_32 1")]:
        kd = replace(ks.descriptor, compute_pgm_rsrc1=(ks.descriptor.compute_pgm_rsrc1 & ~0xFF000) | bits)
        bad = CodeObject(co.arch, co.image, {"k": replace(ks, descriptor=kd)})
        with pytest.raises(EmulatorError, match=f"{field}.*the mock runs only denormals kept"):
            gpu.run(bad, (1, 1, 1), (32, 1, 1))


def test_register_beyond_the_descriptor_is_an_error(gpu):
    with pytest.raises(EmulatorError, match="uses v40, but its descriptor allocates only 8 VGPRs"):
        gpu.run(asm_kernel("v_mov_b32 v40, 0", vgprs=8), (1, 1, 1), (32, 1, 1))


def test_getpc_swappc_setpc_call_a_subroutine(gpu):
    """s_getpc_b64 + a label difference computes the subroutine's address; s_swappc_b64 calls it (return address
    in s[30:31]) twice with different arguments; s_setpc_b64 returns."""
    code = addr(0, 2) + """
    v_mov_b32 v4, 0
    v_mov_b32 v5, 3
    .Lpc:
    s_getpc_b64 s[10:11]                  // address of .Lpc + 4
    s_add_u32 s10, s10, .Lsub-.Lpc-4
    s_addc_u32 s11, s11, 0
    s_swappc_b64 s[30:31], s[10:11]
    v_mov_b32 v5, 10
    s_swappc_b64 s[30:31], s[10:11]
    global_store_b32 v[2:3], v4, off
    s_endpgm
    .Lsub:
    v_mad_u32_u24 v4, v4, 100, v5         // v4 = v4 * 100 + v5
    v_add_nc_u32 v4, v4, v10
    s_setpc_b64 s[30:31]
    """
    out = gpu.buffer(np.zeros(64, np.int32))
    gpu.run(asm_kernel(code, vgprs=16), (1, 1, 1), (64, 1, 1), out)
    i = np.arange(64)
    np.testing.assert_array_equal(gpu.read(out, np.int32, 64), (3 + i) * 100 + 10 + i)


def test_flat_to_global_and_to_the_lds_aperture(gpu):
    """flat_store/flat_load through a global address, and through the LDS aperture (src_shared_base high word with
    the LDS offset as the low word)."""
    code = addr(0, 2) + """
    v_add_nc_u32 v4, 7, v10
    v_lshlrev_b32 v6, 2, v0                // LDS offset of this lane
    v_mov_b32 v7, src_shared_base
    flat_store_b32 v[6:7], v4
    s_waitcnt vmcnt(0) lgkmcnt(0)
    v_xor_b32 v8, 4, v6                    // the neighbour's LDS slot
    ds_load_b32 v9, v8
    s_waitcnt lgkmcnt(0)
    flat_store_b32 v[2:3], v9
    s_waitcnt vmcnt(0)
    flat_load_b32 v12, v[2:3]
    s_waitcnt vmcnt(0)
    v_mul_lo_u32 v12, v12, 2
    flat_store_b32 v[2:3], v12
    """
    out = gpu.buffer(np.zeros(64, np.int32))
    gpu.run(asm_kernel(code, vgprs=16, lds=256), (1, 1, 1), (64, 1, 1), out)
    i = np.arange(64)
    np.testing.assert_array_equal(gpu.read(out, np.int32, 64), ((i ^ 1) + 7) * 2)


def test_scalar_load_fault_names_the_wave(gpu):
    code = """
    s_load_b64 s[4:5], s[0:1], 0x0
    s_waitcnt lgkmcnt(0)
    s_lshl_b32 s7, s2, 12                 // workgroup 1 reads one page past a one-page buffer: the guard page
    s_add_u32 s4, s4, s7
    s_addc_u32 s5, s5, 0
    s_load_b32 s6, s[4:5], 0x8
    s_waitcnt lgkmcnt(0)
    """
    out = gpu.buffer(np.zeros(16, np.int32))
    with pytest.raises(GPUFault, match=rf"scalar read of unmapped memory at address {out.va + 0x1008:#x}, "
                                       r"workgroup \(1, 0, 0\) wave 0.*s_load_b32 s6, s\[4:5\], 0x8"):
        gpu.run(asm_kernel(code), (2, 1, 1), (32, 1, 1), out)
