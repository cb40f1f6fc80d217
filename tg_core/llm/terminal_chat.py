"""`tg llm chat MODEL`: an interactive terminal chat. Each turn renders the whole conversation with the chat
template; the Generator reuses the cached common prefix, so only the new turn is prefilled. Ctrl-C during a
reply ends that reply (the conversation keeps what was shown); /exit or EOF ends the program."""
from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from tg_core.llm.sampling import SamplingParams


def run_chat(model: str, params: SamplingParams, max_tokens: int, system: str | None = None,
             context: int | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    from tg_core.llm.server import load_model
    inp, out = stdin or sys.stdin, stdout or sys.stdout
    generator, tok, template, n_ctx, name = load_model(model, context)
    print(f"tg llm chat: {name} (context {n_ctx} tokens); /exit or EOF ends", file=sys.stderr)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    interactive = inp.isatty()
    while True:
        if interactive:
            out.write("> ")
            out.flush()
        line = inp.readline()
        if not line or line.strip() == "/exit":
            return 0
        if not line.strip():
            continue
        messages.append({"role": "user", "content": line.rstrip("\n")})
        ids = tok.encode(template.render(messages, add_generation_prompt=True))
        if len(ids) >= n_ctx:
            print(f"tg llm chat: the conversation has {len(ids)} tokens, the context {n_ctx}; it ends here",
                  file=sys.stderr)
            return 1
        reply, n, t0 = [], 0, time.perf_counter()
        dec, tokens = tok.stream(), generator.generate(ids, min(max_tokens, n_ctx - len(ids)), params)
        try:
            for t in tokens:
                n += 1
                piece = dec.feed(t)  # a multi-byte character split across tokens comes out once complete
                reply.append(piece)
                out.write(piece)
                out.flush()
        except KeyboardInterrupt:  # stops this reply, not the program
            pass
        finally:
            tokens.close()
        reply.append(dec.flush())
        out.write(reply[-1])
        dt = time.perf_counter() - t0
        out.write("\n")
        print(f"{n} tokens, {n / dt if dt > 0 else 0.0:.1f} tok/s", file=sys.stderr)
        messages.append({"role": "assistant", "content": "".join(reply)})
