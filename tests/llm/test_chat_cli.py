"""`tg llm chat` run as a program with piped stdin against the tiny random llama: the printed replies equal the
Generator's greedy output for the same conversation, turn by turn."""
from __future__ import annotations

import re
import subprocess
import sys

from tg_core.llm.server import load_model


def _expected(path: str, turns: list[str], max_tokens: int) -> list[str]:
    gen, tok, template, _, _ = load_model(path)
    messages, replies = [], []
    for text in turns:
        messages.append({"role": "user", "content": text})
        ids = tok.encode(template.render(messages))
        reply = tok.decode(list(gen.generate(ids, max_tokens)))
        replies.append(reply)
        messages.append({"role": "assistant", "content": reply})
    return replies


def _chat(path: str, stdin: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tg_core", "llm", "chat", path, *args], input=stdin,
                          capture_output=True, text=True, timeout=300)


def test_two_turns_print_the_greedy_replies(tiny_llama_path):
    turns = ["Hello there", "And again?"]
    want = _expected(tiny_llama_path, turns, 12)
    r = _chat(tiny_llama_path, "\n".join(turns) + "\n/exit\nnot read\n", "--max-tokens", "12")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == want  # each reply then a newline; nothing after /exit
    assert len(re.findall(r"^\d+ tokens, [\d.]+ tok/s$", r.stderr, re.M)) == 2


def test_eof_ends_and_bad_options_are_errors(tiny_llama_path):
    r = _chat(tiny_llama_path, "", "--max-tokens", "4")
    assert r.returncode == 0 and r.stdout == ""
    r = _chat(tiny_llama_path, "", "--top-p", "0")
    assert r.returncode == 2 and "top_p must be in (0, 1]" in r.stderr
    r = _chat("no-such-model", "")
    assert r.returncode == 2 and "neither a file nor a packaged model" in r.stderr
