"""Block ranges: a reduce range read through `r // c` or `r % c` is split into the loops `r = outer*c + inner`.

A reshape that merges axes gives one range where the data has blocks: a quantized weight of shape (rows, n)
is (rows, n/32, 32) elements over (rows, n/32, 20) bytes, so a matmul reading it computes `k // 32` (the
block, whose scales it loads) and `k % 32` (the element, whose nibble it shifts out) for every element. Split
at c, the index math has neither (symbolic.py folds `(o*c + i) // c` to `o` and `% c` to `i`): the scales
depend on the outer loop only, so they are loaded once per block, and the inner loop reads contiguous bytes
with a shift that is the same for all of it, which a loop vectorizer widens. The split only renames loops
(the values are the same); the largest divisor is taken first and the new ranges are split again (a Q4
block's 32 elements are two halves of 16 nibbles: `k % 32 // 16` becomes a loop of 2 around one of 16).

Only REDUCE ranges are split: an output range keeps its place for the multi-core split and the opts, which
count output axes; a reduction's loops are private to the kernel."""
from __future__ import annotations

from tg_core.codegen.opts import _axis_key, split_range
from tg_core.uop.ops import AxisType, Ops
from tg_core.uop.symbolic import simplify
from tg_core.uop.uop import UOp

MAX_SPLITS = 8  # a kernel's reduce ranges are few; this bounds the pass on pathological index math


def block_divisors(ast: UOp) -> dict[UOp, set[int]]:
    """For each constant-size reduce range of `ast`, the constants c with `range // c` or `range % c` in it that
    split the range's size evenly (ranges without any are left out)."""
    out: dict[UOp, set[int]] = {}
    for u in ast.toposort():
        if u.op not in (Ops.IDIV, Ops.MOD) or u.src[1].op is not Ops.CONST:
            continue
        rng, c = u.src[0], u.src[1].arg
        if rng.op is Ops.RANGE and rng.arg[1] is AxisType.REDUCE and rng.src[0].op is Ops.CONST and \
                1 < c < rng.src[0].arg and rng.src[0].arg % c == 0:
            out.setdefault(rng, set()).add(c)
    return out


def split_block_ranges(ast: UOp) -> UOp:
    """`ast` with each reduce range that is read by block (see the module docstring) split at its largest
    block size, repeatedly (the first such range in axis order each time), and the index math simplified."""
    for _ in range(MAX_SPLITS):
        divs = block_divisors(ast)
        if not divs:
            return ast
        rng = min(divs, key=lambda r: _axis_key(r.arg[0]))
        ast = simplify(split_range(ast, rng, max(divs[rng]), AxisType.REDUCE))
    return ast
