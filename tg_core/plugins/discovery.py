"""Find plugins: every entry point of the group `tg.plugins`, with its manifest (phase one).

Phase one never imports a plugin's hooks module: it reads the distribution's metadata (name, version,
entry points; dist_scan.py, without `importlib.metadata` for a path of plain directories) and the plugin's tiny
manifest, and refuses a plugin whose declared core API range excludes
this core's version before importing anything of it but the manifest. A plugin the config blocks is not
even inspected.
"""
from __future__ import annotations

import enum
import traceback
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from tg_core.plugins.dist_scan import FoundEntryPoint, find_entry_points
from tg_core.plugins.manifest import Manifest, read_manifest
from tg_core.plugins.version import API_VERSION, API_VERSION_STR, in_range

GROUP = "tg.plugins"


class Status(enum.StrEnum):
    FOUND = "found"        # manifest read; hooks module not imported yet
    LOADED = "loaded"      # hooks module imported and registered
    BROKEN = "broken"      # manifest or hooks module failed; `error` holds the exception
    REFUSED = "refused"    # built for another core API version
    BLOCKED = "blocked"    # disabled by the config's allow/deny lists


@dataclass
class PluginRecord:
    """Everything known about one plugin; filled in phase one and completed by loading."""
    name: str
    dist: str
    version: str
    entry_point: str
    manifest_module: str | None
    status: Status = Status.FOUND
    reason: str = ""
    manifest: Manifest | None = None
    error: BaseException | None = None
    module: ModuleType | None = None
    specs: dict[str, Any] = field(default_factory=dict)
    hooks: list[str] = field(default_factory=list)
    traceback: str = ""
    builtin: bool = False

    @property
    def devices(self) -> dict[str, int]:
        return dict(self.manifest.devices) if self.manifest else {}

    @property
    def label(self) -> str:
        return f"plugin {self.name!r} ({self.dist} {self.version}, entry point {self.entry_point})"

    def names(self) -> set[str]:
        """The names a config may use for this plugin: its entry-point name and its distribution name."""
        return {norm(self.name), norm(self.dist)}

    def fail(self, err: BaseException, what: str) -> None:
        self.status, self.error = Status.BROKEN, err
        self.reason = f"{what}: {type(err).__name__}: {err}"
        self.traceback = "".join(traceback.format_exception(err))


def norm(name: str) -> str:
    return name.lower().replace("_", "-")


def blocked_reason(names: set[str], allow: list[str] | None, deny: list[str], source_allow: str | None,
                   source_deny: str | None) -> str | None:
    if any(norm(d) in names for d in deny):
        return f"disabled by plugins.deny (set in {source_deny})"
    if allow is not None and not any(norm(a) in names for a in allow):
        return f"not in plugins.allow (set in {source_allow})"
    return None


def entry_points(path: list[str] | None = None) -> list[FoundEntryPoint]:
    """The group's entry points, first distribution of each name in path order, sorted by entry-point name."""
    return sorted(find_entry_points(GROUP, path), key=lambda ep: (ep.name, norm(ep.dist)))


def inspect(ep: FoundEntryPoint, blocked: str | None) -> PluginRecord:
    rec = PluginRecord(ep.name, ep.dist, ep.version, f"{ep.name} = {ep.value}", ep.module)
    if blocked:
        rec.status, rec.reason = Status.BLOCKED, blocked
        return rec
    try:
        rec.manifest = read_manifest(ep.module)
    except Exception as e:
        rec.fail(e, f"its manifest {ep.module} failed")
        return rec
    if not in_range(API_VERSION, rec.manifest.api):
        rec.status = Status.REFUSED
        rec.reason = (f"built for tg core API {rec.manifest.api}, but this tg-core has API {API_VERSION_STR}; "
                      f"install a {rec.dist} release for API {API_VERSION_STR}")
    return rec


def discover(path: list[str] | None = None, allow: list[str] | None = None, deny: list[str] | None = None,
             source_allow: str | None = None, source_deny: str | None = None) -> list[PluginRecord]:
    """Phase one for every installed plugin. `path` limits the search (default: sys.path)."""
    records = []
    for ep in entry_points(path):
        names = {norm(ep.name), norm(ep.dist)}
        records.append(inspect(ep, blocked_reason(names, allow, deny or [], source_allow, source_deny)))
    return records
