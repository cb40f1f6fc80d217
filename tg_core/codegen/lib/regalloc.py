"""Linear-scan register allocation of machine instructions (tg_core.renderer.isa), for any ISA.

The algorithm is Poletto & Sarkar's linear scan with the improvements that matter for loop kernels:

- **Live intervals from real liveness.** Basic blocks come from labels and jumps; a backward dataflow gives
  what is live into and out of each block; a value's interval is the hull of its definitions, uses and the
  blocks it is live through. A value live around a loop's back edge is live in the loop header, so its
  interval covers the whole loop. Virtual registers may be defined more than once (loop counters,
  accumulators): liveness, not SSA, decides what is live.
- **Positions**: instruction i reads at 2i and writes at 2i+1, so a value dying at an instruction can give its
  register to that instruction's result, and a read-modify-write operand occupies both.
- **Spill decisions once per value.** When a class runs out of registers, the value with the lowest spill
  cost per position spanned is spilled, the current one included; costs weight each use by 10^loop depth.
  A spilled value lives in its stack slot for its whole life: every definition is stored at once (store at
  definition) and every use loads it into a short temporary interval right around the instruction, which
  is allocated like any other (it may evict a cheaper value in turn). A spilled value that an instruction
  without register sources defines (a constant) is recomputed at each use instead (rematerialization).
  An evicted value's earlier uses reuse the register it held: nothing else held it there.
- **Fixed registers** (ABI arguments, a divide's operands, shift counts) are pre-colored intervals; other
  values take a register only if no fixed interval of it overlaps theirs.
- **Shared registers**: two classes may list the same physical registers (x86's zmm values take xmm16-31
  and then xmm0-15, which scalar and VEX code use): a register is free for a value only when no live value of
  any class holds it, and under pressure a value of another class holding one of this class's registers may
  be spilled for it.
- **Hints**: a copy's destination prefers its source's register and vice versa; copies whose ends share a
  register disappear.
- **Frame**: callee-saved registers are saved and restored only when some value used them; the ISA's
  `ArchContext` lays out the frame once (allocated after entry, freed before each return).
"""
from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field

from tg_core.renderer.isa.arch import ArchContext, Frame
from tg_core.renderer.isa.machine import (
    CJUMP,
    JUMP,
    LABEL,
    MOVE,
    RET,
    FrameRef,
    Mem,
    MFunction,
    MInst,
    Operand,
    PReg,
    Reg,
    View,
    VReg,
)

_MAX_DEPTH_WEIGHT = 6  # 10^6: deeper loops weigh no more (keeps costs finite and comparable)


@dataclass(eq=False)
class Interval:
    """The positions [start, end] a virtual register is live, and the register it got."""
    vreg: VReg
    start: int
    end: int
    weight: float
    tiny: bool = False  # a spill temporary: must get a register
    reg: PReg | None = None

    def overlaps(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end

    def priority(self) -> float:
        """Spill cost per position spanned: the lowest is spilled first."""
        return self.weight / (self.end - self.start + 1)


@dataclass
class Allocation:
    """The allocated function: instructions on physical registers with spill code, prologue and epilogue."""
    insts: list[MInst]
    frame: Frame
    intervals: list[Interval]  # every interval that got a register, spill temporaries included
    spilled: list[VReg] = field(default_factory=list)
    saved: list[PReg] = field(default_factory=list)


class RegallocError(RuntimeError):
    """The instructions cannot be allocated (a value used before any definition, too many fixed operands)."""


# ---- analysis -------------------------------------------------------------------------------------------

def _blocks(insts: list[MInst]) -> tuple[list[tuple[int, int]], list[list[int]]]:
    """Basic blocks as (first, last) instruction indices, and each block's successors."""
    labels = {ins.target: i for i, ins in enumerate(insts) if ins.kind == LABEL}
    starts = {0}
    for i, ins in enumerate(insts):
        if ins.kind == LABEL:
            starts.add(i)
        elif ins.kind in (JUMP, CJUMP, RET) and i + 1 < len(insts):
            starts.add(i + 1)
    order = sorted(starts)
    blocks = [(s, (order[k + 1] if k + 1 < len(order) else len(insts)) - 1) for k, s in enumerate(order)]
    block_of = {s: k for k, (s, _) in enumerate(blocks)}
    succs: list[list[int]] = []
    for k, (_, last) in enumerate(blocks):
        end = insts[last] if last >= 0 else None
        out = []
        if end is not None and end.kind in (JUMP, CJUMP):
            if end.target not in labels:
                raise RegallocError(f"jump to unknown label {end.target!r}")
            out.append(block_of[labels[end.target]])
        if (end is None or end.kind not in (JUMP, RET)) and k + 1 < len(blocks):
            out.append(k + 1)
        succs.append(out)
    return blocks, succs


def _loop_depths(insts: list[MInst]) -> list[int]:
    """Loop depth of each instruction: the number of back edges (jumps to an earlier label) around it."""
    labels = {ins.target: i for i, ins in enumerate(insts) if ins.kind == LABEL}
    diff = [0] * (len(insts) + 1)
    for i, ins in enumerate(insts):
        if ins.kind in (JUMP, CJUMP) and labels.get(ins.target, i + 1) <= i:
            diff[labels[ins.target]] += 1
            diff[i + 1] -= 1
    depths, d = [], 0
    for i in range(len(insts)):
        d += diff[i]
        depths.append(d)
    return depths


def _vregs(regs: Iterable[Reg]) -> list[VReg]:
    return [r for r in regs if isinstance(r, VReg)]


def live_intervals(insts: list[MInst]) -> tuple[dict[VReg, Interval], dict[VReg, list[tuple[int, bool, bool]]]]:
    """Each virtual register's interval (hull of its occurrences and the blocks it is live through, weighted
    by loop depth), and its occurrences (instruction, read, written)."""
    occ: dict[VReg, list[tuple[int, bool, bool]]] = {}
    reads_of, writes_of = [], []
    for i, ins in enumerate(insts):
        rd, wr = _vregs(ins.used_regs()), _vregs(ins.defined_regs())
        reads_of.append(rd)
        writes_of.append(wr)
        for v in dict.fromkeys(rd + wr):
            occ.setdefault(v, []).append((i, v in rd, v in wr))
    blocks, succs = _blocks(insts)
    gen, kill = [], []
    for first, last in blocks:
        g: set[VReg] = set()
        k: set[VReg] = set()
        for i in range(first, last + 1):
            g.update(v for v in reads_of[i] if v not in k)
            k.update(writes_of[i])
        gen.append(g)
        kill.append(k)
    live_in: list[set[VReg]] = [set() for _ in blocks]
    live_out: list[set[VReg]] = [set() for _ in blocks]
    changed = True
    while changed:
        changed = False
        for b in range(len(blocks) - 1, -1, -1):
            out = set().union(*(live_in[s] for s in succs[b])) if succs[b] else set()
            new_in = gen[b] | (out - kill[b])
            if out != live_out[b] or new_in != live_in[b]:
                live_out[b], live_in[b], changed = out, new_in, True
    if blocks:
        undefined = [v for v in live_in[0] if v.fixed is None]
        if undefined:
            raise RegallocError(f"virtual registers used before any definition: {undefined}")
    depths = _loop_depths(insts)
    intervals: dict[VReg, Interval] = {}
    for v, places in occ.items():
        start = min(2 * i + (0 if r else 1) for i, r, _ in places)
        end = max(2 * i + (1 if w else 0) for i, _, w in places)
        weight = sum(10.0 ** min(depths[i], _MAX_DEPTH_WEIGHT) for i, _, _ in places)
        intervals[v] = Interval(v, start, end, weight)
    for b, (first, last) in enumerate(blocks):
        for v in live_in[b]:
            intervals[v].start = min(intervals[v].start, 2 * first)
        for v in live_out[b]:
            intervals[v].end = max(intervals[v].end, 2 * last + 1)
    return intervals, occ


# ---- the scan -------------------------------------------------------------------------------------------

class _Scan:
    def __init__(self, insts: list[MInst], arch: ArchContext):
        self.insts, self.arch = insts, arch
        self.intervals, self.occ = live_intervals(insts)
        self.fixed: dict[PReg, list[Interval]] = {}
        for v, iv in self.intervals.items():
            if v.fixed is not None:
                iv.reg = v.fixed
                for other in self.fixed.get(v.fixed, []):
                    if other.overlaps(iv):
                        raise RegallocError(f"{v} and {other.vreg} both need {v.fixed} at once")
                self.fixed.setdefault(v.fixed, []).append(iv)
        for v, iv in self.intervals.items():
            if v.remat is not None:
                iv.weight /= 2  # recomputing costs no store: cheaper to spill than a value that must be saved
        for ins in insts:  # copies prefer to end up in one register
            if ins.kind == MOVE:
                dst, src = (o.reg if isinstance(o, View) else o for o in ins.operands[:2])
                if isinstance(dst, VReg) and isinstance(src, VReg):
                    dst.hint = dst.hint or src
                    src.hint = src.hint or dst
        self.subst: dict[int, dict[VReg, VReg]] = {}
        self.fills: dict[int, list[tuple[VReg, VReg]]] = {}
        self.stores: dict[int, list[tuple[VReg, VReg]]] = {}
        self.deleted: set[int] = set()
        self.spilled: list[VReg] = []
        self.done: list[Interval] = []
        self.queue: list[tuple[int, int, int, Interval]] = []
        self.seq = 0
        # per class, the classes sharing a physical register with it (itself included)
        regs = {c: set(rs) for c, rs in arch.reg_classes.items()}
        self.sharing = {c: [o for o in regs if o == c or regs[c] & regs[o]] for c in regs}

    def push(self, iv: Interval) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (iv.start, 0 if iv.tiny else 1, self.seq, iv))

    def fixed_free(self, reg: PReg, start: int, end: int) -> bool:
        fixed = self.fixed.get(reg)
        return fixed is None or all(f.end < start or f.start > end for f in fixed)

    def hinted(self, v: VReg) -> PReg | None:
        h = v.hint
        if isinstance(h, VReg):
            h = h.fixed or (self.intervals[h].reg if h in self.intervals else None)
        return h

    def straddles(self, iv: Interval, pos: int) -> bool:
        """Whether a temporary of iv's vreg would begin before pos and end at or after it."""
        i = (pos - 1) // 2
        return pos % 2 == 1 and any(j == i and r and w for j, r, w in self.occ[iv.vreg])

    def run(self) -> None:
        for v, iv in self.intervals.items():
            if v.fixed is None:
                if v.cls not in self.arch.reg_classes:
                    raise RegallocError(f"{v} is of register class {v.cls!r}, which the target does not have "
                                        f"(it has {', '.join(self.arch.reg_classes)})")
                self.push(iv)
        active: dict[str, list[Interval]] = {c: [] for c in self.arch.reg_classes}
        while self.queue:
            pos, _, _, iv = heapq.heappop(self.queue)
            cls = iv.vreg.cls
            for c in self.sharing[cls]:
                active[c] = [a for a in active[c] if a.end >= pos]
            act = active[cls]
            holding = [a for c in self.sharing[cls] for a in active[c]]
            taken = {a.reg for a in holding}
            own = self.arch.reg_classes[cls]
            free = [r for r in own if r not in taken and self.fixed_free(r, iv.start, iv.end)]
            if free:
                hint = self.hinted(iv.vreg)
                iv.reg = hint if hint in free else free[0]
                act.append(iv)
                self.done.append(iv)
                continue
            victims = [a for a in holding if not a.tiny and not self.straddles(a, pos)
                       and a.reg is not None and a.reg in own and self.fixed_free(a.reg, iv.start, iv.end)]
            if not iv.tiny:
                victims.append(iv)
            if not victims:
                raise RegallocError(f"no {iv.vreg.cls} register is left for an operand at instruction {pos // 2} "
                                    f"({self.insts[pos // 2]}): too many operands need a register at once")
            victim = min(victims, key=Interval.priority)
            if victim is iv:
                self.spill(iv, None, pos)
                continue
            active[victim.vreg.cls].remove(victim)
            self.done.remove(victim)
            iv.reg = victim.reg
            act.append(iv)
            self.done.append(iv)
            self.spill(victim, victim.reg, pos)

    def spill(self, iv: Interval, reg: PReg | None, pos: int) -> None:
        """Put iv's value in memory for its whole life: temporaries around each occurrence."""
        v = iv.vreg
        self.spilled.append(v)
        remat = v.remat is not None and sum(w for _, _, w in self.occ[v]) == 1
        if not remat:
            v.remat = None
        for i, r, w in self.occ[v]:
            if remat and w and not r:
                self.deleted.add(i)  # the defining instruction: each use recomputes the value instead
                continue
            t = VReg(v.cls, v.width)
            self.subst.setdefault(i, {})[v] = t
            tiv = Interval(t, 2 * i if r else 2 * i + 1, 2 * i + 1 if w else 2 * i, float("inf"), tiny=True)
            self.intervals[t] = tiv
            self.occ[t] = [(i, r, w)]
            if r:
                self.fills.setdefault(i, []).append((t, v))
            if w:
                self.stores.setdefault(i, []).append((t, v))
            if reg is not None and tiv.end < pos:
                tiv.reg = reg  # before pos, the evicted value held reg alone
                self.done.append(tiv)
            else:
                self.push(tiv)


# ---- rewriting ------------------------------------------------------------------------------------------

def _map_operand(o: Operand, f) -> Operand:
    if isinstance(o, VReg):
        return f(o)
    if isinstance(o, View) and isinstance(o.reg, VReg):
        return View(f(o.reg), o.size)
    if isinstance(o, Mem):
        return dataclasses.replace(o, base=f(o.base) if isinstance(o.base, VReg) else o.base,
                                   index=f(o.index) if isinstance(o.index, VReg) else o.index)
    return o


def map_regs(ins: MInst, f) -> MInst:
    """`ins` with every virtual register v replaced by f(v)."""
    return MInst(ins.op, tuple(_map_operand(o, f) for o in ins.operands), ins.writes, ins.reads, ins.kind, ins.target,
                 tuple(f(r) if isinstance(r, VReg) else r for r in ins.implicit_writes),
                 tuple(f(r) if isinstance(r, VReg) else r for r in ins.implicit_reads), ins.comment)


def _resolve_frame(ins: MInst, frame: Frame) -> MInst:
    if not any(isinstance(o, Mem) and o.frame is not None for o in ins.operands):
        return ins
    return dataclasses.replace(ins, operands=tuple(frame.resolve(o) if isinstance(o, Mem) and o.frame is not None
                                                   else o for o in ins.operands))


def _same_reg(ins: MInst) -> bool:
    a, b = (o.reg if isinstance(o, View) else o for o in ins.operands[:2])
    return a == b


def allocate(fn: MFunction, arch: ArchContext) -> Allocation:
    """Allocate registers for `fn`: the instructions on physical registers, with spill and fill code, the
    prologue at entry and the epilogue before each return."""
    scan = _Scan(fn.insts, arch)
    scan.run()
    # every interval the scan finished holds a register (a spilled value's uses are renamed to temporaries)
    reg: dict[VReg, PReg] = {iv.vreg: iv.reg for iv in scan.done if iv.reg is not None}
    for v in scan.intervals:
        if v.fixed is not None:
            reg[v] = v.fixed
    # spill slots: one per spilled value, largest first so that each is aligned to its size
    slots: dict[VReg, int] = {}
    offset = 0
    for v in sorted((v for v in scan.spilled if v.remat is None), key=lambda v: -arch.slot_size(v.cls, v.width)):
        size = arch.slot_size(v.cls, v.width)
        offset = -(-offset // size) * size
        slots[v] = offset
        offset += size
    used = set(reg.values())
    saved = list(dict.fromkeys(r for cls in arch.reg_classes.values() for r in cls
                               if r in arch.callee_saved and r in used))
    frame = arch.frame(saved, offset, fn.local_bytes)

    def slot(v: VReg) -> Mem:
        return frame.resolve(Mem(frame=FrameRef("slot", slots[v]), size=v.width))

    out: list[MInst] = list(frame.prologue)
    for i, ins in enumerate(fn.insts):
        if i in scan.deleted:
            continue
        if ins.kind == RET:
            out.extend(frame.epilogue)
        sub = scan.subst.get(i, {})
        for t, v in scan.fills.get(i, ()):
            out.append(map_regs(v.remat, lambda x, v=v, t=t: reg[t] if x is v else reg[x]) if v.remat is not None
                       else arch.fill(reg[t], slot(v), v.width))
        new = _resolve_frame(map_regs(ins, lambda x, sub=sub: reg[sub.get(x, x)]), frame)
        if not (new.kind == MOVE and _same_reg(new)):
            out.append(new)
        for t, v in scan.stores.get(i, ()):
            out.append(arch.spill(reg[t], slot(v), v.width))
    return Allocation(out, frame, scan.done, scan.spilled, saved)
