"""What plugins hand to core: device specs and the schema of their per-device options."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

# names the config's device section reserves for core; plugin options may not use them
RESERVED_DEVICE_KEYS = ("plugin", "renderers")
DEVICE_NAME = re.compile(r"[A-Z][A-Z0-9]*")
OPTION_NAME = re.compile(r"[a-z][a-z0-9_]*")
_OPTION_TYPES = (bool, int, float, str)
# an int option without bounds of its own still reaches native code as a signed 64-bit integer
INT_RANGE = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True)
class Option:
    """One per-device option: its type (bool, int, float or str), default, help, and optionally the allowed values
    or, for numbers, the smallest and largest allowed values. `choices` may be a function returning the allowed
    values when they are only known once plugins are loaded (the interfaces other plugins offer to a device)."""
    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] | Callable[[], Iterable[Any]] | None = None
    minimum: float | None = None
    maximum: float | None = None

    def __post_init__(self) -> None:
        if self.type not in _OPTION_TYPES:
            raise TypeError(f"an option's type must be one of bool, int, float, str; got {self.type!r}")
        if not accepts(self.type, self.default):
            raise TypeError(f"option default {self.default!r} is not a {self.type.__name__}")
        if isinstance(self.choices, tuple) and self.default not in self.choices:
            raise ValueError(f"option default {self.default!r} is not one of its choices {list(self.choices)}")
        for bound, ok in (("minimum", lambda b: self.default >= b), ("maximum", lambda b: self.default <= b)):
            value = getattr(self, bound)
            if value is not None and (self.type not in (int, float) or not ok(value)):
                raise ValueError(f"option {bound} {value!r} needs a number option whose default is within it")

    def allowed_choices(self) -> tuple[Any, ...] | None:
        """The allowed values, asked for now when `choices` is a function."""
        return tuple(self.choices()) if callable(self.choices) else self.choices

    def bounds(self) -> tuple[float | None, float | None]:
        """(smallest, largest) allowed value of a number option; an int is at most 64 bits either way."""
        lo, hi = self.minimum, self.maximum
        if self.type is int:
            lo, hi = max(INT_RANGE[0], lo) if lo is not None else INT_RANGE[0], \
                min(INT_RANGE[1], hi) if hi is not None else INT_RANGE[1]
        return lo, hi

    def describe(self, full_range: bool = False) -> str:
        """What is allowed, the default and the help, for error messages; `full_range` also spells out an int's
        implicit 64-bit range."""
        return f"{self.allowed(full_range)} (default {self.default!r}: {self.help})"

    def allowed(self, full_range: bool = False) -> str:
        """The allowed values in words: 'an int >= 0', "'auto' | 'mock'"."""
        name = self.type.__name__
        article = "an" if name == "int" else "a"
        choices = self.allowed_choices()
        allowed = " | ".join(repr(c) for c in choices) if choices else f"{article} {name}"
        lo, hi = self.bounds() if full_range else (self.minimum, self.maximum)
        if lo is not None and hi is not None:
            allowed += f" from {lo!r} to {hi!r}"
        elif lo is not None:
            allowed += f" >= {lo!r}"
        elif hi is not None:
            allowed += f" <= {hi!r}"
        return allowed


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
