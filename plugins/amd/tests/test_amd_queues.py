"""tg-amd's queue encoders: every packet's header, count and register offsets decoded with amd.md's tables as
written here (not the encoder's constants), the pm_encode rules' output, and bad input named."""
from __future__ import annotations

import pytest

from tg_core.dtype import dtypes
from tg_core.hcq import ops as q
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp
from tg_amd.queues import pm4, rules, sdma

# amd.md 2.2: opcode -> (packet, payload dwords or None when variable)
PM4 = {0x10: ("NOP", None), 0x15: ("DISPATCH_DIRECT", 4), 0x23: ("PRED_EXEC", 1), 0x3C: ("WAIT_REG_MEM", 6), 0x3F: ("INDIRECT_BUFFER", 3),
       0x46: ("EVENT_WRITE", 1), 0x49: ("RELEASE_MEM", 7), 0x58: ("ACQUIRE_MEM", 7), 0x76: ("SET_SH_REG", None)}
# amd.md 10: SET_SH_REG offset (absolute - 0x2C00) -> register
SH = {0x204: "START_X", 0x20C: "PGM_LO", 0x210: "SCRATCH_BASE_LO", 0x212: "RSRC1", 0x215: "RESOURCE_LIMITS",
      0x218: "TMPRING_SIZE", 0x21B: "RESTART_X", 0x228: "RSRC3", 0x240: "USER_DATA_0"}


def decode(words: list[int]) -> list[tuple[str, list[int]]]:
    out, i = [], 0
    while i < len(words):
        h = words[i]
        assert h >> 30 == 3 and h & 0xFF == 0, f"dword {i}: {h:#x} is not a type-3 header"
        n = (h >> 16 & 0x3FFF) + 1
        name, fixed = PM4[h >> 8 & 0xFF]
        assert fixed in (None, n), f"{name}: {n} payload dwords, amd.md says {fixed}"
        body = words[i + 1:i + 1 + n]
        out.append((SH[body[0]] if name == "SET_SH_REG" else name, body[1:] if name == "SET_SH_REG" else body))
        i += 1 + n
    return out


def test_dispatch_sequence_registers_and_values():
    d = pm4.Dispatch(code=0x12_3456_7800, rsrc1=0x11, rsrc2=0x22, rsrc3=0x33, tmpring_size=pm4.tmpring_size(200, 64),
                     scratch=(0x7700_0000_0000,), user_data=(0xAAAA0000, 0x7F), grid=(3, 2, 1), local=(64, 2, 1))
    got = decode(pm4.dispatch(d))
    assert got == [("ACQUIRE_MEM", [0, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0, 0, 0x3F0]),
                   ("PGM_LO", [0x1234_5678, 0]), ("RSRC1", [0x11, 0x22]), ("RSRC3", [0x33]),
                   ("TMPRING_SIZE", [64 | (50 << 12)]),     # 200 B per lane x 64 lanes in 256-byte units
                   ("SCRATCH_BASE_LO", [0x77_0000_0000 & 0xFFFFFFFF, 0x77]), ("RESTART_X", [0, 0, 0]),
                   ("USER_DATA_0", [0xAAAA0000, 0x7F]), ("RESOURCE_LIMITS", [0]),
                   ("START_X", [0, 0, 0, 64, 2, 1, 0, 0]), ("DISPATCH_DIRECT", [3, 2, 1, 0x8005]),
                   ("EVENT_WRITE", [0x407])]


def test_signal_wait_timestamp_packets():
    (name, p), = decode(pm4.signal(0x1_2345_6780, 0x9_0000_0001))
    assert name == "RELEASE_MEM" and p == [0x70F514, (2 << 24) | (2 << 29), 0x23456780, 1, 1, 9, 0]
    (name, p), = decode(pm4.wait(0x1000, 0x1_0000_0005))
    assert name == "WAIT_REG_MEM" and p == [0x15, 0x1000, 0, 5, 0xFFFFFFFF, 4]   # the low 32 bits compared
    (name, p), = decode(pm4.timestamp(0x2008))
    assert name == "RELEASE_MEM" and p[1] >> 29 == 3 and p[2:4] == [0x2008, 0]
    (name, p), = decode(pm4.indirect_buffer(0x5_0000_0100, 12))
    assert name == "INDIRECT_BUFFER" and p == [0x100, 5, 12 | 1 << 23]


def test_pred_exec_counts_its_block():
    body = pm4.set_sh_reg("COMPUTE_PGM_RSRC3", 1)
    assert pm4.pred_exec(1, body, 1) == body
    got = decode(pm4.pred_exec(2, body, 2))
    assert got[0] == ("PRED_EXEC", [(2 << 24) | 3]) and got[1] == ("RSRC3", [1])
    with pytest.raises(ValueError, match="XCC mask 0x4 selects no XCC of the 2"):
        pm4.pred_exec(4, body, 2)


def test_sdma_packets():
    ws = sdma.copy_linear(0x10_0000_0003, 0x20_0000_0001, 10 << 20, max_bytes=4 << 20)
    assert len(ws) == 21 and ws[0::7] == [1, 1, 1]                      # three COPY_LINEAR, sub-op 0
    assert [ws[1 + 7 * k] + 1 for k in range(3)] == [4 << 20, 4 << 20, 2 << 20]
    assert ws[7 + 3:7 + 7] == [0x0040_0001, 0x20, 0x0040_0003, 0x10]   # src then dst, each advanced 4 MiB
    assert sdma.fence(0x1000, 7) == [0x00030005, 0x1000, 0, 7]
    assert sdma.poll_regmem(0x1000, 3) == [0xD0000008, 0x1000, 0, 3, 0xFFFFFFFF, 0x0FFF0004]
    assert sdma.timestamp(0x1008) == [0x20D, 0x1008, 0]
    assert sdma.trap() == [6, 0]
    assert sdma.max_copy_bytes((6, 0, 0)) == 1 << 30 and sdma.max_copy_bytes((5, 0, 1)) == 4 << 20
    assert sdma.max_copy_bytes((4, 4, 2)) == 1 << 30


@pytest.mark.parametrize("call, match", [
    (lambda: pm4.header(0x10, 0), "1..16384 payload dwords, not 0"),
    (lambda: pm4.indirect_buffer(0x1002, 4), "dword aligned, not 0x1002"),
    (lambda: pm4.indirect_buffer(0x1000, 1 << 20), "1..1048575 dwords"),
    (lambda: pm4.set_sh_reg("COMPUTE_PGM_LO", *range(20)) and pm4.dispatch(pm4.Dispatch(
        0x100, 0, 0, 0, 0, (0,), tuple(range(17)), (1, 1, 1), (1, 1, 1))), "17 user SGPR values"),
    (lambda: pm4.dispatch(pm4.Dispatch(0x180, 0, 0, 0, 0, (0,), (), (1, 1, 1), (1, 1, 1))), "256-byte aligned"),
    (lambda: pm4.dispatch(pm4.Dispatch(0x100, 0, 0, 0, 0, (0,), (), (1, 1, 1), (1, 1, 1)), 2), "one per XCC"),
    (lambda: sdma.copy_linear(0, 0, 0), "positive number of bytes, not 0"),
    (lambda: sdma.timestamp(0x1004), "8-byte aligned"),
    (lambda: rules.push_pm4(UOp(Ops.INS, dtypes.void, (), ("cmdbuf", q.Queue("AMD", "COMPUTE:0"), 16)), 30),
     "multiples of 4"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def _encode(op: UOp, xccs: int = 1) -> list[UOp]:
    got = rules.pm_encode(xccs).rewrite(op)
    assert got is not None and got.arg[0] == "words"
    return list(got.src)


def test_encode_rules_emit_words_with_symbolic_addresses():
    qu = q.Queue("AMD", "COMPUTE:0")
    sig = q.placeholder("signal", 16, "AMD")
    ws = _encode(q.ins("signal", qu, q.addr(sig), UOp.const(dtypes.uint64, 3)))
    consts = [int(w.arg) if w.op is Ops.CONST else None for w in ws]
    assert consts[:3] == [0xC0064900, 0x70F514, 0x42000000] and consts[3] is None and consts[4] is None
    assert all(w.dtype == dtypes.uint32 for w in ws)
    assert consts[5:] == [3, 0, 0]
    cp = q.Queue("AMD", "COPY:0")
    a, b = q.placeholder("a", 64, "AMD"), q.placeholder("b", 64, "AMD")
    ws = _encode(q.ins("copy", cp, a, b, extra=(64,)))
    assert [int(w.arg) for w in ws[:3]] == [1, 63, 0] and len(ws) == 7
    assert _encode(q.ins("barrier", cp)) == []
    # another device's ops are not AMD's to encode
    assert rules.pm_encode().rewrite(q.ins("signal", q.Queue("HCQREF", "COMPUTE:0"), q.addr(sig),
                                           UOp.const(dtypes.uint64, 3))) is None


def test_aql_vendor_packet_and_bad_compute_kind():
    from tg_amd.queues import aql
    p = aql.pm4_ib(0x3_0000_0040, 9)
    assert len(p) == 16 and p[0] == 0x0001_1500          # header 0x1500 (vendor specific), format 1
    assert decode(p[1:5]) == [("INDIRECT_BUFFER", [0x40, 3, 9 | 1 << 23])] and p[5] == 10 and p[6:] == [0] * 10
    with pytest.raises(ValueError, match="compute queue kind 'bogus'; kinds: pm4, aql"):
        rules.pm_lower("bogus")


@pytest.mark.parametrize("before", [0, *range(2, 19)])  # dwords before the kernel; at 14 a 1-dword gap pads by 17
def test_pm4_stream_aligns_inline_kernargs(before):
    from tg_amd.interface import KernelDescriptor, KernelSymbol
    from tg_amd.queues.stream import PM4Stream
    kd = KernelDescriptor(0, 0, 24, 256, 0, 2 << 1, 0, 1 << 3 | 1 << 10, 0)   # kernarg ptr in s[0:1], wave32
    ks = KernelSymbol("k", 256, 64, 0, kd)
    st = PM4Stream(0x10_0000)
    if before:
        st.add(pm4.packet("NOP", *([0] * (before - 1))))
    st.kernel(ks, 0x20_0000, [1, 2, 3, 4, 5, 6], (1, 1, 1), (32, 1, 1))
    packets = decode(st.words)
    user = next(p for name, p in packets if name == "USER_DATA_0")
    at = user[0] | user[1] << 32
    assert at % 64 == 0 and (at - 0x10_0000) // 4 < len(st.words)
    assert st.words[(at - 0x10_0000) // 4:][:6] == [1, 2, 3, 4, 5, 6]
