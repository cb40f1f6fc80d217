"""Executable memory: bytes placed in read+execute pages, called through ctypes, and unmapped when freed."""
import ctypes
import gc

import pytest

capstone = pytest.importorskip("capstone")
from tg_cpu_x86.execmem import ExecMemory  # noqa: E402

# int add(int a, int b) { return a + b; } and long scale(long a) { return a * 3; }, System V x86-64
ADD = bytes.fromhex("89f8" "01f0" "c3")           # mov eax, edi; add eax, esi; ret
SCALE = bytes.fromhex("488d047f" "c3")            # lea rax, [rdi + rdi*2]; ret


def disasm(code: bytes) -> list[str]:
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    return [f"{i.mnemonic} {i.op_str}" for i in md.disasm(code, 0)]


def mapping_of(addr: int) -> str | None:
    """The permissions of the /proc/self/maps line holding `addr`, None if it is not mapped."""
    with open("/proc/self/maps") as f:
        for line in f:
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= addr < hi:
                return perms
    return None


def test_the_test_code_is_what_it_claims():
    assert disasm(ADD) == ["mov eax, edi", "add eax, esi", "ret "]
    assert disasm(SCALE) == ["lea rax, [rdi + rdi*2]", "ret "]


def test_call_machine_code():
    mem = ExecMemory(ADD)
    add = mem.function(ctypes.c_int32, ctypes.c_int32, ctypes.c_int32)
    assert add(2, 40) == 42 and add(-5, 3) == -2 and add(2**31 - 1, 1) == -2**31
    assert mem.read() == ADD
    scale = ExecMemory(SCALE).function(ctypes.c_int64, ctypes.c_int64)
    assert scale(-7) == -21 and scale(1 << 40) == 3 << 40


def test_pages_are_executable_not_writable_and_freed():
    mem = ExecMemory(ADD * 2000)  # more than a page
    addr = mem.address
    assert mapping_of(addr).startswith("r-x") and mapping_of(addr + 4096).startswith("r-x")
    mem.close()
    assert mem.closed and mapping_of(addr) is None
    with pytest.raises(ValueError, match="freed"):
        mem.address
    mem.close()  # closing twice is harmless


def test_function_pointer_keeps_the_code_alive():
    add = ExecMemory(ADD).function(ctypes.c_int32, ctypes.c_int32, ctypes.c_int32)
    gc.collect()
    assert add(1, 2) == 3
    addr = ctypes.cast(add, ctypes.c_void_p).value
    del add
    gc.collect()
    assert mapping_of(addr) is None


def test_bad_input():
    with pytest.raises(ValueError, match="non-empty machine code"):
        ExecMemory(b"")
    with pytest.raises(ValueError, match="non-empty machine code"):
        ExecMemory("c3")
    with pytest.raises(ValueError, match="outside"):
        ExecMemory(ADD).function(None, offset=5)
