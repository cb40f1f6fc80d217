"""Memory instructions of the emulator against numpy: sub-dword and multi-dword global loads/stores (d16 halves
included), global and LDS atomics with lanes hitting the same address, DS two-address forms and lane permutes."""
import numpy as np
import pytest
from mockgpu_helpers import Runner, asm_kernel, needs_llvm_mc

pytestmark = needs_llvm_mc

# s[4:5] = out, s[6:7] = in; v1 = byte offset 4 * (64 * group + id)
PROLOGUE = """
s_load_b128 s[4:7], s[0:1], 0x0
v_lshlrev_b32 v1, 2, v0
v_lshl_or_b32 v1, s2, 8, v1
s_waitcnt lgkmcnt(0)
"""


@pytest.fixture
def gpu():
    r = Runner()
    yield r
    r.close()


def test_sub_dword_and_wide_loads_stores(gpu):
    """Per lane i: bytes/halves of in[] loaded signed and unsigned, a d16_hi half merged into a register, a b96 load
    and a b16 store at odd halves."""
    code = PROLOGUE + """
    global_load_i8 v2, v1, s[6:7] offset:1        // byte 1 of word i, sign-extended
    global_load_u16 v3, v1, s[6:7] offset:2       // high half of word i
    v_mov_b32 v4, 0x11112222
    global_load_d16_hi_b16 v4, v1, s[6:7]         // low half of word i into v4's high half
    v_lshlrev_b32 v5, 1, v1                        // 8 * (64 g + id): two words per lane
    v_mov_b32 v6, v1
    global_load_b96 v[8:10], v6, s[6:7] offset:-4 // words i-1, i, i+1 (in[] starts one word into its buffer)
    s_waitcnt vmcnt(0)
    v_add_nc_u32 v11, v8, v10
    v_xor_b32 v11, v11, v9
    global_store_b32 v5, v2, s[4:5]
    global_store_b16 v5, v3, s[4:5] offset:4
    global_store_d16_hi_b16 v5, v4, s[4:5] offset:6
    v_add_nc_u32 v5, 0x800, v5
    global_store_b32 v5, v11, s[4:5]
    global_store_b8 v5, v4, s[4:5] offset:4
    """
    n = 128
    x = np.random.default_rng(0).integers(0, 2**32, n + 2, dtype=np.uint64).astype(np.uint32)
    src = gpu.buffer(x)
    inner = src.view(4, src.size - 4)                  # in[] starts one word in, so in[-1] exists
    out = gpu.buffer(np.zeros(2 * n + 1024, np.uint32))
    gpu.run(asm_kernel(code, vgprs=16), (2, 1, 1), (64, 1, 1), out, inner)
    got = gpu.read(out, np.uint32, 2 * n + 1024)
    w = x[1:n + 1]
    b1 = ((w >> 8) & 0xFF).astype(np.uint8).astype(np.int8).astype(np.int32).view(np.uint32)
    hi = w >> 16
    merged = (w & 0xFFFF) << 16 | 0x2222
    np.testing.assert_array_equal(got[0:2 * n:2], b1)
    np.testing.assert_array_equal(got[1:2 * n:2], hi | ((merged >> 16) << 16))
    np.testing.assert_array_equal(got[512:512 + 2 * n:2], (x[0:n] + x[2:n + 2]) ^ w)
    np.testing.assert_array_equal(got[513:513 + 2 * n:2] & 0xFF, merged & 0xFF)


def test_global_atomics_with_shared_addresses(gpu):
    """Every lane adds its id to counter[id % 4] (returning the old value) and swaps its id into slot[id % 2] if
    the slot still holds 0 (cmpswap): lanes sharing an address apply in lane order."""
    code = PROLOGUE + """
    v_and_b32 v2, 3, v0
    v_lshlrev_b32 v2, 2, v2
    global_atomic_add_u32 v3, v2, v0, s[6:7] glc
    v_and_b32 v4, 1, v0
    v_lshlrev_b32 v4, 2, v4
    v_add_nc_u32 v6, 1, v0                       // new value id + 1 (never 0)
    v_mov_b32 v7, 0                              // expected value
    global_atomic_cmpswap_b32 v8, v4, v[6:7], s[6:7] offset:16 glc
    s_waitcnt vmcnt(0)
    global_store_b32 v1, v3, s[4:5]
    global_store_b32 v1, v8, s[4:5] offset:256
    """
    counters = gpu.buffer(np.zeros(8, np.uint32))
    out = gpu.buffer(np.zeros(128, np.uint32))
    gpu.run(asm_kernel(code, vgprs=16), (1, 1, 1), (64, 1, 1), out, counters)
    got = gpu.read(out, np.uint32, 128)
    ids = np.arange(64)
    old = np.array([sum(j for j in range(i % 4, i, 4)) for i in ids], np.uint32)
    np.testing.assert_array_equal(got[:64], old)
    np.testing.assert_array_equal(gpu.read(counters, np.uint32, 8)[:4], [ids[ids % 4 == k].sum() for k in range(4)])
    # slot k is first taken by lane k (0 -> 1, 1 -> 2); every later lane sees that value
    np.testing.assert_array_equal(got[64:], np.where(ids < 2, 0, (ids % 2) + 1))
    np.testing.assert_array_equal(gpu.read(counters, np.uint32, 8)[4:6], [1, 2])


def test_ds_two_address_atomics_and_permute(gpu):
    """LDS: each lane stores (id, 100 + id) with ds_store_2addr_b32 (stride 64 slots), reads its neighbour's pair
    with ds_load_2addr_b32, adds to a shared counter with ds_add_rtn_u32, and reads lane (id + 5) % 32's value with
    ds_bpermute_b32."""
    code = PROLOGUE + """
    v_lshlrev_b32 v2, 2, v0                      // this lane's slot
    v_add_nc_u32 v3, 100, v0
    ds_store_2addr_b32 v2, v0, v3 offset1:64     // slot id and slot 64 + id
    s_waitcnt lgkmcnt(0)
    v_xor_b32 v4, 4, v2                          // the neighbour id ^ 1
    ds_load_2addr_b32 v[6:7], v4 offset1:64
    v_mov_b32 v8, 1
    v_mov_b32 v9, 0x200
    ds_add_rtn_u32 v10, v9, v8
    v_add_nc_u32 v11, 5, v0
    v_lshlrev_b32 v11, 2, v11
    ds_bpermute_b32 v12, v11, v3
    s_waitcnt lgkmcnt(0)
    v_lshlrev_b32 v13, 16, v7
    v_or_b32 v6, v6, v13
    global_store_b32 v1, v6, s[4:5]
    global_store_b32 v1, v10, s[4:5] offset:256
    global_store_b32 v1, v12, s[4:5] offset:512
    """
    out = gpu.buffer(np.zeros(192, np.uint32))
    gpu.run(asm_kernel(code, vgprs=16, lds=1024), (1, 1, 1), (64, 1, 1), out)
    got = gpu.read(out, np.uint32, 192)
    ids = np.arange(64)
    np.testing.assert_array_equal(got[:64], (ids ^ 1) | ((100 + (ids ^ 1)) << 16))
    np.testing.assert_array_equal(np.sort(got[64:128]), ids)         # each lane saw a distinct count
    np.testing.assert_array_equal(got[64:128], ids)                  # in lane (and wave) order
    wave_base = ids // 32 * 32
    np.testing.assert_array_equal(got[128:], 100 + wave_base + (ids + 5) % 32)
