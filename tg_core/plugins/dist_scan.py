"""The entry points of one group in the installed distributions, read from their metadata directories.

`importlib.metadata` finds the same, but importing it imports `email`, `csv`, `zipfile`, `socket`, `calendar`
and more (its metadata is a parsed e-mail message), ~1.6 MB resident in every process that makes a device, and
each distribution's metadata is parsed whole to learn its name. For a path of plain directories the search is
simple: each `*.dist-info` / `*.egg-info` directory of a path entry, in listing order, names a distribution; its
`entry_points.txt` is a small ini file and its METADATA (PKG-INFO) starts with the `Name:` and `Version:`
headers. A path with anything else on it (a zip archive, an `.egg`) or a finder of distributions other than the
path finder on `sys.meta_path` is searched by `importlib.metadata` itself, so no installed plugin is missed.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

INFO_SUFFIXES = (".dist-info", ".egg-info")
MODULE = re.compile(r"[\w.]+")  # an entry point value's module part (importlib.metadata's pattern)


@dataclass(frozen=True)
class FoundEntryPoint:
    """One entry point of the group and the distribution declaring it."""
    dist: str      # the distribution's name as its metadata spells it
    version: str
    name: str      # the entry point's name
    value: str     # `module` or `module:attr`
    module: str


def project_key(name: str) -> str:
    """A distribution name compared as installers spell it in directory names (PEP 503: -, _ and . alike)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def scannable(path: list[str]) -> bool:
    """Whether every entry of `path` is a directory or absent and only the path finder finds distributions."""
    from importlib.machinery import PathFinder
    for finder in sys.meta_path:
        if finder is not PathFinder and getattr(finder, "find_distributions", None) is not None:
            return False
    return all(os.path.isdir(p or ".") or not os.path.exists(p or ".") for p in path)


def _headers(text: str) -> dict[str, str]:
    """The first value of each header of a METADATA / PKG-INFO text (the headers end at the first blank line)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and not line[0].isspace():
            out.setdefault(key.strip().lower(), value.strip())
    return out


def _group_entries(text: str, group: str) -> list[tuple[str, str]]:
    """(name, value) of each entry of section `group` in an entry_points.txt."""
    out, section = [], None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):  # importlib.metadata's comments
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif section == group:
            name, _, value = line.partition("=")
            out.append((name.strip(), value.strip()))
    return out


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def scan(path: list[str], group: str) -> list[FoundEntryPoint]:
    """The group's entry points of the first distribution of each name in `path` order (a `scannable` path)."""
    seen: set[str] = set()
    out = []
    for entry in path:
        root = entry or "."
        try:
            children = os.listdir(root)
        except OSError:
            continue
        for child in children:
            if not child.lower().endswith(INFO_SUFFIXES):
                continue
            info = os.path.join(root, child)
            text = _read(os.path.join(info, "METADATA")) or _read(os.path.join(info, "PKG-INFO"))
            headers = _headers(text) if text else {}
            name = headers.get("name")
            if not name or project_key(name) in seen:
                continue
            seen.add(project_key(name))
            eps = _read(os.path.join(info, "entry_points.txt"))
            for ep_name, value in _group_entries(eps, group) if eps else []:
                m = MODULE.match(value)
                out.append(FoundEntryPoint(name, headers.get("version", ""), ep_name, value, m.group() if m else value))
    return out


def scan_with_importlib(path: list[str], group: str) -> list[FoundEntryPoint]:
    """The same through `importlib.metadata` (any path and finder)."""
    import importlib.metadata as md
    seen: set[str] = set()
    out = []
    for dist in md.distributions(path=path):
        name = dist.metadata["Name"]
        if name is None or project_key(name) in seen:
            continue
        seen.add(project_key(name))
        out += [FoundEntryPoint(name, dist.version, ep.name, ep.value, ep.module)
                for ep in dist.entry_points.select(group=group)]
    return out


def find_entry_points(group: str, path: list[str] | None = None) -> list[FoundEntryPoint]:
    """The group's entry points in `path` (default: sys.path), first distribution of each name."""
    search = list(sys.path if path is None else path)
    return scan(search, group) if scannable(search) else scan_with_importlib(search, group)
