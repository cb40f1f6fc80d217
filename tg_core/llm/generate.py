"""Generation: prefill in pieces (chunks, then powers of two; each length one TinyJit), then a TinyJit'd decode step, with the longest common prefix of the
previous request's tokens reused from the KV cache.

Positions are bound variables (`start_pos`), so the kernels of each prefill piece length and of the decode step
are compiled once for every position. The decode step (model, then greedy or sampled choice on the device)
is one TinyJit per sampling mode; its parameters are tensors, so a new temperature, top_k or top_p replays
the same capture.
"""
from __future__ import annotations

from collections.abc import Generator as Gen
from collections.abc import Iterator, Sequence

from tg_core.engine.jit import TinyJit
from tg_core.llm.model import Transformer
from tg_core.llm.sampling import SamplingParams, greedy, sample
from tg_core.llm.tokenizer import Tokenizer
from tg_core.tensor import Tensor
from tg_core.uop import UOp

GREEDY = SamplingParams()


def piece_lengths(n: int, chunk: int) -> list[int]:
    """How a prompt of n tokens is run: as many chunks as fit, then the rest as descending powers of two
    (23 with chunk 32: 16, 4, 2, 1). Every piece is one of at most log2(chunk) + 2 lengths, each compiled and
    captured once."""
    out = [chunk] * (n // chunk)
    rest = n % chunk
    while rest:
        p = 1 << (rest.bit_length() - 1)
        out.append(p)
        rest -= p
    return out


class Generator:
    def __init__(self, model: Transformer, tokenizer: Tokenizer | None = None, chunk: int = 32):
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1, got {chunk}")
        self.model, self.tokenizer, self.chunk = model, tokenizer, chunk
        self.cached: list[int] = []  # the tokens whose keys and values the cache holds, in order
        self._greedy = TinyJit(self._greedy_step)
        self._sampled = TinyJit(self._sampled_step)
        # prefill pieces replay captures too (eager, building and scheduling a piece's 400 kernels cost as much as
        # running them): one per piece length, and the lengths are the chunk and powers of two (piece_lengths),
        # so a handful of captures serve every prompt
        self._piece_steps: dict[int, TinyJit] = {}

    def _pos(self, value: int, length: int) -> UOp:
        """start_pos bound to value, its range the positions a run of `length` tokens may start at."""
        return UOp.variable("start_pos", 0, self.model.cfg.max_context - length).bind(value)

    # the steps run under no_grad (Tensor.test()): a realized tensor then keeps no graph for gradients, which would
    # keep every buffer that graph read alive (a layer's output holds the layers before it), so the intermediates
    # of a capture die as it runs and their memory is reused (engine/jit_memory.py)
    @Tensor.test()
    def _greedy_step(self, tok: Tensor, pos: UOp) -> Tensor:
        return greedy(self.model(tok, pos)).realize()

    @Tensor.test()
    def _sampled_step(self, tok: Tensor, pos: UOp, temp: Tensor, k: Tensor, p: Tensor) -> Tensor:
        return sample(self.model(tok, pos), temp, k, p).realize()

    @Tensor.test()
    def _prefill_step(self, tok: Tensor, pos: UOp) -> Tensor:
        return self.model(tok, pos).realize()

    def prefill(self, ids: Sequence[int]) -> Tensor:
        """Run the prompt (reusing the cached common prefix; at least its last token runs) and return the
        logits after its last token, (1, vocab)."""
        ctx = self.model.cfg.max_context
        if not ids:
            raise ValueError("the prompt is empty: at least one token is needed")
        if len(ids) > ctx:
            raise ValueError(f"the prompt has {len(ids)} tokens, but the model context is {ctx}")
        start = 0
        for a, b in zip(self.cached, ids[:-1]):
            if a != b:
                break
            start += 1
        self.cached = list(ids[:start])
        logits = None
        for n in piece_lengths(len(ids) - start, self.chunk):
            piece = list(ids[start:start + n])
            step = self._piece_steps.get(n)
            if step is None:
                step = self._piece_steps[n] = TinyJit(self._prefill_step)
            logits = step(Tensor([piece], dtype="int32", device=self.model.device), self._pos(start, n))
            start += n
            self.cached += piece
        assert logits is not None
        return logits

    def generate(self, ids: Sequence[int], max_new_tokens: int = 256, params: SamplingParams = GREEDY,
                 stop_ids: Sequence[int] | None = None) -> Gen[int, None, None]:
        """The new tokens after the prompt, one at a time, until a stop token (not yielded), max_new_tokens
        or the end of the context. Closing the iterator stops the generation."""
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        stops = set(stop_ids) if stop_ids is not None else (set(self.tokenizer.stop_ids) if self.tokenizer else set())
        if params.seed is not None:
            Tensor.manual_seed(params.seed)
        logits = self.prefill(ids)
        dev = self.model.device
        if params.temperature == 0:
            with Tensor.test():
                tok = greedy(logits)
        else:
            vocab = self.model.cfg.vocab
            knobs = (Tensor(float(params.temperature), device=dev).realize(),
                     Tensor(params.top_k if params.top_k else vocab, dtype="int32", device=dev).realize(),
                     Tensor(float(params.top_p), device=dev).realize())
            with Tensor.test():
                tok = sample(logits, *knobs)
        for _ in range(max_new_tokens):
            t = int(tok.numpy().reshape(-1)[0])
            if t in stops:
                return
            yield t
            pos = len(self.cached)
            if pos >= self.model.cfg.max_context:
                return
            self.cached.append(t)
            inp = Tensor([[t]], dtype="int32", device=dev)
            tok = self._greedy(inp, self._pos(pos, 1)) if params.temperature == 0 else \
                self._sampled(inp, self._pos(pos, 1), *knobs)

    def generate_text(self, ids: Sequence[int], max_new_tokens: int = 256, params: SamplingParams = GREEDY,
                      stop: Sequence[str] = ()) -> Iterator[str]:
        """Text pieces as they become complete UTF-8, ending before the first stop string (held back until
        it can no longer begin one)."""
        if self.tokenizer is None:
            raise ValueError("generate_text needs the generator's tokenizer")
        dec, pending = self.tokenizer.stream(), ""
        hold = max((len(s) for s in stop), default=0)
        gen = self.generate(ids, max_new_tokens, params)
        try:
            for t in gen:
                pending += dec.feed(t)
                hits = [i for i in (pending.find(s) for s in stop if s) if i >= 0]
                if hits:
                    if min(hits):
                        yield pending[:min(hits)]
                    return
                if len(pending) > hold:
                    cut = len(pending) - hold
                    yield pending[:cut]
                    pending = pending[cut:]
            pending += dec.flush()
            hits = [i for i in (pending.find(s) for s in stop if s) if i >= 0]
            if hits:
                pending = pending[:min(hits)]
            if pending:
                yield pending
        finally:
            gen.close()
