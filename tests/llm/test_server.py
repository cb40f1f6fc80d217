"""`tg llm serve` over HTTP: raw requests (SSE framing, usage, stop, length, context overflow, disconnect, bad
input), the `openai` client, concurrency and prefix reuse, all against a tiny random llama whose greedy output
is checked against a Generator of its own; <think> routing against a canned reply."""
from __future__ import annotations

import json
import random
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from llm_helpers import CannedGenerator, running

from tg_core.llm.chat import ChatTemplate
from tg_core.llm.generate import Generator
from tg_core.llm.gguf import GGUFFile
from tg_core.llm.model import Transformer
from tg_core.llm.server import load_model, make_server
from tg_core.llm.stream import StopStrings, ThinkSplitter
from tg_core.llm.tokenizer import Tokenizer

HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def tiny(tiny_llama_path):
    gen, tok, template, n_ctx, name = load_model(tiny_llama_path)
    server = make_server(gen, tok, template, n_ctx, name, port=0, quiet=True)
    with running(server) as url:
        yield server, url


@pytest.fixture(scope="module")
def reference(tiny_llama_path):
    """Greedy text of a prompt from a Generator of its own (a fresh cache for each prompt)."""
    f = GGUFFile(tiny_llama_path)
    tok, template = Tokenizer.from_gguf_metadata(f.metadata), ChatTemplate.from_gguf_metadata(f.metadata)
    model = Transformer.from_gguf(f)

    def run(messages=None, ids=None, max_tokens=12):
        ids = ids if ids is not None else tok.encode(template.render(messages))
        gen = Generator(model, tok)
        out = list(gen.generate(ids, max_tokens))
        return tok.decode(out), len(out)
    return run


def post(url, path, body, raw=False):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), (r.read() if raw else json.loads(r.read()))
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def sse_events(raw: bytes) -> list:
    """The events of a server-sent-event body, checking the framing: every event one `data: ` line and a
    blank line, the last one [DONE]."""
    text = raw.decode()
    assert text.endswith("\n\n"), text[-50:]
    blocks = text[:-2].split("\n\n")
    assert all(b.startswith("data: ") and "\n" not in b for b in blocks), blocks
    assert blocks[-1] == "data: [DONE]"
    return [json.loads(b[len("data: "):]) for b in blocks[:-1]]


def wait_idle(server, timeout=20.0):
    end = time.monotonic() + timeout
    while (server.worker.busy.is_set() or not server.worker.jobs.empty()) and time.monotonic() < end:
        time.sleep(0.02)
    assert not server.worker.busy.is_set(), f"the worker was still busy after {timeout} s"


# ---- the text filters ---------------------------------------------------------------------------------------

def _pieces(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 8))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


@pytest.mark.parametrize("text,opens,want", [
    ("<think>why\nso</think>\nThe answer", False, ("why\nso", "The answer")),
    ("  <think>x</think>y", False, ("x", "y")),
    ("no tags <think>here</think>", False, ("", "no tags <think>here</think>")),
    ("because</think>so", True, ("because", "so")),
    ("<thin", False, ("", "<thin")),
    ("<think>unclosed </thi", False, ("unclosed </thi", "")),
])
def test_think_splitter_any_chunking(text, opens, want):
    rng = random.Random(0)
    for _ in range(30):
        s, got = ThinkSplitter(opens), {"reasoning": "", "content": ""}
        for piece in _pieces(text, rng):
            for route, t in s.feed(piece):
                got[route] += t
        for route, t in s.flush():
            got[route] += t
        assert (got["reasoning"], got["content"]) == want


@pytest.mark.parametrize("text,stops,want,stopped", [
    ("hello world", ["wor"], "hello ", True),
    ("hello world", ["xyz", "o w"], "hell", True),
    ("hello wo", ["world"], "hello wo", False),
    ("aab", ["ab"], "a", True),
])
def test_stop_strings_any_chunking(text, stops, want, stopped):
    rng = random.Random(1)
    for _ in range(30):
        s = StopStrings(stops)
        out = "".join(s.feed(p) for p in _pieces(text, rng)) + s.flush()
        assert (out, s.stopped) == (want, stopped)


# ---- raw HTTP -----------------------------------------------------------------------------------------------

def test_models_health_and_unknown_routes(tiny):
    server, url = tiny
    with urllib.request.urlopen(url + "/health", timeout=10) as r:
        assert json.loads(r.read()) == {"status": "ok"}
    with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:
        models = json.loads(r.read())
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["tiny-llama"]
    assert models["data"][0]["meta"]["n_ctx"] == 256
    status, _, body = post(url, "/v1/nothing", {})
    assert status == 404 and "/v1/chat/completions" in body["error"]["message"]


def test_chat_matches_the_generator_and_counts_usage(tiny, reference):
    _, url = tiny
    status, _, body = post(url, "/v1/chat/completions", {"messages": HELLO, "max_tokens": 12, "temperature": 0})
    text, n = reference(HELLO, max_tokens=12)
    assert status == 200 and body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-") and body["model"] == "tiny-llama"
    msg = body["choices"][0]["message"]
    assert msg["role"] == "assistant" and msg["content"] == text
    usage = body["usage"]
    assert usage["completion_tokens"] == n == 12 and body["choices"][0]["finish_reason"] == "length"
    assert usage["total_tokens"] == usage["prompt_tokens"] + 12


@pytest.mark.parametrize("include_usage", [False, True])
def test_sse_framing_order_and_usage(tiny, reference, include_usage):
    _, url = tiny
    body = {"messages": HELLO, "max_tokens": 10, "temperature": 0, "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    status, headers, raw = post(url, "/v1/chat/completions", body, raw=True)
    assert status == 200 and headers["Content-Type"] == "text/event-stream"
    events = sse_events(raw)
    assert len({e["id"] for e in events}) == 1 and all(e["object"] == "chat.completion.chunk" for e in events)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    if include_usage:
        *events, last = events
        assert last["choices"] == [] and last["usage"]["completion_tokens"] == 10
        assert all(e["usage"] is None for e in events)
    else:
        assert not any("usage" in e for e in events)
    final = events[-1]["choices"][0]
    assert final["delta"] == {} and final["finish_reason"] == "length"
    assert all(e["choices"][0]["finish_reason"] is None for e in events[:-1])
    content = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
    assert content == reference(HELLO, max_tokens=10)[0]


def test_stop_string_ends_the_reply_before_it(tiny, reference):
    _, url = tiny
    full, _ = reference(HELLO, max_tokens=12)
    stop = full[3:5]
    want = full[:full.find(stop)]
    for stream in (False, True):
        status, _, out = post(url, "/v1/chat/completions", {"messages": HELLO, "max_tokens": 12, "temperature": 0,
                                                            "stop": [stop], "stream": stream}, raw=stream)
        assert status == 200
        if stream:
            events = sse_events(out)
            text = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
            finish = events[-1]["choices"][0]["finish_reason"]
        else:
            text, finish = out["choices"][0]["message"]["content"], out["choices"][0]["finish_reason"]
        assert (text, finish) == (want, "stop")


def test_completions_with_token_ids_and_text(tiny, reference):
    server, url = tiny
    ids = [72, 105, 33, 10, 65]
    status, _, body = post(url, "/v1/completions", {"prompt": ids, "max_completion_tokens": 6, "max_tokens": 99,
                                                    "temperature": 0})
    assert status == 200 and body["object"] == "text_completion"
    assert body["choices"][0]["text"] == reference(ids=ids, max_tokens=6)[0]
    assert body["usage"]["prompt_tokens"] == 5 and body["usage"]["completion_tokens"] == 6
    status, _, raw = post(url, "/v1/completions", {"prompt": "Hi!\nA", "max_tokens": 6, "temperature": 0,
                                                   "stream": True}, raw=True)
    events = sse_events(raw)
    assert "".join(e["choices"][0]["text"] for e in events) == body["choices"][0]["text"]
    assert events[-1]["choices"][0]["finish_reason"] == "length"


def test_context_overflow_is_a_400_naming_the_sizes(tiny):
    server, url = tiny
    status, _, body = post(url, "/v1/completions", {"prompt": [65] * 256, "max_tokens": 1})
    err = body["error"]
    assert status == 400 and err["n_prompt_tokens"] == 256 and err["n_ctx"] == 256
    assert "256 tokens" in err["message"] and err["code"] == "context_length_exceeded"
    status, _, body = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 300}]})
    assert status == 400 and body["error"]["n_prompt_tokens"] > 300 and body["error"]["param"] == "messages"


@pytest.mark.parametrize("body,needle", [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    ({"messages": []}, "messages must be a non-empty list"),
    ({"messages": [{"content": "hi"}]}, "messages[0] must be an object with a string 'role'"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "role 'robot'"),
    ({"messages": HELLO, "temperature": "hot"}, "temperature must be a number in [0.0, 2.0], got 'hot'"),
    ({"messages": HELLO, "top_p": 0}, "top_p must be a number in (0.0, 1.0]"),
    ({"messages": HELLO, "top_k": -1}, "top_k must be an integer >= 0, got -1"),
    ({"messages": HELLO, "max_tokens": 1.5}, "max_tokens must be an integer >= 0, got 1.5"),
    ({"messages": HELLO, "stop": [1]}, "stop must be a string or a list of strings"),
    ({"messages": HELLO, "stream": "yes"}, "stream must be true or false"),
    ({"messages": HELLO, "n": 2}, "n must be 1"),
    ({"messages": HELLO, "seed": "x"}, "seed must be an integer"),
])
def test_bad_requests_are_400s_naming_the_field(tiny, body, needle):
    _, url = tiny
    status, _, out = post(url, "/v1/chat/completions", body)
    assert status == 400 and needle in out["error"]["message"], out


def test_bad_completion_prompts(tiny):
    _, url = tiny
    for prompt, needle in ((None, "prompt must be"), ([5, 999], "in [0, 259), got [999]"), ("", "prompt is empty")):
        status, _, out = post(url, "/v1/completions", {"prompt": prompt})
        assert status == 400 and needle in out["error"]["message"], out


def test_disconnect_stops_generation(tiny, reference):
    server, url = tiny
    wait_idle(server)
    host, port = server.server_address[:2]
    body = json.dumps({"messages": HELLO, "max_tokens": 200, "temperature": 0, "stream": True}).encode()
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while got.count(b"data: ") < 2:  # the role chunk and one content chunk
            got += s.recv(4096)
    wait_idle(server)
    job = server.worker.finished[-1]
    assert job.finish == "cancelled" and job.completion_tokens < 200
    # the next request is unharmed by the abandoned one
    status, _, out = post(url, "/v1/chat/completions", {"messages": HELLO, "max_tokens": 12, "temperature": 0})
    assert out["choices"][0]["message"]["content"] == reference(HELLO, max_tokens=12)[0]


def test_concurrent_requests_queue_and_keep_their_own_cache(tiny, reference):
    _, url = tiny
    convs = [[{"role": "user", "content": c}] for c in ("Hello", "Hi there", "Hello again", "What?")]
    want = [reference(c, max_tokens=8)[0] for c in convs]
    got: list = [None] * len(convs)

    def ask(i):
        got[i] = post(url, "/v1/chat/completions", {"messages": convs[i], "max_tokens": 8, "temperature": 0})[2]
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(convs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [g["choices"][0]["message"]["content"] for g in got] == want


def test_a_conversation_reuses_its_cached_prefix(tiny, reference):
    server, url = tiny
    first = [{"role": "user", "content": "Tell me"}]
    _, _, a = post(url, "/v1/chat/completions", {"messages": first, "max_tokens": 6, "temperature": 0})
    turn2 = [*first, {"role": "assistant", "content": a["choices"][0]["message"]["content"]},
             {"role": "user", "content": "More"}]
    _, _, b = post(url, "/v1/chat/completions", {"messages": turn2, "max_tokens": 6, "temperature": 0})
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] >= a["usage"]["prompt_tokens"]
    assert b["choices"][0]["message"]["content"] == reference(turn2, max_tokens=6)[0]


# ---- the openai client ----------------------------------------------------------------------------------------

def test_openai_client(tiny, reference):
    openai = pytest.importorskip("openai")
    _, url = tiny
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=60, max_retries=0)
    assert [m.id for m in client.models.list().data] == ["tiny-llama"]
    r = client.chat.completions.create(model="tiny-llama", messages=HELLO, max_tokens=12, temperature=0)
    text = reference(HELLO, max_tokens=12)[0]
    assert r.choices[0].message.content == text and r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 12
    chunks = list(client.chat.completions.create(model="tiny-llama", messages=HELLO, max_tokens=12, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    c = client.completions.create(model="tiny-llama", prompt=[72, 105, 33, 10, 65], max_tokens=6, temperature=0)
    assert c.choices[0].text == reference(ids=[72, 105, 33, 10, 65], max_tokens=6)[0]
    with pytest.raises(openai.BadRequestError, match="n_ctx|256 tokens"):
        client.completions.create(model="tiny-llama", prompt=[65] * 300, max_tokens=1)


@pytest.mark.slow  # the sampled decode step compiles its bisection kernels (~15 s on 2 cores)
def test_sampling_fields_seed_and_top_k(tiny, reference):
    _, url = tiny
    body = {"messages": HELLO, "max_tokens": 12, "temperature": 1.5, "seed": 7}
    a = [post(url, "/v1/chat/completions", body)[2]["choices"][0]["message"]["content"] for _ in range(2)]
    assert a[0] == a[1]
    one = post(url, "/v1/chat/completions", {**body, "top_k": 1, "top_p": 0.5})[2]
    assert one["choices"][0]["message"]["content"] == reference(HELLO, max_tokens=12)[0]


# ---- reasoning ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def canned(tiny_llama_path):
    md = GGUFFile(tiny_llama_path).metadata
    tok = Tokenizer.from_gguf_metadata(md)

    def serve(reply: str, template: str | None = None):
        gen = CannedGenerator(tok, reply)
        return running(make_server(gen, tok, ChatTemplate(template), 256, "canned", port=0, quiet=True))
    return serve


def test_think_goes_to_reasoning_content(canned):
    with canned("<think>Let me see.\n</think>\n\nIt is **4**.") as url:
        _, _, out = post(url, "/v1/chat/completions", {"messages": HELLO})
        msg = out["choices"][0]["message"]
        assert (msg["reasoning_content"], msg["content"]) == ("Let me see.\n", "It is **4**.")
        _, _, raw = post(url, "/v1/chat/completions", {"messages": HELLO, "stream": True}, raw=True)
        deltas = [e["choices"][0]["delta"] for e in sse_events(raw)]
        assert "".join(d.get("reasoning_content", "") for d in deltas) == "Let me see.\n"
        assert "".join(d.get("content", "") for d in deltas) == "It is **4**."
        assert all(not (d.get("reasoning_content") and d.get("content")) for d in deltas)
    # a template that opens the thinking itself: the reply starts as reasoning
    opened = "{% for m in messages %}{{ m['content'] }}{% endfor %}<think>\n"
    with canned("pondering</think>done", opened) as url:
        msg = post(url, "/v1/chat/completions", {"messages": HELLO})[2]["choices"][0]["message"]
        assert (msg["reasoning_content"], msg["content"]) == ("pondering", "done")
