"""ENDs in the form the linearizer wants: one range per END, and one END per range.

`END(x, r0, r1)` (outermost first) splits into `END(END(x, r1), r0)`. Effects ended separately over the
same range (two stores in one loop nest, the accumulator updates of reductions sharing a range) merge
into one `END(GROUP(x1, x2), r)`: one loop, both effects inside it.
"""
from __future__ import annotations

from tg_core.codegen.linearize import LinearizeError
from tg_core.dtype import dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.rewrite import PatternMatcher, graph_rewrite, substitute
from tg_core.uop.upat import UPat
from tg_core.uop.uop import UOp


def _split(x: UOp) -> UOp | None:
    if len(x.src) <= 2:
        return None
    inner = UOp(Ops.END, dtypes.void, (x.src[0], x.src[-1]))
    return UOp(Ops.END, dtypes.void, (inner, *x.src[1:-1]))


pm_split_ends = PatternMatcher([(UPat(Ops.END, name="x"), _split)])


def _ends_by_range(root: UOp) -> dict[UOp, list[UOp]]:
    out: dict[UOp, list[UOp]] = {}
    for u in root.toposort():
        if u.op is Ops.END:
            out.setdefault(u.src[1], []).append(u)
    return out


def merge_ends(root: UOp) -> UOp:
    """`root` with the ENDs of each range merged into one (innermost ranges first: merging them can make
    the ENDs around them identical)."""
    while True:
        many = [(r, ends) for r, ends in _ends_by_range(root).items() if len(ends) > 1]
        if not many:
            return root
        r, ends = many[0]  # toposort order: an END comes before the ENDs that contain it
        # one walk under all of them finds an END inside another (an END is never inside its own body)
        body = UOp(Ops.GROUP, dtypes.void, tuple(e.src[0] for e in ends))
        inside = body.toposort()
        if any(e in inside for e in ends):
            raise LinearizeError(f"range r{r.arg[0]} is ended twice, one END depending on the other: "
                                 "its loops are not properly nested (or one reduction over it needs another)")
        merged = UOp(Ops.END, dtypes.void, (body, r))
        root = substitute(root, {e: merged for e in ends})


# (matcher, matcher + pm_split_ends) by id(matcher): a renderer's decompositions, built once
_with_split: dict[int, tuple[PatternMatcher, PatternMatcher]] = {}


def normalize_ends(ast: UOp, also: PatternMatcher | None = None) -> UOp:
    """`ast` with single-range ENDs, one per range. `also` (a renderer's extra rules, on ops other than END) is
    applied in the same pass: one walk of the whole kernel instead of two."""
    pm = pm_split_ends
    if also is not None:
        if Ops.END in also.rules_by_op:
            ast = graph_rewrite(ast, also)  # its rules might look at the ENDs: they see them unsplit, as before
        else:
            if id(also) not in _with_split:
                _with_split[id(also)] = (also, also + pm_split_ends)
            pm = _with_split[id(also)][1]
    return merge_ends(graph_rewrite(ast, pm))
