"""The chat page of `tg llm serve` in headless Chromium (Debian's, over the DevTools protocol): a canned
reply with a table, a code block, a list, a link, raw HTML and reasoning is sent by typing and Enter, and
the rendered DOM is checked; a second Enter while the reply streams sends nothing; Shift+Enter is a newline;
the stop button ends a slow reply on the server; a screenshot is written under the test's tmp_path."""
from __future__ import annotations

import time

import pytest
from cdp import Chromium
from llm_helpers import CannedGenerator, running

from tg_core.llm.chat import ChatTemplate
from tg_core.llm.gguf import GGUFFile
from tg_core.llm.server import make_server
from tg_core.llm.tokenizer import Tokenizer

CODE = 'def f(x):\n    return x < 2 and "ok"'
REPLY = f"""<think>Thinking about tables.</think>
Here is a table:

| Name | Value |
|------|-------|
| a    | 1     |
| b    | 2     |

```python
{CODE}
```

- first
- second with [a link](https://example.org/x)

Raw: <img src=x onerror="window.__pwned=1"><b>bold?</b>
"""


@pytest.fixture
def page(tiny_llama_path, tmp_path):
    tok = Tokenizer.from_gguf_metadata(GGUFFile(tiny_llama_path).metadata)
    gen = CannedGenerator(tok, REPLY, delay=0.004)
    server = make_server(gen, tok, ChatTemplate(), 4096, "canned", port=0, quiet=True)
    with running(server) as url, Chromium(tmp_path / "profile") as browser:
        browser.navigate(url + "/")
        browser.wait_for("document.getElementById('model').textContent === 'canned'")
        yield browser, server, gen


def test_chat_page_renders_markdown_and_guards_double_submit(page, tmp_path):
    browser, server, gen = page
    browser.evaluate("document.getElementById('input').focus()")
    browser.type("Show me")
    browser.press_enter(shift=True)  # a newline, not a send
    browser.type("a table")
    assert browser.evaluate("document.getElementById('input').value") == "Show me\na table"
    browser.press_enter()
    browser.wait_for("!document.getElementById('stop').disabled")  # streaming
    browser.type("second")
    browser.press_enter()  # ignored while the reply streams
    browser.evaluate("document.getElementById('form').requestSubmit()")  # so is the form's submit
    browser.wait_for("document.querySelector('.msg.assistant').dataset.done === '1'")

    assert browser.evaluate("window.tgChat.requests") == 1 and len(gen.prompts) == 1
    assert browser.evaluate("document.getElementById('input').value") == "second"
    assert browser.evaluate("[...document.querySelectorAll('.msg.user')].map(e => e.textContent)") == \
        ["Show me\na table"]
    ans = "document.querySelector('.msg.assistant .answer')"
    assert browser.evaluate(f"[...{ans}.querySelectorAll('table th')].map(e => e.textContent)") == ["Name", "Value"]
    assert browser.evaluate(f"[...{ans}.querySelectorAll('table tbody td')].map(e => e.textContent)") == \
        ["a", "1", "b", "2"]
    assert browser.evaluate(f"{ans}.querySelector('pre > code').textContent") == CODE + "\n"
    assert browser.evaluate(f"{ans}.querySelector('pre > code').className") == "language-python"
    assert browser.evaluate(f"{ans}.querySelectorAll('ul > li').length") == 2
    assert browser.evaluate(f"{ans}.querySelector('li a').href") == "https://example.org/x"
    # raw HTML of the reply is text, not markup
    assert browser.evaluate(f"{ans}.querySelectorAll('img, b, script').length") == 0
    assert '<img src=x onerror="window.__pwned=1"><b>bold?</b>' in browser.evaluate(f"{ans}.textContent")
    assert browser.evaluate("window.__pwned === undefined")
    # reasoning apart from the answer
    assert browser.evaluate("document.querySelector('.msg.assistant .reasoning').textContent") == \
        "Thinking about tables."
    assert "Thinking" not in browser.evaluate(f"{ans}.textContent")
    png = browser.screenshot(tmp_path / "chat.png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_stop_button_ends_the_reply_on_the_server(page):
    browser, server, gen = page
    gen.delay = 0.05  # ~15 s for the whole reply
    browser.evaluate("document.getElementById('input').focus()")
    browser.type("go")
    browser.press_enter()
    browser.wait_for("document.querySelector('.msg.assistant .answer').textContent.includes('table')")
    browser.evaluate("document.getElementById('stop').click()")
    browser.wait_for("document.querySelector('.msg.assistant').dataset.done === '1'", timeout=5)
    end = time.monotonic() + 5  # the worker sees the closed connection after its current token
    while not (server.worker.finished and server.worker.finished[-1].finish) and time.monotonic() < end:
        time.sleep(0.02)
    job = server.worker.finished[-1]
    assert job.finish == "cancelled" and job.completion_tokens < len(gen.tokenizer.encode(REPLY))
    assert browser.evaluate("document.querySelector('.msg.assistant .error')") is None
    assert not browser.evaluate("document.getElementById('send').disabled")
