"""PACK in K blocks: a matmul whose B panel (K x width) would not fit the cache, or the scratch, packs K in blocks.

`pack_blocks` is what `opts.pack_panels` does when its `depth` is less than the reduction's size K. The reduce
axis `k` becomes `ko*depth + ki`, `ko` a loop just inside the panel loop `jo`, so each panel holds `depth` rows of
B and is copied once per block; the partial sums of a block are added to the output, which therefore holds the
running sum between blocks:

    for jo:                                  panels of `width` columns
        for rows, jw: C[row, j] = 0          (zero the panel's columns)
        for ko:                              K blocks
            copy P[ki][jw] = B[ko*depth + ki, j]
            for rows, jw: C[row, j] += sum over ki of A[row, ko*depth + ki] * P[ki][jw]
    for rows, j: C[row, j] = epilogue(C[row, j])    (bias, relu: only when the kernel has one)

so no copy of the register tile is made: the zeroing and the epilogue are elementwise loops, O(M*N) against the
tile's O(M*N*K), and blocks are only asked for when K is deep. The accumulation and the epilogue are the kernel's
two effects (opts split their ranges, tails included, as any effect's); the zeroing is inside the first. The last block is shorter when `depth` does not divide K:
its trip count is an expression of `ko`, so no index is ever out of bounds and nothing is gated. Loads of the
output are ordered after the effect that wrote it by AFTERs, as the panel's reads are after its copy.
"""
from __future__ import annotations

from collections.abc import Iterator

from tg_core.dtype import AddrSpace
from tg_core.uop.ops import AxisType, Ops
from tg_core.uop.uop import UOp


def _fresh_copy(ranges: list[UOp], fresh: Iterator[int]) -> dict[UOp, UOp]:
    """New ranges of the same sizes and kinds (each loop has one place in the loop tree)."""
    return {r: UOp.range(r.src[0], next(fresh), r.arg[1], r.dtype) for r in ranges}


def pack_blocks(ast: UOp, j: UOp, k: UOp, red: UOp, load: UOp, amt: int, depth: int, fresh: Iterator[int]) -> UOp:
    """The kernel `ast` (one effect ended over the output axis `j`, reduction `red` over `k` reading B as `load`)
    with B packed into panels of `amt` columns and `depth` rows of K (see the module docstring). OptError (from
    opts) when the kernel's shape does not allow it."""
    from tg_core.codegen.opts import OptError
    effect = ast.src[0]
    store = effect.src[0]
    size, full = j.src[0].arg, k.src[0].arg
    if store.op is not Ops.STORE or store.src[0].op is not Ops.INDEX or store.src[0].src[0].op is not Ops.PARAM:
        raise OptError("K blocks need the kernel's effect to be a store to a buffer")
    target, value = store.src[0], store.src[1]
    out = target.src[0]
    if size % amt:
        raise OptError(f"K blocks need the panel width {amt} to divide the {size} columns")
    if red.dtype != out.dtype.base or red.dtype.count != 1:
        # the running sum is kept in the output: in a narrower dtype it would be rounded between blocks
        raise OptError(f"K blocks keep partial sums in the output, which is {out.dtype.base!r}, not {red.dtype!r}")
    if len(target.src) != 2:
        raise OptError("K blocks need an ungated store")
    blocks = -(-full // depth)
    last = full - (blocks - 1) * depth
    jo = UOp.range(UOp.const(j.dtype, size // amt), j.arg[0], j.arg[1], j.dtype)
    jw, pw = (UOp.range(UOp.const(j.dtype, amt), next(fresh), AxisType.LOOP, j.dtype) for _ in range(2))
    ko = UOp.range(UOp.const(k.dtype, blocks), next(fresh), AxisType.LOOP, k.dtype)
    # the block's rows: `depth`, and what is left of K in the last block
    rows = UOp.const(k.dtype, depth) if last == depth else (ko < blocks - 1).where(
        UOp.const(k.dtype, depth), UOp.const(k.dtype, last))
    ki = UOp.range(rows, next(fresh), AxisType.REDUCE, k.dtype)
    pk = UOp.range(rows, next(fresh), AxisType.LOOP, k.dtype)
    panel = UOp(Ops.DEFINE_REG, load.dtype.ptr(depth * amt, AddrSpace.REG), (), -1 - len(
        [u for u in ast.toposort() if u.op is Ops.DEFINE_REG]))
    col, copy_col, kk = jo * amt + jw, jo * amt + pw, ko * depth
    copy = panel.index(pk * amt + pw).store(load.substitute({k: kk + pk, j: copy_col})).end(pk, pw)
    packed = panel.after(copy).index(ki * amt + jw).load()
    block_sum = UOp(Ops.REDUCE, red.dtype, (red.src[0].substitute({load: packed, k: kk + ki}).substitute({j: col}),
                                             ki), red.arg, red.tag)
    others = [r for r in effect.src[1:] if r is not j]
    at = target.substitute({j: col})

    zero_rngs = _fresh_copy([*others, jw], fresh)
    zeroed = at.substitute(zero_rngs).store(UOp.const(red.dtype, 0)).end(*zero_rngs.values())
    # after this block's copy too: a load whose index names no loop inside `ko` (a tile of all the rows and
    # columns, as lanes) would otherwise be placed before the block loop, reading only the zeros
    prev = at.replace(src=(out.after(zeroed, copy), *at.src[1:])).load()
    accumulate = at.store(prev + block_sum)
    summed = accumulate.end(jo, ko, *others, jw)
    if value is red:  # a plain matmul: the last block's sum is the result
        return ast.replace(src=(summed,))
    # the epilogue reads each element's total: the value with the reduction replaced by the output's load, over
    # the whole output after the last panel (a top-level effect, so its rows and the tile's split like any other)
    mapping = _fresh_copy([*others, j], fresh)
    epi_at = target.substitute(mapping)
    total = epi_at.replace(src=(out.after(summed), *epi_at.src[1:])).load()
    # renamed first: `total` holds the accumulation, whose ranges stay its own
    epi = epi_at.store(value.substitute(mapping).substitute({red.substitute(mapping): total}))
    return ast.replace(src=(summed, epi.end(*mapping.values())))
