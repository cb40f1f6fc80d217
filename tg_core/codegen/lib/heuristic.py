"""The default opts for a CPU: which axes of a kernel become straight-line lanes.

A CPU kernel is fast when its inner loop keeps independent work in vector registers and streams memory
with unit stride. The shapes it handles:

- **Register tiles** for matmul-like reductions (`REDUCE(ADD)` over products where one operand does not
  depend on the contiguous output axis `j` and another does not depend on a second output axis `i`):
  UPCAST `j` by two vectors and `i` by `tile_rows`, so the reduce loop updates `tile_rows x 2` vector
  accumulators from two vector loads of B and one broadcast of A per row: the GEMM micro-kernel shape
  (4x16 for fp32 on AVX2: 8 accumulators cover the FMA latency x ports, 11 of 16 registers; 8x32 on AVX-512:
  16 accumulators of 32 registers). Convolutions match too (output channels x output columns).
- **Packed panels** before the tile where PACK applies: B's columns, two vectors at a time, are copied into
  a contiguous scratch panel reused by every row tile (opts.pack_panels; 2.5x on a 1024 matmul, whose B rows
  4 KB apart otherwise thrash the caches), whatever B's layout (`x @ w.T` too). Kernels PACK does not fit
  keep the unpacked tile, which needs B unit-stride in `j`. A panel deeper than half of L2 (or the scratch) is
  packed in K blocks (k_depth, codegen/blocking.py).
- **Column reductions** (`out[j] = sum_i a[i, j]`, a bias gradient): UPCAST `j` by eight vectors, since the
  reduce loop sits inside `j` and no loop vectorizer widens across it.
- **Vector width** on the contiguous axis of everything else, and UNROLL of contiguous reduce axes into
  that many separate accumulators. Only for targets that do not vectorize loops themselves: LLVM's loop
  vectorizer already widens a contiguous innermost loop (and, with `reassoc` on the accumulator update,
  splits a reduction into interleaved vector accumulators); lanes made by opts there turn the loop's
  unit-stride loads into strided ones across iterations, which it then vectorizes with gathers (measured
  2x slower for a 16M sum).

Sizes the amount does not divide, and sizes that are expressions, get a peeled tail (see opts.py).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from tg_core.codegen.opts import MAX_PANEL_BYTES, Opt, OptError, OptOps, apply_opts, kernel_ranges
from tg_core.dtype import dtypes
from tg_core.uop.linear import decompose
from tg_core.uop.ops import AxisType, Ops
from tg_core.uop.uop import UOp

# the narrowest vector (float32 lanes: an xmm register) a register tile's columns are sized for
MIN_TILE_LANES = 4
# the most vectors of lanes a reduction is unrolled into (_block_halves; the X86 packer's limit too)
MAX_VECTORS = 4


def tile_rows_for(vector_bytes: int) -> int:
    """Rows of a matmul register tile (times two vectors of columns) on a CPU whose vectors are `vector_bytes`
    wide: 8 with AVX-512, whose 32 registers hold the 16 accumulators, two B vectors and a broadcast (8 rows
    measured fastest of 4-14 on both CPU renderers: a 1024 matmul on one core 24.7 -> 20.7 ms X86, 30.9 -> 22.7
    ms LLVM), else 4 (8 accumulators of 16 registers)."""
    return 8 if vector_bytes >= 64 else 4


@dataclass(frozen=True)
class CPUTarget:
    """What the heuristic needs to know about a CPU and its code generator."""
    vector_bytes: int = 32          # AVX2; 64 with AVX-512, 16 with SSE/NEON
    tile_rows: int = 4              # rows of a matmul register tile (times two vectors of columns): tile_rows_for
    auto_vectorize: bool = True     # the backend vectorizes contiguous loops itself (LLVM)
    pack: bool = True               # matmul B panels copied to contiguous scratch (needs DEFINE_REG arrays)
    quant_rows: int = 0             # rows of a quantized matmul's other operand sharing each decoded weight
    # partial vectors are masked (AVX-512 opmasks): a tile of fewer columns than a vector's lanes, but more than
    # half of them, is one masked vector per row rather than a narrower vector and scalar columns
    masked: bool = False
    # one core's L2 (bytes), which a packed matmul's K blocks are sized from (k_depth); a device reads its host's
    # (tg_cpu_x86.caches), this is a common x86 core's
    l2_bytes: int = 1024 * 1024
    # one core's L1d (bytes, ways), which a register tile's rows are limited by where A's rows alias (l1_rows)
    l1_bytes: int = 32 * 1024
    l1_ways: int = 8
    # a deep K's panels: K blocks of the full width first (X86), or whole panels one vector wide first (LLVM,
    # whose SLP vectorizer packs the blocked tile's accumulation badly: 0.56x numpy against 0.69x at K=4096)
    blocks_first: bool = True


def _stride(index: UOp, r: UOp) -> int | None:
    """The coefficient of `r` in the INDEX's offset when it is linear in it (0 if it does not use `r`);
    None when `r` appears inside a non-linear term (div, mod, ...). An outer `% n` with n at least the buffer's
    size is read through: it changes no in-bounds offset (the scheduler leaves one on padded loads, whose
    gate keeps them in bounds)."""
    idx = index.src[1]
    if r not in idx.ranges:
        return 0
    if idx.op is Ops.MOD and idx.src[1].op is Ops.CONST and idx.src[1].arg >= index.src[0].ptrdtype.size > 0:
        idx = idx.src[0]
    terms, _ = decompose(idx)
    coeff = terms.get(r)
    if coeff is None or any(r in b.ranges for b in terms if b is not r):
        return None
    return coeff


def _size(r: UOp) -> int:
    """The axis' size, or its upper bound when it is an expression (a core's share of rows): opts split
    such axes with a tail loop."""
    end = r.src[0]
    return end.arg if end.op is Ops.CONST else int(end.vmax)


def _loads(x: UOp) -> list[UOp]:
    """The INDEXes of the buffer loads in `x`."""
    return [u.src[0] for u in x.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]


def _matmul_rows(red: UOp, j: UOp, loops: list[UOp], unit: bool = True) -> UOp | None:
    """For a REDUCE(ADD) of products over loads, an output axis `i` other than `j` that one load of the
    reduction does not use while another does not use `j`: upcasting both reuses every load across lanes.
    With `unit`, a load must also be unit-stride in `j` (vector loads without packing)."""
    if red.arg is not Ops.ADD:
        return None
    loads = _loads(red.src[0])
    if unit and not any(_stride(ld, j) == 1 for ld in loads):
        return None
    without_j = [ld for ld in loads if j not in ld.src[1].ranges]
    for i in reversed(loops):
        if i is not j and any(i in ld.src[1].ranges for ld in without_j) and any(
                i not in ld.src[1].ranges for ld in loads):
            return i
    return None


def cpu_opts(ast: UOp, target: CPUTarget = CPUTarget()) -> list[Opt]:
    """The opts for `ast` on `target` (see the module docstring); [] when nothing applies."""
    stores = _stores(ast)
    if not stores:
        return []
    out = stores[0]
    lanes = max(1, target.vector_bytes // out.dtype.base.itemsize)
    loops = [r for r in kernel_ranges(ast, AxisType.LOOP) if _size(r) > 1]
    # the contiguous output axis: stride 1 in the (first) store
    j = next((r for r in reversed(loops) if _stride(out, r) == 1), None)
    plan: list[tuple[OptOps, UOp, int]] = []
    if j is not None:
        reduces = [u for u in ast.toposort() if u.op is Ops.REDUCE]
        # fewer columns than a vector's lanes (an MLP's 10 classes on AVX-512) tile with the widest vector they
        # fill, as the X86 renderer does: 4 rows x 10 columns against no tile ran 5x faster on both renderers;
        # with masks, one masked vector more than half full
        def fills(n: int) -> bool:  # the columns fill a vector of n lanes (with a mask: more than half of it)
            return _size(j) >= n or target.masked and 2 * _size(j) > n
        tile_lanes = lanes
        while tile_lanes > MIN_TILE_LANES and not fills(tile_lanes):
            tile_lanes //= 2
        for unit in (False, True):  # packed panels are unit-stride whatever B's layout (x @ w.T)
            i = next((m for red in reduces if (m := _matmul_rows(red, j, loops, unit)) is not None), None)
            if i is None or not fills(tile_lanes):
                continue
            width = min(2 * tile_lanes, _size(j))
            # one vector of columns (a masked one): twice the rows keep as many accumulators
            rows = l1_rows(ast, i, min(target.tile_rows * (2 if width <= tile_lanes and target.masked else 1),
                                       _size(i)), target)
            # a panel too big for the scratch (a deep K, AVX-512's 32 columns) is tried one vector wide, with
            # twice the rows to keep as many accumulators
            narrow = (min(tile_lanes, width), l1_rows(ast, i, min(2 * rows, _size(i)), target))
            # K blocks of the full width first (a deep K), or only after whole panels one vector wide
            tries = [(width, rows, True), (*narrow, True)] if target.blocks_first else \
                [(width, rows, False), (*narrow, False), (width, rows, True)]
            for w, h, blocks in dict.fromkeys(tries) if target.pack else ():
                if (packed := _packed_tile(ast, j, i, w, h, target, blocks)) is not None:
                    return packed
            if unit:
                return _resolve(ast, [(OptOps.UPCAST, j, width), (OptOps.UPCAST, i, rows)])
        # a quantized weight (no panel: B is decoded from bytes): rows of the other operand upcast, so each
        # decoded vector of weights serves several rows' accumulators (prefill's tokens)
        quantized = not target.auto_vectorize and target.quant_rows > 1 and all(_narrow_ints(r) for r in reduces)
        i = next((m for red in reduces if (m := _matmul_rows(red, j, loops, unit=False)) is not None), None) \
            if quantized else None
        if i is not None:
            plan.append((OptOps.UPCAST, i, min(target.quant_rows, _size(i))))
        unit = all(_stride(ld, j) in (0, 1) for ld in _loads(ast))
        across = [red for red in reduces if j in red.src[0].ranges]
        if across and unit and _size(j) >= lanes:
            # a reduction down the columns (out[j] = sum_i a[i, j]): its loop is inside j, so no loop
            # vectorizer widens j; 8 vectors of j lanes are 8 accumulators and four whole cache lines per row
            # (4096x1024 sum(0): 2 vectors 3.9 ms, 4 vectors 2.2 ms, 8 vectors 0.9 ms)
            return _resolve(ast, [(OptOps.UPCAST, j, min(8 * lanes, _size(j)))])
        if not target.auto_vectorize and _size(j) >= lanes and unit:
            plan.append((OptOps.UPCAST, j, lanes))
    if not target.auto_vectorize:
        reduces = kernel_ranges(ast, AxisType.REDUCE)
        for r in reduces:
            uses = [ld for ld in _loads(ast) if r in ld.src[1].ranges]
            if _size(r) >= lanes and uses and all(_stride(ld, r) == 1 for ld in uses):
                if (outer := _block_halves(ast, reduces, r, lanes)) is not None:
                    plan += [(OptOps.UNROLL, r, _size(r)), (OptOps.UNROLL, outer, _size(outer))]
                elif _block(ast, r, lanes):
                    plan.append((OptOps.UNROLL, r, _size(r)))
                else:
                    plan.append((OptOps.UNROLL, r, lanes))
    return _resolve(ast, plan)


def l1_rows(ast: UOp, i: UOp, rows: int, target: CPUTarget) -> int:
    """`rows` for a register tile over output axis `i`, or fewer where the rows of A (the tile's loads that move with
    `i`) would map more lines to one L1 set than it has ways: a step of the reduction reads one line of each row,
    and a row stride that is a multiple of L1's way size (4 KB: K = 1024 floats) puts every row in one set, so a
    16-row tile evicts its own lines at every step. The most rows that fit every set are kept (a halving of the
    rows that do not). Measured (X86, one core, 256 x K @ K x 10, 16 vs 8 rows): K = 1024 0.158 -> 0.086 ms,
    K = 3072 0.475 -> 0.222, and no change where the rows spread over sets (K = 784, 1000, 1536)."""
    line = 64
    sets = max(1, target.l1_bytes // (line * max(1, target.l1_ways)))
    strides = [s * ld.src[0].dtype.base.itemsize for ld in _loads(ast) if (s := _stride(ld, i)) is not None and s > 0]
    def fits(n: int) -> bool:
        return all(max(Counter((r * st // line) % sets for r in range(n)).values()) <= target.l1_ways
                   for st in strides)
    while rows > 1 and not fits(rows):
        rows //= 2
    return rows


def core_axis(ast: UOp, target: CPUTarget, cores: int) -> UOp | None:
    """The parallel axis to split a kernel across `cores` cores by (threads.split_cores' `axis`): a packed matmul's
    columns when every core gets whole panels (two vectors wide) of them, else None (the outermost, its rows).
    Split by rows, each core packs all of B for its share of A; by columns, only its own panels, and A, read by
    every core, is the smaller operand's reuse. Measured (2 cores, X86, the kernels' CPU time): the MLP
    784-1024-1024-10 at batch 256 7.9 -> 6.8 ms, a 1024 matmul 15.9 -> 15.4 ms."""
    if cores < 2 or not target.pack:
        return None
    stores = _stores(ast)
    loads = _loads(ast)
    if len(stores) != 1 or any(ld.src[0].dtype.base is not dtypes.float32 for ld in loads):
        return None
    loops = [r for r in kernel_ranges(ast, AxisType.LOOP) if _size(r) > 1]
    j = next((r for r in reversed(loops) if _stride(stores[0], r) == 1), None)
    if j is None or j.src[0].op is not Ops.CONST:
        return None
    reduces = [u for u in ast.toposort() if u.op is Ops.REDUCE]
    width = 2 * max(1, target.vector_bytes // 4)
    if len(reduces) != 1 or _matmul_rows(reduces[0], j, loops, unit=False) is None or _size(j) % (cores * width):
        return None
    return j


def _narrow_ints(ast: UOp) -> bool:
    """Whether the kernel loads ints narrower than 32 bits (a quantized weight's bytes)."""
    return any(u.op is Ops.LOAD and u.dtype.itemsize < 4 and not dtypes.is_float(u.dtype) for u in ast.toposort())


def _block(ast: UOp, inner: UOp, lanes: int) -> bool:
    """Whether the contiguous reduce range `inner` is a quantized block's elements (the kernel reads narrow
    ints) of a few whole vectors (at most MAX_VECTORS): unrolled whole, the block's decoding has no loop of its
    own (Q8_0's 32 int8s: two vectors, no 2-iteration loop and its pointer set-up per block)."""
    return _narrow_ints(ast) and inner.src[0].op is Ops.CONST and _size(inner) % lanes == 0 and \
        lanes < _size(inner) <= MAX_VECTORS * lanes


def _block_halves(ast: UOp, reduces: list[UOp], inner: UOp, lanes: int) -> UOp | None:
    """The reduce range just outside the contiguous `inner` (a whole number of vectors of lanes) when it is a
    few steps of `inner`'s elements in every load it moves: a quantized block's halves, whose lanes read the
    same bytes with a shift amount the outer range gives. Both unrolled whole (at most MAX_VECTORS vectors),
    each vector's shift is a constant and the vectors' FMA chains are independent (Q4_1 1536x576 on AVX-512:
    180 -> 80 us against a loop of 2 computing its shift with one chain)."""
    # the nearest range outside it that a load moves with it (a kernel of two matvecs interleaves their ranges)
    loads = _loads(ast)
    outside = [o for o in reduces[:reduces.index(inner)]
               if any(o in ld.src[1].ranges and inner in ld.src[1].ranges for ld in loads)]
    if _size(inner) % lanes or not outside or (outer := outside[-1]).src[0].op is not Ops.CONST or \
            inner.src[0].op is not Ops.CONST:
        return None
    moved = [ld for ld in loads if outer in ld.src[1].ranges]
    ok = 1 < _size(outer) and _size(outer) * _size(inner) <= MAX_VECTORS * lanes and moved and all(
        (s := _stride(ld, inner)) is not None and s > 0 and _stride(ld, outer) == s * _size(inner) for ld in moved)
    return outer if ok else None


def k_depth(target: CPUTarget, depth: int, width: int, itemsize: int) -> int:
    """The rows of K a packed panel of `width` columns holds: all `depth` of them (0) while the panel fits half of
    L2 and the scratch (opts.MAX_PANEL_BYTES), else equal blocks that do (blocking.py). Not smaller blocks: each
    block adds a load and a store of the output tile, and blocks sized for L1 (the tile's A strip, 8 rows x 256
    or 512) measured slower where the whole panel fits L2 (a 1024 matmul on one core, X86: 0.78x / 0.87x numpy
    against 1.02x unblocked; 256x784 @ 784x1024: 1.18x / 1.10x against 1.25x)."""
    budget = min(MAX_PANEL_BYTES, target.l2_bytes // 2) // (width * itemsize)
    if depth <= budget:
        return 0
    blocks = -(-depth // budget)
    return -(-depth // blocks)


def _packed_tile(ast: UOp, j: UOp, i: UOp, width: int, rows: int, target: CPUTarget,
                 blocks: bool = True) -> list[Opt] | None:
    """PACK B's columns into panels of `width` (with `blocks`, in K blocks where the panel would not fit:
    k_depth), then the register tile over the panel's columns (all of them) and `rows` rows; None when PACK does
    not apply (see opts.pack_panels)."""
    loops = kernel_ranges(ast, AxisType.LOOP)
    reds = [u for u in ast.toposort() if u.op is Ops.REDUCE and j in u.src[0].ranges and len(u.src) == 2]
    depth = k_depth(target, _size(reds[0].src[1]), width, 4) if len(reds) == 1 and blocks else 0
    if depth and reds[0] is not _stores_of(ast)[0].src[1] and (i.src[0].op is not Ops.CONST or _size(i) % rows):
        # blocks with an epilogue (bias, relu) order it after the tile by an AFTER on the tile's effect, which a
        # peeled tail of the rows would copy: the rows must be whole tiles
        depth = 0
    packed: UOp | None = None
    for pack in dict.fromkeys((Opt(OptOps.PACK, loops.index(j), width, depth), Opt(OptOps.PACK, loops.index(j), width))):
        try:
            packed = apply_opts(ast, [pack])
            break
        except OptError:
            continue
    if packed is None:
        return None
    old = {r.arg[0] for r in kernel_ranges(ast)}
    new = [r for r in kernel_ranges(packed, AxisType.LOOP) if r.arg[0] not in old]
    stores = _stores_of(packed)
    tile = next(st for st in stores if any(u.op is Ops.REDUCE for u in st.src[1].toposort()))
    jw = next(r for r in new if _size(r) == width and r in tile.src[0].src[1].ranges)
    plan = [(OptOps.UPCAST, jw, width), (OptOps.UPCAST, i, rows)]
    if pack.depth and not target.auto_vectorize:
        # K blocks: the zeroing's columns and the epilogue's as vector lanes too (no loop vectorizer here)
        lanes = max(1, target.vector_bytes // 4)
        for st in stores:
            if st is tile:
                continue
            col = next((r for r in reversed(kernel_ranges(packed, AxisType.LOOP)) if r not in tile.src[0].ranges
                        and _stride(st.src[0], r) == 1), None)
            if col is not None and _size(col) >= lanes:
                plan.append((OptOps.UPCAST, col, width if _size(col) == width else lanes))
    return [pack, *_resolve(packed, plan)]


def _stores_of(ast: UOp) -> list[UOp]:
    """The kernel's buffer STOREs."""
    return [u for u in ast.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX
            and u.src[0].src[0].op is Ops.PARAM]


def _stores(ast: UOp) -> list[UOp]:
    """The INDEXes of the kernel's buffer stores."""
    return [u.src[0] for u in ast.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX
            and u.src[0].src[0].op is Ops.PARAM]


def _resolve(ast: UOp, plan: list[tuple[OptOps, UOp, int]]) -> list[Opt]:
    """Opts for (op, range, amount) steps: an opt's axis is counted on the AST the earlier opts leave (a
    split range keeps its axis id; an axis split into one full group of lanes leaves the count)."""
    opts: list[Opt] = []
    for op, rng, amt in plan:
        kind = AxisType.LOOP if op is OptOps.UPCAST else AxisType.REDUCE
        axes = [r.arg[0] for r in kernel_ranges(ast, kind)]
        opt = Opt(op, axes.index(rng.arg[0]), amt)
        ast = apply_opts(ast, [opt])
        opts.append(opt)
    return opts
