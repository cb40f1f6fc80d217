"""Codegen's programs stay what they were: a few representative kernels (elementwise, reductions, softmax,
matmul register tiles, tails) linearized and compared, node by node, with tests/golden/codegen_programs.txt.

A speed change to the rewrite engine or to a codegen stage must leave every program identical. A change that
means to alter programs regenerates the file: `python tests/test_codegen_golden.py --update` (and says why in
its commit)."""
import sys
from pathlib import Path

import pytest

from tg_core.codegen import Opt, OptOps, linearize_kernel

pytest.importorskip("llvmlite.binding")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_codegen import ew_2d, matmul, row_sum, softmax  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "golden" / "codegen_programs.txt"
U, R = OptOps.UPCAST, OptOps.UNROLL

CASES = {
    "ew_plain": (lambda: ew_2d(8, 6), []),
    "ew_upcast_tail": (lambda: ew_2d(7, 13), [Opt(U, 0, 3), Opt(U, 1, 5)]),
    "row_sum_unroll": (lambda: row_sum(4, 16), [Opt(R, 0, 8)]),
    "softmax_plain": (lambda: softmax(4, 32), []),
    "softmax_upcast_unroll": (lambda: softmax(6, 32), [Opt(U, 0, 2), Opt(R, 1, 3)]),
    "softmax_lanes_tail": (lambda: softmax(5, 37), [Opt(R, 0, 4), Opt(R, 1, 8)]),
    "matmul_tile": (lambda: matmul(16, 32, 8), [Opt(U, 1, 4), Opt(U, 0, 4), Opt(R, 0, 2)]),
    "matmul_tile_tails": (lambda: matmul(13, 37, 9), [Opt(U, 1, 16), Opt(U, 0, 4), Opt(R, 0, 2)]),
}


def render(name: str) -> str:
    """The case's linear program, one node a line: position, op, dtype, sources by position, arg, tag."""
    build, opts = CASES[name]
    prog = linearize_kernel(build(), opts=opts)
    pos = {u: i for i, u in enumerate(prog.uops)}
    lines = [f"{i} {u.op.name} {u.dtype!r} {[pos.get(s, '?') for s in u.src]} {u.arg!r} {u.tag!r}"
             for i, u in enumerate(prog.uops)]
    return f"== {name}\n" + "\n".join(lines) + "\n"


def _stored() -> dict[str, str]:
    out: dict[str, str] = {}
    for block in GOLDEN.read_text().split("== ")[1:]:
        name = block.split("\n", 1)[0]
        out[name] = "== " + block
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_program_identical(name):
    stored = _stored()
    assert name in stored, f"{GOLDEN.name} has no program for {name}: run this file with --update"
    got, want = render(name).splitlines(), stored[name].splitlines()
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"{name}: line {i} differs:\n  got  {g}\n  want {w}"
    assert len(got) == len(want), f"{name}: {len(got) - 1} nodes, the stored program has {len(want) - 1}"


if __name__ == "__main__" and "--update" in sys.argv:
    GOLDEN.write_text("".join(render(n) for n in sorted(CASES)))
    print(f"wrote {len(CASES)} programs to {GOLDEN}")
