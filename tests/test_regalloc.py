"""The linear-scan allocator on synthetic programs of a toy ISA: each program is run by an interpreter before
allocation (on virtual registers) and after (on physical registers, with the spill code and frame the
allocator added), and both runs must print the same values and preserve callee-saved registers. Structural
checks: no two overlapping intervals share a register, spills happen exactly under pressure, loop-carried
values stay correct, fixed registers are respected."""
from __future__ import annotations

import random

import pytest

from tg_core.codegen.lib.regalloc import Allocation, RegallocError, allocate, live_intervals
from tg_core.renderer.isa import (
    CJUMP,
    JUMP,
    MOVE,
    RET,
    ArchContext,
    Frame,
    Imm,
    Label,
    Mem,
    MFunction,
    MInst,
    PReg,
    VReg,
    label,
)

SP = PReg("sp", "sp", 99)


class ToyFrame(Frame):
    def resolve(self, mem: Mem) -> Mem:
        assert mem.frame is not None and mem.frame.kind == "slot"
        return Mem(base=SP, disp=mem.frame.index, size=mem.size)


class ToyArch(ArchContext):
    """n general registers r0..; the last `callee` of them are callee-saved."""

    def __init__(self, n: int = 4, callee: int = 1):
        regs = tuple(PReg(f"r{i}", "gpr", i) for i in range(n))
        self.reg_classes = {"gpr": regs}
        self.callee_saved = frozenset(regs[n - callee:])

    def move(self, dst, src, width):
        return mov(dst, src)

    def spill(self, src, slot, width):
        return MInst("st", (slot, src), reads=(1,))

    def fill(self, dst, slot, width):
        return MInst("ld", (dst, slot), writes=(0,))

    def frame(self, saved, spill_bytes, local_bytes=0):
        base = spill_bytes
        pro = [MInst("st", (Mem(base=SP, disp=base + 8 * k, size=8), r), reads=(1,)) for k, r in enumerate(saved)]
        epi = [MInst("ld", (r, Mem(base=SP, disp=base + 8 * k, size=8)), writes=(0,)) for k, r in enumerate(saved)]
        return ToyFrame(pro, epi, base + 8 * len(saved))


# ---- the toy ISA: constructors and an interpreter -------------------------------------------------------

def li(d, value):
    ins = MInst("li", (d, Imm(value)), writes=(0,))
    return ins


def add(d, a, b):
    return MInst("add", (d, a, b), writes=(0,), reads=(1, 2))


def addi(d, value):  # two-address: d += value
    return MInst("addi", (d, Imm(value)), writes=(0,), reads=(0,))


def mov(d, s):
    return MInst("mov", (d, s), writes=(0,), reads=(1,), kind=MOVE)


def out(a):
    return MInst("out", (a,), reads=(0,))


def blt(a, b, target):
    return MInst("blt", (a, b, Label(target)), reads=(0, 1), kind=CJUMP, target=target)


def jmp(target):
    return MInst("jmp", (Label(target),), kind=JUMP, target=target)


def ret():
    return MInst("ret", kind=RET)


def gpr():
    return VReg("gpr", 8)


def interpret(insts: list[MInst], regs: dict | None = None, limit: int = 200000) -> tuple[list[int], dict]:
    """Run the program; registers (virtual or physical) and memory are dicts. Returns (printed, registers)."""
    regs = dict(regs or {})
    mem: dict[int, int] = {}
    labels = {ins.target: i for i, ins in enumerate(insts) if ins.op == "label"}
    printed, pc, steps = [], 0, 0

    def val(o):
        if isinstance(o, Imm):
            return o.value
        if o not in regs:
            raise AssertionError(f"read of {o} before it was written")
        return regs[o]
    while pc < len(insts):
        steps += 1
        assert steps < limit, "runaway program"
        ins, pc = insts[pc], pc + 1
        o = ins.operands
        if ins.op in ("li", "mov"):
            regs[o[0]] = val(o[1])
        elif ins.op == "add":
            regs[o[0]] = val(o[1]) + val(o[2])
        elif ins.op == "addi":
            regs[o[0]] = val(o[0]) + o[1].value
        elif ins.op == "out":
            printed.append(val(o[0]))
        elif ins.op == "st":
            assert o[0].base is SP
            mem[o[0].disp] = val(o[1])
        elif ins.op == "ld":
            assert o[1].base is SP and o[1].disp in mem, f"fill of {o[1]} never stored"
            regs[o[0]] = mem[o[1].disp]
        elif ins.op == "blt":
            if val(o[0]) < val(o[1]):
                pc = labels[ins.target]
        elif ins.op == "jmp":
            pc = labels[ins.target]
        elif ins.op == "ret":
            break
        elif ins.op != "label":
            raise AssertionError(f"unknown toy instruction {ins.op}")
    return printed, regs


def check(fn: MFunction, arch: ToyArch) -> Allocation:
    """Allocate, then check the invariants and that the allocated program computes what the virtual one does."""
    want, _ = interpret(fn.insts, {v: 1000 + v.id for i in fn.insts for v in i.used_regs() if v.fixed})
    fixed_in = {v.fixed: 1000 + v.id for i in fn.insts for v in i.used_regs() if isinstance(v, VReg) and v.fixed}
    alloc = allocate(fn, arch)
    ivs = [iv for iv in alloc.intervals]
    for a_i, a in enumerate(ivs):
        assert a.reg in arch.reg_classes[a.vreg.cls]
        for b in ivs[a_i + 1:]:
            assert not (a.reg == b.reg and a.overlaps(b)), \
                f"{a.vreg} {a.start}-{a.end} and {b.vreg} {b.start}-{b.end} share {a.reg}"
    for ins in alloc.insts:
        assert not any(isinstance(r, VReg) for r in ins.used_regs() + ins.defined_regs()), \
            f"virtual register left in {ins}"
    sentinel = {r: -7000 - r.num for r in arch.callee_saved}
    got, regs = interpret(alloc.insts, {**sentinel, **fixed_in})
    assert got == want
    for r, v in sentinel.items():
        assert regs[r] == v, f"callee-saved {r} not restored"
    return alloc


def straight(n_live: int) -> MFunction:
    vs = [gpr() for _ in range(n_live)]
    insts = [li(v, i * 3 + 1) for i, v in enumerate(vs)]
    total = gpr()
    insts.append(li(total, 0))
    for v in vs:
        insts.append(add(total, total, v))
    insts += [out(v) for v in vs] + [out(total), ret()]
    return MFunction("straight", insts)


# ---- tests ---------------------------------------------------------------------------------------------

def test_no_spill_when_registers_suffice():
    alloc = check(straight(2), ToyArch(4, callee=0))
    assert alloc.spilled == []
    assert not any(i.op in ("st", "ld") for i in alloc.insts)


def test_spills_under_pressure():
    alloc = check(straight(9), ToyArch(4, callee=0))
    assert alloc.spilled, "9 values live at once in 4 registers must spill"
    assert any(i.op == "ld" for i in alloc.insts) and any(i.op == "st" for i in alloc.insts)


def test_callee_saved_only_when_used():
    light = check(straight(1), ToyArch(4, callee=2))
    assert light.saved == [] and light.frame.size == 0
    heavy = check(straight(6), ToyArch(4, callee=2))
    assert heavy.saved, "under pressure the callee-saved registers are used, and then saved and restored"


def loop_program(n_acc: int, n_inv: int, trips: int) -> MFunction:
    """Invariants defined before a loop, accumulators carried around it, all printed after it."""
    invs, accs, i, n = [gpr() for _ in range(n_inv)], [gpr() for _ in range(n_acc)], gpr(), gpr()
    insts = [li(v, 10 + k) for k, v in enumerate(invs)] + [li(a, k) for k, a in enumerate(accs)]
    insts += [li(i, 0), li(n, trips), label("top")]
    for k, a in enumerate(accs):
        t = gpr()
        insts += [add(t, a, invs[k % n_inv] if invs else a), mov(a, t)]
    insts += [addi(i, 1), blt(i, n, "top")]
    insts += [out(a) for a in accs] + [out(i), ret()]
    return MFunction("loop", insts)


@pytest.mark.parametrize("n_acc, n_inv", [(1, 0), (1, 1), (3, 2), (6, 5)])
def test_loop_carried_values(n_acc, n_inv):
    fn = loop_program(n_acc, n_inv, 5)
    ivs, _ = live_intervals(fn.insts)
    top = next(k for k, ins in enumerate(fn.insts) if ins.op == "label")
    back = next(k for k, ins in enumerate(fn.insts) if ins.op == "blt")
    for v in fn.insts[0].defined_regs():  # an invariant is live across the whole loop, back edge included
        assert ivs[v].start < 2 * top and ivs[v].end >= 2 * back + 1
    alloc = check(fn, ToyArch(4, callee=1))
    assert bool(alloc.spilled) == (n_acc + n_inv + 3 > 4)  # + counter, limit and one temporary


def test_spill_prefers_values_outside_loops():
    """A value used only outside the loop is spilled before one used inside it."""
    fn = loop_program(2, 1, 4)
    cold = [gpr() for _ in range(2)]
    fn.insts = [li(c, 99) for c in cold] + fn.insts[:-1] + [out(c) for c in cold] + [ret()]
    alloc = check(fn, ToyArch(6, callee=0))  # the loop needs 6 registers: the 2 cold values must go
    assert set(alloc.spilled) == set(cold)


def test_fixed_registers():
    arch = ToyArch(4, callee=0)
    r0, r1 = arch.reg_classes["gpr"][:2]
    arg = VReg("gpr", 8, fixed=r1)  # an incoming argument in r1
    a, b, t = gpr(), gpr(), gpr()
    pinned = VReg("gpr", 8, fixed=r0)  # an instruction that reads its operand from r0
    fn = MFunction("fixed", [mov(a, arg), li(b, 5), add(t, a, b), mov(pinned, t), out(pinned), out(a), out(b), ret()])
    alloc = check(fn, arch)
    regs = {iv.vreg: iv.reg for iv in alloc.intervals}
    assert regs[a] != r0 and regs[b] != r0, "values live across the pinned interval stay out of r0"
    assert regs[a] == r1, "the copy of the argument coalesces with it"
    assert not any(i.op == "mov" and i.operands[1] == r1 for i in alloc.insts)


def test_fixed_conflict_is_an_error():
    r0 = PReg("r0", "gpr", 0)
    x, y = VReg("gpr", 8, fixed=r0), VReg("gpr", 8, fixed=r0)
    with pytest.raises(RegallocError, match="both need r0"):
        allocate(MFunction("bad", [li(x, 1), li(y, 2), out(x), out(y), ret()]), ToyArch())


def test_use_before_definition_is_an_error():
    x = gpr()
    with pytest.raises(RegallocError, match="before any definition"):
        allocate(MFunction("bad", [out(x), ret()]), ToyArch())


def test_rematerialized_constants_are_not_stored():
    fn = straight(9)
    for ins in fn.insts:
        if ins.op == "li":
            ins.operands[0].remat = ins
    alloc = check(fn, ToyArch(4, callee=0))
    assert alloc.spilled and not any(i.op == "st" for i in alloc.insts), "spilled constants are recomputed"


def _random_program(rng: random.Random, n_stmts: int, classes: tuple[str, ...] = ("gpr",)) -> MFunction:
    """Loops (counters and their limits are class "gpr"), constants, adds and prints; the other values take a
    random class of `classes`."""
    insts: list[MInst] = []
    labels = iter(range(10 ** 6))
    counters: set[VReg] = set()

    def block(scope: list[VReg], depth: int, n: int) -> list[VReg]:
        for _ in range(n):
            kind = rng.random()
            if kind < 0.15 and depth < 2:
                i, lim = gpr(), gpr()
                counters.add(i)
                top = f"L{next(labels)}"
                insts.extend([li(i, 0), li(lim, rng.randint(1, 3)), label(top)])
                values = [v for v in scope if v not in counters]
                carried = rng.sample(values, min(len(values), rng.randint(0, 3)))
                inner = block(scope + [i], depth + 1, rng.randint(1, 5))
                for c in carried:  # loop-carried updates
                    insts.append(add(c, c, rng.choice(inner)))
                insts.extend([addi(i, 1), blt(i, lim, top)])
                scope = scope + inner[len(scope) + 1:]
            elif kind < 0.35 or len(scope) < 2:
                v = VReg(rng.choice(classes), 8)
                insts.append(li(v, rng.randint(-5, 5)))
                scope = scope + [v]
            elif kind < 0.8:
                v = VReg(rng.choice(classes), 8)
                insts.append(add(v, rng.choice(scope), rng.choice(scope)))
                scope = scope + [v]
            else:
                insts.append(out(rng.choice(scope)))
        return scope
    final = block([], 0, n_stmts)
    insts.extend(out(v) for v in final[-6:])
    insts.append(ret())
    return MFunction("random", insts)


@pytest.mark.parametrize("seed", range(25))
def test_random_programs(seed):
    rng = random.Random(seed)
    fn = _random_program(rng, 30)
    check(fn, ToyArch(rng.choice([3, 4, 6]), callee=rng.choice([0, 1, 2])))


class SharedArch(ToyArch):
    """Two classes over one register file, as x86's xmm (scalar and VEX code: registers 0-15) and zmm values
    (16-31, then 0-15): "lo" has r0..r{lo-1}, "any" the registers above them first, then the same r0..r{lo-1}."""

    def __init__(self, lo: int = 3, hi: int = 4):
        regs = tuple(PReg(f"r{i}", "gpr", i) for i in range(lo + hi))
        self.reg_classes = {"gpr": regs[:lo], "any": regs[lo:] + regs[:lo]}
        self.callee_saved = frozenset()


@pytest.mark.parametrize("n_any, n_lo", [(4, 3), (6, 1), (7, 0), (7, 2), (9, 3)])
def test_classes_sharing_registers(n_any, n_lo):
    """Values of a class with registers of its own and of the class it shares: "any" takes its own registers
    first, then the shared ones while free; a "lo" value never gets a register an "any" value holds at the same
    time, and evicts one (which spills) when all are taken."""
    arch = SharedArch(3, 4)
    wide = [VReg("any", 8) for _ in range(n_any)]
    low = [gpr() for _ in range(n_lo)]
    insts = [li(v, 7 * i + 1) for i, v in enumerate(wide + low)]
    total = VReg("any", 8)
    insts.append(li(total, 0))
    for v in wide + low:
        insts.append(add(total, total, v))
    insts += [out(v) for v in wide + low] + [out(total), ret()]
    alloc = check(MFunction("shared", insts), arch)
    regs = {iv.vreg: iv.reg for iv in alloc.intervals}
    if n_any <= 4:
        assert all(regs[v].num >= 3 for v in wide), "an 'any' value takes its own registers first"
    assert bool(alloc.spilled) == (n_any + n_lo + 1 > 7), "a spill exactly when the register file is full"


@pytest.mark.parametrize("seed", range(15))
def test_random_programs_sharing_registers(seed):
    rng = random.Random(seed)
    fn = _random_program(rng, 30, classes=("gpr", "any"))
    check(fn, SharedArch(rng.choice([2, 3]), rng.choice([1, 2, 3])))
