"""`tg llm SUBCOMMAND`: the LLM commands (`tg llm serve`, `tg llm chat`) as one subcommand group.

A subcommand is registered here with `llm_command` (a function taking the parsed arguments and returning the exit
code, plus an optional function adding its arguments); the heavy modules (model, server) are imported inside
the function that runs, so `tg --help` stays fast.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from tg_core.cli import Command, command

LLM_COMMANDS: dict[str, Command] = {}


def llm_command(name: str, help: str, arguments: Callable[[argparse.ArgumentParser], None] | None = None
                ) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Register `fn(args) -> exit code` as `tg llm name`."""
    def register(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        if name in LLM_COMMANDS:
            raise ValueError(f"tg llm subcommand {name!r} is registered twice")
        LLM_COMMANDS[name] = Command(name, help, fn, arguments)
        return fn
    return register


def _group_args(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="llm_command", metavar="SUBCOMMAND")
    for cmd in LLM_COMMANDS.values():
        sp = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        if cmd.arguments is not None:
            cmd.arguments(sp)


@command("llm", "LLM inference on GGUF models (tg llm SUBCOMMAND --help)", _group_args)
def cmd_llm(args: argparse.Namespace) -> int:
    if args.llm_command is None:
        print(f"tg llm: a subcommand is needed: {', '.join(LLM_COMMANDS)}")
        return 2
    from tg_core.llm.chat import ChatTemplateError
    from tg_core.llm.gguf import GGUFError
    try:
        return LLM_COMMANDS[args.llm_command].run(args)
    except (FileNotFoundError, GGUFError, ChatTemplateError, NotImplementedError, ValueError, OSError) as e:
        # a model tg cannot load, a bad option value or an address it cannot bind: the user's to fix, one line
        print(f"tg llm {args.llm_command}: error: {e}", file=sys.stderr)
        return 2



def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="a .gguf file, or the name of a packaged model (smollm2)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="the TCP port (default 8000; 0 picks a free one)")
    p.add_argument("--context", type=int, default=None,
                   help="the context length in tokens (default: the model's, at most 4096)")


@llm_command("serve", "serve MODEL over HTTP: an OpenAI-compatible API (/v1/chat/completions, /v1/completions, "
                      "/v1/models, /health) and a chat page at /", _serve_args)
def cmd_serve(args: argparse.Namespace) -> int:
    from tg_core.llm.server import serve_model
    return serve_model(args.model, args.host, args.port, args.context)


def _chat_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="a .gguf file, or the name of a packaged model (smollm2)")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0: greedy)")
    p.add_argument("--top-k", type=int, default=0, help="sample from the k most likely tokens (default 0: off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass in (0, 1] (default 1: off)")
    p.add_argument("--seed", type=int, default=None, help="the sampling seed (default: random)")
    p.add_argument("--max-tokens", type=int, default=512, help="the longest reply in tokens (default 512)")
    p.add_argument("--system", default=None, help="a system message that opens the conversation")
    p.add_argument("--context", type=int, default=None,
                   help="the context length in tokens (default: the model's, at most 4096)")


@llm_command("chat", "chat with MODEL in the terminal: streamed replies, a tokens/s line after each, "
                     "/exit or EOF ends, Ctrl-C stops a reply", _chat_args)
def cmd_chat(args: argparse.Namespace) -> int:
    from tg_core.llm.sampling import SamplingParams
    from tg_core.llm.terminal_chat import run_chat
    params = SamplingParams(args.temperature, args.top_k, args.top_p, args.seed)
    if args.max_tokens < 1:
        raise ValueError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    return run_chat(args.model, params, args.max_tokens, args.system, args.context)
