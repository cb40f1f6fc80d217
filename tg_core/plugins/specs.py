"""What plugins hand to core: device specs and the schema of their per-device options."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# names the config's device section reserves for core; plugin options may not use them
RESERVED_DEVICE_KEYS = ("plugin", "renderers")
DEVICE_NAME = re.compile(r"[A-Z][A-Z0-9]*")
OPTION_NAME = re.compile(r"[a-z][a-z0-9_]*")
_OPTION_TYPES = (bool, int, float, str)


@dataclass(frozen=True)
class Option:
    """One per-device option: its type (bool, int, float or str), default, help, and optionally the allowed values
    or, for numbers, the smallest allowed value."""
    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None

    def __post_init__(self) -> None:
        if self.type not in _OPTION_TYPES:
            raise TypeError(f"an option's type must be one of bool, int, float, str; got {self.type!r}")
        if not accepts(self.type, self.default):
            raise TypeError(f"option default {self.default!r} is not a {self.type.__name__}")
        if self.choices is not None and self.default not in self.choices:
            raise ValueError(f"option default {self.default!r} is not one of its choices {list(self.choices)}")
        if self.minimum is not None and (self.type not in (int, float) or self.default < self.minimum):
            raise ValueError(f"option minimum {self.minimum!r} needs a number option whose default is at least it")

    def describe(self) -> str:
        name = self.type.__name__
        article = "an" if name == "int" else "a"
        allowed = " | ".join(repr(c) for c in self.choices) if self.choices else f"{article} {name}"
        if self.minimum is not None:
            allowed += f" >= {self.minimum!r}"
        return f"{allowed} (default {self.default!r}: {self.help})"


def accepts(typ: type, value: Any) -> bool:
    """Whether a YAML value has the option type. bool is not an int here, an int is a float."""
    if typ is bool:
        return isinstance(value, bool)
    if typ is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if typ is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, typ)


@dataclass(frozen=True)
class DeviceSpec:
    """A device a plugin provides, as returned by `tg_devices()`.

    `cls` is the device class (a `tg_core.device.Compiled` subclass); core constructs it as
    `cls(device, options)` with the canonical name ("TEMPLATE:0") and the validated options of that device.
    The default-device priority is declared in the plugin's manifest, not here, because the default is
    chosen before any plugin is imported."""
    name: str
    cls: type
    options: dict[str, Option] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not DEVICE_NAME.fullmatch(self.name):
            raise ValueError(f"device name {self.name!r} must be upper-case letters and digits, starting with a letter")
        for key, opt in self.options.items():
            if key in RESERVED_DEVICE_KEYS or not OPTION_NAME.fullmatch(key):
                raise ValueError(f"device {self.name}: option name {key!r} must be lower_snake_case and not one of "
                                 f"{', '.join(RESERVED_DEVICE_KEYS)}")
            if not isinstance(opt, Option):
                raise TypeError(f"device {self.name}: option {key!r} must be a tg_core.plugins.Option, got {opt!r}")
