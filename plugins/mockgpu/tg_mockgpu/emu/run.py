"""The wave scheduler: runs every resident wave of a machine to s_endpgm, batching waves by program counter.

Waves that share a program counter form one group and execute each instruction together (one numpy operation over
all of their lanes). The group with the lowest program counter runs next, so after a divergent branch the group
that fell behind catches up and the two merge where they meet again (typically right after the if/else or loop).
A group runs straight-line code without going back to the scheduler; it merges with any group waiting at the pc it
reaches. s_barrier holds a wave until every live wave of its workgroup has arrived (waves that ended do not count);
when a whole workgroup arrives together, it just continues.

`log`, when given, receives one (pc, waves) pair per instruction executed by a batch (waves: the machine's wave
indices that ran it, a slice when they are consecutive), in execution order: what the performance counters and the thread trace count (cp/work.py).
It is None on the plain path, which then pays one test per batch-instruction.
"""
from __future__ import annotations

import numpy as np

from tg_mockgpu.emu.machine import WAVE, Batch, EmulatorError, GPUFault, Machine
from tg_mockgpu.emu.program import Program
from tg_mockgpu.emu.salu import BARRIER, END, JUMP, NEXT


def run(m: Machine, prog: Program, entry: int, log: list[tuple[int, slice | np.ndarray]] | None = None) -> None:
    groups: dict[int, Batch] = {entry: Batch(m, np.arange(m.nwaves))}
    alive = np.ones(m.nwaves, bool)
    held = np.zeros(m.nwaves, bool)
    held_pc = np.zeros(m.nwaves, np.int64)
    ngroups = int(m.group_of[-1]) + 1 if m.nwaves else 0

    def add(pc: int, bt: Batch) -> None:
        other = groups.pop(pc, None)
        groups[pc] = bt if other is None else merge(bt, other)

    def merge(a: Batch, b: Batch) -> Batch:
        return Batch(m, np.sort(np.concatenate([a.waves, b.waves])))

    def release() -> None:
        """Let go of the held waves of every workgroup whose live waves have all arrived at a barrier."""
        have = np.bincount(m.group_of[held], minlength=ngroups)
        live = np.bincount(m.group_of[alive], minlength=ngroups)
        go = held & ((have == live) & (have > 0))[m.group_of]
        if go.any():
            held[go] = False
            for p in np.unique(held_pc[go]).tolist():
                add(p, Batch(m, np.flatnonzero(go & (held_pc == p))))

    cache = prog.cache
    executed = 0                    # wave-instructions
    with np.errstate(all="ignore"):
        while groups:
            pc = min(groups)
            bt = groups.pop(pc)
            while True:
                c = cache.get(pc) or prog.at(pc)
                try:
                    r = c.fn(m, bt)
                except GPUFault as e:
                    raise GPUFault(f"{e}, executing {c.where}", e.address, e.write) from None
                except EmulatorError as e:
                    raise EmulatorError(f"{e}, executing {c.where}") from None
                executed += bt.n
                if log is not None:
                    log.append((pc, bt.idx))
                flow = c.flow
                if flow is NEXT:
                    pc += c.size
                    if pc in groups:
                        bt = merge(bt, groups.pop(pc))
                    continue
                if flow is JUMP:
                    if isinstance(r, int):
                        pc = r
                        if groups and min(groups) < pc:
                            add(pc, bt)
                            break
                        if pc in groups:
                            bt = merge(bt, groups.pop(pc))
                        continue
                    for t in np.unique(r).tolist():
                        add(int(t), Batch(m, bt.waves[r == t]))
                    break
                if flow is END:
                    alive[bt.waves] = False
                    if held.any():
                        release()
                    break
                if flow is BARRIER:
                    nxt = pc + c.size
                    if not held.any() and _whole_groups(m, bt, alive, ngroups):
                        pc = nxt
                        if pc in groups:
                            bt = merge(bt, groups.pop(pc))
                        continue
                    held[bt.waves] = True
                    held_pc[bt.waves] = nxt
                    release()
                    break
                raise EmulatorError(f"unknown control flow {flow!r} of {c.where}")
    m.lane_count += WAVE * executed


def _whole_groups(m: Machine, bt: Batch, alive: np.ndarray, ngroups: int) -> bool:
    """Whether the batch holds every live wave of each workgroup it touches."""
    g = m.group_of[bt.waves]
    have = np.bincount(g, minlength=ngroups)
    live = np.bincount(m.group_of[alive], minlength=ngroups)
    return bool((have[g] == live[g]).all())
