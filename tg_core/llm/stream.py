"""Incremental filters of a reply's text as it streams: stop strings, and `<think>` reasoning split from the
answer. Each holds back only the tail that may still turn into a match (a partial stop string or tag), so
text reaches the client as early as it is certain."""
from __future__ import annotations

from collections.abc import Sequence

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def _partial_suffix(text: str, word: str) -> int:
    """The length of the longest proper prefix of `word` that `text` ends with."""
    for n in range(min(len(word) - 1, len(text)), 0, -1):
        if text.endswith(word[:n]):
            return n
    return 0


class StopStrings:
    """`feed(text)` returns the text that is certainly before any stop string; once a stop string is seen,
    `stopped` is True and the rest (the stop string included, as OpenAI's API does) is dropped."""

    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self.pending, self.stopped = "", False

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        self.pending += text
        hits = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped = True
            out, self.pending = self.pending[:min(hits)], ""
            return out
        hold = max((_partial_suffix(self.pending, s) for s in self.stops), default=0)
        out = self.pending[:len(self.pending) - hold]
        self.pending = self.pending[len(out):]
        return out

    def flush(self) -> str:
        out, self.pending = ("" if self.stopped else self.pending), ""
        return out


class ThinkSplitter:
    """Routes a reply into ("reasoning", text) and ("content", text) pieces: a reply that opens with `<think>`
    (after optional whitespace), or whose prompt already ended with `<think>`, is reasoning up to `</think>`;
    the rest is content. Tags are not part of either."""

    def __init__(self, prompt_opens_think: bool = False):
        self.state = "reasoning" if prompt_opens_think else "start"
        self.buf = ""
        self.strip = prompt_opens_think  # drop the newlines that follow a tag, even when they arrive later

    def feed(self, text: str) -> list[tuple[str, str]]:
        self.buf += text
        out: list[tuple[str, str]] = []
        while self.buf:
            if self.strip:
                self.buf = self.buf.lstrip("\n")
                if not self.buf:
                    break
                self.strip = False
            if self.state == "start":
                head = self.buf.lstrip()
                if head.startswith(THINK_OPEN):
                    self.state, self.buf, self.strip = "reasoning", head[len(THINK_OPEN):], True
                elif head and not THINK_OPEN.startswith(head):
                    self.state = "content"
                else:
                    break  # whitespace or a partial "<think>": wait for more
            elif self.state == "reasoning":
                i = self.buf.find(THINK_CLOSE)
                if i >= 0:
                    if i:
                        out.append(("reasoning", self.buf[:i]))
                    self.state, self.buf, self.strip = "content", self.buf[i + len(THINK_CLOSE):], True
                    continue
                hold = _partial_suffix(self.buf, THINK_CLOSE)
                if len(self.buf) > hold:
                    out.append(("reasoning", self.buf[:len(self.buf) - hold]))
                self.buf = self.buf[len(self.buf) - hold:]
                break
            else:  # content
                out.append(("content", self.buf))
                self.buf = ""
        return out

    def flush(self) -> list[tuple[str, str]]:
        """The held-back tail at the end of the reply (an unclosed partial tag is text)."""
        rest, self.buf = self.buf, ""
        if not rest:
            return []
        return [("reasoning" if self.state == "reasoning" else "content", rest)]
