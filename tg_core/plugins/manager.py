"""The plugin registry: one pluggy PluginManager, the plugins discovery found, and loading them on demand.

Phase one (discovery.py) runs when the registry is created. Phase two — importing a plugin's hooks module,
registering it, asking it for its devices — happens for a plugin only when one of its devices (or a device it
extends) is first used, or when everything is listed (`tg devices`, `tg config`).

Broken plugins follow one policy:
- not selected (met while choosing the default device, or while collecting hooks from extending plugins):
  skipped, and reported once with a `PluginWarning`;
- selected (asked for by name, by `DEV`, by the config): `PluginBrokenError` chained to the original
  exception, saying how to disable the plugin.
Nothing ever falls back silently to another device.
"""
from __future__ import annotations

import importlib
import logging
import os
import threading
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from tg_core.plugins import hookspecs
from tg_core.plugins.config import Config, load_config, parse_device_string
from tg_core.plugins.discovery import PluginRecord, Status, discover, norm
from tg_core.plugins.errors import (
    ConfigError,
    DeviceClashError,
    DeviceNotFoundError,
    PluginBlockedError,
    PluginBrokenError,
    PluginRefusedError,
    suggest,
)
from tg_core.plugins.manifest import Manifest
from tg_core.plugins.specs import DeviceSpec
from tg_core.plugins.version import API_VERSION_STR

if TYPE_CHECKING:
    from tg_core.renderer import Renderer

log = logging.getLogger("tg.plugins")

# first-party plugins (entry-point name: distribution, devices): a config may name them and their devices where
# they are not installed (one config file may serve several machines), and errors say what to install
FIRST_PARTY: dict[str, tuple[str, tuple[str, ...]]] = {
    "amd": ("tg-amd", ("AMD",)), "cpu_x86": ("tg-cpu-x86", ("CPU",)), "mockgpu": ("tg-mockgpu", ()),
    "mpi": ("tg-mpi", ("MPI",))}
KNOWN_DEVICES: dict[str, str] = {d: dist for dist, devs in FIRST_PARTY.values() for d in devs}
BUILTIN_NAME = "core"
REFERENCE_DEVICE = "PYTHON"
PM_HOOKS = ("tg_pm_encode", "tg_pm_lower", "tg_pm_bufferize", "tg_pm_batch")


class PluginWarning(UserWarning):
    """A plugin that was not selected was skipped (broken, refused, or clashing)."""


def _builtin_record() -> PluginRecord:
    from tg_core import __version__
    manifest = Manifest(f"=={API_VERSION_STR}", {REFERENCE_DEVICE: 0}, "tg_core.plugins.builtin")
    return PluginRecord(BUILTIN_NAME, "tg-core", __version__, "(built-in) tg_core.plugins.builtin", None,
                        manifest=manifest, builtin=True)


class PluginRegistry:
    """Discovered plugins of one configuration. Thread-safe; build it with `PluginRegistry.create`."""

    def __init__(self, config: Config, records: list[PluginRecord]):
        self.config = config
        self.records = records
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.pm.hook.tg_addhooks.call_historic(kwargs={"pluginmanager": self.pm})
        self._lock = threading.RLock()
        self._reported: set[str] = set()
        self._cache: dict[tuple[str, str], Any] = {}
        config.check_names(self.device_names(), KNOWN_DEVICES, self.plugin_names(),
                           [n for r in records if r.builtin for n in (r.name, r.dist)])

    @classmethod
    def create(cls, explicit: Mapping[str, Any] | None = None, path: list[str] | None = None,
               env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
               home: Path | str | None = None, explicit_source: str = "explicit argument") -> PluginRegistry:
        """Load the config, then run phase one over the plugins on `path` (default: the directories in
        TG_PLUGINS_PATH when set, else sys.path)."""
        config = load_config(explicit, env, cwd, home, explicit_source)
        if path is None and config.env.get("TG_PLUGINS_PATH"):
            path = [p for p in config.env["TG_PLUGINS_PATH"].split(os.pathsep) if p]
        records = discover(path, config.allow, config.deny, config.source("plugins", "allow"),
                           config.source("plugins", "deny"))
        return cls(config, [_builtin_record()] + records)

    # ---- looking things up (phase one only) ----

    def plugin(self, name: str) -> PluginRecord:
        for r in self.records:
            if norm(name) in r.names():
                return r
        allowed = [r.name for r in self.records]
        hint = suggest(name, allowed)
        raise KeyError(f"no plugin {name!r}; plugins: {', '.join(allowed)}"
                       + (f"; did you mean {hint}?" if hint else ""))

    def plugin_names(self) -> dict[str, frozenset[str] | None]:
        """Every name a config may call a plugin by, with the devices it provides (None: its manifest was not
        read): installed plugins by entry-point and distribution name, then first-party ones not installed."""
        out: dict[str, frozenset[str] | None] = {}
        for r in self.records:
            devs = frozenset(r.devices) if r.manifest is not None else None
            out.setdefault(r.name, devs)
            # a distribution with several entry points provides what any of them does
            known = out.get(r.dist)
            out[r.dist] = devs if known is None else known | (devs or frozenset())
        installed = {norm(n) for n in out}
        for name, (dist, first_party_devs) in FIRST_PARTY.items():
            if norm(name) not in installed and norm(dist) not in installed:
                out[name] = out[dist] = frozenset(first_party_devs)
        return out

    def data_parallel(self) -> Any:
        """This process's data-parallel group (`tg_data_parallel`): the first loaded plugin's that is not None, in
        plugin order; None when no installed plugin offers one (`tg demo --data-parallel` then names tg-mpi)."""
        self.load_all()
        for rec in self.ordered([r for r in self.records if r.status is Status.LOADED]):
            got = self.call(rec, "tg_data_parallel")
            if got is not None:
                return got
        return None

    def device_names(self) -> list[str]:
        return sorted({d for r in self.records for d in r.devices})

    def providers(self, device: str) -> list[PluginRecord]:
        return [r for r in self.records if device in r.devices]

    def candidates(self) -> list[tuple[str, int]]:
        """Every device with its priority, best first; the reference device always last."""
        best: dict[str, int] = {}
        for r in self.records:
            for d, prio in r.devices.items():
                best[d] = max(prio, best.get(d, prio))
        return sorted(best.items(), key=lambda dp: (dp[0] == REFERENCE_DEVICE, -dp[1], dp[0]))

    def clashes(self) -> dict[str, list[PluginRecord]]:
        out: dict[str, list[PluginRecord]] = {}
        for d in self.device_names():
            provs = [r for r in self.providers(d) if r.status is not Status.REFUSED]
            if len(provs) > 1:
                out[d] = provs
        return out

    # ---- phase two ----

    def load(self, rec: PluginRecord) -> PluginRecord:
        """Import and register the plugin if it is only found; its status says how that went."""
        with self._lock:
            if rec.status is not Status.FOUND:
                return rec
            assert rec.manifest is not None  # found means discovery read the manifest
            try:
                mod = importlib.import_module(rec.manifest.hooks)
            except Exception as e:
                rec.fail(e, f"importing its hooks module {rec.manifest.hooks} failed")
                return rec
            try:
                self.pm.register(mod, name=rec.name)
            except Exception as e:
                rec.fail(e, f"registering {rec.manifest.hooks} failed")
                return rec
            rec.module = mod
            try:
                self._check_hooks(rec)
                rec.specs = self._device_specs(rec)
            except Exception as e:
                self.pm.unregister(mod)
                rec.module = None
                rec.fail(e, "initializing it failed")
                return rec
            rec.status = Status.LOADED
            log.debug("loaded %s", rec.label)
            return rec

    def load_all(self) -> None:
        for r in self.records:
            self.load(r)

    def _check_hooks(self, rec: PluginRecord) -> None:
        callers = self.pm.get_hookcallers(rec.module) or []
        core = [n for n in dir(hookspecs) if n.startswith("tg_")]
        assert rec.manifest is not None  # only loaded plugins have hooks to check
        for caller in callers:
            if caller.name.startswith("tg_") and not caller.has_spec():
                hint = suggest(caller.name, core)
                raise TypeError(f"{rec.manifest.hooks} implements {caller.name}, which is not a tg hook"
                                + (f"; did you mean {hint}?" if hint else f"; hooks: {', '.join(core)}"))
            for impl in caller.get_hookimpls():
                if impl.plugin is rec.module and (impl.wrapper or impl.hookwrapper):
                    raise TypeError(f"{caller.name} in {rec.manifest.hooks} is a wrapper; tg hooks take plain "
                                    "implementations, combined in plugin order")
        rec.hooks = sorted(c.name for c in callers)

    def _device_specs(self, rec: PluginRecord) -> dict[str, DeviceSpec]:
        specs = self.call(rec, "tg_devices") or []
        if not all(isinstance(s, DeviceSpec) for s in specs):
            raise TypeError(f"tg_devices() must return a list of DeviceSpec, got {specs!r}")
        got, declared = sorted(s.name for s in specs), sorted(rec.devices)
        if got != declared:
            raise ValueError(f"tg_devices() returned devices {got}, but the manifest declares {declared}")
        return {s.name: s for s in specs}

    def call(self, rec: PluginRecord, hook: str, **kwargs: Any) -> Any:
        """Call one plugin's implementation of `hook` (None if it has none)."""
        for impl in getattr(self.pm.hook, hook).get_hookimpls():
            if impl.plugin is rec.module:
                return impl.function(*(kwargs[a] for a in impl.argnames))
        return None

    # ---- the policy for broken plugins ----

    def report(self, rec: PluginRecord, why: str = "") -> None:
        """Say once that a plugin that was not selected is skipped."""
        self.warn_once(rec.name, f"tg: skipping {rec.label}: {rec.status.value}: {rec.reason}{why} "
                                 "(`tg devices` shows details)")

    def warn_once(self, key: str, msg: str) -> None:
        if key in self._reported:
            return
        self._reported.add(key)
        log.info(msg)
        warnings.warn(msg, PluginWarning, stacklevel=4)

    def disable_hint(self, rec: PluginRecord) -> str:
        return (f"to disable it: set TG_PLUGINS_DENY={rec.name}, "
                f"or add `plugins: {{deny: [{rec.name}]}}` to ./tg.yaml, "
                f"or uninstall it with `python -m pip uninstall {rec.dist}`")

    def raise_unusable(self, rec: PluginRecord, device: str) -> None:
        """For a selected plugin that cannot be used: the error the user must get."""
        if rec.status is Status.REFUSED:
            raise PluginRefusedError(f"device {device}: {rec.label} is refused: {rec.reason}")
        if rec.status is Status.BLOCKED:
            raise PluginBlockedError(f"device {device}: {rec.label} is blocked: {rec.reason}")
        if rec.status is Status.BROKEN:
            raise PluginBrokenError(f"device {device}: {rec.label} is broken: {rec.reason}\n"
                                    f"{self.disable_hint(rec)}") from rec.error

    # ---- devices ----

    def provider(self, device: str) -> PluginRecord:
        """The loaded plugin that provides `device` (a bare name such as "AMD"), for a device the user selected.
        Raises DeviceNotFoundError, DeviceClashError, PluginRefusedError or PluginBrokenError."""
        with self._lock:
            provs = self.providers(device)
            if not provs:
                raise DeviceNotFoundError(self.not_found_message(device))
            # a refused plugin provides nothing: it only explains, when it is all there is
            provs = [r for r in provs if r.status is not Status.REFUSED] or provs
            if len(provs) > 1:
                picked = self.config.device_plugin(device)
                if picked is None:
                    dists = " and ".join(f"{r.dist} (plugin {r.name!r})" for r in provs)
                    raise DeviceClashError(
                        f"device {device} is provided by two plugins: {dists}; pick one with "
                        f"`devices: {{{device}: {{plugin: {provs[0].name}}}}}` in ./tg.yaml, or disable the other "
                        f"with TG_PLUGINS_DENY=<name>")
                chosen = [r for r in provs if norm(picked[0]) in r.names()]
                if not chosen:
                    raise ConfigError(picked[1], f"devices.{device}.plugin", picked[0],
                                      "plugins providing " + device + ": " + ", ".join(r.name for r in provs),
                                      suggest(picked[0], [r.name for r in provs]), problem="plugin does not provide it")
                provs = chosen
            rec = self.load(provs[0])
            self.raise_unusable(rec, device)
            return rec

    def not_found_message(self, device: str) -> str:
        if device in KNOWN_DEVICES:
            dist = KNOWN_DEVICES[device]
            # installed, but its manifest was not read (blocked) or failed (broken)
            unread = [r for r in self.records if norm(r.dist) == dist and r.manifest is None]
            if unread:
                return (f"device {device}: its distribution {dist} is installed but {unread[0].status.value}: "
                        f"{unread[0].reason}")
            return (f"device {device} is provided by the distribution {dist}, which is not installed; "
                    f"install it with `python -m pip install {dist}`")
        known = sorted(set(self.device_names()) | set(KNOWN_DEVICES))
        hint = suggest(device, known)
        msg = f"unknown device {device!r}" + (f"; did you mean {hint}?" if hint else "")
        msg += f"; available devices: {', '.join(self.device_names())}"
        blocked = [r.name for r in self.records if r.status is Status.BLOCKED]
        if blocked:
            msg += f" (blocked plugins, not inspected: {', '.join(blocked)})"
        return msg

    def device_spec(self, device: str) -> tuple[PluginRecord, DeviceSpec]:
        rec = self.provider(device)
        return rec, rec.specs[device]

    def device_options(self, device: str) -> dict[str, Any]:
        """The validated options of `device` (loads its plugin)."""
        _, spec = self.device_spec(device)
        return self.config.device_options(device, spec.options)

    def participants(self, device: str) -> list[PluginRecord]:
        """The loaded plugins whose hooks apply to `device` (a canonical name), in plugin order. Loads extending
        plugins on first use; a broken one is reported and skipped."""
        base = parse_device_string(device)[0]
        owner = self.provider(base)
        out = [owner]
        for r in self.records:
            if r is owner or r.status in (Status.BLOCKED,) or r.manifest is None:
                continue
            if base in r.manifest.extends or "*" in r.manifest.extends:
                if r.status is Status.FOUND:
                    self.load(r)
                if r.status is Status.LOADED:
                    out.append(r)
                else:
                    self.report(r, f" (it extends {base})")
        return self.ordered(out, owner)

    def ordered(self, recs: list[PluginRecord], owner: PluginRecord | None = None) -> list[PluginRecord]:
        """Plugin order: the config's plugins.order first, then the device's provider, then the rest by name."""
        order = [norm(n) for n in self.config.order]

        def key(r: PluginRecord) -> tuple:
            listed = [i for i, n in enumerate(order) if n in r.names()]
            return (listed[0] if listed else len(order), r is not owner, r.name)
        return sorted(recs, key=key)

    def _collect(self, hook: str, device: str) -> list[tuple[PluginRecord, Any]]:
        """Each participating plugin's result of `hook`, in plugin order. A failing provider is an error (the
        device is in use); a failing extending plugin is marked broken, reported and skipped."""
        out = []
        owner = self.provider(parse_device_string(device)[0])
        for rec in self.participants(device):
            try:
                res = self.call(rec, hook, device=device)
            except Exception as e:
                if rec is owner:
                    raise PluginBrokenError(f"{rec.label}: {hook}({device!r}) raised {type(e).__name__}: {e}\n"
                                            f"{self.disable_hint(rec)}") from e
                rec.fail(e, f"{hook}({device!r}) raised")
                self.pm.unregister(rec.module)
                self.report(rec)
                continue
            if res is not None:
                out.append((rec, res))
        return out

    def collect_named(self, hook: str, device: str, fold: Callable[[str], str] | None = None) -> dict[str, Any]:
        """The objects the plugins taking part in `device` offer through `hook` (a core hook, or one a plugin added
        with `tg_addhooks`), by name: each plugin's list of results in plugin order, the first object of each
        `name` kept (`fold` normalizes a name before comparing, e.g. `str.upper`; the key is the folded name).

        Errors name the plugin: a result that is not a list, or an object without a str attribute `name`, is a
        PluginBrokenError; a failing call follows the broken-plugin policy of `_collect`."""
        self._check_hook_name(hook)
        found: dict[str, Any] = {}
        for rec, items in self._collect(hook, device):
            if not isinstance(items, (list, tuple)):
                raise PluginBrokenError(f"{rec.label}: {hook}({device!r}) returned {type(items).__name__}, "
                                        "not a list")
            for item in items:
                name = getattr(item, "name", None)
                if not isinstance(name, str):
                    raise PluginBrokenError(f"{rec.label}: {hook}({device!r}) returned {item!r}, which has no str "
                                            "attribute `name`")
                found.setdefault(fold(name) if fold is not None else name, item)
        return found

    def _check_hook_name(self, hook: str) -> None:
        if not isinstance(hook, str) or not hasattr(self.pm.hook, hook):
            known = sorted(n for n in vars(self.pm.hook) if not n.startswith("_"))
            hint = suggest(hook, known) if isinstance(hook, str) else None
            raise ValueError(f"no hook {hook!r} has a spec; hooks: {', '.join(known)}"
                             + (f"; did you mean {hint}?" if hint else ""))

    def kernels(self, device: str) -> dict[str, Any]:
        """The named kernels (`tg_kernels`) the plugins offer for `device`, by name, first in plugin order; asked
        once per device (core's LLM code looks kernels up for every layer of every step)."""
        key = ("tg_kernels", device)
        if key not in self._cache:
            self._cache[key] = self.collect_named("tg_kernels", device)
        return dict(self._cache[key])

    def renderers(self, device: str) -> list[type[Renderer]]:
        """Renderer classes for `device` in plugin order, first of each name kept, before config preferences."""
        key = ("tg_renderers", device)
        if key not in self._cache:
            self._cache[key] = list(self.collect_named("tg_renderers", device, str.upper).values())
        return list(self._cache[key])

    def choose_renderer(self, device: str) -> tuple[list[type[Renderer]], str]:
        """The renderer classes of `device`, the one it renders with first, and why that one; errors if the config
        prefers a renderer nobody offers."""
        base = parse_device_string(device)[0]
        offered = self.renderers(device)
        by_name = {c.name.upper(): c for c in offered}
        wanted, why = self.config.renderer_order(base)
        missing = [w for w in wanted if w not in by_name]
        if missing:
            assert why is not None  # a preference always comes from somewhere
            from_dev = why.startswith("device:") and missing[0] == wanted[0]
            key = "device" if from_dev else f"devices.{base}.renderers"
            value = self.config.device if from_dev else self.config.get("devices", base, "renderers")
            raise ConfigError(self.config.source(*key.split(".")) or why, key, value,
                              f"renderers offered for {base}: {', '.join(by_name) or 'none'}",
                              suggest(missing[0], list(by_name)), problem="renderer not offered")
        ordered = [by_name[w] for w in wanted] + [c for c in offered if c.name.upper() not in wanted]
        if not ordered:
            return [], "no plugin offers a renderer for this device"
        if wanted:
            return ordered, f"{wanted[0]}: preferred by {why}"
        return ordered, f"{ordered[0].name.upper()}: first renderer offered (in plugin order: {', '.join(by_name)})"

    def matcher(self, hook: str, device: str) -> Any:
        """The sum, in plugin order, of the PatternMatchers plugins return from `hook` for `device`; None if none."""
        if hook not in PM_HOOKS:
            raise ValueError(f"{hook} is not a matcher hook; matcher hooks: {', '.join(PM_HOOKS)}")
        key = (hook, device)
        if key not in self._cache:
            from tg_core.uop import PatternMatcher
            total = None
            for rec, pm in self._collect(hook, device):
                if not isinstance(pm, PatternMatcher):
                    raise PluginBrokenError(f"{rec.label}: {hook}({device!r}) returned {type(pm).__name__}, "
                                            "not a PatternMatcher")
                total = pm if total is None else total + pm
            self._cache[key] = total
        return self._cache[key]

    def profilers(self, device: str) -> list[Any]:
        return [p for _, ps in self._collect("tg_profilers", device) for p in ps]


_registry: PluginRegistry | None = None
_registry_lock = threading.Lock()


def get_registry() -> PluginRegistry:
    """The process's registry, created on first use from the process's config and sys.path."""
    global _registry
    with _registry_lock:
        if _registry is None:
            _registry = PluginRegistry.create()
            _apply_process_config(_registry)
        return _registry


def set_registry(registry: PluginRegistry | None) -> None:
    """Replace the process's registry (None: rebuild from config on next use)."""
    global _registry
    with _registry_lock:
        _registry = registry
        if registry is not None:
            _apply_process_config(registry)


def _apply_process_config(registry: PluginRegistry) -> None:
    """Config keys that are process-wide switches rather than plugin settings: `profile` (tg_core/profile)."""
    from tg_core.profile import state
    state.configure(registry.config)
