"""Choosing the next token on the device: greedy argmax, or temperature, top_k and top_p then a Gumbel-max
draw. Nothing is sorted (a sort of the vocabulary is n^2 comparisons here): the k-th largest logit and the
top_p probability threshold are found by bisection over the logits' order-preserving int keys, 33 halvings
of the int32 range, each one small reduction. The parameters are tensors so that one TinyJit capture serves
every setting."""
from __future__ import annotations

from dataclasses import dataclass

from tg_core.dtype import dtypes
from tg_core.tensor import Tensor


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0            # 0: off
    top_p: float = 1.0        # 1: off
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0: off), got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def order_keys(x: Tensor) -> Tensor:
    """int64 keys of float32 values in the same order: the bits, with the magnitude bits of negatives flipped."""
    b = x.bitcast(dtypes.int32)
    return (b < 0).where(b ^ 0x7FFFFFFF, b).cast(dtypes.int64)


def _bisect(keys: Tensor, enough) -> Tensor:
    """The largest t with enough(keys >= t) (true at t = min(keys)), for each row: (B, 1) int64."""
    lo = keys.min(-1, keepdim=True)
    hi = keys.max(-1, keepdim=True) + 1
    for _ in range(33):  # hi - lo < 2^33
        mid = lo + (hi - lo) // 2
        ok = enough(keys >= mid)
        lo, hi = ok.where(mid, lo).contiguous(), ok.where(hi, mid).contiguous()
    return lo


GREEDY_CHUNK = 1024


def greedy(logits: Tensor) -> Tensor:
    """(B, vocab) -> (B, 1) int32: the first index of each row's largest logit.

    In two stages over chunks of GREEDY_CHUNK logits: one argmax over a 49152 vocabulary is a single-core
    reduction of two passes (the max, then the first index holding it), 330-430 us of a decode step; the chunks'
    maxima are a kernel of their own and the winner's index is looked up in the one chunk that holds it (~70 us).
    The first chunk holding the largest value, then the first index in it, is the first index overall; a padded
    tail of -inf comes after every real logit, so it never wins a tie. (Rows with NaN have no defined answer.)"""
    B, V = logits.shape
    C = GREEDY_CHUNK
    if V <= 2 * C:
        return logits.argmax(-1, keepdim=True).cast(dtypes.int32)
    n = -(-V // C)
    x = logits if n * C == V else logits.pad((None, (0, n * C - V)), value=-float("inf"))
    chunks = x.reshape(B, n, C)
    best = chunks.max(-1).contiguous()                                   # (B, n): each chunk's largest logit
    c = best.argmax(-1, keepdim=True).cast(dtypes.int32)                 # (B, 1): the first chunk holding the max
    inner = chunks.argmax(-1).cast(dtypes.int32)                         # (B, n), only chunk c is read (a gather)
    at = (Tensor.arange(n, device=logits.device).reshape(1, n) == c).where(inner, 0).sum(-1, keepdim=True)
    return (c * C + at).cast(dtypes.int32)


def sample(logits: Tensor, temperature: Tensor, top_k: Tensor, top_p: Tensor) -> Tensor:
    """(B, vocab) logits -> (B, 1) int32 token ids. temperature (> 0), top_k (int, 1..vocab) and top_p
    ((0, 1]) are 0-d tensors."""
    x = logits.float() / temperature
    keys = order_keys(x)
    kth = _bisect(keys, lambda keep: keep.cast(dtypes.int32).sum(-1, keepdim=True) >= top_k)
    x = (keys >= kth).where(x, -float("inf"))
    probs = x.softmax(-1)
    pth = _bisect(keys, lambda keep: keep.where(probs, 0.0).sum(-1, keepdim=True) >= top_p)
    x = ((keys >= pth) & (keys >= kth)).where(x, -float("inf"))
    u = Tensor.rand(*x.shape, device=x.device).maximum(1e-20)
    return (x - (-u.log()).log()).argmax(-1, keepdim=True).cast(dtypes.int32)
