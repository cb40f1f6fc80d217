"""The model's one thread: requests queue here and run one at a time, so the KV cache (which the Generator
keeps with the tokens it holds) is never written by two requests at once, and each request reuses the longest
common prefix of the previous one's tokens.

A job's events go to its own queue: ("text", piece) while it runs, then ("done", finish_reason) or
("error", exception). `Job.cancel()` (a client that went away, a stop button) ends it after the current
token; a job cancelled while it waits never runs.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tg_core.llm.sampling import SamplingParams
from tg_core.llm.stream import StopStrings
from tg_core.llm.tokenizer import Tokenizer


class TokenGenerator(Protocol):
    """What the worker needs of tg_core.llm.generate.Generator (tests pass a canned one)."""
    cached: list[int]

    def generate(self, ids: Sequence[int], max_new_tokens: int = ..., params: SamplingParams = ...,
                 stop_ids: Sequence[int] | None = ...) -> Any: ...


@dataclass
class Job:
    ids: list[int]
    max_tokens: int | None  # None: up to the end of the context
    params: SamplingParams
    stop: list[str]
    events: queue.Queue[tuple[str, Any]] = field(default_factory=queue.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    completion_tokens: int = 0
    cached_tokens: int = 0   # prompt tokens whose keys and values were already in the cache
    finish: str | None = None  # stop, length or cancelled, once done

    def cancel(self) -> None:
        self.cancelled.set()


def common_prefix(cached: Sequence[int], ids: Sequence[int]) -> int:
    """How many prompt tokens the cache can serve (the last prompt token always runs: its logits are needed)."""
    n = 0
    for a, b in zip(cached, ids[:-1]):
        if a != b:
            break
        n += 1
    return n


class ModelWorker:
    def __init__(self, generator: TokenGenerator, tokenizer: Tokenizer, n_ctx: int):
        self.generator, self.tokenizer, self.n_ctx = generator, tokenizer, n_ctx
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.busy = threading.Event()      # set while a job runs (tests wait for the worker to go idle)
        self.finished: list[Job] = []      # the jobs run so far, in order, with their counts (the last 64)
        self._thread = threading.Thread(target=self._run, name="tg-llm-model", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> Job:
        self.jobs.put(job)
        return job

    def close(self, timeout: float = 10.0) -> None:
        self.jobs.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while (job := self.jobs.get()) is not None:
            if job.cancelled.is_set():
                job.finish = "cancelled"
                job.events.put(("done", job.finish))
                continue
            self.busy.set()
            try:
                job.finish = self._generate(job)
                job.events.put(("done", job.finish))
            except Exception as e:  # reported to the request's thread, which answers 500; the worker lives on
                job.events.put(("error", e))
            finally:
                self.finished = [*self.finished[-63:], job]
                self.busy.clear()

    def _generate(self, job: Job) -> str:
        job.cached_tokens = common_prefix(self.generator.cached, job.ids)
        room = self.n_ctx - len(job.ids)
        limit = room if job.max_tokens is None else min(job.max_tokens, room)
        dec, stops = self.tokenizer.stream(), StopStrings(job.stop)
        gen = self.generator.generate(job.ids, limit, job.params)
        try:
            for t in gen:
                job.completion_tokens += 1
                text = stops.feed(dec.feed(t))
                if text:
                    job.events.put(("text", text))
                if stops.stopped:
                    return "stop"
                if job.cancelled.is_set():
                    return "cancelled"
        finally:
            gen.close()
        text = stops.feed(dec.flush())
        text += stops.flush()
        if text:
            job.events.put(("text", text))
        if stops.stopped:
            return "stop"
        return "length" if job.completion_tokens >= limit else "stop"
