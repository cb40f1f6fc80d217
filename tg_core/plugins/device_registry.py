"""The device registry: the devices opened so far (`Device["AMD:1"]`) and the choice of the default device.

Policy, not mechanism: which plugin's class opens a name, which renderer a device gets, and which device is the
default (the config's, else the highest-priority one that opens, never silently a slower one when the best fails
to open). `tg_core.device.Device` and `tg_core.Device` are this module's `Device`.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from tg_core.device import Compiled
from tg_core.plugins.config import parse_device_string
from tg_core.plugins.errors import (
    DeviceClashError,
    DeviceNotFoundError,
    DeviceUnavailable,
    PluginBlockedError,
    PluginBrokenError,
    PluginError,
    PluginRefusedError,
    suggest,
)

log = logging.getLogger("tg.device")

_canonical_names: dict[str, str] = {}
_UNUSABLE = (PluginBrokenError, PluginRefusedError, PluginBlockedError, DeviceClashError)


class _Devices:
    """The registry of opened devices: `Device["AMD:1"]`, `Device.DEFAULT`. Plugins load on first use."""

    def __init__(self) -> None:
        self._opened: dict[str, Compiled] = {}
        self._lock = threading.RLock()
        self._default: tuple[str, str] | None = None

    @property
    def registry(self) -> Any:
        from tg_core.plugins.manager import get_registry
        return get_registry()

    @staticmethod
    def canonicalize(name: str) -> str:
        """'amd' -> 'AMD', 'AMD:0' -> 'AMD', 'AMD:1' -> 'AMD:1', 'cpu:llvm' -> 'CPU:LLVM'. A named renderer is part
        of the device: CPU:LLVM is the CPU rendering with LLVM, whatever renderer plain CPU uses."""
        got = _canonical_names.get(name) if isinstance(name, str) else None
        if got is None:
            base, renderer, idx = parse_device_string(name)
            got = ":".join([base] + ([renderer] if renderer else []) + ([str(idx)] if idx else []))
            if len(_canonical_names) < 1024:  # every tensor op passes its device through here
                _canonical_names[name] = got
        return got

    def __getitem__(self, name: str) -> Compiled:
        """The device named `name`, opened on first use. Errors name what to install or how to fix the config."""
        dev = self._opened.get(name)  # a canonical name of an open device: the engine asks this per kernel
        if dev is not None:
            return dev
        with self._lock:
            return self._open(name)

    def _open(self, name: str) -> Compiled:
        base, renderer, _ = parse_device_string(name)
        canonical = self.canonicalize(name)
        if canonical in self._opened:
            return self._opened[canonical]
        reg = self.registry
        rec, spec = reg.device_spec(base)
        options = reg.config.device_options(base, spec.options)
        count = options.get("count")  # a device with several instances (CPU:0..CPU:n-1) says how many exist
        if isinstance(count, int) and (parse_device_string(canonical)[2] or 0) >= count:
            raise DeviceNotFoundError(
                f"no device {canonical}: {count} {base} device{'s exist' if count > 1 else ' exists'} "
                f"({', '.join(f'{base}:{i}' for i in range(count))}); set TG_{base}_DEVICES or devices.{base}.count "
                f"for more")
        renderers = self._renderers(canonical, renderer)  # checked before the device touches anything
        try:
            dev = spec.cls(canonical, options)
        except DeviceUnavailable:
            raise
        except Exception as e:
            raise PluginBrokenError(f"{rec.label}: opening device {canonical} failed: {type(e).__name__}: {e}\n"
                                    f"{reg.disable_hint(rec)}") from e
        if not isinstance(dev, Compiled):
            raise PluginBrokenError(f"{rec.label}: {spec.cls.__name__} is not a tg_core.device.Compiled")
        dev.renderers, why = renderers
        dev.renderer, dev.renderer_reason = (dev.renderers[0] if dev.renderers else None), why
        self._opened[canonical] = dev
        log.debug("opened %s from %s", canonical, rec.label)
        return dev

    def _renderers(self, device: str, wanted: str | None) -> tuple[list[type], str]:
        """The renderers of `device`, the one it renders with first, and why; `wanted` is the renderer named in
        the device string, which must be one of those offered."""
        ordered, why = self.registry.choose_renderer(device)
        if wanted is None:
            return ordered, why
        by_name = {c.name.upper(): c for c in ordered}
        if wanted not in by_name:
            hint = suggest(wanted, list(by_name))
            raise DeviceNotFoundError(f"no renderer {wanted!r} for {parse_device_string(device)[0]}; offered: "
                                      f"{', '.join(by_name) or 'none'}" + (f"; did you mean {hint}?" if hint else ""))
        ordered = [by_name[wanted]] + [c for c in ordered if c is not by_name[wanted]]
        return ordered, f"{wanted}: named in the device string"

    @property
    def DEFAULT(self) -> str:  # noqa: N802 -- the registry's public name
        """The default device's name: the config's `device` (or DEV), else the highest-priority working device."""
        return self.default_with_reason()[0]

    @DEFAULT.setter
    def DEFAULT(self, name: str) -> None:  # noqa: N802
        self[name]  # the device named, with its index and renderer ("AMD:1", "CPU:LLVM"), as Tensor(device=) has it
        self._default = (self.canonicalize(name), f"set by Device.DEFAULT = {name!r}")

    def default_with_reason(self) -> tuple[str, str]:
        """(default device, why it was chosen)."""
        with self._lock:
            if self._default is None:
                self._default = self._choose_default()
            return self._default

    def _choose_default(self) -> tuple[str, str]:
        reg = self.registry
        if reg.config.device is not None:
            # selected: every failure is the user's error to see. The renderer part is a config preference for
            # every instance of the device (see Config.renderer_order), so the default is the device without it.
            base, _, idx = parse_device_string(reg.config.device)
            name = self.canonicalize(f"{base}:{idx}" if idx else base)
            self[name]
            return name, f"device: {reg.config.device} from {reg.config.source('device')}"
        skipped = []
        for name, prio in reg.candidates():
            try:
                self._open(name)
            except DeviceUnavailable as e:
                log.info("default device: %s is unavailable: %s", name, e)
                skipped.append(f"{name} (unavailable: {e})")
                continue
            except _UNUSABLE as e:
                provs = reg.providers(name)
                if isinstance(e, DeviceClashError):
                    reg.warn_once(f"device:{name}", f"tg: skipping device {name} for the default device: "
                                                    f"{str(e).splitlines()[0]}")
                elif not any(r.status.value == "loaded" for r in provs):
                    for r in provs:  # its plugin could not be loaded: it provides no device to fall back from
                        reg.report(r)
                else:
                    # a loaded plugin whose device fails to open: the device exists, so using another one instead
                    # would hide the failure behind a different (often much slower) device
                    raise PluginBrokenError(
                        f"default device: {name} (priority {prio}) is the highest-priority device and fails to open, "
                        f"and tg does not fall back to another device; fix the cause below, or choose a device with "
                        f"DEV=NAME or `device:` in ./tg.yaml ({', '.join(d for d, _ in reg.candidates())})\n{e}"
                    ) from e
                skipped.append(f"{name} ({str(e).splitlines()[0]})")
                continue
            why = f"highest-priority working device (priority {prio})"
            return name, why + (f"; skipped: {'; '.join(skipped)}" if skipped else "")
        raise PluginError("no working device: " + "; ".join(skipped))

    def opened(self) -> list[str]:
        return list(self._opened)

    def reset(self, registry: Any = None) -> None:
        """Close every opened device and forget the default; use `registry` (None: rebuild from config on next use)."""
        from tg_core.plugins.manager import set_registry
        with self._lock:
            for dev in self._opened.values():
                dev.close()
            self._opened.clear()
            self._default = None
            set_registry(registry)

    def configure(self, **explicit: Any) -> None:
        """Rebuild the registry with explicit settings, the last config layer: `Device.configure(device="CPU")`."""
        from tg_core.plugins.manager import PluginRegistry
        self.reset(PluginRegistry.create(explicit))


Device = _Devices()
