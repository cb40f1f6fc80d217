"""The entry-point scan of plain directories finds what importlib.metadata finds, and hands anything else to it."""
from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from tg_core.plugins import dist_scan


def _dist(site: Path, dirname: str, name: str | None, version: str, entry_points: str) -> None:
    info = site / dirname
    info.mkdir(parents=True)
    headers = f"Metadata-Version: 2.1\nName: {name}\n" if name else "Metadata-Version: 2.1\n"
    (info / "METADATA").write_text(f"{headers}Version: {version}\nSummary: x\n\nName: not-a-header\n")
    (info / "entry_points.txt").write_text(entry_points)


def test_scan_matches_importlib_on_the_test_plugins_and_sys_path(plugin_site: Path) -> None:
    for path in ([str(plugin_site)], [str(plugin_site), *sys.path], sys.path):
        assert dist_scan.scannable(path)
        found = dist_scan.scan(path, "tg.plugins")
        assert found == dist_scan.scan_with_importlib(path, "tg.plugins")
    assert {ep.dist for ep in dist_scan.scan([str(plugin_site)], "tg.plugins")} >= {"tg-test-multi", "tg-test-broken"}
    assert dist_scan.scan(sys.path, "console_scripts") == dist_scan.scan_with_importlib(sys.path, "console_scripts")


def test_first_distribution_of_a_name_wins_and_sections_are_kept_apart(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    eps = "# comment\n[console_scripts]\nx = other:main\n\n[tg.plugins]\n# note\nfoo = foo_pkg.manifest:M [extra]\n"
    _dist(first, "Foo_Bar-1.0.dist-info", "Foo.Bar", "1.0", eps)
    _dist(second, "foo_bar-2.0.dist-info", "foo-bar", "2.0", "[tg.plugins]\nfoo = old.manifest\n")
    _dist(second, "nameless-1.0.dist-info", None, "1.0", "[tg.plugins]\nghost = ghost.manifest\n")
    _dist(second, "other-3.0.egg-info", "other", "3.0", "[tg.plugins]\nother = other_pkg.manifest\n")
    path = [str(tmp_path / "missing"), str(first), str(second)]
    found = dist_scan.scan(path, "tg.plugins")
    assert found == [dist_scan.FoundEntryPoint("Foo.Bar", "1.0", "foo", "foo_pkg.manifest:M [extra]", "foo_pkg.manifest"),
                     dist_scan.FoundEntryPoint("other", "3.0", "other", "other_pkg.manifest", "other_pkg.manifest")]
    assert sorted(found, key=lambda e: e.name) == sorted(dist_scan.scan_with_importlib(path, "tg.plugins"),
                                                         key=lambda e: e.name)


def test_a_zip_on_the_path_is_searched_by_importlib(tmp_path: Path) -> None:
    archive = tmp_path / "site.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: zipped\nVersion: 1.0\n")
        z.writestr("zipped-1.0.dist-info/entry_points.txt", "[tg.plugins]\nzipped = zipped_pkg.manifest\n")
    path = [str(archive)]
    assert not dist_scan.scannable(path)
    assert dist_scan.scan(path, "tg.plugins") == []  # the directory scan cannot see into it ...
    assert dist_scan.find_entry_points("tg.plugins", path) == [  # ... so importlib.metadata searches it
        dist_scan.FoundEntryPoint("zipped", "1.0", "zipped", "zipped_pkg.manifest", "zipped_pkg.manifest")]
