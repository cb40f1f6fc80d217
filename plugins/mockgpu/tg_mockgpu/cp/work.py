"""What a dispatch did, as the performance counters and the thread trace see it: where each wave ran, what it
executed and when, by a cycle model of the emulator (docs/architecture.md, "Performance counters and SQTT").

The emulator runs the waves of a dispatch in batches and does not model the machine they run on, so the mock
places them and times them by rules of its own:

- Placement (a 7900 XTX: 6 SEs x 2 SAs x 4 WGPs, 4 SIMDs per WGP): the workgroup of flat index g (x fastest)
  goes to WGP unit u = g mod 48, se = u mod 6, sa = (u div 6) mod 2, wgp = u div 12 (the workgroup dispatcher
  deals workgroups to the shader engines in turn); wave i of a workgroup runs on SIMD i mod 4. A wave's slot
  (the SQTT wave field) is its rank among the waves of its SIMD, mod 16.
- Time: each instruction takes the issue cycles of its class (CYCLES: 1 for scalar and plain vector ALU, 4 for
  a transcendental, ...); there is no memory latency (a wait issues in one cycle) and barriers cost their issue
  only. A wave lasts the sum over its executed instructions; the waves of one SIMD run one after another in
  dispatch order, all SIMDs at once from the dispatch's start. A WGP is busy from the start to its last wave's
  end (the longest of its SIMDs); the dispatch lasts as long as its busiest WGP.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tg_mockgpu.emu.program import Program
from tg_mockgpu.rdna3.decode import Inst

SES, SAS, WGPS, SIMDS = 6, 2, 4, 4
UNITS = SES * SAS * WGPS
WAVE_SLOTS = 16

# instruction classes: what a counter counts and which SQTT packet an issue becomes (sqtt_enc.py)
CLASSES = ("SALU", "SALU_EXEC", "SMEM", "VALU", "VALU_EXEC", "VALU_TRANS", "VALU_SHIFT64", "VALU_MAD64",
           "VALU_F64", "LDS_RD", "LDS_WR", "VMEM_RD", "VMEM_WR", "FLAT_RD", "FLAT_WR", "JUMP", "IMMEDIATE",
           "MESSAGE", "BARRIER", "ENDPGM", "NONE")
CLASS = {c: i for i, c in enumerate(CLASSES)}
VALU_CLASSES = frozenset({"VALU", "VALU_EXEC", "VALU_TRANS", "VALU_SHIFT64", "VALU_MAD64", "VALU_F64"})
SALU_CLASSES = frozenset({"SALU", "SALU_EXEC"})
LDS_CLASSES = frozenset({"LDS_RD", "LDS_WR"})
# issue cycles of each class (the model, not measured hardware timings)
CYCLES = {"SALU": 1, "SALU_EXEC": 1, "SMEM": 4, "VALU": 1, "VALU_EXEC": 1, "VALU_TRANS": 4, "VALU_SHIFT64": 2,
          "VALU_MAD64": 4, "VALU_F64": 16, "LDS_RD": 2, "LDS_WR": 2, "VMEM_RD": 4, "VMEM_WR": 4, "FLAT_RD": 4,
          "FLAT_WR": 4, "JUMP": 1, "IMMEDIATE": 1, "MESSAGE": 1, "BARRIER": 1, "ENDPGM": 1, "NONE": 0}
COST = np.array([CYCLES[c] for c in CLASSES], np.int64)

VALU_ENCODINGS = frozenset({"VOP1", "VOP2", "VOP3", "VOP3SD", "VOPC", "VOP3P", "VOPD", "VINTERP"})
TRANSCENDENTAL = ("v_exp_", "v_log_", "v_rcp_", "v_rsq_", "v_sqrt_", "v_sin_", "v_cos_")
WRITES = ("store", "write", "atomic")
EXEC_SGPRS = (126, 127)


def classify(inst: Inst) -> str:
    """The class of an instruction (CLASSES)."""
    enc, op = inst.enc, inst.op
    if enc == "SOPP":
        if op == "s_delay_alu":
            return "NONE"      # issues nothing: the scheduler reads it as a hint
        if op == "s_endpgm":
            return "ENDPGM"
        if op.startswith(("s_branch", "s_cbranch")):
            return "JUMP"
        if op == "s_barrier":
            return "BARRIER"
        if op.startswith("s_sendmsg"):
            return "MESSAGE"
        return "IMMEDIATE"     # waits, nops, clauses, priorities
    if enc in ("SOP1", "SOP2", "SOPC", "SOPK"):
        return "SALU_EXEC" if inst.fields.get("sdst") in EXEC_SGPRS or "exec" in op else "SALU"
    if enc == "SMEM":
        return "SMEM"
    if enc in VALU_ENCODINGS:
        if op.startswith("v_cmpx"):
            return "VALU_EXEC"
        if op.startswith(TRANSCENDENTAL):
            return "VALU_TRANS"
        if op.startswith(("v_lshlrev_b64", "v_lshrrev_b64", "v_ashrrev_i64")):
            return "VALU_SHIFT64"
        if op.startswith(("v_mad_u64", "v_mad_i64")):
            return "VALU_MAD64"
        if op.endswith("_f64") or "_f64_" in op:
            return "VALU_F64"
        return "VALU"
    writes = any(w in op for w in WRITES)
    if enc == "DS":
        return "LDS_WR" if writes else "LDS_RD"
    if enc == "FLAT":
        return "FLAT_WR" if writes else "FLAT_RD"
    if enc in ("GLOBAL", "SCRATCH", "MUBUF", "MTBUF"):
        return "VMEM_WR" if writes else "VMEM_RD"
    return "SALU"


@dataclass
class DispatchWork:
    """The waves of one dispatch in dispatch order: placement, executed instructions by class, cycles, and (for
    the waves asked for) the instructions each issued with their issue cycle."""
    se: np.ndarray
    sa: np.ndarray
    wgp: np.ndarray
    simd: np.ndarray
    slot: np.ndarray
    counts: np.ndarray                   # (len(CLASSES), waves) executed instructions
    start: np.ndarray                    # cycle each wave starts, from the dispatch's start
    cycles: np.ndarray                   # cycles each wave lasts
    span: int                            # cycles of the whole dispatch
    # wave -> (issue cycle from the dispatch's start, class index, branch taken) of each executed instruction
    issued: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def waves(self) -> int:
        return len(self.se)

    def per_unit(self, values: np.ndarray) -> np.ndarray:
        """A per-wave quantity summed over each WGP: (SES, SAS, WGPS)."""
        out = np.zeros((SES, SAS, WGPS), np.int64)
        np.add.at(out, (self.se, self.sa, self.wgp), values)
        return out

    def count(self, classes: frozenset[str]) -> np.ndarray:
        """Executed instructions of these classes per wave."""
        return self.counts[[CLASS[c] for c in classes]].sum(axis=0)

    def busy(self) -> np.ndarray:
        """Cycles each WGP is busy: (SES, SAS, WGPS)."""
        simd_total = np.zeros((SES, SAS, WGPS, SIMDS), np.int64)
        np.add.at(simd_total, (self.se, self.sa, self.wgp, self.simd), self.cycles)
        return simd_total.max(axis=-1)


class WorkBuilder:
    """Collects the emulator's instruction logs of a dispatch's batches (emu/run.py `log`) into a DispatchWork.
    `traced` holds the (se, sa, wgp, simd) units whose waves' instructions are kept one by one (SQTT)."""

    def __init__(self, prog: Program, grid: tuple[int, int, int], traced: frozenset[tuple[int, int, int, int]]):
        self.prog, self.grid, self.traced = prog, grid, traced
        self.cls: dict[int, int] = {}
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # per batch: group, index, counts
        self.seqs: dict[int, np.ndarray] = {}  # global wave -> executed pcs
        self.done = 0                          # waves of earlier batches

    def _class(self, pc: int) -> int:
        c = self.cls.get(pc)
        if c is None:
            c = self.cls[pc] = CLASS[classify(self.prog.at(pc).inst)]
        return c

    def add(self, group_ids: np.ndarray, waves_per_group: int, log: list[tuple[int, slice | np.ndarray]]) -> None:
        """One batch: its workgroup ids (n, 3), waves per workgroup and the run's log."""
        gx, gy, _ = self.grid
        n = len(group_ids) * waves_per_group
        flat = (group_ids[:, 0] + gx * (group_ids[:, 1] + gy * group_ids[:, 2])).astype(np.int64)
        group = np.repeat(flat, waves_per_group)
        index = np.tile(np.arange(waves_per_group), len(group_ids))
        counts = np.zeros((len(CLASSES), n), np.int64)
        for pc, waves in log:
            counts[self._class(pc), waves] += 1
        self.parts.append((group, index, counts))
        if self.traced:
            keys = np.isin(_unit(*_place(group, index)), [_unit(*u) for u in self.traced])
            if keys.any():
                pcs, hits = [], []
                for pc, waves in log:
                    hit = np.flatnonzero(keys[waves]) + waves.start if isinstance(waves, slice) else waves[keys[waves]]
                    if len(hit):
                        pcs.append(np.full(len(hit), pc, np.int64))
                        hits.append(hit)
                w_all, pc_all = np.concatenate(hits), np.concatenate(pcs)
                order = np.argsort(w_all, kind="stable")          # each wave's pcs in execution order
                w_all, pc_all = w_all[order], pc_all[order]
                cut = np.flatnonzero(np.diff(w_all)) + 1
                for ws, seq in zip(np.split(w_all, cut), np.split(pc_all, cut)):
                    self.seqs[self.done + int(ws[0])] = seq
        self.done += n

    def finish(self) -> DispatchWork:
        if self.parts:
            group = np.concatenate([p[0] for p in self.parts])
            index = np.concatenate([p[1] for p in self.parts])
            counts = np.concatenate([p[2] for p in self.parts], axis=1)
        else:
            group = index = np.zeros(0, np.int64)
            counts = np.zeros((len(CLASSES), 0), np.int64)
        se, sa, wgp, simd = _place(group, index)
        cycles = COST @ counts
        unit = _unit(se, sa, wgp, simd)
        order = np.argsort(unit, kind="stable")              # each SIMD's waves in dispatch order
        u, d = unit[order], cycles[order]
        first = np.ones(len(u), bool)
        first[1:] = u[1:] != u[:-1]
        run_id = np.cumsum(first) - 1
        ends = np.cumsum(d)
        base = (ends - d)[first][run_id]                      # cycles before the SIMD's first wave
        rank = np.arange(len(u)) - np.flatnonzero(first)[run_id]
        start, slot = np.empty_like(cycles), np.empty_like(cycles)
        start[order], slot[order] = ends - d - base, rank % WAVE_SLOTS
        work = DispatchWork(se, sa, wgp, simd, slot, counts, start, cycles, 0)
        work.span = int(work.busy().max()) if len(se) else 0
        if self.seqs:   # all traced waves at once: classes, issue cycles and taken branches
            waves = list(self.seqs)
            pcs = np.concatenate([self.seqs[w] for w in waves])
            uniq, at = np.unique(pcs, return_inverse=True)
            cls = np.array([self._class(int(pc)) for pc in uniq], np.int64)[at]
            size = np.array([self.prog.at(int(pc)).size for pc in uniq], np.int64)[at]
            lens = np.array([len(self.seqs[w]) for w in waves])
            first = np.cumsum(lens) - lens
            cost = COST[cls]
            done = np.cumsum(cost) - cost                               # cycles before, over all the waves
            when = done - np.repeat(done[first], lens) + np.repeat(start[waves], lens)
            taken = np.zeros(len(pcs), bool)
            taken[:-1] = pcs[1:] != pcs[:-1] + size[:-1]
            taken[first + lens - 1] = False                             # a wave's last instruction
            cut = first[1:]
            for w, t, c, k in zip(waves, np.split(when, cut), np.split(cls, cut), np.split(taken, cut)):
                work.issued[w] = (t, c, k)
        return work


def _place(group: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(se, sa, wgp, simd) of waves given their workgroup's flat index and their index in it (module doc)."""
    u = group % UNITS
    return u % SES, (u // SES) % SAS, u // (SES * SAS), index % SIMDS


def _unit(se: Any, sa: Any, wgp: Any, simd: Any) -> Any:
    """One number per SIMD (ints or arrays of them)."""
    return ((se * SAS + sa) * WGPS + wgp) * SIMDS + simd
