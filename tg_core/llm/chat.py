"""Chat templates: the GGUF's `tokenizer.chat_template` (Jinja, rendered with jinja2 in a sandbox, as
Hugging Face's apply_chat_template does), or ChatML when the file has none."""
from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

ROLES = ("system", "user", "assistant", "tool")


class ChatTemplateError(ValueError):
    """A template that does not compile or raised while rendering (raise_exception), with the reason."""


def _raise(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the conversation: {message}")


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False) -> str:
    # Hugging Face's tojson: no HTML escaping (jinja2's own escapes <, >, & for HTML pages)
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


class ChatTemplate:
    def __init__(self, source: str | None = None, bos_token: str = "", eos_token: str = ""):
        try:
            from jinja2 import TemplateError
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError as e:  # pragma: no cover - the llm extra installs it
            raise ImportError("chat templates need jinja2: pip install 'tg-core[llm]'") from e
        self.source = source or CHATML
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        try:
            self._template = env.from_string(self.source)
        except TemplateError as e:
            raise ChatTemplateError(f"the chat template does not compile: {e}") from None
        self.bos_token, self.eos_token = bos_token, eos_token

    @classmethod
    def from_gguf_metadata(cls, md: dict[str, Any]) -> ChatTemplate:
        tokens = md.get("tokenizer.ggml.tokens") or []

        def tok(key: str) -> str:
            i = md.get(key)
            return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else ""
        return cls(md.get("tokenizer.chat_template"), tok("tokenizer.ggml.bos_token_id"), tok("tokenizer.ggml.eos_token_id"))

    def render(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True, **kwargs: Any) -> str:
        """The prompt text of a conversation (a list of {"role", "content"} dicts)."""
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m:
                raise ValueError(f"message {i} must be a dict with 'role' and 'content', got {m!r}")
            if m["role"] not in ROLES:
                raise ValueError(f"message {i} has role {m['role']!r} (allowed: {', '.join(ROLES)})")
        from jinja2 import TemplateError
        try:
            return self._template.render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                         bos_token=self.bos_token, eos_token=self.eos_token, **kwargs)
        except ChatTemplateError:
            raise
        except TemplateError as e:
            raise ChatTemplateError(f"the chat template failed to render: {e}") from None
