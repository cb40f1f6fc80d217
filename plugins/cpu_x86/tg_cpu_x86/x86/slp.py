"""Packing scalar lanes into vectors (superword-level parallelism) for the X86 selector: 8 float32 lanes
(ymm, AVX2) or 16 (zmm, AVX-512).

Codegen expands an UPCAST/UNROLL axis into straight-line scalar lanes. Here runs of `lanes` float32 stores to
consecutive elements of one buffer are the seeds; their values are packed lane by lane, bottom-up: a lane
tuple packs when its members are one value (broadcast), constants, loads of consecutive elements,
accumulators (whose every store then packs too), or the same arithmetic op on packed operands. A kernel is
vectorized only if every seed's whole tree packs and no member has a user outside the packed set (so no lane
needs to be extracted); other stores (a peeled tail) stay scalar. Each group is emitted where its last member
is in the program, after the groups it reads.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from tg_core.plugin_api import Call, Ops, UOp, dtypes, trampoline

LANES = 8  # float32 lanes of a ymm register (the default); a zmm register has 16
MAX_VECTORS = 4  # the vectors of accumulators one reduction tree may combine (see Packer._reduction_tree)
_ALU = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.MULACC})
_INT_ALU = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR})
# narrow ints are int32 lanes holding the value sign- or zero-extended (as a general register holds them), so
# loads of them are widening loads (a quantized weight's bytes) and bitwise ops and right shifts on the lanes
# give the narrow op's value as is; ops that can leave the narrow range are re-extended after (Group.wrap)
NARROW = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)
INT_LANES = (dtypes.int32, *NARROW)
_LANE_DTYPES = (dtypes.float32, *INT_LANES)
# int ops whose int32 result on extended operands is the narrow op's result extended (bitwise ops commute with
# extension; a right shift by an amount below the width, which codegen/shifts.py guarantees, keeps the range)
_EXACT = frozenset({Ops.AND, Ops.OR, Ops.XOR, Ops.SHR})
# the right identity of int ops (x op c == x): a lane symbolic simplified to x packs with lanes computing x op c
_IDENTITY = {Ops.ADD: 0, Ops.SUB: 0, Ops.OR: 0, Ops.XOR: 0, Ops.SHL: 0, Ops.SHR: 0, Ops.MUL: 1}
_CMP = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})


@dataclass(eq=False)
class Group:
    """`lanes` uops computed as one vector. kind: "splat" (one scalar, broadcast), "const", "load", "store",
    "acc" (loads of accumulators), "accstore" (stores to them), "alu", "cmp" (a mask), "where" (a blend),
    "cast" (float32 <-> int32, int -> float32), "bitcast" (the same bits), "convert" (an int -> int cast or
    bitcast: the source's lanes, wrapped when the value may change), "gload" (gated loads of consecutive elements:
    one load under an opmask of the lanes' gates, AVX-512 only), "alias" (a group's value under other uops:
    where(gate, gated load, 0)), and "hreduce": a scalar ADD/MAX tree over an
    accumulator's lanes (its lanes are the tree's nodes, the last the root), computed by shuffles."""
    kind: str
    lanes: tuple[UOp, ...]
    srcs: tuple[Group, ...] = ()
    accs: tuple[UOp, ...] = ()  # the accumulators (DEFINE_REGs) of an "acc"/"accstore" group, by lane
    # the int32 result is truncated to the lanes' narrow dtype and extended again (an ADD/SUB/MUL/SHL that may
    # leave the narrow range, a value-changing int cast or bitcast), so every lane holds the narrow value
    wrap: bool = False


def buffer_of(idx: UOp) -> UOp:
    """What an INDEX addresses: a PARAM or a DEFINE_REG (through the AFTERs that order its accesses)."""
    buf = idx.src[0]
    while buf.op is Ops.AFTER:
        buf = buf.src[0]
    return buf


def _acc_of(idx: UOp) -> UOp | None:
    """The accumulator (a one-element register) an INDEX addresses, if it does."""
    buf = buffer_of(idx)
    return buf if buf.op is Ops.DEFINE_REG and buf.ptrdtype.size == 1 else None


def offset(idx: UOp) -> tuple[UOp, int]:
    """An INDEX's element as (base, constant): base + c, with c = 0 when the index has no constant term."""
    i = idx.src[1]
    if i.op is Ops.ADD and i.src[1].op is Ops.CONST:
        return i.src[0], int(i.src[1].arg)
    return i, 0


def _plain_global(idx: UOp, ints: bool = False) -> bool:
    """An ungated float32 element of a buffer or of a stack array (a packed panel); with `ints`, also an int
    element (int32 or narrow) of a buffer."""
    if idx.op is not Ops.INDEX or len(idx.src) != 2:
        return False
    buf = buffer_of(idx)
    if idx.dtype.base is not dtypes.float32:
        return ints and idx.dtype.base in INT_LANES and buf.op is Ops.PARAM
    return buf.op is Ops.PARAM or buf.op is Ops.DEFINE_REG and buf.ptrdtype.size > 1


def gated_index(idx: UOp) -> UOp | None:
    """A gated float32 INDEX of a buffer (a padded load: conv2d's borders): its element, read through an outer
    `% n` with n at least the buffer's size. The scheduler leaves that modulo on padded loads whose gate is the
    element's in-bounds condition, so on every lane the gate lets through the modulo changes nothing and the
    lanes' elements are the unreduced ones (masked-off lanes read nothing). None for any other INDEX."""
    if idx.op is not Ops.INDEX or len(idx.src) != 3 or idx.dtype.base is not dtypes.float32 or \
            buffer_of(idx).op is not Ops.PARAM:
        return None
    i = idx.src[1]
    if i.op is Ops.MOD and i.src[1].op is Ops.CONST and int(i.src[1].arg) >= buffer_of(idx).ptrdtype.size > 0:
        return i.src[0]
    return i


def _gated_consecutive(idxs: tuple[UOp, ...]) -> bool:
    """Gated INDEXes of consecutive elements of one buffer (see gated_index): one masked vector load."""
    elems = [gated_index(i) for i in idxs]
    if any(e is None for e in elems) or len({buffer_of(i) for i in idxs}) != 1:
        return False
    offs = [_offset_of(e) for e in elems if e is not None]
    return len({b for b, _ in offs}) == 1 and all(c == offs[0][1] + k for k, (_, c) in enumerate(offs))


def _offset_of(i: UOp) -> tuple[UOp, int]:
    """An element expression as (base, constant), as offset() reads an INDEX's."""
    if i.op is Ops.ADD and i.src[1].op is Ops.CONST:
        return i.src[0], int(i.src[1].arg)
    return i, 0


def _consecutive(idxs: tuple[UOp, ...]) -> bool:
    if not all(_plain_global(i, ints=True) for i in idxs) or len({buffer_of(i) for i in idxs}) != 1:
        return False
    if all(i.src[1].op is Ops.CONST for i in idxs):  # constant elements: a 10-column tile's bias loads b[0..7]
        return all(i.src[1].arg == idxs[0].src[1].arg + k for k, i in enumerate(idxs))
    offs = [offset(i) for i in idxs]
    return len({b for b, _ in offs}) == 1 and all(c == offs[0][1] + k for k, (_, c) in enumerate(offs))


class Packer:
    """Finds the vector groups of a linear program (see the module docstring)."""

    def __init__(self, uops: tuple[UOp, ...], users: dict[UOp, list[UOp]], lanes: int = LANES):
        self.uops, self.users, self.lanes = uops, users, lanes
        # AVX-512 vectors may be partial: a run of 2..lanes-1 stores left after the whole vectors (a 10-column
        # tile, a straight-line tail) packs too, its loads and stores masked by an opmask of its lanes
        self.masked = lanes == 16
        self.pos = {u: i for i, u in enumerate(uops)}
        self.memo: dict[tuple[UOp, ...], Group | None] = {}
        self.acc_groups: dict[tuple[UOp, ...], Group] = {}  # accumulators by lane -> their "acc" group
        self.groups: list[Group] = []
        self.trees: dict[UOp, Group] = {}  # a reduction's root -> its "hreduce" group
        self.acc_stores: dict[UOp, list[UOp]] = {}  # accumulator -> its stores, in program order
        # lanes made up by _complete (not in the program) -> the program uop each computes the value of
        self.anchors: dict[UOp, UOp] = {}
        for u in uops:
            if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and (acc := _acc_of(u.src[0])) is not None:
                self.acc_stores.setdefault(acc, []).append(u)

    def run(self) -> list[Group]:
        """The groups, or none. First every seed at once (the whole kernel's stores as vectors); if some seed
        does not pack, seeds are taken one at a time where they pack and keep every lane's readers vector code
        (partial vectorization: a 10-column matmul tile packs 8 columns, the other 2 stay scalar), provided at
        least half the seeded stores pack. Stores outside seeds (a peeled tail) stay scalar; scalar code may
        read vector reductions' results."""
        runs = self._seeds()
        if not all(trampoline(self._store_group(seed)) is not None for seed in runs):
            self._restore(([], {}, {}, {}, {}))
            packed, taken = 0, set[UOp]()
            seeds = self._seeds(exclusive=False)
            # whole vectors first, then (masked) equal chunks of the runs they leave, then partial runs
            for whole in (True, False):
                if not whole and self.masked:
                    packed += self._pack_chunks(taken)
                for seed in seeds:
                    if (len(seed) == self.lanes) != whole or any(s in taken for s in seed):
                        continue
                    saved = self._snapshot()
                    if trampoline(self._store_group(seed)) is not None and self._closed():
                        taken.update(seed)
                        packed += len(seed)
                    else:
                        self._restore(saved)
            if 2 * packed < sum(len(seed) for seed in runs):
                return []
        # scalar code may still combine accumulators by a vector reduction (softmax's max feeds a multiply, a
        # peeled tail's store a sum): first every such root at once (rows of a quantized matmul share their
        # decoded weights, which only all the rows' reductions together read), else one root at a time, each
        # undone if it fails
        roots = [u for u in self.uops if u.op in (Ops.ADD, Ops.MAX) and u.dtype is dtypes.float32 and
                 u not in self.trees and not self._inner(u) and self._tree(u) is not None]
        saved = self._snapshot()
        if len(roots) < 2 or not all(trampoline(self._reduction_tree(u)) is not None for u in roots) or \
                not self._closed():
            self._restore(saved)
            for u in roots:
                saved = self._snapshot()
                if trampoline(self._reduction_tree(u)) is None or not self._closed():
                    self._restore(saved)
        return self.groups if self.groups and self._closed() else []

    def _inner(self, u: UOp) -> bool:
        """Whether u is an inner node of a larger reduction tree, not its root (a residual added to a
        reduction's result makes no tree: the reduction's root is a root)."""
        users = self.users.get(u, ())
        return len(users) == 1 and users[0].op is u.op and users[0].dtype is u.dtype and \
            self._tree(users[0]) is not None

    def _snapshot(self) -> tuple:
        return (list(self.groups), dict(self.memo), dict(self.acc_groups), dict(self.trees),
                {g: g.lanes for g in self.acc_groups.values()})

    def _restore(self, saved: tuple) -> None:
        """Undo packing attempts since the snapshot (accumulator groups collect their loads as lanes)."""
        self.groups, self.memo, self.acc_groups, self.trees, lanes = \
            list(saved[0]), dict(saved[1]), dict(saved[2]), dict(saved[3]), saved[4]
        for g, ls in lanes.items():
            g.lanes = ls

    def _seeds(self, exclusive: bool = True) -> list[tuple[UOp, ...]]:
        """Runs of `lanes` stores to consecutive float32 elements of a buffer, in program order: disjoint runs
        from the lowest element, or (not exclusive) every run, for taking the ones that pack."""
        by_base: dict[tuple[UOp, UOp], dict[int, UOp]] = {}
        for u in self.uops:
            if u.op is Ops.STORE and _plain_global(u.src[0]):
                base, c = offset(u.src[0])
                by_base.setdefault((buffer_of(u.src[0]), base), {})[c] = u
        seeds: list[tuple[UOp, ...]] = []
        taken: set[UOp] = set()
        for stores in by_base.values():
            for c in sorted(stores):
                seed = tuple(stores[c + k] for k in range(self.lanes) if c + k in stores)
                if len(seed) == self.lanes and all(s not in taken or not exclusive for s in seed):
                    seeds.append(seed)
                    taken.update(seed)
        if self.masked:  # what whole vectors leave, as partial vectors: maximal runs of at least 2 stores
            whole = {s for seed in seeds for s in seed} if exclusive else \
                {s for seed in self._seeds() if len(seed) == self.lanes for s in seed}
            for stores in by_base.values():
                run: list[UOp] = []
                for c in sorted(stores):
                    if stores[c] not in whole and (not run or offset(run[-1].src[0])[1] == c - 1):
                        run.append(stores[c])
                        continue
                    if len(run) >= 2:
                        seeds.append(tuple(run))
                    run = [stores[c]] if stores[c] not in whole else []
                if len(run) >= 2:
                    seeds.append(tuple(run))
        return seeds

    def _pack_chunks(self, taken: set[UOp]) -> int:
        """Partial vectors in runs of consecutive stores longer than a vector that no whole vector took: each run
        split into equal chunks of fewer lanes but more than half a vector, the most that pack (a register tile of
        10-column rows: 4 rows are 40 consecutive elements, which pack as 4 chunks of 10 lanes, not as 16 lanes
        across rows). The number of stores packed."""
        by_base: dict[tuple[UOp, UOp], dict[int, UOp]] = {}
        for u in self.uops:
            if u.op is Ops.STORE and _plain_global(u.src[0]) and u not in taken:
                base, c = offset(u.src[0])
                by_base.setdefault((buffer_of(u.src[0]), base), {})[c] = u
        runs: list[list[UOp]] = []
        for stores in by_base.values():
            run: list[UOp] = []
            for c in sorted(stores):
                if run and offset(run[-1].src[0])[1] != c - 1:
                    runs.append(run)
                    run = []
                run.append(stores[c])
            runs.append(run)
        packed = 0
        for run in (r for r in runs if len(r) > self.lanes):
            for n in (n for n in range(self.lanes - 1, self.lanes // 2, -1) if len(run) % n == 0):
                saved = self._snapshot()
                chunks = [tuple(run[i:i + n]) for i in range(0, len(run), n)]
                if all(trampoline(self._store_group(c)) is not None for c in chunks) and self._closed():
                    taken.update(run)
                    packed += len(run)
                    break
                self._restore(saved)
        return packed

    def _closed(self) -> bool:
        """Every member's users are members too (no lane is read by scalar code; constants, broadcast scalars
        and loads may be shared with it: scalar code loads its own copy)."""
        members = {u for g in self.groups if g.kind not in ("splat", "const", "load") for u in g.lanes}
        scalars = {g.lanes[-1] for g in self.groups if g.kind == "hreduce"}  # a reduction's result is a scalar
        return all(all(x in members for x in self.users.get(u, ())) for u in members
                   if u.op is not Ops.STORE and u not in scalars)

    def _add(self, g: Group) -> Group:
        self.groups.append(g)
        return g

    # packing follows the expressions from the stores down to the loads, as deep as the kernel's value chains
    # (thousands of ops): pack and its helpers are generators yielding their recursive calls (tg_core.trampoline)

    def _store_group(self, stores: tuple[UOp, ...]) -> Call[Group | None]:
        value = yield self.pack(tuple(s.src[1] for s in stores))
        return None if value is None else self._add(Group("store", stores, (value,)))

    def pack(self, vals: tuple[UOp, ...]) -> Call[Group | None]:
        if vals in self.memo:
            return self.memo[vals]
        self.memo[vals] = None  # a cycle through an accumulator resolves in _acc
        g = yield self._pack(vals)
        self.memo[vals] = g
        return g

    def _pack(self, vals: tuple[UOp, ...]) -> Call[Group | None]:
        v0 = vals[0]
        if any(v.dtype is not v0.dtype for v in vals) or v0.dtype not in _LANE_DTYPES:
            return None
        if all(v is v0 for v in vals):
            tree = yield self._reduction_tree(v0)
            return self._add(Group("splat", vals, () if tree is None else (tree,)))
        if all(v.op is Ops.CONST for v in vals):
            return self._add(Group("const", vals))
        if all(v.op is Ops.LOAD and len(v.src) == 1 for v in vals):
            idxs = tuple(v.src[0] for v in vals)
            accs = tuple(a for i in idxs if (a := _acc_of(i)) is not None)
            if len(accs) == len(idxs):  # every load reads an accumulator
                return (yield self._acc(vals, accs))
            if self.masked and _gated_consecutive(idxs):  # padded loads: one load under an opmask of the gates
                return self._add(Group("gload", vals))
            if v0.dtype in NARROW and len(vals) < self.lanes:
                return None  # a partial widening load would need masked-off lanes not to fault: not relied on
            return self._add(Group("load", vals)) if _consecutive(idxs) else None
        if v0.op is Ops.WHERE and all(v.op is Ops.WHERE for v in vals):
            return (yield self._select(vals))
        if v0.op in (Ops.CAST, Ops.BITCAST) and all(v.op is v0.op for v in vals):
            src = yield self.pack(tuple(v.src[0] for v in vals))
            return None if src is None else self._conversion(vals, src)
        if v0.dtype in INT_LANES and v0.op not in _INT_ALU:
            return None
        if v0.dtype in INT_LANES and len({v.op for v in vals}) > 1 and (done := self._complete(vals)) is not None:
            vals, v0 = done, done[0]
        if (v0.op in _ALU or v0.op in _INT_ALU) and all(v.op is v0.op for v in vals):
            srcs = []
            for k in range(len(v0.src)):
                s = yield self.pack(tuple(v.src[k] for v in vals))
                if s is None:
                    return None
                srcs.append(s)
            wrap = v0.dtype in NARROW and v0.op not in _EXACT and not all(_exact_fits(v) for v in vals)
            return self._add(Group("alu", vals, tuple(srcs), wrap=wrap))
        return None

    def _complete(self, vals: tuple[UOp, ...]) -> tuple[UOp, ...] | None:
        """Int lanes some of which lost an op by a constant that the others have: symbolic simplifies each lane
        on its own, so a uint8 `(q >> 7) & 1` is `q >> 7` while the other lanes keep the AND, and `q >> 0` is q.
        Such a lane v becomes `v op c`, a uop of the same value made up here (emitted where v is, see anchor):
        c is the op's identity, or for an AND the other lanes' mask when it keeps every value v can have."""
        ops = [v.op for v in vals if v.op in (Ops.AND, *_IDENTITY) and v.src[1].op is Ops.CONST]
        if not ops:
            return None
        op = max(dict.fromkeys(ops), key=ops.count)  # the most common (the first of equals)
        masks = {v.src[1] for v in vals if v.op is op}
        out = []
        for v in vals:
            if v.op is op:
                out.append(v)
                continue
            if op is Ops.AND:
                if len(masks) != 1:
                    return None
                c = next(iter(masks))
                if v.vmin < 0 or (1 << int(v.vmax).bit_length()) - 1 & ~int(c.arg):
                    return None
            else:
                c = UOp.const(v.dtype, _IDENTITY[op])
            self.anchors[w := UOp(op, v.dtype, (v, c))] = v
            out.append(w)
        return tuple(out)

    def anchor(self, u: UOp) -> UOp:
        """The program uop whose value lane `u` is (u itself, unless _complete made it up)."""
        while u in self.anchors:
            u = self.anchors[u]
        return u

    def _conversion(self, vals: tuple[UOp, ...], src: Group) -> Group | None:
        """A CAST or BITCAST of packed lanes: float32 <-> int32 and int -> float32 convert, an int -> int cast
        (or a bitcast between narrow ints of one size) reuses the source's lanes, wrapped into the destination
        unless every source value fits it (uint8 -> int32 never changes a value, uint8 -> int8 bits may)."""
        v0 = vals[0]
        sdt, ddt = v0.src[0].dtype, v0.dtype
        if {sdt, ddt} == {dtypes.float32, dtypes.int32}:
            return self._add(Group(v0.op.name.lower(), vals, (src,)))
        if v0.op is Ops.CAST and sdt in NARROW and ddt is dtypes.float32:  # exact: the lanes hold the value
            return self._add(Group("cast", vals, (src,)))
        if sdt in INT_LANES and ddt in INT_LANES and (v0.op is Ops.CAST or sdt.itemsize == ddt.itemsize):
            fits = all(dtypes.min(ddt) <= v.src[0].vmin and v.src[0].vmax <= dtypes.max(ddt) for v in vals)
            return self._add(Group("convert", vals, (src,), wrap=not fits))
        return None

    def _reduction_tree(self, root: UOp) -> Call[Group | None]:
        """If `root` combines the final loads of `lanes` accumulators (or of 2..MAX_VECTORS times as many) by a
        tree of one op (ADD or MAX) whose inner nodes have no other users: the accumulators become vectors and
        the tree a horizontal reduction ("hreduce" of its vectors combined lane by lane, whose scalar is then
        broadcast). Several vectors are a reduction unrolled across an axis besides the lanes' one (a quantized
        block's two halves: each half's shift amount a constant, and independent FMA chains); which leaves form
        a vector is tried as runs of `lanes` consecutive leaves, then as every m-th leaf."""
        if root.op not in (Ops.ADD, Ops.MAX) or root.dtype is not dtypes.float32 or root in self.trees:
            return self.trees.get(root)
        found = self._tree(root)
        if found is None:
            return None
        nodes, leaves = found
        m = len(leaves) // self.lanes
        orders = [[leaves[k * self.lanes:(k + 1) * self.lanes] for k in range(m)]]
        if m > 1:
            orders.append([leaves[k::m] for k in range(m)])
        for chunks in orders:
            saved = self._snapshot()
            accs: list[Group] = []
            for chunk in chunks:  # every leaf loads an accumulator (_tree checked it)
                acc = yield self._acc(tuple(chunk), tuple(a for n in chunk if (a := _acc_of(n.src[0])) is not None))
                if acc is None:
                    break
                accs.append(acc)
            if len(accs) == m:
                order = sorted(nodes, key=self.pos.__getitem__)
                self.trees[root] = tree = self._add(Group("hreduce", tuple(order), tuple(accs)))
                return tree
            self._restore(saved)
        return None

    def _tree(self, root: UOp) -> tuple[list[UOp], list[UOp]] | None:
        """The nodes and the `lanes` accumulator-load leaves of a reduction tree at `root` (see _reduction_tree),
        found without changing anything."""
        nodes, leaves, stack = [], [], [root]
        while stack:
            n = stack.pop()
            if n.op is root.op and (n is root or len(self.users.get(n, ())) == 1) and n.dtype is root.dtype:
                nodes.append(n)
                stack.extend(reversed(n.src))
            elif n.op is Ops.LOAD and len(n.src) == 1 and _acc_of(n.src[0]) is not None and \
                    len(self.users.get(n, ())) == 1:
                leaves.append(n)
            else:
                return None
        return (nodes, leaves) if len(leaves) % self.lanes == 0 and len(leaves) <= MAX_VECTORS * self.lanes \
            else None

    def _select(self, vals: tuple[UOp, ...]) -> Call[Group | None]:
        """where(a cmp b, x, y) with float32 a, b: a compare mask and a blend (the compares are members); or
        where(gate, load gated by it, +0.0), what a padded load becomes: the masked load itself ("alias")."""
        if self.masked and all(_zero_where_of_gated_load(v) for v in vals):
            load = yield self.pack(tuple(v.src[1] for v in vals))
            return self._add(Group("alias", vals, (load,))) if load is not None and load.kind == "gload" else None
        conds = tuple(v.src[0] for v in vals)
        c0 = conds[0]
        if c0.op not in _CMP or any(c.op is not c0.op or c.src[0].dtype is not dtypes.float32 for c in conds):
            return None
        parts = []
        for srcs, k in ((conds, 0), (conds, 1), (vals, 1), (vals, 2)):
            parts.append((yield self.pack(tuple(c.src[k] for c in srcs))))
        if any(p is None for p in parts):
            return None
        cmp = self._add(Group("cmp", conds, tuple(parts[:2])))
        return self._add(Group("where", vals, (cmp, parts[2], parts[3])))

    def _acc(self, loads: tuple[UOp, ...], accs: tuple[UOp, ...]) -> Call[Group | None]:
        """Loads of `lanes` distinct accumulators: the accumulators become one vector, so each of their stores
        must pack with the same lanes."""
        if len(set(accs)) != len(accs) or any(a.dtype.base is not dtypes.float32 for a in accs):
            return None
        known = accs in self.acc_groups
        group = self.acc_groups[accs] if known else self._add(Group("acc", (), accs=accs))
        self.acc_groups[accs] = self.memo[loads] = group  # stores below may read these loads again
        group.lanes += loads
        if not known:
            stores_by_acc = {a: self.acc_stores.get(a, []) for a in accs}
            counts = {len(s) for s in stores_by_acc.values()}
            if len(counts) != 1:
                return None
            for n in range(counts.pop()):
                lane_stores = tuple(stores_by_acc[a][n] for a in accs)
                value = yield self.pack(tuple(s.src[1] for s in lane_stores))
                if value is None:
                    return None
                self._add(Group("accstore", lane_stores, (value,), accs=accs))
        return group


def _exact_fits(v: UOp) -> bool:
    """Whether the exact (unwrapped) result of the narrow int ADD/SUB/MUL/SHL `v`, over its sources' bounds, lies
    inside v's dtype: then the int32 lanes' result is the narrow result and needs no wrap (where it does not,
    the int32 result is right modulo 2^32, so its low 8 or 16 bits are the narrow result's)."""
    a, b = v.src
    alo, ahi, blo, bhi = int(a.vmin), int(a.vmax), int(b.vmin), int(b.vmax)
    if v.op is Ops.ADD:
        lo, hi = alo + blo, ahi + bhi
    elif v.op is Ops.SUB:
        lo, hi = alo - bhi, ahi - blo
    elif v.op is Ops.MUL:
        corners = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
        lo, hi = min(corners), max(corners)
    elif v.op is Ops.SHL and alo >= 0 and blo >= 0:
        lo, hi = alo << blo, ahi << bhi
    else:
        return False
    return dtypes.min(v.dtype) <= lo and hi <= dtypes.max(v.dtype)


def _zero_where_of_gated_load(v: UOp) -> bool:
    """where(g, load(buf[i] if g), +0.0): a zero-masked load computes it as is (a gated-off lane is +0.0)."""
    _, x, y = v.src
    return x.op is Ops.LOAD and len(x.src) == 1 and len(x.src[0].src) == 3 and x.src[0].src[2] is v.src[0] and \
        y.op is Ops.CONST and y.arg == 0 and math.copysign(1.0, y.arg) > 0


_recent = threading.local()


def users_of(uops: tuple[UOp, ...]) -> dict[UOp, list[UOp]]:
    """Each uop's users among `uops`, in program order, made once per program and thread: the renderer's lane
    choice (plan) and the selector read the same map."""
    cache: tuple[tuple[UOp, ...], dict[UOp, list[UOp]]] | None = getattr(_recent, "users", None)
    if cache is None or cache[0] is not uops:
        users: dict[UOp, list[UOp]] = {}
        for u in uops:
            for s in u.src:
                if s in users:
                    users[s].append(u)
                else:
                    users[s] = [u]
        cache = _recent.users = (uops, users)
    return cache[1]


def plan(uops: tuple[UOp, ...], users: dict[UOp, list[UOp]], lanes: int = LANES) -> tuple[Packer, list[Group]]:
    """A program's Packer and its groups (Packer.run) for vectors of `lanes`, computed once per program, width
    and thread: the renderer packs a program to choose vector lanes, then the selector emits the same groups
    (a second run was ~4 ms per matmul kernel of a first MLP forward)."""
    cache: tuple[tuple[UOp, ...], dict[int, tuple[Packer, list[Group]]]] | None = getattr(_recent, "plans", None)
    if cache is None or cache[0] is not uops:
        cache = _recent.plans = (uops, {})
    if lanes not in cache[1]:
        packer = Packer(uops, users, lanes)
        cache[1][lanes] = (packer, packer.run())
    return cache[1][lanes]


def widest_plan(uops: tuple[UOp, ...], users: dict[UOp, list[UOp]], widths: tuple[int, ...]) \
        -> tuple[int, Packer, list[Group]]:
    """The plan of the first of `widths` (lane counts, widest first) at which the program packs, with its width;
    the last width's (empty) plan when none does."""
    for lanes in widths:
        packer, groups = plan(uops, users, lanes)
        if groups:
            break
    return lanes, packer, groups
