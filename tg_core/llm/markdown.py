"""Markdown of the chat page's replies, rendered on the server by markdown-it-py (CommonMark with GitHub's
tables and strikethrough). Raw HTML in a reply is escaped, not passed through (`html: False`), and links
with scripting schemes (javascript:, vbscript:, data: other than images) are refused by markdown-it's
validateLink, so a reply cannot inject markup or script into the page."""
from __future__ import annotations

import functools
from typing import Any


@functools.cache
def _parser() -> Any:
    try:
        from markdown_it import MarkdownIt
    except ImportError as e:  # pragma: no cover - the llm extra installs it
        raise ImportError("the chat page renders markdown with markdown-it-py: pip install 'tg-core[llm]'") from e
    return MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True}).enable(["table", "strikethrough"])


def render_markdown(text: str) -> str:
    """The HTML of `text` (safe to insert into the page)."""
    return str(_parser().render(text))
