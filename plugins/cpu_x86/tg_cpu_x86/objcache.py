"""CPU:LLVM's compiled kernels kept on disk (`TG_LLVM_CACHE`: a directory; unset or empty: no cache).

LLVM's optimization and code generation are most of a first call's time on CPU:LLVM (the three kernels of the
784-1024-1024-10 MLP forward: about 0.35 of its 0.7 s). With a cache directory a process stores the machine
code MCJIT makes of each kernel's IR and a later process loads it instead of compiling again.

An entry is keyed by everything the object code depends on: the IR text itself, LLVM's and llvmlite's versions,
the target (triple, CPU, features), the pass pipeline's settings and this module's format version; a change of
any of them is another key, so an entry is never stale, only unused (the directory can be emptied at any time).
An entry holds the object's SHA-256 beside it: a truncated or corrupt file is a miss, never loaded. Entries are
written to a temporary file and renamed, so concurrent processes see a whole entry or none.
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

ENV = "TG_LLVM_CACHE"
FORMAT = b"tg-llvm-object-cache 1"
log = logging.getLogger("tg.cpu")


def cache_dir() -> Path | None:
    """The directory `TG_LLVM_CACHE` names, or None when the cache is off."""
    value = os.environ.get(ENV, "").strip()
    return Path(value).expanduser() if value else None


def entry_key(src: str, config: str) -> str:
    """The hex key of `src` compiled under `config` (versions, target and pipeline settings as one string)."""
    import hashlib  # here, not at the top: it loads OpenSSL (~3.5 MB resident) and only CPU:LLVM uses it
    h = hashlib.sha256(FORMAT)
    for part in (config.encode(), src.encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def read(directory: Path, key: str) -> bytes | None:
    """The object stored under `key`, or None (absent, unreadable, or not matching its checksum)."""
    try:
        data = (directory / f"{key}.o").read_bytes()
    except OSError:
        return None
    import hashlib
    digest, obj = data[:32], data[32:]
    if len(data) < 32 or hashlib.sha256(obj).digest() != digest:
        log.info("tg-cpu-x86: ignoring the damaged LLVM cache entry %s", directory / f"{key}.o")
        return None
    return obj


def write(directory: Path, key: str, obj: bytes) -> None:
    """Store `obj` under `key` (atomically); a directory that cannot be written only costs the cache."""
    import hashlib
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(hashlib.sha256(obj).digest() + obj)
            os.replace(tmp, directory / f"{key}.o")
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        log.warning("tg-cpu-x86: cannot write the LLVM cache entry in %s (%s): %s", directory, ENV, e)
