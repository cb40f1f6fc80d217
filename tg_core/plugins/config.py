"""Layered configuration: built-in defaults, YAML files, environment variables, explicit arguments.

Layers, later wins: built-in defaults, `~/.config/tg/config.yaml`, `./tg.yaml`, the file named by
`TG_CONFIG`, environment variables, explicit arguments (`tg --set`, `Device.configure(...)`). Mappings
merge key by key; a scalar or a list replaces what a lower layer set. Every leaf value remembers the
layer that set it, for `tg config --explain` and for error messages.

Keys:

    device: CPU:LLVM            # default device, optionally with a renderer; null: the highest-priority working one
    plugins:
      allow: [template]         # null: every plugin; a list: only these (by entry-point or distribution name)
      deny: [broken]            # never load these
      order: [profiler, amd]    # plugin order for hooks; unlisted plugins follow (see hookspecs)
    profile: false              # true: record a profile (tg_core/profile; also PROFILE=1)
    devices:
      CPU:
        plugin: tg-cpu-x86      # which plugin provides CPU when several do
        renderers: [LLVM, X86]  # renderer preference
        some_option: 3          # options declared by the plugin (DeviceSpec.options)

The structure is checked when a layer is read; device names when discovery has run; a device's options
when its plugin declares their schema (on first use of the device, or by `tg config`).
YAML is imported only here, and only when a config is loaded, so `import tg_core` stays light.
"""
from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tg_core.plugins.errors import ConfigError, DeviceStringError, suggest
from tg_core.plugins.specs import DEVICE_NAME, RESERVED_DEVICE_KEYS, Option, accepts

DEFAULTS: dict[str, Any] = {"device": None, "plugins": {"allow": None, "deny": [], "order": []}, "devices": {},
                            "profile": False}
DEFAULTS_SOURCE = "built-in defaults"
_TOP_KEYS = ("device", "plugins", "devices", "profile")
_PLUGIN_KEYS = ("allow", "deny", "order")
_ENV_SOURCE = "environment"  # the source of the environment variables' layer
# environment variables read by the config, with the key each sets; TG_<DEVICE>_<OPTION> is read per device
ENV_KEYS: dict[str, tuple[str, ...]] = {
    "DEV": ("device",), "TG_PLUGINS_ALLOW": ("plugins", "allow"), "TG_PLUGINS_DENY": ("plugins", "deny"),
    "TG_PLUGINS_ORDER": ("plugins", "order"), "PROFILE": ("profile",)}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
RENDERER_NAME = re.compile(r"[A-Z][A-Z0-9_]*")

Key = tuple[str, ...]


def dotted(key: Key) -> str:
    return ".".join(key)


def parse_device_string(text: str) -> tuple[str, str | None, int | None]:
    """'CPU' -> ('CPU', None, None); 'CPU:LLVM' -> renderer LLVM; 'AMD:1' -> index 1; 'CPU:LLVM:1' -> both.
    Raises DeviceStringError (a ValueError) describing the accepted form."""
    parts = text.split(":") if isinstance(text, str) else []
    form = "NAME, NAME:INDEX, NAME:RENDERER or NAME:RENDERER:INDEX (e.g. AMD, AMD:1, CPU:LLVM)"
    if not parts or not 1 <= len(parts) <= 3 or not all(parts):
        raise DeviceStringError(f"a device is written {form}, got {text!r}")
    name, renderer, index = parts[0].upper(), None, None
    for part in parts[1:]:
        if part.lstrip("+-").isdigit() and not part.isdigit():
            raise DeviceStringError(f"a device index is a whole number >= 0 (AMD, AMD:1, ...), got {part!r} in "
                                    f"{text!r}")
        if part.isdigit() and index is None:
            index = int(part)
        elif renderer is None and index is None and not part.isdigit():
            renderer = part.upper()
        else:
            raise DeviceStringError(f"a device is written {form}, got {text!r}")
    if not DEVICE_NAME.fullmatch(name):
        raise DeviceStringError(f"device name {parts[0]!r} must be letters and digits, starting with a letter")
    if renderer is not None and not RENDERER_NAME.fullmatch(renderer):
        raise DeviceStringError(f"renderer name {renderer!r} in {text!r} must be letters, digits and _, starting "
                                "with a letter")
    return name, renderer, index


@dataclass(frozen=True)
class Layer:
    """One source of settings: its description (a path, 'environment variable DEV', ...) and its data."""
    source: str
    data: Mapping[str, Any]
    # sources of individual keys when they differ from `source` (environment variables name themselves)
    key_sources: Mapping[Key, str] | None = None

    def source_of(self, key: Key) -> str:
        return (self.key_sources or {}).get(key, self.source)


def _type_name(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _check_str_list(layer: Layer, key: Key, value: Any, nullable: bool = False) -> None:
    if value is None and nullable:
        return
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        allowed = "a list of names" + (" or null" if nullable else "")
        raise ConfigError(layer.source_of(key), dotted(key), value, allowed,
                          problem=f"wrong type ({_type_name(value)})")


def _check_mapping(layer: Layer, key: Key, value: Any, allowed: str) -> None:
    if not isinstance(value, Mapping):
        raise ConfigError(layer.source_of(key), dotted(key), value, allowed,
                          problem=f"wrong type ({_type_name(value)})")


def _unknown(layer: Layer, key: Key, value: Any, allowed: Iterable[str]) -> ConfigError:
    allowed = list(allowed)
    return ConfigError(layer.source_of(key), dotted(key), value, "keys " + ", ".join(allowed),
                       suggest(key[-1], allowed), problem="unknown key")


def check_layer(layer: Layer) -> None:
    """Check the structure and the types of the core keys of one layer."""
    _check_mapping(layer, (), layer.data, "a mapping of " + ", ".join(_TOP_KEYS))
    for k, v in layer.data.items():
        if k not in _TOP_KEYS:
            raise _unknown(layer, (str(k),), v, _TOP_KEYS)
    if "device" in layer.data and layer.data["device"] is not None:
        try:
            parse_device_string(layer.data["device"])
        except ValueError as e:
            raise ConfigError(layer.source_of(("device",)), "device", layer.data["device"],
                              "NAME, NAME:INDEX, NAME:RENDERER (e.g. AMD, AMD:1, CPU:LLVM) or null",
                              problem=f"bad device ({e})") from None
    if "profile" in layer.data and not isinstance(layer.data["profile"], bool):
        raise ConfigError(layer.source_of(("profile",)), "profile", layer.data["profile"], "true or false",
                          problem=f"wrong type ({_type_name(layer.data['profile'])})")
    plugins = layer.data.get("plugins", {})
    _check_mapping(layer, ("plugins",), plugins, "a mapping of " + ", ".join(_PLUGIN_KEYS))
    for k, v in plugins.items():
        if k not in _PLUGIN_KEYS:
            raise _unknown(layer, ("plugins", str(k)), v, _PLUGIN_KEYS)
        _check_str_list(layer, ("plugins", k), v, nullable=k == "allow")
    devices = layer.data.get("devices", {})
    _check_mapping(layer, ("devices",), devices, "a mapping of device names to their options")
    for name, section in devices.items():
        if not isinstance(name, str) or not DEVICE_NAME.fullmatch(name):
            raise ConfigError(layer.source_of(("devices",)), f"devices.{name}", section,
                              "upper-case device names such as AMD or CPU",
                              repr(name.upper()) if isinstance(name, str) and DEVICE_NAME.fullmatch(name.upper())
                              else None, problem="bad device name")
        if section is None:
            continue
        _check_mapping(layer, ("devices", name), section, "a mapping of options")
        if "plugin" in section and not isinstance(section["plugin"], str):
            raise ConfigError(layer.source_of(("devices", name, "plugin")), f"devices.{name}.plugin", section["plugin"],
                              "a plugin name (entry point or distribution)", problem="wrong type")
        if "renderers" in section:
            _check_str_list(layer, ("devices", name, "renderers"), section["renderers"])


def _flatten(layer: Layer, into: dict[Key, tuple[Any, str]], mentioned: dict[str, str]) -> None:
    for k, v in layer.data.items():
        if k == "plugins":
            for pk, pv in v.items():
                into[("plugins", pk)] = (pv, layer.source_of(("plugins", pk)))
        elif k == "devices":
            for name, section in v.items():
                mentioned.setdefault(name, layer.source_of(("devices", name)))
                for ok, ov in (section or {}).items():
                    into[("devices", name, str(ok))] = (ov, layer.source_of(("devices", name, str(ok))))
        else:
            into[(k,)] = (v, layer.source_of((k,)))


def _read_yaml(path: Path, source: str) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError.unreadable(source, f"cannot read the config file: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError.unreadable(source, f"not UTF-8 text: byte {raw[e.start]:#04x} at offset {e.start} cannot "
                                             "be decoded; a config file is YAML written in UTF-8") from None
    data = parse_yaml(text, source)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError.unreadable(source, f"the top level must be a mapping of {', '.join(_TOP_KEYS)}, "
                                             f"got a {_type_name(data)}")
    return data


@functools.cache
def _loader() -> type:
    """YAML's safe loader, except that a key given twice in one mapping is an error (YAML keeps the last one, so
    a second `devices:` section would silently drop the first)."""
    import yaml  # deferred: only a config load needs YAML

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            first: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *anchor` merges by the base loader's rules
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, (str, int, float, bool)):
                    continue  # the base loader rejects unhashable keys itself
                if key in first:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first at line {first[key] + 1})", key_node.start_mark)
                first[key] = key_node.start_mark.line
            return super().construct_mapping(node, deep)
    return UniqueKeyLoader


def parse_yaml(text: str, source: str) -> Any:
    """`text` as YAML; a syntax error is a one-line ConfigError naming `source` and the line and column."""
    import yaml  # deferred: only a config load needs YAML
    try:
        return yaml.load(text, Loader=_loader())  # noqa: S506 -- a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = " ".join(str(getattr(e, "problem", None) or e).split())
        raise ConfigError.unreadable(source, f"not valid YAML{where}: {what}") from None


# TG_PLUGINS_* is core's namespace: any other variable in it is a misspelling, not a device's option
_PLUGIN_VARS = tuple(v for v in ENV_KEYS if v.startswith("TG_PLUGINS_")) + ("TG_PLUGINS_PATH",)


def _env_layer(env: Mapping[str, str]) -> Layer:
    data: dict[str, Any] = {}
    sources: dict[Key, str] = {}
    for var in sorted(env):
        if var.startswith("TG_PLUGINS_") and var not in _PLUGIN_VARS:
            raise ConfigError(f"environment variable {var}", var, env[var], "variables " + ", ".join(_PLUGIN_VARS),
                              suggest(var, _PLUGIN_VARS), problem="unknown variable")
    for var, key in ENV_KEYS.items():
        if var not in env:
            continue
        raw = env[var]
        value: Any = raw if key == ("device",) else [p.strip() for p in raw.split(",") if p.strip()]
        if key == ("device",) and raw == "":
            continue
        if key == ("profile",):
            value = _env_bool(var, raw)
        target = data
        for part in key[:-1]:
            target = target.setdefault(part, {})
        target[key[-1]] = value
        sources[key] = f"environment variable {var}"
    return Layer(_ENV_SOURCE, data, sources)


def _env_bool(var: str, raw: str) -> bool:
    """A yes/no environment variable (PROFILE): the spellings _TRUE and _FALSE, any other is a ConfigError."""
    low = raw.strip().lower()
    if low not in _TRUE + _FALSE:
        raise ConfigError(f"environment variable {var}", var, raw, "1/true/yes/on or 0/false/no/off",
                          problem="not a yes/no value")
    return low in _TRUE


def _explicit_layer(explicit: Mapping[str, Any], source: str) -> Layer:
    return Layer(source, dict(explicit))


class Config:
    """The merged configuration. Build it with `load_config`."""

    def __init__(self, layers: list[Layer], env: Mapping[str, str]):
        self.layers = layers
        self.env = dict(env)
        self._values: dict[Key, tuple[Any, str]] = {}
        self.mentioned_devices: dict[str, str] = {}
        for layer in layers:
            check_layer(layer)
            _flatten(layer, self._values, self.mentioned_devices)
        # the sources of the layers after the environment's (explicit arguments, `tg --set`): a per-device
        # variable TG_<NAME>_<OPTION> sits between the files and these, so it does not override what they set
        env_at = next((i for i, layer in enumerate(layers) if layer.source == _ENV_SOURCE), len(layers))
        self._after_env = {layer.source for layer in layers[env_at + 1:]}

    def get(self, *key: str) -> Any:
        return self._values[key][0] if key in self._values else None

    def source(self, *key: str) -> str | None:
        return self._values[key][1] if key in self._values else None

    def _source_of_set(self, *key: str) -> str:
        # where a key that holds a value was set (the checks below only name keys they read a value from)
        return self._values[key][1]

    @property
    def device(self) -> str | None:
        return self.get("device")

    @property
    def profile(self) -> bool | None:
        """The `profile` key when a layer other than the built-in defaults set it, else None."""
        return None if self.source("profile") in (None, DEFAULTS_SOURCE) else bool(self.get("profile"))

    @property
    def allow(self) -> list[str] | None:
        return self.get("plugins", "allow")

    @property
    def deny(self) -> list[str]:
        return self.get("plugins", "deny") or []

    @property
    def order(self) -> list[str]:
        return self.get("plugins", "order") or []

    def device_plugin(self, name: str) -> tuple[str, str] | None:
        """(plugin name, source) picked by `devices.<name>.plugin`, if any."""
        key = ("devices", name, "plugin")
        return self._values[key] if key in self._values else None

    def renderer_order(self, name: str) -> tuple[list[str], str | None]:
        """The preferred renderers of device `name` and where that came from. The renderer of the default device
        string (`DEV=CPU:LLVM`) comes first, then `devices.<name>.renderers`."""
        order: list[str] = []
        sources: list[str] = []
        if self.device is not None:
            dname, renderer, _ = parse_device_string(self.device)
            if dname == name and renderer is not None:
                order.append(renderer)
                sources.append(f"device: {self.device} from {self.source('device')}")
        key = ("devices", name, "renderers")
        if key in self._values:
            order += [r.upper() for r in self._values[key][0] if r.upper() not in order]
            sources.append(f"devices.{name}.renderers from {self._values[key][1]}")
        return order, ("; ".join(sources) or None)

    def items(self) -> list[tuple[str, Any, str]]:
        """Every set leaf as (dotted key, value, source), in key order."""
        return [(dotted(k), v, s) for k, (v, s) in sorted(self._values.items())]

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"device": self.device, "plugins": {k: self.get("plugins", k) for k in _PLUGIN_KEYS},
                               "devices": {}, "profile": bool(self.get("profile"))}
        for name in self.mentioned_devices:
            out["devices"].setdefault(name, {})
        for k, (v, _) in self._values.items():
            if k[0] == "devices":
                out["devices"].setdefault(k[1], {})[k[2]] = v
        return out

    def check_names(self, devices: Iterable[str], first_party: Mapping[str, str],
                    plugins: Mapping[str, Iterable[str] | None], builtin: Iterable[str] = ()) -> None:
        """Check device and plugin names against what discovery found. A first-party device or plugin that is not
        installed may be configured (the file may be shared between machines); its options are then not checked.
        `plugins` maps every name a plugin may be called by to the devices it provides (None: not known, its
        manifest was not read); `builtin` are the names of core's own plugin, which cannot be denied."""
        known = sorted(set(devices) | set(first_party))
        allowed_devices = ", ".join(known)
        if self.device is not None:
            name = parse_device_string(self.device)[0]
            if name not in known:
                raise ConfigError(self._source_of_set("device"), "device", self.device, f"devices {allowed_devices}",
                                  suggest(name, known), problem="unknown device")
        for name, source in self.mentioned_devices.items():
            if name not in known:
                raise ConfigError(source, f"devices.{name}", self.as_dict()["devices"].get(name),
                                  f"devices {allowed_devices}", suggest(name, known), problem="unknown device")
        provides = {_norm(p): devs for p, devs in plugins.items()}
        names = sorted(plugins)
        builtin = {_norm(b) for b in builtin}
        for key in ("allow", "deny", "order"):
            for p in self.get("plugins", key) or []:
                if _norm(p) not in provides:
                    raise ConfigError(self._source_of_set("plugins", key), f"plugins.{key}", p, "plugins " + ", ".join(names),
                                      suggest(p, names), problem="unknown plugin")
                if key == "deny" and _norm(p) in builtin:
                    raise ConfigError(self._source_of_set("plugins", key), f"plugins.{key}", p,
                                      "installed plugins other than core (core is tg itself: it provides the "
                                      "reference device PYTHON, the last resort, and cannot be denied)",
                                      problem="cannot deny core")
        for name in self.mentioned_devices:
            picked = self.device_plugin(name)
            if picked is None:
                continue
            if _norm(picked[0]) not in provides:
                raise ConfigError(picked[1], f"devices.{name}.plugin", picked[0], "plugins " + ", ".join(names),
                                  suggest(picked[0], names), problem="unknown plugin")
            devs = provides[_norm(picked[0])]
            if devs is not None and name not in devs:
                providers = sorted(p for p, d in plugins.items() if d is not None and name in d)
                raise ConfigError(picked[1], f"devices.{name}.plugin", picked[0],
                                  f"plugins providing {name}: {', '.join(providers) or 'none installed'}",
                                  suggest(picked[0], providers), problem="plugin does not provide it")

    def device_options(self, name: str, schema: Mapping[str, Option]) -> dict[str, Any]:
        """The options of device `name`: the schema's defaults overridden by the config layers, then by the
        environment variables TG_<NAME>_<OPTION>. Unknown options and wrong types raise ConfigError."""
        out = {k: opt.default for k, opt in schema.items()}
        allowed = list(schema) + list(RESERVED_DEVICE_KEYS)
        for (_, dev, key), (value, source) in self._device_values(name):
            if key in RESERVED_DEVICE_KEYS:
                continue
            if key not in schema:
                raise ConfigError(source, f"devices.{dev}.{key}", value, "options " + ", ".join(allowed),
                                  suggest(key, allowed), problem="unknown option")
            out[key] = _check_option(source, f"devices.{dev}.{key}", schema[key], value)
        prefix = f"TG_{name}_"
        by_var = {f"{prefix}{k.upper()}": k for k in schema}
        env_allowed = list(by_var)
        by_var.update({f"{prefix}{ENV_ALIASES[k]}": k for k in schema if k in ENV_ALIASES})
        for var, raw in sorted(self.env.items()):
            if not var.startswith(prefix):
                continue
            key = by_var.get(var, var[len(prefix):].lower() + " (not an option's variable)")
            if key not in schema:
                raise ConfigError(f"environment variable {var}", var, raw,
                                  "variables " + (", ".join(env_allowed) or f"none (device {name} has no options)"),
                                  suggest(var, env_allowed), problem="unknown option")
            value = _check_option(f"environment variable {var}", var, schema[key], _from_env(schema[key], raw))
            if not self._set_after_env(name, key):  # checked either way: a bad variable is an error wherever it is
                out[key] = value
        return out

    def option_sources(self, name: str) -> dict[str, str]:
        """Where each set option of device `name` came from (for --explain)."""
        out = {key: source for (_, _, key), (_, source) in self._device_values(name)}
        prefix = f"TG_{name}_"
        keys = {var[len(prefix):]: var[len(prefix):].lower() for var in self.env if var.startswith(prefix)}
        keys.update({suffix: key for key, suffix in ENV_ALIASES.items() if suffix in keys})
        out.update({key: f"environment variable {prefix}{suffix}" for suffix, key in keys.items()
                    if not self._set_after_env(name, key)})
        return out

    def _set_after_env(self, name: str, key: str) -> bool:
        """Whether option `key` of device `name` was set by a layer that comes after the environment."""
        got = self._values.get(("devices", name, key))
        return got is not None and got[1] in self._after_env

    def _device_values(self, name: str) -> list[tuple[Key, tuple[Any, str]]]:
        return [(k, vs) for k, vs in self._values.items() if k[0] == "devices" and k[1] == name]


# a second environment variable for an option besides TG_<DEVICE>_<OPTION>: `count` (how many devices of the
# name exist, for multi-device tensors) is also TG_<DEVICE>_DEVICES, e.g. TG_CPU_DEVICES=4
ENV_ALIASES = {"count": "DEVICES"}


def _from_env(opt: Option, raw: str) -> Any:
    """An environment variable's text as the option's type (the unconverted text when it does not convert,
    so the type check reports it)."""
    if opt.type is bool:
        low = raw.strip().lower()
        return True if low in _TRUE else False if low in _FALSE else raw
    if opt.type in (int, float):
        try:
            return opt.type(raw)
        except ValueError:
            return raw
    return raw


def _check_option(source: str, key: str, opt: Option, value: Any) -> Any:
    if not accepts(opt.type, value):
        # a quoted number or a yes/no in YAML is the usual slip: suggest the value it was meant to be
        meant = _from_env(opt, str(value)) if isinstance(value, (str, int, float)) else None
        hint = repr(meant) if meant is not None and accepts(opt.type, meant) else None
        raise ConfigError(source, key, value, opt.describe(), hint, problem=f"wrong type ({_type_name(value)})")
    choices = opt.allowed_choices()
    if choices is not None and value not in choices:
        raise ConfigError(source, key, value, opt.describe(), suggest(str(value), [str(c) for c in choices]),
                          problem="bad value")
    if opt.type is float and not math.isfinite(_as_float(value)):
        raise ConfigError(source, key, value, opt.describe(), None, problem="not a finite number")
    lo, hi = opt.bounds()
    if lo is not None and value < lo:
        raise ConfigError(source, key, value, opt.describe(full_range=True), None, problem="too small")
    if hi is not None and value > hi:
        raise ConfigError(source, key, value, opt.describe(full_range=True), None, problem="too large")
    return float(value) if opt.type is float else value


def _as_float(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond any float
        return math.inf


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def config_paths(env: Mapping[str, str], cwd: Path, home: Path) -> list[tuple[Path, str, bool]]:
    """The config files in layer order: (path, source description, must exist)."""
    paths = [(home / ".config" / "tg" / "config.yaml", False), (cwd / "tg.yaml", False)]
    out = [(p, str(p), must) for p, must in paths]
    if env.get("TG_CONFIG"):
        p = Path(env["TG_CONFIG"]).expanduser()
        p = p if p.is_absolute() else cwd / p
        out.append((p, f"{p} (from TG_CONFIG)", True))
    return out


def load_config(explicit: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
                cwd: Path | str | None = None, home: Path | str | None = None,
                explicit_source: str = "explicit argument") -> Config:
    """Read every layer and merge them. `env`, `cwd` and `home` default to the process's own; tests pass their own."""
    env = dict(os.environ if env is None else env)
    cwd = Path.cwd() if cwd is None else Path(cwd)
    home = Path(env.get("HOME") or Path.home()) if home is None else Path(home)
    layers = [Layer(DEFAULTS_SOURCE, DEFAULTS)]
    for path, source, must in config_paths(env, cwd, home):
        if path.is_file() or must:
            layers.append(Layer(source, _read_yaml(path, source)))
    layers.append(_env_layer(env))
    if explicit:
        layers.append(_explicit_layer(explicit, explicit_source))
    return Config(layers, env)
