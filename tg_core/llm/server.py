"""`tg llm serve`: an OpenAI-compatible HTTP server (stdlib ThreadingHTTPServer) and the chat page.

Each HTTP request has its own thread, which checks the body, renders the chat template, tokenizes and then
waits on its job's events; the model runs only on the ModelWorker's one thread (worker.py), so requests
queue there. Streaming replies are server-sent events in OpenAI's order: a role chunk (chat), content or
reasoning_content chunks, a chunk with the finish_reason, a usage chunk when stream_options.include_usage,
then `data: [DONE]`. A client that goes away (seen as a failed write or as end-of-file on its socket while
its job waits or runs) cancels the job, which stops after the current token.

Routes: GET / (the chat page), /health, /v1/models; POST /v1/chat/completions, /v1/completions, /markdown
(the page's server-side markdown rendering, see markdown.py).
"""
from __future__ import annotations

import importlib.resources
import json
import queue
import secrets
import select
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tg_core.llm.api import APIError, Request, parse_json, parse_request
from tg_core.llm.chat import ChatTemplate, ChatTemplateError
from tg_core.llm.markdown import render_markdown
from tg_core.llm.stream import THINK_OPEN, ThinkSplitter
from tg_core.llm.tokenizer import Tokenizer
from tg_core.llm.worker import Job, ModelWorker, TokenGenerator

MAX_BODY = 16 << 20   # bytes of a request body
POLL = 0.2            # seconds between checks that a waiting client is still connected


class LLMServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], generator: TokenGenerator, tokenizer: Tokenizer,
                 template: ChatTemplate, n_ctx: int, model_name: str, quiet: bool = False):
        self.tokenizer, self.template, self.n_ctx, self.model_name, self.quiet = \
            tokenizer, template, n_ctx, model_name, quiet
        self.worker = ModelWorker(generator, tokenizer, n_ctx)
        self.page = importlib.resources.files("tg_core.llm").joinpath("web/chat.html").read_bytes()
        super().__init__(address, Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def server_close(self) -> None:
        super().server_close()
        self.worker.close()


def _completion_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + secrets.token_hex(12)


class ClientGone(Exception):
    pass


class Handler(BaseHTTPRequestHandler):
    server: LLMServer
    protocol_version = "HTTP/1.0"  # one request per connection: a stream ends when the connection closes

    def log_message(self, format: str, *args: Any) -> None:
        if not self.server.quiet:
            sys.stderr.write(f"tg llm serve: {self.address_string()} {format % args}\n")

    # ---- plumbing -------------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _client_gone(self) -> bool:
        """End-of-file on the socket: the client closed its side (it sends nothing after its one request)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _body(self) -> dict[str, Any]:
        n = self.headers.get("Content-Length")
        if n is None or not n.isdigit():
            raise APIError(f"a request body with a Content-Length is needed, got Content-Length {n!r}", status=411)
        if int(n) > MAX_BODY:
            raise APIError(f"the request body has {n} bytes, more than the {MAX_BODY} allowed", status=413)
        return parse_json(self.rfile.read(int(n)))

    # ---- routes ---------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            self._send(200, self.server.page, "text/html; charset=utf-8")
        elif path == "/health":
            self._json(200, {"status": "ok"})
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.server.model_name, "object": "model",
                                                         "created": 0, "owned_by": "tg",
                                                         "meta": {"n_ctx": self.server.n_ctx}}]})
        else:
            self._json(404, APIError(f"no route GET {path}", status=404, code="not_found").body)

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        routes = {"/v1/chat/completions": "chat", "/v1/completions": "completion", "/markdown": "markdown"}
        try:
            if path not in routes:
                raise APIError(f"no route POST {path} (POST routes: {', '.join(routes)})", status=404,
                               code="not_found")
            body = self._body()
            if routes[path] == "markdown":
                if not isinstance(body.get("text"), str):
                    raise APIError(f"text must be a string, got {body.get('text')!r}", param="text")
                self._json(200, {"html": render_markdown(body["text"])})
                return
            self._complete(parse_request(body, routes[path], len(self.server.tokenizer.tokens)))
        except APIError as e:
            self._json(e.status, e.body)
        except (BrokenPipeError, ConnectionResetError, ClientGone):
            pass

    # ---- completions ----------------------------------------------------------------------------------

    def _prompt_ids(self, req: Request) -> tuple[list[int], bool]:
        """The prompt's token ids, and whether it ends inside an opened <think> (the reply starts as reasoning)."""
        tok = self.server.tokenizer
        if req.kind == "chat":
            assert req.messages is not None
            try:
                text = self.server.template.render(req.messages)
            except (ChatTemplateError, ValueError) as e:
                raise APIError(str(e), param="messages") from None
            return tok.encode(text), text.rstrip().endswith(THINK_OPEN)
        if isinstance(req.prompt, list):
            return req.prompt, False
        assert req.prompt is not None
        return tok.encode(req.prompt), False

    def _complete(self, req: Request) -> None:
        ids, opens_think = self._prompt_ids(req)
        n_ctx = self.server.n_ctx
        if len(ids) >= n_ctx:
            raise APIError(f"the prompt has {len(ids)} tokens, but the context is {n_ctx} tokens (a reply needs at "
                           f"least one more)", param="messages" if req.kind == "chat" else "prompt",
                           code="context_length_exceeded", type="exceed_context_size_error",
                           n_prompt_tokens=len(ids), n_ctx=n_ctx)
        job = self.server.worker.submit(Job(ids, req.max_tokens, req.params, req.stop))
        try:
            if req.stream:
                self._stream(req, job, opens_think)
            else:
                self._collect(req, job, opens_think)
        finally:
            job.cancel()  # a no-op after "done"; otherwise the client is gone

    def _events(self, job: Job):
        """The job's events until it is done; ClientGone as soon as the client closed its connection."""
        while True:
            try:
                kind, value = job.events.get(timeout=POLL)
            except queue.Empty:
                if self._client_gone():
                    raise ClientGone() from None
                continue
            if kind == "error":
                raise value
            yield kind, value
            if kind == "done":
                return
            if self._client_gone():
                raise ClientGone()

    @staticmethod
    def _usage(job: Job) -> dict[str, Any]:
        n_prompt = len(job.ids)
        return {"prompt_tokens": n_prompt, "completion_tokens": job.completion_tokens,
                "total_tokens": n_prompt + job.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": job.cached_tokens}}

    def _collect(self, req: Request, job: Job, opens_think: bool) -> None:
        split = ThinkSplitter(opens_think) if req.kind == "chat" else None
        parts: dict[str, list[str]] = {"content": [], "reasoning": []}
        finish = "stop"
        try:
            for kind, value in self._events(job):
                if kind == "text":
                    for route, text in (split.feed(value) if split else [("content", value)]):
                        parts[route].append(text)
                else:
                    finish = value
        except ClientGone:
            return
        except Exception as e:
            self._json(500, APIError(f"generation failed: {type(e).__name__}: {e}", status=500,
                                     type="server_error").body)
            return
        for route, text in (split.flush() if split else []):
            parts[route].append(text)
        content, reasoning = "".join(parts["content"]), "".join(parts["reasoning"])
        base = {"id": _completion_id(req.kind), "created": int(time.time()),
                "model": req.model or self.server.model_name, "usage": self._usage(job)}
        if req.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if reasoning:
                message["reasoning_content"] = reasoning
            self._json(200, {**base, "object": "chat.completion",
                             "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]})
        else:
            self._json(200, {**base, "object": "text_completion",
                             "choices": [{"index": 0, "text": content, "logprobs": None, "finish_reason": finish}]})

    def _stream(self, req: Request, job: Job, opens_think: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        cid, created, model = _completion_id(req.kind), int(time.time()), req.model or self.server.model_name
        chat = req.kind == "chat"

        def event(obj: Any) -> None:
            try:
                self.wfile.write(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError, OSError):
                raise ClientGone() from None

        def chunk(delta: dict[str, Any] | None = None, text: str | None = None, finish: str | None = None) -> None:
            choice: dict[str, Any] = {"index": 0, "delta": delta or {}} if chat else {"index": 0, "text": text or ""}
            choice.update({"logprobs": None, "finish_reason": finish})
            obj: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk" if chat else "text_completion", "created": created,
                   "model": model, "choices": [choice]}
            if req.include_usage:
                obj["usage"] = None
            event(obj)

        def emit(pieces: list[tuple[str, str]]) -> None:
            for route, text in pieces:
                if chat:
                    chunk({"reasoning_content" if route == "reasoning" else "content": text})
                else:
                    chunk(text=text)

        split = ThinkSplitter(opens_think) if chat else None
        if chat:
            chunk({"role": "assistant", "content": ""})
        finish = "stop"
        try:
            for kind, value in self._events(job):
                if kind == "text":
                    emit(split.feed(value) if split else [("content", value)])
                else:
                    finish = value
        except ClientGone:
            return
        except Exception as e:
            event({"error": {"message": f"generation failed: {type(e).__name__}: {e}", "type": "server_error"}})
            return
        if split:
            emit(split.flush())
        chunk(finish=finish)
        if req.include_usage:
            event({"id": cid, "object": "chat.completion.chunk" if chat else "text_completion", "created": created,
                   "model": model, "choices": [], "usage": self._usage(job)})
        event(b"[DONE]")


def make_server(generator: TokenGenerator, tokenizer: Tokenizer, template: ChatTemplate, n_ctx: int,
                model_name: str, host: str = "127.0.0.1", port: int = 8000, quiet: bool = False) -> LLMServer:
    """A server (not yet serving: call serve_forever, from a thread in tests) around a generator."""
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be in 0..65535, got {port}")
    return LLMServer((host, port), generator, tokenizer, template, n_ctx, model_name, quiet)


def load_model(model: str, context: int | None = None) -> tuple[Any, Tokenizer, ChatTemplate, int, str]:
    """(Generator, tokenizer, chat template, context length, model name) of a GGUF path or packaged name."""
    import os

    from tg_core.llm.generate import Generator
    from tg_core.llm.gguf import GGUFFile
    from tg_core.llm.model import Transformer
    from tg_core.llm.packaged import resolve_model
    path = resolve_model(model)
    f = GGUFFile(path)
    tok = Tokenizer.from_gguf_metadata(f.metadata)
    template = ChatTemplate.from_gguf_metadata(f.metadata)
    transformer = Transformer.from_gguf(f, context)
    name = str(f.metadata.get("general.name") or os.path.splitext(os.path.basename(path))[0])
    return Generator(transformer, tok), tok, template, transformer.cfg.max_context, name


def serve_model(model: str, host: str = "127.0.0.1", port: int = 8000, context: int | None = None) -> int:
    """`tg llm serve`: load the model, compile its decode step once (so the first reply is not the one that
    waits for it), then serve until interrupted."""
    if not 0 <= port <= 65535:  # before the model loads: a typo should not cost the load
        raise ValueError(f"port must be in 0..65535, got {port}")
    t0 = time.perf_counter()
    generator, tok, template, n_ctx, name = load_model(model, context)
    print(f"tg llm serve: loaded {name} (context {n_ctx} tokens) in {time.perf_counter() - t0:.1f} s; compiling ...",
          file=sys.stderr)
    t0 = time.perf_counter()
    for _ in generator.generate(tok.encode("Hi"), 2):
        pass
    print(f"tg llm serve: compiled in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    server = make_server(generator, tok, template, n_ctx, name, host, port)
    print(f"tg llm serve: {name} at {server.url}/ (chat page), {server.url}/v1 (OpenAI API); Ctrl-C stops",
          file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
