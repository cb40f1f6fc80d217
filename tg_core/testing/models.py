"""Small models shared by core's and the plugins' multi-device tests, built for whichever device a test runs on."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tg_core.tensor import Tensor


def decoder_block(shard: bool, seed: int, devs: Sequence[str], device: str | None = None, D: int = 8, H: int = 2,
                  T: int = 6) -> Callable[[Tensor, int], Tensor]:
    """A decoder block (layernorm, attention over a KV cache, ReLU MLP) on `device` (None: the default device).
    Sharded, the heads split over `devs`: q, k, v and the first MLP weight along their output axis, the output
    projections along their input axis, the caches along the model axis. Returns `step(x, pos)`, which writes
    position `pos` of the cache and returns the block's output for the token `x` of shape (1, 1, D)."""
    rng = np.random.default_rng(seed)
    w = {k: Tensor(rng.standard_normal((D, D)).astype(np.float32) * 0.3, device=device)
         for k in ("q", "k", "v", "o", "f1", "f2")}
    cache = [Tensor(np.zeros((1, T, D), np.float32), device=device) for _ in range(2)]
    if shard:
        for k in ("q", "k", "v", "f1"):
            w[k].shard_(list(devs), axis=1)
        for k in ("o", "f2"):
            w[k].shard_(list(devs), axis=0)
        for c in cache:
            c.shard_(list(devs), axis=2)
    Tensor.realize_all(*cache)

    def step(x: Tensor, pos: int) -> Tensor:
        h = x.layernorm()
        q, k, v = h @ w["q"], h @ w["k"], h @ w["v"]
        cache[0][:, pos:pos + 1] = k
        cache[1][:, pos:pos + 1] = v
        heads = [t.reshape(1, t.shape[1], H, D // H).permute(0, 2, 1, 3)
                 for t in (q, cache[0][:, :pos + 1], cache[1][:, :pos + 1])]
        att = (heads[0] @ heads[1].transpose(-1, -2) / np.sqrt(D // H)).softmax(-1) @ heads[2]
        x = x + att.permute(0, 2, 1, 3).reshape(1, 1, D) @ w["o"]
        return x + (x.layernorm() @ w["f1"]).relu() @ w["f2"]
    return step


def assert_sharded_decode_matches(devs: Sequence[str], device: str | None = None, steps: int = 4) -> None:
    """Decode `steps` tokens at a changing start position through two stacked blocks, sharded over `devs` and
    unsharded on `device`, and assert both give the same outputs at every step."""
    outs: dict[bool, list[np.ndarray]] = {}
    for shard in (False, True):
        layers = [decoder_block(shard, seed, devs, device) for seed in (1, 2)]
        res = []
        for pos in range(steps):
            x = Tensor(np.random.default_rng(100 + pos).standard_normal((1, 1, 8)).astype(np.float32), device=device)
            x = x.shard(list(devs)) if shard else x
            for layer in layers:
                x = layer(x, pos)
            res.append(x.numpy())
        outs[shard] = res
    for got, want in zip(outs[True], outs[False]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
