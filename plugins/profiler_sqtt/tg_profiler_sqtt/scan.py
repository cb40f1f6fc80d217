"""The packet scan: one pass over a trace's nibbles, JIT-compiled from the LLVM IR below by llvmlite.

Where each packet starts depends on the lengths of all packets before it, so the scan is inherently sequential:
a Python loop over packets runs at about 1 M packets/s (tinygrad's decoder: 0.84 M/s, 2 MB/s), and numpy cannot
vectorize the chain without one call per packet position of every lane (which on a 4.6 KB capture costs more
than the whole budget). The loop below is table-driven like the Python one (packets.py: type of the low byte,
length, delta field and time rule per type) and runs at a few ns per packet; everything after it (fields,
selections) is numpy over its output columns.

Per packet it writes the nibble offset, the type id, the packet's bits (at most 16 nibbles: one u64) and the
time after its delta (or, with `write` false, only counts). It stops at the end of the stream, at a packet that
does not fit before the end (the caller reports that incomplete tail), or after `cap` packets.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from tg_profiler_sqtt import packets

# the window of a packet is 9 bytes from its first byte (8 for the packet, 1 for an odd nibble's shift):
# the stream is copied into a buffer this much longer, zero-filled
PAD_BYTES = 16

IR = r"""
define i64 @sqtt_scan(ptr noalias %data, i64 %nnib, ptr noalias %kind_of_key, ptr noalias %nibbles,
                      ptr noalias %delta_lo, ptr noalias %delta_mask, ptr noalias %special, ptr noalias %state,
                      i64 %cap, i1 %write, ptr noalias %out_off, ptr noalias %out_kind, ptr noalias %out_raw,
                      ptr noalias %out_time) {
entry:
  %p0 = load i64, ptr %state
  %tp = getelementptr i64, ptr %state, i64 1
  %t0 = load i64, ptr %tp
  br label %loop

loop:
  %p = phi i64 [ %p0, %entry ], [ %end, %emit ], [ %end, %store ]
  %t = phi i64 [ %t0, %entry ], [ %tn, %emit ], [ %tn, %store ]
  %n = phi i64 [ 0, %entry ], [ %nn, %emit ], [ %nn, %store ]
  %more = icmp ult i64 %p, %nnib
  %room = icmp ult i64 %n, %cap
  %go = and i1 %more, %room
  br i1 %go, label %body, label %exit

body:
  ; the 64-bit window whose lowest nibble is nibble p (low nibble of each byte first)
  %byte = lshr i64 %p, 1
  %bp = getelementptr i8, ptr %data, i64 %byte
  %w8 = load i64, ptr %bp, align 1
  %b9p = getelementptr i8, ptr %bp, i64 8
  %b9 = load i8, ptr %b9p, align 1
  %b9z = zext i8 %b9 to i64
  %odd = trunc i64 %p to i1
  %sh = select i1 %odd, i64 4, i64 0
  %lo = lshr i64 %w8, %sh
  %hi0 = shl i64 %b9z, 60
  %hi = select i1 %odd, i64 %hi0, i64 0
  %w = or i64 %lo, %hi
  ; its type and length from the tables (both by the low byte: the length is on the loop's critical path)
  %key = and i64 %w, 255
  %kp = getelementptr i8, ptr %kind_of_key, i64 %key
  %k8 = load i8, ptr %kp
  %k = zext i8 %k8 to i64
  %lp = getelementptr i8, ptr %nibbles, i64 %key
  %l8 = load i8, ptr %lp
  %len = zext i8 %l8 to i64
  %end = add i64 %p, %len
  %fits = icmp ule i64 %end, %nnib
  br i1 %fits, label %emit, label %exit

emit:
  %dlp = getelementptr i8, ptr %delta_lo, i64 %k
  %dl8 = load i8, ptr %dlp
  %dl = zext i8 %dl8 to i64
  %dmp = getelementptr i64, ptr %delta_mask, i64 %k
  %dm = load i64, ptr %dmp
  %ds = lshr i64 %w, %dl
  %d0 = and i64 %ds, %dm
  %spp = getelementptr i8, ptr %special, i64 %k
  %sp = load i8, ptr %spp
  %short = icmp eq i8 %sp, 1
  %d4 = add i64 %d0, 4
  %d1 = select i1 %short, i64 %d4, i64 %d0
  ; a TS_DELTA_OR_MARK with rt (bit 9) = 1 and pl (bit 8) = 0 is a marker: no time passes
  %orm = icmp eq i8 %sp, 2
  %rtpl0 = lshr i64 %w, 8
  %rtpl = and i64 %rtpl0, 3
  %isrt = icmp eq i64 %rtpl, 2
  %mark = and i1 %orm, %isrt
  %d = select i1 %mark, i64 0, i64 %d1
  %tn = add i64 %t, %d
  ; the packet's own bits: len nibbles (1..16) of the window
  %bits = shl i64 %len, 2
  %rest = sub i64 64, %bits
  %mask = lshr i64 -1, %rest
  %raw = and i64 %w, %mask
  %nn = add i64 %n, 1
  br i1 %write, label %store, label %loop

store:
  %op = getelementptr i64, ptr %out_off, i64 %n
  store i64 %p, ptr %op
  %okp = getelementptr i8, ptr %out_kind, i64 %n
  store i8 %k8, ptr %okp
  %orp = getelementptr i64, ptr %out_raw, i64 %n
  store i64 %raw, ptr %orp
  %otp = getelementptr i64, ptr %out_time, i64 %n
  store i64 %tn, ptr %otp
  br label %loop

exit:
  %pe = phi i64 [ %p, %loop ], [ %p, %body ]
  %te = phi i64 [ %t, %loop ], [ %t, %body ]
  %ne = phi i64 [ %n, %loop ], [ %n, %body ]
  store i64 %pe, ptr %state
  store i64 %te, ptr %tp
  ret i64 %ne
}
"""

_ARGS = [ctypes.c_void_p, ctypes.c_int64] + [ctypes.c_void_p] * 6 + [ctypes.c_int64, ctypes.c_bool] + \
    [ctypes.c_void_p] * 4
_lock = threading.Lock()
_compiled: tuple[Any, Any] | None = None  # (the execution engine, which owns the code; the function)


def _function() -> Any:
    """The compiled scan, built once per process (about 20 ms) and kept with the engine that owns its code."""
    global _compiled
    with _lock:
        if _compiled is None:
            import llvmlite.binding as llvm
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            mod = llvm.parse_assembly(IR)
            mod.verify()
            target = llvm.Target.from_triple(llvm.get_process_triple())
            tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(), codemodel="jitdefault", opt=3)
            pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
            pb.getModulePassManager().run(mod, pb)
            engine = llvm.create_mcjit_compiler(mod, tm)
            engine.finalize_object()
            fn = ctypes.CFUNCTYPE(ctypes.c_int64, *_ARGS)(engine.get_function_address("sqtt_scan"))
            _compiled = (engine, fn)
        return _compiled[1]


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


_TABLES = [_ptr(packets.KIND_OF_KEY), _ptr(packets.NIBBLES_OF_KEY), _ptr(packets.DELTA_LO), _ptr(packets.DELTA_MASK),
           _ptr(packets.SPECIAL)]  # module-level arrays: their addresses are fixed for the process


def scan(data: bytes | bytearray | memoryview | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                                     int]:
    """(offsets in nibbles, type ids, packet bits, times, where the scan stopped in nibbles) for every packet of
    `data` that fits before its end. The caller checks the header and what the stop position means."""
    src = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8).ravel()
    # the state (position, time) lives in front of the padded copy of the stream: one allocation, one address
    buf = np.zeros(16 + src.size + PAD_BYTES, np.uint8)
    buf[16:16 + src.size] = src
    state = buf[:16].view(np.int64)
    at = _ptr(buf)
    nnib = 2 * src.size
    fn = _function()
    # two passes: count, then write into arrays of exactly that size (the scan costs a few ns per packet; a
    # worst-case allocation of one entry per nibble, 25 bytes each, costs more in page faults than the scan)
    n = fn(at + 16, nnib, *_TABLES, at, nnib, False, 0, 0, 0, 0)
    stop = int(state[0])
    # the four columns in one block (8-byte columns first, so every column is aligned)
    block = np.empty(25 * n, np.uint8)
    b = _ptr(block)
    state[:] = 0
    written = fn(at + 16, nnib, *_TABLES, at, n, True, b, b + 24 * n, b + 8 * n, b + 16 * n)
    assert written == n and state[0] == stop, "the two passes of the scan disagree"
    off, raw, time = block[:8 * n].view(np.int64), block[8 * n:16 * n].view(np.uint64), block[16 * n:24 * n].view(
        np.int64)
    return off, block[24 * n:], raw, time, stop
