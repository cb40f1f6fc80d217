"""DepsTracker: the exact rules of issue 12 item 2, views of one base buffer, and a per-byte model."""
from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tg_core.device import Buffer
from tg_core.hcq.deps import DepsTracker, Region

B = "b"  # the key of the 16-byte buffer b of the seed's tests


def rg(s: int, e: int, key: object = B) -> Region:
    return Region(key, s, e)


def step(t: DepsTracker, s: int, e: int, write: bool, dep: int) -> list:
    return t.access([rg(s, e)], [0] if write else [], dep)


@pytest.mark.parametrize("first_write", [False, True], ids=["first-read", "first-write"])
def test_disjoint_write_keeps_the_earlier_dependency(first_write):
    t = DepsTracker()
    assert step(t, 0, 4, first_write, 0) == []
    assert step(t, 4, 8, True, 1) == []       # touches at 4: no overlap
    assert step(t, 0, 4, True, 2) == [0]      # the disjoint write left dep 0 intact


@pytest.mark.parametrize("first_write", [False, True], ids=["first-read", "first-write"])
def test_partial_writes_split_and_keep_the_remainders(first_write):
    t = DepsTracker()
    assert step(t, 0, 16, first_write, 0) == []
    assert step(t, 4, 12, True, 1) == [0]     # dep 0 now only on [0,4) and [12,16)
    assert step(t, 0, 4, True, 2) == [0]      # left remainder
    assert step(t, 12, 16, True, 3) == [0]    # right remainder
    assert step(t, 4, 12, False, 4) == [1]    # the middle's writer only


def test_reads_after_reads_are_independent_and_a_write_waits_for_all_readers():
    t = DepsTracker()
    assert step(t, 0, 16, True, 0) == []
    assert step(t, 0, 8, False, 1) == [0]
    assert step(t, 4, 16, False, 2) == [0]    # not on reader 1
    assert step(t, 0, 16, False, 3) == [0]
    assert step(t, 6, 7, True, 4) == [0, 1, 2, 3]
    assert step(t, 0, 2, True, 5) == [0, 1, 3]  # reader 2 never touched [0, 2)
    assert step(t, 6, 7, False, 6) == [4]       # the write at 6 removed the readers of byte 6


def test_zero_length_ranges_are_no_access():
    t = DepsTracker()
    assert step(t, 0, 16, True, 0) == []
    assert step(t, 4, 4, True, 1) == []       # inside the write of 0: still nothing
    assert step(t, 4, 4, False, 2) == []
    assert step(t, 0, 16, True, 3) == [0]     # neither was recorded, nor split the write of 0
    assert t.segments(B) == (1, 0)


def test_a_range_split_on_both_sides_keeps_two_independent_reader_sets():
    t = DepsTracker()
    assert step(t, 0, 16, False, 0) == []
    assert step(t, 4, 8, True, 1) == [0]      # readers of 0 survive on [0,4) and [8,16)
    assert step(t, 0, 4, False, 2) == []
    assert step(t, 8, 16, True, 3) == [0]     # reader 2 read [0,4) only


def test_different_keys_never_interact():
    t = DepsTracker()
    t.access([rg(0, 16, "a")], None, 0)
    assert t.access([rg(0, 16, "b")], None, 1) == []
    assert t.access([rg(0, 16, "a"), rg(0, 16, "b")], [0], 2) == [0, 1]   # RAW on both


def test_one_call_reading_and_writing_waits_on_the_state_before_it():
    t = DepsTracker()
    t.access([rg(0, 8)], None, 0)
    t.access([rg(8, 16)], [], 1)
    # reads [0,16) (writer 0) and writes [8,16) (writer none, reader 1): waits are against the old state
    assert t.access([rg(0, 16), rg(8, 16)], [1], 2) == [0, 1]
    assert t.access([rg(0, 4)], [], 3) == [0]
    assert t.access([rg(12, 16)], [], 4) == [2]
    assert t.access([rg(0, 16)], [0], 5) == [0, 2, 3, 4]  # dep 2 both read and wrote: listed once


def test_views_of_one_base_share_bytes_and_other_buffers_do_not():
    base = Buffer("CPU", 16, "float32")          # 64 bytes; nothing is allocated by the tracker
    lo, hi = base.view(8, "float32"), base.view(8, "float32", offset=32)
    mid = base.view(4, "int32", offset=16)     # bytes [16, 32)
    as_bytes = base.view(64, "uint8")
    other = Buffer("CPU", 16, "float32")
    t = DepsTracker()
    assert t.access([lo], None, 0) == []
    assert t.access([hi], None, 1) == []        # [32, 64) does not touch [0, 32)
    assert t.access([other], None, 2) == []     # another buffer of the same size and device
    assert t.access([mid], [], 3) == [0]        # [16, 32) is inside lo
    assert t.access([hi.view(1, "float32", offset=4)], [], 4) == [1]  # a view of a view: bytes [36, 40)
    assert t.access([as_bytes], None, 5) == [0, 1, 3, 4]
    assert t.access([base], [], 6) == [5]       # the base itself is the whole range
    assert not base.is_allocated()


def test_bad_input_names_what_is_wrong():
    t = DepsTracker()
    with pytest.raises(ValueError, match=r"0 <= start <= end"):
        rg(8, 4)
    with pytest.raises(ValueError, match=r"0 <= start <= end"):
        rg(-1, 4)
    with pytest.raises(TypeError, match=r"Region.start is a byte offset"):
        Region(B, 1.5, 4)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"a Buffer or a Region, got str"):
        t.access(["b"], None, 0)  # type: ignore[list-item]
    with pytest.raises(IndexError, match=r"written indices \[2\] .* of the 2 accessed buffers \(allowed: 0..1\)"):
        t.access([rg(0, 4), rg(4, 8)], [2], 0)


def test_a_batch_of_thousands_of_kernels_stays_linear():
    # a chain of kernels, each reading a shared weight, the previous output and its own slice of an input,
    # writing its own output: the segment count stays bounded and 4000 kernels take milliseconds
    n = 4000
    t = DepsTracker()
    outs = [rg(0, 64, ("out", i % 2)) for i in range(2)]
    t0 = time.perf_counter()
    for i in range(n):
        deps = t.access([rg(0, 1024, "w"), outs[(i + 1) % 2], rg(16 * i, 16 * i + 16, "x"), outs[i % 2]], [3], i)
        assert deps == ([] if i == 0 else [i - 1] if i == 1 else [i - 1, i - 2])
    elapsed = time.perf_counter() - t0
    assert t.segments("w") == (0, 1)            # one segment holds every reader of the weight
    assert t.segments("x") == (0, n)            # disjoint slices: one segment each
    assert t.access([rg(0, 1024, "w")], None, n) == list(range(n))  # overwriting the weight waits for all readers
    assert elapsed < 1.0, f"{n} accesses took {elapsed:.2f}s"


# ---- property test against a per-byte model ----

class ByteModel:
    """The rules stated per byte: each byte has its last writer and its readers since."""

    def __init__(self) -> None:
        self.writer: dict[tuple[object, int], object] = {}
        self.readers: dict[tuple[object, int], list] = {}

    def access(self, regions: list[Region], writes: list[int], dep: object) -> list:
        waits: list = []
        for i, r in enumerate(regions):
            bytes_ = [(r.key, b) for b in range(r.start, r.end)]
            waits += [self.writer[b] for b in bytes_ if b in self.writer]
            if i in writes:
                waits += [d for b in bytes_ for d in self.readers.get(b, [])]
        for i, r in enumerate(regions):
            for b in range(r.start, r.end):
                if i in writes:
                    self.writer[(r.key, b)] = dep
                    self.readers.pop((r.key, b), None)
                else:
                    self.readers.setdefault((r.key, b), []).append(dep)
        return list({id(d): d for d in waits}.values())


_BOUNDARY = st.sampled_from([0, 4, 8, 12, 16])
_OFFSET = st.one_of(_BOUNDARY, _BOUNDARY, _BOUNDARY, st.integers(0, 16))


@st.composite
def access_lists(draw):
    calls = []
    for _ in range(draw(st.integers(1, 24))):
        regions = []
        for _ in range(draw(st.integers(1, 2))):
            # mostly the same few boundaries, so ranges repeat exactly, abut and split each other
            s = draw(_OFFSET)
            regions.append(Region(draw(st.sampled_from("aab")), s, min(16, s + draw(_OFFSET))))
        writes = draw(st.lists(st.integers(0, len(regions) - 1), unique=True))
        calls.append((regions, writes))
    return calls


def test_every_sequence_of_four_accesses_of_a_3_byte_buffer_matches_the_model():
    # exhaustive on a small space: every range [s, e) of 3 bytes, read or written, four times in a row
    options = [(Region(B, s, e), w) for s in range(3) for e in range(s + 1, 4) for w in (False, True)]
    for seq in itertools.product(options, repeat=4):
        t, model = DepsTracker(), ByteModel()
        for dep, (r, w) in enumerate(seq):
            assert t.access([r], [0] if w else [], dep) == model.access([r], [0] if w else [], dep), seq


@settings(max_examples=100)
@given(access_lists())
def test_matches_the_per_byte_model(calls):
    t, model = DepsTracker(), ByteModel()
    for dep, (regions, writes) in enumerate(calls):
        assert t.access(regions, writes, dep) == model.access(regions, writes, dep), (dep, regions, writes)
