"""`tg profile SCRIPT [ARGS]`: run a Python script with profiling on, print the per-kernel summary and write the
trace file (Perfetto / chrome://tracing)."""
from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
from pathlib import Path

from tg_core.cli import command


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("script", help="the Python script to run (as `python SCRIPT ARGS` would)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    p.add_argument("-o", "--output", default=None,
                   help="where to write the trace (default: tg-profile-<script name>.json in the current directory)")
    p.add_argument("--top", type=int, default=30, help="kernels shown in the summary, most time first (default 30)")


def run_script(script: Path, argv: list[str]) -> int:
    """Run `script` as __main__ with `argv` as its arguments; its exit code (1 for an uncaught exception)."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *argv]
    sys.path.insert(0, str(script.parent.resolve()))
    try:
        runpy.run_path(str(script), run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


@command("profile", "run a Python script with profiling on; print the per-kernel summary and write the trace",
         _args)
def profile_command(args: argparse.Namespace) -> int:
    from tg_core import profile
    from tg_core.profile import state
    script = Path(args.script)
    if not script.is_file():
        print(f"tg profile: {args.script} is not a file; give the path of a Python script to run", file=sys.stderr)
        return 2
    if args.top < 1:
        print(f"tg profile: --top must be at least 1, got {args.top}", file=sys.stderr)
        return 2
    out = Path(args.output) if args.output else Path.cwd() / f"tg-profile-{script.stem}.json"
    profile.enable(True)
    state.exported = True  # written below, not at exit
    with profile.span(f"script {script.name}"):
        code = run_script(script, args.args)
    events = profile.collect()
    path = profile.write_trace(out, events)
    sys.stdout.flush()
    print(f"\ntg profile: {script} (exit code {code}), {len(events)} events\n")
    print(profile.summary(events, args.top))
    print(f"\ntrace written to {os.path.abspath(path)} (open it in https://ui.perfetto.dev or chrome://tracing)")
    return code
