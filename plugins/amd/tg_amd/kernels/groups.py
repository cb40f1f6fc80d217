"""The launch shape every sudot4 `quant_linear` kernel shares (q4k.py, q6k.py, iq4xs.py): one wave per (output row n,
token t); lane l of the wave takes groups l, l + 32, ... of the row's 32-element groups, each group one sub-block j of
256-block b. A kernel gives only what one lane computes for its group; the gating of groups past the row's end, the
sum over the lane's groups and the butterfly over the wave are written once here."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tg_core.plugin_api import AxisType, Ops, UOp, dtypes
from tg_amd.kernels.wave import WAVE, wave_reduce

BLOCK, GROUP = 256, 32


def u32(v: int) -> UOp:
    return UOp.const(dtypes.uint32, v)


def f16_bits(bits: UOp) -> UOp:
    """The float16 whose bits are the low 16 bits of a uint32, as float32."""
    return bits.cast(dtypes.uint16).bitcast(dtypes.float16).cast(dtypes.float32)


@dataclass(frozen=True)
class Group:
    """One lane's group: token t, group g of the row (block b, sub-block j), `ok` whether it exists, `base` the
    first weight word of its block, `index` the group's place among every token's groups (t * G + g: its x scale;
    its q8 words start at 8 * index, its per-16 sums at 2 * index)."""
    words: UOp
    t: UOp
    g: UOp
    ok: UOp
    b: UOp
    j: UOp
    base: UOp
    index: UOp

    def word(self, at: UOp) -> UOp:
        """Weight word `at`, streamed (nontemporal: each weight word is read once per token)."""
        return UOp(Ops.LOAD, dtypes.uint32, (self.words.index(at, self.ok),), "nontemporal")

    def q8_word(self, q: UOp, w: int) -> UOp:
        """Word w (four int8 activations) of the group's Q8 activations."""
        return q.index(self.index * 8 + w, self.ok).load()

    def load(self, buf: UOp, at: UOp) -> UOp:
        return buf.index(at, self.ok).load()


# (the lane's group, q8 words, x scales per group, q8 sums per 16) -> this group's float32 share of the output
GroupBody = Callable[[Group, UOp, UOp, UOp], UOp]


def group_matvec(T: int, N: int, K: int, words_per_block: int, body: GroupBody) -> Callable[..., UOp]:
    """A custom-kernel fxn(out, words, q, xs, xsum) computing out[t, n] as the sum of `body` over row n's groups."""
    G, blocks = K // GROUP, K // BLOCK

    def fxn(out: UOp, words: UOp, q: UOp, xs: UOp, xsum: UOp) -> UOp:
        n, t = UOp.range(N, 0, AxisType.GLOBAL), UOp.range(T, 1, AxisType.GLOBAL)
        lane, it = UOp.range(WAVE, 2, AxisType.LOCAL), UOp.range((G + WAVE - 1) // WAVE, 3, AxisType.REDUCE)
        g = it * WAVE + lane
        ok = g < G
        b = g // 8
        group = Group(words, t, g, ok, b, g % 8, (n * blocks + b) * words_per_block, t * G + g)
        f32 = dtypes.float32
        part = UOp(Ops.REDUCE, f32, (ok.where(body(group, q, xs, xsum), UOp.const(f32, 0.0)), it), Ops.ADD)
        return out.index(t * N + n, lane < 1).store(wave_reduce(part, Ops.ADD)).end(n, t, lane).sink()
    return fxn
