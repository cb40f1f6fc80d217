"""The device registry: names, errors a user must get, the broken-plugin policy, default device, hooks."""
from __future__ import annotations

import warnings

import pytest

from tg_core.device import Compiled, Device
from tg_core.dtype import dtypes
from tg_core.plugins import (
    ConfigError,
    DeviceClashError,
    DeviceNotFoundError,
    DeviceUnavailable,
    PluginBrokenError,
    PluginWarning,
)
from tg_core.plugins.discovery import Status
from tg_core.plugins.hookspecs import hookimpl
from tg_core.uop import UOp


def test_device_names(make_registry):
    make_registry()
    dev = Device["template"]
    assert isinstance(dev, Compiled) and dev.device == "TEMPLATE"
    assert Device["TEMPLATE:0"] is dev and Device["TEMPLATE"] is dev
    other = Device["TEMPLATE:1"]
    assert other is not dev and other.device == "TEMPLATE:1"
    assert Device.canonicalize("cpu:llvm:2") == "CPU:LLVM:2" and Device.canonicalize("cpu:llvm:0") == "CPU:LLVM"
    with pytest.raises(ValueError, match="NAME:RENDERER"):
        Device["TEMPLATE:1:2"]


def test_unknown_device_suggests(make_registry):
    make_registry()
    with pytest.raises(DeviceNotFoundError) as e:
        Device["TEMPLAT"]
    assert "unknown device 'TEMPLAT'" in str(e.value) and "did you mean 'TEMPLATE'?" in str(e.value)
    assert "MULTI" in str(e.value)


@pytest.mark.parametrize("name,dist", [("AMD", "tg-amd"), ("CPU", "tg-cpu-x86")])
def test_first_party_device_names_its_distribution(make_registry, name, dist):
    make_registry()
    with pytest.raises(DeviceNotFoundError) as e:
        Device[name]
    assert f"pip install {dist}" in str(e.value)


def test_selected_broken_plugin_raises_with_traceback_and_hint(make_registry):
    make_registry()
    with pytest.raises(PluginBrokenError) as e:
        Device["BROKEN"]
    msg = str(e.value)
    assert "tg-test-broken" in msg and "RuntimeError: tg-test-broken fails on purpose" in msg
    assert "TG_PLUGINS_DENY=broken" in msg and "pip uninstall tg-test-broken" in msg
    cause = e.value.__cause__
    assert isinstance(cause, RuntimeError) and cause.__traceback__ is not None
    frames = []
    tb = cause.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "_load_native_library" in frames


def test_broken_plugin_does_not_break_others(make_registry):
    make_registry()
    with pytest.raises(PluginBrokenError):
        Device["BROKEN"]
    assert isinstance(Device["TEMPLATE"], Compiled) and isinstance(Device["MULTI"], Compiled)


def test_default_skips_broken_with_one_warning_and_unavailable_quietly(make_registry):
    make_registry()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        name, why = Device.default_with_reason()
        assert Device.DEFAULT == "TEMPLATE"
    assert name == "TEMPLATE" and "priority 10" in why
    assert "BROKEN" in why and "NOHW (unavailable" in why
    # one warning per skipped plugin, even though DEFAULT was asked twice; NOHW's absence is no warning
    msgs = sorted(str(w.message) for w in caught if issubclass(w.category, PluginWarning))
    assert len(msgs) == 2
    assert "tg-test-broken" in msgs[0] and "fails on purpose" in msgs[0]
    assert "tg-test-incompatible" in msgs[1] and "refused" in msgs[1] and ">=99.0,<100" in msgs[1]


def test_default_never_falls_back_from_a_device_that_fails_to_open(make_registry, monkeypatch):
    """TEMPLATE is the highest-priority device that exists (BROKEN's plugin does not load, NOHW's hardware is
    absent); when it fails to open, the default is an error naming it, not the next device (MULTI)."""
    reg = make_registry()
    template = reg.load(reg.plugin("template")).specs["TEMPLATE"].cls

    def fails(self, device, options):
        raise OSError("no queue for this device")
    monkeypatch.setattr(template, "__init__", fails)
    with pytest.raises(PluginBrokenError) as e:
        Device.DEFAULT
    msg = str(e.value)
    assert msg.startswith("default device: TEMPLATE (priority 10) is the highest-priority device and fails to open")
    assert "does not fall back" in msg and "DEV=NAME" in msg and "OSError: no queue for this device" in msg
    assert "MULTI" not in Device.opened()


@pytest.mark.parametrize("value,problem", [("99999999999999999999", "too large"), ("0", "too small")])
def test_default_with_a_bad_option_value_is_a_config_error(make_registry, tmp_path, value, problem):
    (tmp_path / "tg.yaml").write_text(f"devices:\n  TEMPLATE: {{max_bytes: {value}}}\n")
    make_registry()
    with pytest.raises(ConfigError, match=f"{problem} for devices.TEMPLATE.max_bytes: {value}"):
        Device.DEFAULT


def test_selected_default_never_falls_back(make_registry):
    make_registry(env={"DEV": "BROKEN"})
    with pytest.raises(PluginBrokenError):
        Device.DEFAULT
    make_registry(env={"DEV": "NOHW"})
    with pytest.raises(DeviceUnavailable):
        Device.DEFAULT
    make_registry(env={"DEV": "AMD"})
    with pytest.raises(DeviceNotFoundError, match="tg-amd"):
        Device.DEFAULT


def test_default_from_env_and_explicit(make_registry):
    make_registry(env={"DEV": "multi"})
    assert Device.default_with_reason() == ("MULTI", "device: multi from environment variable DEV")
    make_registry(env={"DEV": "multi:exact:1"})  # the index names the device; the renderer is a preference
    assert Device.default_with_reason() == ("MULTI:1", "device: multi:exact:1 from environment variable DEV")
    assert Device["MULTI:1"].renderer.name == "EXACT"
    make_registry(env={"DEV": "multi"}, explicit={"device": "PYTHON"})
    assert Device.default_with_reason() == ("PYTHON", "device: PYTHON from explicit argument")
    Device.DEFAULT = "TEMPLATE"
    assert Device.DEFAULT == "TEMPLATE"
    Device.DEFAULT = "multi:fast:1"
    assert Device.DEFAULT == "MULTI:FAST:1" and Device[Device.DEFAULT].renderer.name == "FAST"


def test_clash_names_both_distributions(make_registry):
    make_registry()
    with pytest.raises(DeviceClashError) as e:
        Device["CLASH"]
    assert "tg-test-clash-a" in str(e.value) and "tg-test-clash-b" in str(e.value)
    assert "devices: {CLASH: {plugin: clash_a}}" in str(e.value)


@pytest.mark.parametrize("pick,provider", [("clash_b", "b"), ("tg-test-clash-a", "a")])
def test_config_picks_a_clashing_provider(make_registry, tmp_path, pick, provider):
    (tmp_path / "tg.yaml").write_text(f"devices:\n  CLASH:\n    plugin: {pick}\n")
    make_registry()
    assert type(Device["CLASH"]).provider == provider


def test_config_pick_must_provide_the_device(make_registry, tmp_path):
    (tmp_path / "tg.yaml").write_text("devices:\n  CLASH:\n    plugin: template\n")
    with pytest.raises(ConfigError, match="plugin does not provide it.*clash_a, clash_b"):
        make_registry()


def test_renderers_combine_in_plugin_order(make_registry):
    make_registry()
    dev = Device["MULTI"]
    assert [r.name for r in dev.renderers] == ["FAST", "EXACT", "EXTRA"]
    assert dev.renderer.name == "FAST" and "first renderer offered" in dev.renderer_reason


def test_renderer_from_device_string(make_registry):
    make_registry(env={"DEV": "MULTI:EXACT"})
    assert Device.DEFAULT == "MULTI"
    dev = Device["MULTI"]
    assert dev.renderer.name == "EXACT" and "DEV" in dev.renderer_reason
    assert [r.name for r in dev.renderers] == ["EXACT", "FAST", "EXTRA"]
    # a renderer in the device string names a device of its own, whatever renderer plain MULTI uses
    fast = Device["multi:fast"]
    assert fast is not dev and fast.device == "MULTI:FAST" and fast.renderer.name == "FAST"
    assert "named in the device string" in fast.renderer_reason and Device["MULTI:FAST:0"] is fast
    assert Device["MULTI:EXTRA:1"].renderer.name == "EXTRA" and Device["MULTI:EXTRA:1"].device == "MULTI:EXTRA:1"


def test_renderer_order_from_config(make_registry, tmp_path):
    (tmp_path / "tg.yaml").write_text("devices:\n  MULTI:\n    renderers: [extra, exact]\n")
    make_registry()
    assert [r.name for r in Device["MULTI"].renderers] == ["EXTRA", "EXACT", "FAST"]


def test_unknown_renderer(make_registry):
    make_registry(env={"DEV": "MULTI:EXACTT"})
    with pytest.raises(ConfigError) as e:
        Device.DEFAULT
    assert "environment variable DEV" in str(e.value) and "renderer not offered" in str(e.value)
    assert "FAST, EXACT, EXTRA" in str(e.value) and "did you mean 'EXACT'?" in str(e.value)
    make_registry()
    with pytest.raises(DeviceNotFoundError, match="no renderer 'FASTER'.*did you mean 'FAST'"):
        Device["MULTI:FASTER"]


def _encode(reg, value):
    from tg_core.uop import graph_rewrite
    pm = reg.matcher("tg_pm_encode", "MULTI")
    return graph_rewrite(UOp.const(dtypes.int32, value), pm).arg


def test_matchers_sum_in_plugin_order(make_registry):
    reg = make_registry()
    with pytest.warns(PluginWarning, match="brokenext"):  # the broken extending plugin is skipped, not fatal
        reg.matcher("tg_pm_encode", "MULTI")
    assert len(reg.matcher("tg_pm_encode", "MULTI")) == 3
    assert _encode(reg, 1) == 10   # the device's own plugin comes first: its rule wins
    assert _encode(reg, 2) == 30   # the extending plugin's rule still applies
    assert reg.matcher("tg_pm_lower", "MULTI") is None and reg.matcher("tg_pm_batch", "MULTI") is None
    with pytest.raises(ValueError, match="not a matcher hook"):
        reg.matcher("tg_renderers", "MULTI")


@pytest.mark.filterwarnings("ignore::tg_core.plugins.PluginWarning")
def test_plugin_order_is_configurable(make_registry):
    reg = make_registry(env={"TG_PLUGINS_ORDER": "extra"})
    assert _encode(reg, 1) == 20
    assert reg.profilers("MULTI") == ["extra-profiler", "multi-profiler"]
    reg = make_registry()
    assert reg.profilers("MULTI") == ["multi-profiler", "extra-profiler"]


def test_options_reach_the_device(make_registry, tmp_path):
    (tmp_path / "tg.yaml").write_text("devices:\n  MULTI:\n    count: 9\n    mode: slow\n")
    make_registry(env={"TG_MULTI_FLAG": "1", "TG_MULTI_SCALE": "2"})
    assert Device["MULTI"].options == {"flag": True, "count": 9, "scale": 2.0, "mode": "slow"}


def test_tg_core_imports_no_backend(run_tg):
    code = ("import sys, tg_core; from tg_core.device import Device; "
            "print(sorted(m for m in sys.modules if m.startswith(('tg_t', 'yaml', 'pluggy', 'tg_core.plugins.m'))))")
    res = run_tg(code=code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_broken_plugins_do_not_break_import_or_use(run_tg):
    code = ("import warnings, tg_core; from tg_core.device import Device, Buffer; import numpy as np\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    print(Device.DEFAULT, Buffer.from_numpy(np.arange(3), 'TEMPLATE').numpy().tolist())\n"
            "    Device.DEFAULT\n"
            "print(len(w))")
    res = run_tg(code=code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:2] == ["TEMPLATE [0, 1, 2]", "2"]  # broken and refused, each once


def test_status_of_records_after_use(make_registry):
    reg = make_registry()
    with pytest.raises(PluginBrokenError):
        Device["BROKEN"]
    rec = reg.plugin("broken")
    assert rec.status is Status.BROKEN and "importing its hooks module tg_test_broken.plugin failed" in rec.reason
    with pytest.raises(KeyError, match="did you mean 'template'"):
        reg.plugin("templat")


def test_failing_hook_of_an_extending_plugin_is_skipped(make_registry, monkeypatch):
    reg = make_registry()
    Device["MULTI"]
    extra = reg.plugin("extra")

    @hookimpl
    def boom(device):
        raise ValueError("encode failed")
    monkeypatch.setattr(extra.module, "tg_pm_encode", boom)
    reg.pm.unregister(extra.module)
    reg.pm.register(extra.module, name="extra")
    with pytest.warns(PluginWarning, match="extra.*tg_pm_encode.*encode failed"):
        assert len(reg.matcher("tg_pm_encode", "MULTI")) == 1
    assert extra.status is Status.BROKEN


def test_failing_hook_of_the_provider_is_an_error(make_registry, monkeypatch):
    reg = make_registry()
    multi = reg.load(reg.plugin("multi"))
    monkeypatch.setattr(multi.module, "tg_profilers", hookimpl(lambda device: 1 / 0))
    reg.pm.unregister(multi.module)
    reg.pm.register(multi.module, name="multi")
    with pytest.raises(PluginBrokenError, match="tg_profilers.*ZeroDivisionError") as e:
        reg.profilers("MULTI")
    assert isinstance(e.value.__cause__, ZeroDivisionError)


def test_configure_is_the_explicit_layer(site, monkeypatch):
    monkeypatch.setenv("DEV", "TEMPLATE")
    Device.configure(device="MULTI", devices={"MULTI": {"count": 11}})
    assert Device.default_with_reason() == ("MULTI", "device: MULTI from explicit argument")
    assert Device["MULTI"].options["count"] == 11


def test_hookspecs_are_documented():
    from tg_core.plugins import hookspecs
    names = [n for n in dir(hookspecs) if n.startswith("tg_")]
    assert names == ["tg_addhooks", "tg_data_parallel", "tg_devices", "tg_kernels", "tg_pm_batch", "tg_pm_bufferize", "tg_pm_encode", "tg_pm_lower",
                     "tg_profilers", "tg_renderers"]
    assert all(len(getattr(hookspecs, n).__doc__) > 80 for n in names)
