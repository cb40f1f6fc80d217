"""The `tg` command: `tg devices`, `tg config`, `tg doctor`.

Subcommands are registered with the `command` decorator: a function taking the parsed arguments and
returning the exit code, plus an optional function adding its arguments to its parser. A later
subcommand (`tg demo`, `tg bench`, `tg profile`) is one more decorated function, here or in a module
listed in `_COMMAND_MODULES`.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tg_core.plugins.errors import ConfigError, DeviceUnavailable, PluginError

SIGPIPE = 13  # its number on every POSIX system (the signal module has no SIGPIPE on Windows)


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    arguments: Callable[[argparse.ArgumentParser], None] | None


COMMANDS: dict[str, Command] = {}
# modules that register more subcommands when imported
_COMMAND_MODULES: tuple[str, ...] = ("tg_core.demo", "tg_core.bench", "tg_core.profile.cli", "tg_core.llm.cli")


def command(name: str, help: str, arguments: Callable[[argparse.ArgumentParser], None] | None = None
            ) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Register `fn(args) -> exit code` as the subcommand `name`."""
    def register(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        if name in COMMANDS:
            raise ValueError(f"tg subcommand {name!r} is registered twice")
        COMMANDS[name] = Command(name, help, fn, arguments)
        return fn
    return register


# the `--set` examples of `tg --help` and of the error for a bad --set (tests run each one)
SET_EXAMPLES = ("device=CPU:LLVM", "devices.CPU.threads=2", "devices.AMD.queue=aql")


def _parse_set(items: list[str]) -> dict[str, Any]:
    """`--set a.b=value` items as a nested mapping; values are YAML scalars (`true`, `3`, `[A, B]`)."""
    from tg_core.plugins.config import parse_yaml
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        parts = key.split(".")
        if not sep or not all(parts):
            raise ConfigError("tg --set", item, item, f"KEY=VALUE with a dotted KEY, e.g. {' or '.join(SET_EXAMPLES)}",
                              problem="bad argument")
        target = out
        for i, part in enumerate(parts[:-1]):
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise ConfigError("tg --set", ".".join(parts[:i + 1]), target, "a mapping, since --set " + item +
                                  " sets a key inside it", problem="conflicting --set arguments")
        target[parts[-1]] = parse_yaml(raw, f"tg --set {item}") if raw else None
    return out


def _registry(args: argparse.Namespace) -> Any:
    """Build the registry for this invocation (config errors surface here) and make Device use it."""
    from tg_core.device import Device
    from tg_core.plugins.manager import PluginRegistry
    reg = PluginRegistry.create(_parse_set(args.set), explicit_source="command line (tg --set)")
    Device.reset(reg)
    return reg


# ---- tg devices ----

def _devices_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--probe", action="store_true",
                   help="open every device and run a tiny check on it (touches hardware); reports PASS/FAIL")


def _option_json(opt: Any, value: Any, source: str) -> dict[str, Any]:
    choices = opt.allowed_choices()
    return {"type": opt.type.__name__, "default": opt.default, "help": opt.help,
            "choices": list(choices) if choices is not None else None, "minimum": opt.minimum,
            "maximum": opt.maximum, "allowed": opt.allowed(), "value": value, "source": source}


def plugin_info(reg: Any, rec: Any, probes: dict[str, Any]) -> dict[str, Any]:
    """One plugin as `tg devices --json` reports it."""
    renderers: dict[str, list[str]] = {}
    if rec.status.value == "loaded":
        targets = list(rec.devices) + [d for d in rec.manifest.extends if d != "*"]
        for d in targets:
            try:
                classes = reg.call(rec, "tg_renderers", device=d) or []
                renderers[d] = [getattr(c, "name", repr(c)) for c in classes]
            except Exception as e:
                renderers[d] = [f"<error: {type(e).__name__}: {e}>"]
    clashes = reg.clashes()
    devices = []
    for name, prio in rec.devices.items():
        spec = rec.specs.get(name)
        options = None
        if spec is not None:
            values = _option_values(reg, rec, name)
            options = {k: _option_json(o, *values[k]) for k, o in spec.options.items()}
        # the device names there are: a `count` option (CPU's) says how many, NAME being NAME:0
        count = options["count"]["value"] if options and "count" in options else None
        entry = {"name": name, "priority": prio, "description": spec.description if spec else None,
                 "indices": [f"{name}:{i}" for i in range(count)] if isinstance(count, int) else None,
                 "renderers": renderers.get(name, []), "options": options,
                 "clash_with": [r.dist for r in clashes.get(name, []) if r is not rec]}
        if name in probes:
            p = probes[name]
            entry["probe"] = {"result": "PASS" if p.ok else "FAIL", "steps": p.steps, "error": p.error,
                              "seconds": round(p.seconds, 4)}
        devices.append(entry)
    m = rec.manifest
    return {"name": rec.name, "distribution": rec.dist, "version": rec.version, "entry_point": rec.entry_point,
            "builtin": rec.builtin, "status": rec.status.value, "reason": rec.reason or None,
            "api": m.api if m else None, "hooks_module": m.hooks if m else None,
            "extends": list(m.extends) if m else [], "devices": devices, "renderers": renderers,
            "hooks": list(rec.hooks), "traceback": rec.traceback or None}


def _print_plugin(info: dict[str, Any]) -> None:
    print(f"{info['name']}  {info['distribution']} {info['version']}  [{info['status']}]")
    print(f"  entry point: {info['entry_point']}")
    if info["reason"]:
        print(f"  reason:      {info['reason']}")
    if info["api"]:
        print(f"  core API:    {info['api']}")
    for d in info["devices"]:
        line = f"  device:      {d['name']} (priority {d['priority']})"
        if d["renderers"]:
            line += f", renderers {', '.join(d['renderers'])}"
        if d["clash_with"]:
            line += f", ALSO PROVIDED BY {', '.join(d['clash_with'])}"
        print(line)
        if d["description"]:
            print(f"    about:     {d['description']}")
        if d["indices"] is not None:
            print(f"    indices:   {', '.join(d['indices'])} ({d['name']} is {d['name']}:0; the option count sets how "
                  f"many, TG_{d['name']}_DEVICES)")
        else:
            print(f"    indices:   {d['name']}:0 ({d['name']}), {d['name']}:1, ...: as many as the device opens")
        for k, o in (d["options"] or {}).items():
            set_by = "" if o["source"].startswith("default of plugin") else f" (from {o['source']})"
            print(f"    option:    {k} = {o['value']!r}{set_by}: {o['help']} (default {o['default']!r}; "
                  f"{o['allowed']})")
        if "probe" in d:
            p = d["probe"]
            detail = p["error"] or ", ".join(p["steps"])
            print(f"    probe:     {p['result']} ({detail})")
    if info["extends"]:
        print(f"  extends:     {', '.join(info['extends'])}")
    own = {d["name"] for d in info["devices"]}
    for dev, names in info["renderers"].items():
        if dev not in own and names:
            print(f"  renderers:   {', '.join(names)} for {dev}")
    if info["hooks"]:
        print(f"  hooks:       {', '.join(info['hooks'])}")


@command("devices", "list every plugin found, its devices, renderers, hooks and status", _devices_args)
def cmd_devices(args: argparse.Namespace) -> int:
    from tg_core import __version__
    from tg_core.plugins.manager import PluginWarning
    from tg_core.plugins.probe import probe
    from tg_core.plugins.version import API_VERSION_STR
    reg = _registry(args)
    reg.load_all()  # imports the plugins (phase two) but opens no device
    probes: dict[str, Any] = {}
    if args.probe:
        with warnings.catch_warnings():
            # the listing itself shows every skipped plugin with its reason
            warnings.simplefilter("ignore", PluginWarning)
            for rec in reg.records:
                if rec.status.value == "loaded":
                    probes.update({d: probe(d) for d in rec.devices if d not in probes})
    infos = [plugin_info(reg, rec, probes) for rec in reg.records]
    if args.json:
        clashes = {d: [r.dist for r in rs] for d, rs in reg.clashes().items()}
        print(json.dumps({"core": {"version": __version__, "api": API_VERSION_STR}, "plugins": infos,
                          "clashes": clashes}, indent=2, default=str))
    else:
        print(f"tg-core {__version__}, plugin API {API_VERSION_STR}\n")
        for info in infos:
            _print_plugin(info)
            print()
    return 1 if any(not p.ok for p in probes.values()) else 0


# ---- tg config ----

def _config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--explain", action="store_true",
                   help="say which layer set each value, and why the default device and renderer were chosen "
                        "(opens the default device)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _option_values(reg: Any, rec: Any, name: str) -> dict[str, tuple[Any, str]]:
    """Option -> (value, where it came from) of device `name` of the loaded plugin `rec`. Checks them, and the
    config's renderer preference for the device, as opening the device would."""
    values = reg.config.device_options(name, rec.specs[name].options)
    if reg.config.renderer_order(name)[0]:
        reg.choose_renderer(name)
    sources = reg.config.option_sources(name)
    return {k: (v, sources.get(k, f"default of plugin {rec.name}")) for k, v in values.items()}


def _device_options(reg: Any) -> dict[str, dict[str, tuple[Any, str]]]:
    """Per loaded device: option -> (value, where it came from). Validates every device's config."""
    out = {}
    for rec in reg.records:
        reg.load(rec)
        for name in rec.specs:
            out[name] = _option_values(reg, rec, name)
    return out


@command("config", "print the merged configuration; --explain says where each value came from", _config_args)
def cmd_config(args: argparse.Namespace) -> int:
    from tg_core.device import Device
    reg = _registry(args)
    cfg = reg.config
    options = _device_options(reg)
    merged = cfg.as_dict()
    for name, opts in options.items():
        merged["devices"].setdefault(name, {}).update({k: v for k, (v, _) in opts.items()})
    explain: dict[str, Any] = {}
    if args.explain:
        explain["layers"] = [layer.source for layer in cfg.layers]
        explain["values"] = [{"key": k, "value": v, "source": s} for k, v, s in cfg.items()]
        explain["options"] = {d: {k: {"value": v, "source": s} for k, (v, s) in o.items()} for d, o in options.items()}
        name, why = Device.default_with_reason()
        dev = Device[name]
        explain["default_device"] = {"device": name, "reason": why}
        explain["renderer"] = {"renderer": dev.renderer.name if dev.renderer is not None else None,
                               "reason": dev.renderer_reason}
    if args.json:
        print(json.dumps({"config": merged, **({"explain": explain} if explain else {})}, indent=2, default=str))
        return 0
    import yaml
    print(yaml.safe_dump(merged, sort_keys=False).rstrip())
    if explain:
        print("\n# layers, later wins: " + " < ".join(explain["layers"]))
        for v in explain["values"]:
            print(f"# {v['key']} = {v['value']!r}: {v['source']}")
        for d, o in explain["options"].items():
            for k, vs in o.items():
                print(f"# devices.{d}.{k} = {vs['value']!r}: {vs['source']}")
        print(f"# default device {explain['default_device']['device']}: {explain['default_device']['reason']}")
        print(f"# renderer {explain['renderer']['renderer']}: {explain['renderer']['reason']}")
    return 0


# ---- tg doctor ----

@command("doctor", "check the installation, the config and every plugin; say how to fix what is wrong")
def cmd_doctor(args: argparse.Namespace) -> int:
    import pluggy

    from tg_core import __version__
    from tg_core.device import Device
    from tg_core.plugins.manager import KNOWN_DEVICES
    from tg_core.plugins.version import API_VERSION_STR
    results: list[tuple[str, str]] = []

    def say(level: str, text: str) -> None:
        results.append((level, text))
        print(f"[{level:4}] {text}")

    say("OK", f"Python {platform.python_version()}, tg-core {__version__} (plugin API {API_VERSION_STR}), "
              f"pluggy {pluggy.__version__}")
    say("OK" if shutil.which("tg") else "INFO",
        "the `tg` command is on PATH" if shutil.which("tg") else "`tg` is not on PATH; `python -m tg_core` works too")
    try:
        reg = _registry(args)
    except (ConfigError, PluginError) as e:
        say("FAIL", f"config: {e}")
        return 1
    say("OK", "config: " + " < ".join(layer.source for layer in reg.config.layers))
    reg.load_all()
    for rec in reg.records:
        status = rec.status.value
        if status == "loaded":
            say("OK", f"{rec.label}: loaded, devices {', '.join(rec.devices) or '-'}")
        elif status == "broken":
            say("FAIL", f"{rec.label}: broken: {rec.reason}; {reg.disable_hint(rec)}")
        elif status == "refused":
            say("WARN", f"{rec.label}: refused: {rec.reason}")
        else:
            say("INFO", f"{rec.label}: {status}: {rec.reason}")
    for dev, recs in reg.clashes().items():
        if reg.config.device_plugin(dev) is None:
            say("FAIL", f"device {dev} is provided by {' and '.join(r.dist for r in recs)}; pick one with "
                        f"`devices: {{{dev}: {{plugin: NAME}}}}` in ./tg.yaml or deny one")
    try:
        _device_options(reg)
        say("OK", "device options and renderer preferences are valid")
    except (ConfigError, PluginError) as e:
        say("FAIL", f"device config: {e}")
    for dev, dist in KNOWN_DEVICES.items():
        if dev not in reg.device_names():
            say("INFO", f"device {dev} is not installed (`python -m pip install {dist}`)")
    try:
        name, why = Device.default_with_reason()
        say("OK", f"default device {name}: {why}")
    except Exception as e:
        say("FAIL", f"default device: {type(e).__name__}: {'; '.join(str(e).splitlines())}")
    return 1 if any(level == "FAIL" for level, _ in results) else 0


def build_parser() -> argparse.ArgumentParser:
    for mod in _COMMAND_MODULES:
        importlib.import_module(mod)
    parser = argparse.ArgumentParser(prog="tg", description="tg: a small tensor compiler whose backends are plugins")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config value, the last layer (e.g. " + " ".join(f"--set {e}" for e in SET_EXAMPLES)
                             + ")")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in COMMANDS.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        if cmd.arguments is not None:
            cmd.arguments(p)
    return parser


_default_showwarning = warnings.showwarning


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """A skipped plugin is one line of the command's output ("tg: skipping plugin ..."), not a source location."""
    from tg_core.plugins.manager import PluginWarning
    if issubclass(category, PluginWarning):
        print(message, file=sys.stderr if file is None else file)
    else:
        _default_showwarning(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        with warnings.catch_warnings():  # restores showwarning: main() also runs inside other programs' processes
            warnings.showwarning = _show_warning
            code = COMMANDS[args.command].run(args)
        sys.stdout.flush()  # here, so that a reader that went away is seen below and not at interpreter exit
        return code
    except (ConfigError, PluginError, DeviceUnavailable) as e:  # the user's to fix: the message says how
        print(f"tg {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader stopped reading (`tg devices | head`): exit quietly with the status of a process killed by
        # SIGPIPE, as other command-line tools do; stdout goes to devnull so the final flush cannot raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
