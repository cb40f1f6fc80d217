"""Byte-level BPE tokenizers from GGUF metadata (`tokenizer.ggml.model = gpt2`).

Encoding: (1) the text is split on the literal strings of the special tokens (control and user-defined, so
`<|im_end|>` in a prompt is that token); (2) each piece is pre-tokenized by the regex of the file's
`tokenizer.ggml.pre`; (3) each word's UTF-8 bytes, as GPT-2's byte-to-character table spells them, are merged
pair by pair, always the adjacent pair of lowest merge rank (`tokenizer.ggml.merges`; without merges the token
id stands in for the rank), until no pair merges. Decoding concatenates the tokens' bytes; `StreamDecoder`
emits text only once a multi-byte character is complete.

Python's `re` has no `\\p{L}`: the letter and number classes are built from unicodedata as code-point ranges.
"""
from __future__ import annotations

import codecs
import functools
import re
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


@functools.cache
def _byte_chars() -> tuple[str, ...]:
    """GPT-2's table: printable bytes stand for themselves, the other 68 map to U+0100 upwards in order."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return tuple(out[b] for b in range(256))


@functools.cache
def _classes() -> dict[str, str]:
    """Character-class bodies (for use inside [...]) of Unicode letters (L) and numbers (N)."""
    ranges: dict[str, list[list[int]]] = {"L": [], "N": []}
    for cp in range(min(sys.maxunicode, 0x323AF) + 1):
        k = unicodedata.category(chr(cp))[0]
        if k in ranges:
            r = ranges[k]
            if r and r[-1][1] == cp - 1:
                r[-1][1] = cp
            else:
                r.append([cp, cp])
    return {k: "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in r) for k, r in ranges.items()}


_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?[{L}]+| ?[{N}]+| ?[^\s{L}{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n{L}{N}]?[{L}]+|[{N}]{{1,3}}| ?[^\s{L}{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n{L}{N}]?[{L}]+|[{N}]| ?[^\s{L}{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

# pre-tokenizer name -> the regexes applied in turn (each splits the pieces of the one before), as llama.cpp's
# llama-vocab.cpp lists them; `smollm` and the starcoder family first split off every single digit
PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    "gpt2": (_GPT2,), "default": (_GPT2,),
    "llama-bpe": (_LLAMA3,), "llama3": (_LLAMA3,), "llama-v3": (_LLAMA3,),
    "smollm": (r"[{N}]", _GPT2), "starcoder": (r"[{N}]", _GPT2), "refact": (r"[{N}]", _GPT2),
    "qwen2": (_QWEN2,), "qwen35": (_QWEN2,),
}
# llama.cpp's `ignore_merges`: a word that is itself a token is emitted whole (Llama-3's vocab has words no
# merge sequence reaches)
_IGNORE_MERGES = frozenset({"llama-bpe", "llama3", "llama-v3"})


@functools.cache
def _compiled(pre: str) -> tuple[re.Pattern[str], ...]:
    c = _classes()
    return tuple(re.compile(p.format(L=c["L"], N=c["N"])) for p in PRE_TOKENIZERS[pre])


def pretokenize(text: str, pre: str) -> list[str]:
    """The words of `text` under the pre-tokenizer `pre`; their concatenation is `text`."""
    pieces = [text]
    for pat in _compiled(pre):
        out: list[str] = []
        for p in pieces:
            pos = 0
            for m in pat.finditer(p):  # the text between matches is a piece of its own (the digit split)
                if m.start() > pos:
                    out.append(p[pos:m.start()])
                out.append(m.group())
                pos = m.end()
            if pos < len(p):
                out.append(p[pos:])
        pieces = out
    return pieces


def _as_list(values: Sequence[Any]) -> list[Any]:
    return values if type(values) is list else list(values)


class Tokenizer:
    """A byte-level BPE tokenizer. `tokens` are the vocabulary strings (GPT-2 byte characters for normal
    tokens, literal text for special ones), `types` their token types, `merges` "left right" in rank order."""

    def __init__(self, tokens: Sequence[str], types: Sequence[int] | None = None, merges: Sequence[str] | None = None,
                 pre: str = "gpt2", bos_id: int | None = None, eos_id: int | None = None, eot_id: int | None = None,
                 add_bos: bool = False):
        if pre not in PRE_TOKENIZERS:
            raise ValueError(f"pre-tokenizer {pre!r} is not supported (supported: {', '.join(sorted(PRE_TOKENIZERS))})")
        # a list given is kept, not copied (the tokenizer only reads it): the GGUF metadata's own lists, ~0.8 MB of
        # pointers for SmolLM2's 49k tokens and types
        self.tokens, self.pre = _as_list(tokens), pre
        self.types = _as_list(types) if types is not None else [NORMAL] * len(self.tokens)
        # one int object per number, shared by the ids and the ranks (two dicts' own ints: ~1.5 MB more for
        # SmolLM2's 49k tokens and merges)
        numbers = list(range(max(len(self.tokens), len(merges) if merges else 0)))
        self.ids = dict(zip(self.tokens, numbers))
        # without merges the vocabulary is taken as rank-ordered: the merged token's id is its rank
        # keyed by the merge strings themselves ("left right", shared with the file's metadata): a (left, right)
        # tuple key costs a tuple and two new strings per merge, ~10 MB of SmolLM2's 49k merges
        self.ranks: dict[str, int] | None = None
        if merges:
            self.ranks = dict(zip(merges, numbers))
        self.special = {t: i for i, t in enumerate(self.tokens) if self.types[i] in (CONTROL, USER_DEFINED)}
        self._special_re = re.compile("|".join(re.escape(s) for s in sorted(self.special, key=len, reverse=True))) \
            if self.special else None
        self.bos_id, self.eos_id, self.add_bos = bos_id, eos_id, add_bos
        self.eot_id = eot_id if eot_id is not None else self.ids.get("<|im_end|>", self.ids.get("<|eot_id|>"))
        self._byte = _byte_chars()
        self._unbyte = {c: b for b, c in enumerate(self._byte)}
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_gguf_metadata(cls, md: dict[str, Any]) -> Tokenizer:
        model = md.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise NotImplementedError(f"tokenizer.ggml.model {model!r} is not supported: only byte-level BPE ('gpt2') is"
                                      " (SentencePiece 'llama' vocabularies are not)")
        return cls(md["tokenizer.ggml.tokens"], md.get("tokenizer.ggml.token_type"), md.get("tokenizer.ggml.merges"),
                   md.get("tokenizer.ggml.pre", "gpt2"), md.get("tokenizer.ggml.bos_token_id"),
                   md.get("tokenizer.ggml.eos_token_id"), md.get("tokenizer.ggml.eot_token_id"),
                   bool(md.get("tokenizer.ggml.add_bos_token", False)))

    @property
    def stop_ids(self) -> frozenset[int]:
        """Tokens that end a reply: end of sequence and end of turn."""
        return frozenset(i for i in (self.eos_id, self.eot_id) if i is not None)

    # ---- encode -----------------------------------------------------------------------------------------

    def encode(self, text: str, add_bos: bool | None = None, allow_special: bool = True) -> list[int]:
        """Token ids of `text`; special-token strings in it become those tokens unless `allow_special` is
        False; a BOS token first when `add_bos` (default: the file's add_bos_token)."""
        out: list[int] = []
        if add_bos if add_bos is not None else self.add_bos:
            if self.bos_id is None:
                raise ValueError("the tokenizer has no BOS token (tokenizer.ggml.bos_token_id) to add")
            out.append(self.bos_id)
        pos = 0
        if allow_special and self._special_re is not None:
            for m in self._special_re.finditer(text):
                out += self._encode_ordinary(text[pos:m.start()])
                out.append(self.special[m.group()])
                pos = m.end()
        out += self._encode_ordinary(text[pos:])
        return out

    def _encode_ordinary(self, text: str) -> list[int]:
        out: list[int] = []
        for word in pretokenize(text, self.pre) if text else ():
            ids = self._cache.get(word)
            if ids is None:
                ids = self._cache[word] = self._bpe("".join(self._byte[b] for b in word.encode("utf-8")))
            out += ids
        return out

    def _rank(self, a: str, b: str) -> int | None:
        if self.ranks is not None:
            # a merge names its left part up to its first space, so a left part with a space never merges
            return None if " " in a else self.ranks.get(f"{a} {b}")
        return self.ids.get(a + b)

    def _bpe(self, word: str) -> list[int]:
        if self.pre in _IGNORE_MERGES and word in self.ids:
            return [self.ids[word]]
        parts = list(word)
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                r = self._rank(parts[i], parts[i + 1])
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        out = []
        for p in parts:
            if p not in self.ids:
                raise ValueError(f"the vocabulary has no token for {p!r} (bytes "
                                 f"{bytes(self._unbyte[c] for c in p)!r}): it is not a byte-level BPE vocabulary")
            out.append(self.ids[p])
        return out

    # ---- decode ----------------------------------------------------------------------------------------

    def token_bytes(self, i: int) -> bytes:
        if not 0 <= i < len(self.tokens):
            raise IndexError(f"token id {i} is outside the vocabulary of {len(self.tokens)}")
        t = self.tokens[i]
        if self.types[i] in (CONTROL, USER_DEFINED, UNKNOWN, UNUSED):
            return t.encode("utf-8")
        try:
            return bytes(self._unbyte[c] for c in t)
        except KeyError:  # not spelled in byte characters (a hand-added token): its text
            return t.encode("utf-8")

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        data = b"".join(self.token_bytes(i) for i in ids if not (skip_special and self.types[i] == CONTROL))
        return data.decode("utf-8", errors="replace")

    def stream(self) -> StreamDecoder:
        return StreamDecoder(self)


class StreamDecoder:
    """Token ids in, text out as soon as it is complete UTF-8: a character split across tokens is emitted
    once its last byte arrives; `flush` ends the stream (an unfinished character becomes U+FFFD)."""

    def __init__(self, tok: Tokenizer):
        self.tok = tok
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token_id: int) -> str:
        return self._dec.decode(self.tok.token_bytes(token_id))

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)
