"""The OpenAI-style request bodies of /v1/chat/completions and /v1/completions, checked field by field.

A bad field is an `APIError` (HTTP 400) naming the field, the value and what is allowed; fields tg does not
use (n=1, logprobs, penalties, ...) are accepted and ignored, as OpenAI clients send some by default.
Defaults follow OpenAI's API: temperature 1, top_p 1, no top_k, no limit on the tokens but the context.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tg_core.llm.sampling import SamplingParams


class APIError(Exception):
    """An error reply: the HTTP status and OpenAI's error object (message, type, param, code, extras)."""

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error", **extra: Any):
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": type, "param": param, "code": code, **extra}}


@dataclass
class Request:
    kind: str                         # "chat" or "completion"
    model: str | None
    messages: list[dict[str, Any]] | None = None
    prompt: str | list[int] | None = None
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None     # None: up to the end of the context
    stop: list[str] = field(default_factory=list)
    params: SamplingParams = field(default_factory=SamplingParams)


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise APIError(f"the request body is not UTF-8: {e}") from None
    except json.JSONDecodeError as e:
        raise APIError(f"the request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise APIError(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _number(body: dict[str, Any], name: str, default: float, lo: float, hi: float, lo_open: bool = False) -> float:
    v = body.get(name)
    if v is None:
        return default
    if not _is_num(v) or not (lo < v if lo_open else lo <= v) or not v <= hi:
        raise APIError(f"{name} must be a number in {'(' if lo_open else '['}{lo}, {hi}], got {v!r}", param=name)
    return float(v)


def _int(body: dict[str, Any], name: str, lo: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if not _is_int(v) or v < lo:
        raise APIError(f"{name} must be an integer >= {lo}, got {v!r}", param=name)
    return int(v)


def _text_content(i: int, content: Any) -> str:
    """A message's content: a string, or a list of {"type": "text", "text": ...} parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise APIError(f"messages[{i}].content parts must be {{'type': 'text', 'text': str}} (only text is "
                               f"supported), got {part!r}", param=f"messages[{i}].content")
            parts.append(part["text"])
        return "".join(parts)
    raise APIError(f"messages[{i}].content must be a string or a list of text parts, got {content!r}",
                   param=f"messages[{i}].content")


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise APIError(f"messages must be a non-empty list of {{'role', 'content'}} objects, got {msgs!r}",
                       param="messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise APIError(f"messages[{i}] must be an object with a string 'role', got {m!r}", param=f"messages[{i}]")
        msg = {"role": m["role"], "content": _text_content(i, m.get("content"))}
        if isinstance(m.get("reasoning_content"), str):
            msg["reasoning_content"] = m["reasoning_content"]
        out.append(msg)
    return out


def _prompt(body: dict[str, Any], vocab: int) -> str | list[int]:
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
        p = p[0]  # OpenAI allows a list of prompts; one is supported
    if isinstance(p, str):
        if not p:
            raise APIError("prompt is empty", param="prompt")
        return p
    if isinstance(p, list) and p and all(_is_int(t) for t in p):
        bad = [t for t in p if not 0 <= t < vocab]
        if bad:
            raise APIError(f"prompt token ids must be in [0, {vocab}), got {bad[:5]}", param="prompt")
        return list(p)
    raise APIError(f"prompt must be a non-empty string or a non-empty list of token ids, got {p!r}", param="prompt")


def _stop(body: dict[str, Any]) -> list[str]:
    s = body.get("stop")
    if s is None:
        return []
    if isinstance(s, str):
        return [s] if s else []
    if isinstance(s, list) and all(isinstance(x, str) for x in s):
        return [x for x in s if x]
    raise APIError(f"stop must be a string or a list of strings, got {s!r}", param="stop")


def parse_request(body: dict[str, Any], kind: str, vocab: int) -> Request:
    """The request of a /v1/chat/completions ("chat") or /v1/completions ("completion") body."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise APIError(f"model must be a string, got {model!r}", param="model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise APIError(f"stream must be true or false, got {stream!r}", param="stream")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict) or not isinstance(opts.get("include_usage", False), bool):
        raise APIError(f"stream_options must be an object like {{'include_usage': true}}, got {opts!r}",
                       param="stream_options")
    n = body.get("n", 1)
    if n != 1:
        raise APIError(f"n must be 1 (one choice per request), got {n!r}", param="n")
    mt, mct = _int(body, "max_tokens", 0), _int(body, "max_completion_tokens", 0)
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise APIError(f"seed must be an integer, got {seed!r}", param="seed")
    params = SamplingParams(temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
                            top_k=_int(body, "top_k", 0) or 0,
                            top_p=_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
                            seed=seed)
    req = Request(kind, model, stream=stream, include_usage=bool(opts.get("include_usage", False)) and stream,
                  max_tokens=mct if mct is not None else mt, stop=_stop(body), params=params)
    if kind == "chat":
        req.messages = _messages(body)
    else:
        req.prompt = _prompt(body, vocab)
    return req
