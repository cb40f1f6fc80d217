"""Phase one (metadata and manifests only), refusal before import, lazy loading, allow/deny lists."""
from __future__ import annotations

import sys

import pytest

from tg_core.device import Device
from tg_core.plugins import PluginWarning
from tg_core.plugins.discovery import Status
from tg_core.plugins.version import API_VERSION_STR, in_range, parse_range

from .conftest import loaded_test_modules


def _by_name(reg):
    return {r.name: r for r in reg.records}


def test_phase_one_finds_every_entry_point(make_registry):
    recs = _by_name(make_registry())
    assert set(recs) == {"core", "template", "broken", "badmanifest", "brokenext", "incompatible", "clash_a", "clash_b",
                         "multi", "extra", "nohw"}
    t = recs["template"]
    assert (t.dist, t.version, t.entry_point) == ("tg-template", "0.1.0", "template = tg_template.manifest")
    assert t.status is Status.FOUND and t.devices == {"TEMPLATE": 10} and t.manifest.hooks == "tg_template.plugin"
    assert recs["extra"].manifest.extends == ("MULTI",)
    assert recs["core"].builtin and recs["core"].devices == {"PYTHON": 0}


def test_phase_one_imports_no_hooks_module(make_registry):
    make_registry()
    # only manifests (and their packages) were imported: no plugin's hooks module, so no backend
    assert [m for m in loaded_test_modules() if "manifest" not in m and "." in m] == []
    assert "tg_test_broken.plugin" not in sys.modules


def test_incompatible_plugin_is_refused_before_import(make_registry):
    rec = _by_name(make_registry())["incompatible"]
    assert rec.status is Status.REFUSED
    assert ">=99.0,<100" in rec.reason and f"API {API_VERSION_STR}" in rec.reason
    assert "tg_test_incompatible.plugin" not in sys.modules
    with pytest.raises(Exception) as e:
        Device["OLDDEV"]
    assert type(e.value).__name__ == "PluginRefusedError"
    assert ">=99.0,<100" in str(e.value) and API_VERSION_STR in str(e.value) and "tg-test-incompatible" in str(e.value)
    assert "tg_test_incompatible.plugin" not in sys.modules


def test_broken_manifest_is_reported_with_a_suggestion(make_registry):
    rec = _by_name(make_registry())["badmanifest"]
    assert rec.status is Status.BROKEN
    assert "unknown constant DEVICE" in rec.reason and "'DEVICES'" in rec.reason
    assert "ManifestError" in rec.traceback


def test_loading_is_lazy(make_registry):
    reg = make_registry()
    Device["TEMPLATE"]
    recs = _by_name(reg)
    assert recs["template"].status is Status.LOADED and recs["template"].hooks == ["tg_devices"]
    assert "tg_template.plugin" in sys.modules
    # nothing else was imported for it
    assert all(r.status is not Status.LOADED for n, r in recs.items() if n not in ("template", "core"))
    assert not [m for m in loaded_test_modules() if m.startswith("tg_test_") and "." in m and "manifest" not in m]


def test_extending_plugin_loads_with_its_device(make_registry):
    reg = make_registry()
    with pytest.warns(PluginWarning, match="brokenext.*fails on purpose.*it extends MULTI"):
        Device["MULTI"]
    recs = _by_name(reg)
    assert recs["multi"].status is Status.LOADED and recs["extra"].status is Status.LOADED
    assert recs["brokenext"].status is Status.BROKEN
    assert recs["nohw"].status is Status.FOUND and recs["template"].status is Status.FOUND


def test_deny_blocks_without_reading_the_manifest(make_registry):
    reg = make_registry(env={"TG_PLUGINS_DENY": "broken,tg-test-clash-b"})
    recs = _by_name(reg)
    assert recs["broken"].status is Status.BLOCKED and "plugins.deny" in recs["broken"].reason
    assert "environment variable TG_PLUGINS_DENY" in recs["broken"].reason
    assert recs["clash_b"].status is Status.BLOCKED
    assert "tg_test_clash_b.manifest" not in sys.modules
    # with one provider left, CLASH is no longer a clash
    assert type(Device["CLASH"]).provider == "a"


def test_allow_list(make_registry, tmp_path):
    (tmp_path / "tg.yaml").write_text("plugins:\n  allow: [template]\n")
    recs = _by_name(make_registry())
    assert recs["template"].status is Status.FOUND and recs["core"].status is Status.FOUND
    assert recs["multi"].status is Status.BLOCKED and "not in plugins.allow" in recs["multi"].reason
    assert str(tmp_path / "tg.yaml") in recs["multi"].reason


@pytest.mark.parametrize("spec,ok", [(">=1.0,<2", True), (">=1", True), ("==1.0", True), ("==1", True),
                                     (">1.0", False), ("<1.0", False), ("!=1.0", False), (">=0.9, <1.1", True)])
def test_api_ranges(spec, ok):
    assert in_range((1, 0), spec) is ok


@pytest.mark.parametrize("bad", ["", "1.0", "=>1.0", ">=1.x", None])
def test_bad_api_ranges(bad):
    with pytest.raises(ValueError):
        parse_range(bad)
