"""The errors the plugin system raises. Each message says what went wrong and what the user can do."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


class PluginError(RuntimeError):
    """Base of every plugin-system error."""


class ConfigError(PluginError, ValueError):
    """A config file, environment variable or argument holds an unknown key or a bad value.

    The message names where the value came from, the key, the bad value, what is allowed and, when a
    close match exists, a suggestion."""
    key: str | None  # None for a file that could not be read (`unreadable`): there is no key to name

    def __init__(self, source: str, key: str, value: object, allowed: str, suggestion: str | None = None,
                 problem: str = "bad value"):
        self.source, self.key, self.value, self.allowed, self.suggestion = source, key, value, allowed, suggestion
        msg = f"{source}: {problem} for {key}: {value!r}; allowed: {allowed}"
        if suggestion:
            msg += f"; did you mean {suggestion}?"
        super().__init__(msg)

    @classmethod
    def unreadable(cls, source: str, detail: str) -> ConfigError:
        """A file that is missing or not valid YAML: there is no key to name, only the file and the reason."""
        err = cls.__new__(cls)
        err.source, err.key, err.value, err.allowed, err.suggestion = source, None, None, "a YAML mapping", None
        PluginError.__init__(err, f"{source}: {detail}")
        return err


class DeviceStringError(PluginError, ValueError):
    """A device string that is not NAME[:RENDERER][:INDEX] (`AMD:-1`, `CPU:LLVM:1:2`); the message shows the form."""


class PluginBrokenError(PluginError):
    """A selected plugin failed to import or to initialize. The original exception is the `__cause__`."""


class PluginRefusedError(PluginError):
    """A selected plugin declares a core API range that excludes this core's API version."""


class PluginBlockedError(PluginError):
    """A selected plugin is disabled by the allow/deny lists of the config."""


class DeviceNotFoundError(PluginError, KeyError):
    """No installed plugin provides the device; the message names the distribution to install when known."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


class DeviceClashError(PluginError):
    """Two plugins provide the same device name and the config does not say which one to use."""


class DeviceUnavailable(RuntimeError):
    """Raised by a device class when the hardware it drives is not on this machine.

    Choosing the default device skips such a device quietly (logging only), since a missing GPU is not a
    broken plugin; asking for the device by name still raises."""


def suggest(word: str, candidates: Iterable[str]) -> str | None:
    """The closest candidates to `word`, quoted and joined, or None."""
    candidates = [str(c) for c in candidates]
    close = difflib.get_close_matches(str(word), candidates, n=2, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in candidates}
        close = [lowered[m] for m in difflib.get_close_matches(str(word).lower(), list(lowered), n=2, cutoff=0.6)]
    return " or ".join(repr(c) for c in close) if close else None
