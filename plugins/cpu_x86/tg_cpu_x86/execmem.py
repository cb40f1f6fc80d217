"""Executable memory: machine code bytes placed in pages of their own and called through ctypes.

The pages are mapped writable, filled, then switched to read+execute (never writable and executable at
once), and unmapped when the `ExecMemory` is closed or collected. A function pointer made by `function()`
keeps its `ExecMemory` alive, so a caller holding only the pointer cannot outlive the code.
"""
from __future__ import annotations

import ctypes
import mmap
import threading
from typing import Any

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mprotect.restype = ctypes.c_int
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.strerror.restype = ctypes.c_void_p
_libc.strerror.argtypes = [ctypes.c_int]
_MAP_FAILED = ctypes.c_void_p(-1).value


def _check(ok: bool, what: str) -> None:
    if not ok:
        err = ctypes.get_errno()
        text = ctypes.cast(_libc.strerror(err), ctypes.c_char_p).value or b"unknown error"  # strerror never gives NULL
        raise OSError(err, f"{what} failed: {text.decode()}")



class ExecMemory:
    """`code` in freshly mapped executable pages; `address` is its first byte (the entry point at offset 0
    unless the caller says otherwise)."""

    def __init__(self, code: bytes):
        if not isinstance(code, (bytes, bytearray, memoryview)) or len(code) == 0:
            raise ValueError(f"executable memory needs non-empty machine code bytes, got {type(code).__name__} "
                             f"of length {len(code) if hasattr(code, '__len__') else '?'}")
        self.size = len(code)
        self._mapped = -(-self.size // mmap.PAGESIZE) * mmap.PAGESIZE
        self._lock = threading.Lock()
        addr = _libc.mmap(None, self._mapped, mmap.PROT_READ | mmap.PROT_WRITE,
                          mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        _check(addr not in (None, _MAP_FAILED), f"mmap of {self._mapped} bytes")
        self._addr: int | None = addr
        ctypes.memmove(addr, bytes(code), self.size)
        if _libc.mprotect(addr, self._mapped, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
            self.close()
            _check(False, "mprotect to read+execute")

    @property
    def address(self) -> int:
        if self._addr is None:
            raise ValueError("this executable memory has been freed")
        return self._addr

    @property
    def closed(self) -> bool:
        return self._addr is None

    def read(self) -> bytes:
        """The code as placed (for checks: what runs is what was given)."""
        return ctypes.string_at(self.address, self.size)

    def function(self, restype: Any, *argtypes: Any, offset: int = 0) -> Any:
        """A ctypes function pointer to `address + offset` with the given C signature. It holds a reference
        to this memory, so the code stays mapped as long as the pointer is alive."""
        if not 0 <= offset < self.size:
            raise ValueError(f"entry offset {offset} is outside the {self.size} bytes of code")
        fn = ctypes.CFUNCTYPE(restype, *argtypes)(self.address + offset)
        fn._tg_exec_memory = self  # type: ignore[attr-defined]  # the pointer keeps the pages alive
        return fn

    def close(self) -> None:
        """Unmap the pages. Calling a function pointer into them afterwards would crash: only close memory
        whose pointers are gone (collection does that by itself)."""
        with self._lock:
            if self._addr is not None:
                addr, self._addr = self._addr, None
                _check(_libc.munmap(addr, self._mapped) == 0, "munmap")

    def __enter__(self) -> ExecMemory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # at interpreter exit this module's globals may be gone before the object; the OS frees the pages then
        if getattr(self, "_addr", None) is not None and _libc is not None:
            self.close()

    def __repr__(self) -> str:
        where = "freed" if self._addr is None else f"at {self._addr:#x}"
        return f"<ExecMemory {self.size} bytes {where}>"
