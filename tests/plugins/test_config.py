"""Config layers and every config error message: file, key, bad value, what is allowed, a suggestion."""
from __future__ import annotations

import pytest

from tg_core.device import Device
from tg_core.plugins import ConfigError
from tg_core.plugins.config import load_config


@pytest.fixture
def files(tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    (home / ".config" / "tg").mkdir(parents=True)
    cwd.mkdir()
    return {"home": home, "cwd": cwd, "user": home / ".config" / "tg" / "config.yaml", "local": cwd / "tg.yaml",
            "extra": tmp_path / "extra.yaml"}


def _load(files, env=None, explicit=None):
    return load_config(explicit, env or {}, files["cwd"], files["home"])


def test_layers_merge_in_order(files):
    files["user"].write_text("device: USERDEV\nplugins: {deny: [a], order: [x]}\ndevices: {AMD: {aql: true, n: 1}}\n")
    files["local"].write_text("device: LOCALDEV\ndevices: {AMD: {n: 2}}\n")
    files["extra"].write_text("plugins: {deny: [b]}\n")
    cfg = _load(files, env={"TG_CONFIG": str(files["extra"])})
    assert cfg.device == "LOCALDEV" and cfg.source("device") == str(files["local"])
    assert cfg.deny == ["b"] and cfg.source("plugins", "deny") == f"{files['extra']} (from TG_CONFIG)"
    assert cfg.order == ["x"] and cfg.source("plugins", "order") == str(files["user"])
    assert cfg.get("devices", "AMD", "aql") is True and cfg.get("devices", "AMD", "n") == 2
    assert cfg.allow is None and cfg.source("plugins", "allow") == "built-in defaults"
    assert [layer.source for layer in cfg.layers] == [
        "built-in defaults", str(files["user"]), str(files["local"]), f"{files['extra']} (from TG_CONFIG)",
        "environment"]

    cfg = _load(files, env={"TG_CONFIG": str(files["extra"]), "DEV": "ENVDEV", "TG_PLUGINS_DENY": "c, d"})
    assert cfg.device == "ENVDEV" and cfg.source("device") == "environment variable DEV"
    assert cfg.deny == ["c", "d"] and cfg.source("plugins", "deny") == "environment variable TG_PLUGINS_DENY"

    cfg = _load(files, env={"DEV": "ENVDEV"}, explicit={"device": "ARGDEV", "plugins": {"allow": ["z"]}})
    assert cfg.device == "ARGDEV" and cfg.source("device") == "explicit argument"
    assert cfg.allow == ["z"]
    assert cfg.as_dict()["devices"] == {"AMD": {"aql": True, "n": 2}}


def test_empty_file_and_null_device_section(files):
    files["user"].write_text("")
    files["local"].write_text("devices:\n  AMD:\n")
    cfg = _load(files)
    assert cfg.device is None and cfg.mentioned_devices == {"AMD": str(files["local"])}


def _error(files, text, env=None, explicit=None) -> str:
    files["local"].write_text(text)
    with pytest.raises(ConfigError) as e:
        _load(files, env, explicit)
    return str(e.value)


def test_unknown_top_level_key(files):
    msg = _error(files, "devcie: AMD\n")
    assert msg == (f"{files['local']}: unknown key for devcie: 'AMD'; allowed: keys device, plugins, devices, profile; "
                   "did you mean 'device' or 'devices'?")


def test_unknown_plugins_key(files):
    msg = _error(files, "plugins:\n  denny: [x]\n")
    assert str(files["local"]) in msg and "plugins.denny" in msg and "['x']" in msg
    assert "allowed: keys allow, deny, order" in msg and "did you mean 'deny'?" in msg


@pytest.mark.parametrize("text,key,allowed", [
    ("plugins:\n  deny: broken\n", "plugins.deny", "a list of names"),
    ("plugins:\n  allow: 3\n", "plugins.allow", "a list of names or null"),
    ("plugins: [a]\n", "plugins", "a mapping of allow, deny, order"),
    ("devices:\n  AMD: 3\n", "devices.AMD", "a mapping of options"),
    ("devices:\n  AMD:\n    renderers: LLVM\n", "devices.AMD.renderers", "a list of names"),
    ("devices:\n  AMD:\n    plugin: [a]\n", "devices.AMD.plugin", "a plugin name"),
])
def test_wrong_types(files, text, key, allowed):
    msg = _error(files, text)
    assert msg.startswith(f"{files['local']}: ") and f" for {key}: " in msg and f"allowed: {allowed}" in msg


def test_bad_device_string(files):
    msg = _error(files, "device: 'cpu:llvm:1:2'\n")
    assert str(files["local"]) in msg and "device" in msg and "'cpu:llvm:1:2'" in msg and "CPU:LLVM" in msg


def test_lower_case_device_section(files):
    msg = _error(files, "devices:\n  amd: {aql: true}\n")
    assert "bad device name for devices.amd" in msg and "upper-case" in msg and "did you mean 'AMD'?" in msg


def test_not_a_mapping_and_bad_yaml(files):
    assert _error(files, "- a\n- b\n") == (f"{files['local']}: the top level must be a mapping of device, plugins, "
                                          "devices, profile, got a list")
    msg = _error(files, "device: [unclosed\n")
    assert msg.startswith(f"{files['local']}: not valid YAML")


def test_missing_tg_config_file(files):
    with pytest.raises(ConfigError) as e:
        _load(files, env={"TG_CONFIG": str(files["cwd"] / "nope.yaml")})
    assert "nope.yaml (from TG_CONFIG): cannot read the config file" in str(e.value)


def test_explicit_arguments_are_checked(files):
    files["local"].write_text("")
    with pytest.raises(ConfigError, match="explicit argument: unknown key for dev: 'AMD'.*did you mean 'device'"):
        _load(files, explicit={"dev": "AMD"})


# ---- errors that need discovery: device names, plugin names, option schemas ----

def _registry_error(make_registry, tmp_path, text, env=None, open_device=None, explicit=None) -> str:
    (tmp_path / "tg.yaml").write_text(text)
    with pytest.raises(ConfigError) as e:
        make_registry(env=env, explicit=explicit)
        if open_device:
            Device[open_device]
    return str(e.value)


def test_unknown_device(make_registry, tmp_path):
    msg = _registry_error(make_registry, tmp_path, "devices:\n  TEMPLAT: {zero: false}\n")
    assert msg.startswith(f"{tmp_path / 'tg.yaml'}: unknown device for devices.TEMPLAT: {{'zero': False}}")
    allowed = msg.split("allowed: devices ", 1)[1].split(";", 1)[0].split(", ")
    # installed plugins add their own sections (tg-mpi's MPI), so check order and membership, not the whole list
    assert allowed == sorted(allowed) and {"AMD", "CPU", "MULTI", "TEMPLATE"} <= set(allowed)
    assert "did you mean 'TEMPLATE'?" in msg


def test_unknown_default_device_from_env(make_registry, tmp_path):
    msg = _registry_error(make_registry, tmp_path, "", env={"DEV": "MULTY"})
    assert msg.startswith("environment variable DEV: unknown device for device: 'MULTY'")
    assert "did you mean 'MULTI'?" in msg


def test_first_party_device_may_be_configured_when_absent(make_registry, tmp_path):
    (tmp_path / "tg.yaml").write_text("devices:\n  AMD: {queue: aql}\n")
    make_registry()


def test_unknown_plugin(make_registry, tmp_path):
    msg = _registry_error(make_registry, tmp_path, "plugins:\n  deny: [templat]\n")
    assert msg.startswith(f"{tmp_path / 'tg.yaml'}: unknown plugin for plugins.deny: 'templat'")
    assert "tg-template" in msg and "did you mean 'template'" in msg


def test_unknown_plugin_for_a_device(make_registry, tmp_path):
    msg = _registry_error(make_registry, tmp_path, "devices:\n  CLASH: {plugin: clash_c}\n")
    assert "unknown plugin for devices.CLASH.plugin: 'clash_c'" in msg and "did you mean 'clash_b' or 'clash_a'" in msg


def test_unknown_option(make_registry, tmp_path):
    msg = _registry_error(make_registry, tmp_path, "devices:\n  MULTI: {cont: 3}\n", open_device="MULTI")
    assert msg == (f"{tmp_path / 'tg.yaml'}: unknown option for devices.MULTI.cont: 3; allowed: options flag, count, "
                   "scale, mode, plugin, renderers; did you mean 'count'?")


@pytest.mark.parametrize("text,bad,allowed", [
    ("count: many", "wrong type (str) for devices.MULTI.count: 'many'", "an int (default 3: an int)"),
    ("count: '7'", "wrong type (str) for devices.MULTI.count: '7'", "an int (default 3: an int); did you mean 7?"),
    ("flag: 1", "wrong type (int) for devices.MULTI.flag: 1", "a bool (default False: a bool); did you mean True?"),
    ("count: true", "wrong type (bool) for devices.MULTI.count: True", "an int"),
    ("mode: slo", "bad value for devices.MULTI.mode: 'slo'", "'fast' | 'slow' (default 'fast': a choice); "
                                                          "did you mean 'slow'?"),
])
def test_bad_option_values(make_registry, tmp_path, text, bad, allowed):
    msg = _registry_error(make_registry, tmp_path, f"devices:\n  MULTI: {{{text}}}\n", open_device="MULTI")
    assert msg.startswith(f"{tmp_path / 'tg.yaml'}: {bad}; allowed: ") and allowed in msg


def test_float_option_takes_an_int(make_registry, tmp_path):
    (tmp_path / "tg.yaml").write_text("devices:\n  MULTI: {scale: 2}\n")
    make_registry()
    assert Device["MULTI"].options["scale"] == 2.0


def test_option_env_errors(make_registry, tmp_path):
    msg = _registry_error(make_registry, tmp_path, "", env={"TG_MULTI_COUNT": "lots"}, open_device="MULTI")
    assert msg.startswith("environment variable TG_MULTI_COUNT: wrong type (str) for TG_MULTI_COUNT: 'lots'")
    msg = _registry_error(make_registry, tmp_path, "", env={"TG_MULTI_FLAGG": "1"}, open_device="MULTI")
    assert msg.startswith("environment variable TG_MULTI_FLAGG: unknown option for TG_MULTI_FLAGG: '1'")
    assert "did you mean 'TG_MULTI_FLAG' or" in msg
    msg = _registry_error(make_registry, tmp_path, "", env={"TG_MULTI_FLAG": "maybe"}, open_device="MULTI")
    assert "wrong type (str) for TG_MULTI_FLAG: 'maybe'" in msg


def test_env_overrides_file_options(make_registry, tmp_path):
    (tmp_path / "tg.yaml").write_text("devices:\n  MULTI: {count: 4, mode: slow}\n")
    reg = make_registry(env={"TG_MULTI_COUNT": "5"})
    assert reg.device_options("MULTI") == {"flag": False, "count": 5, "scale": 1.5, "mode": "slow"}
    assert reg.config.option_sources("MULTI") == {"count": "environment variable TG_MULTI_COUNT",
                                                  "mode": str(tmp_path / "tg.yaml")}


def test_explicit_options_override_env(make_registry, tmp_path):
    """The layer order is files < environment < explicit arguments (`tg --set`, Device.configure): a per-device
    variable does not override an explicit value, and is still checked."""
    (tmp_path / "tg.yaml").write_text("devices:\n  MULTI: {count: 4, mode: slow}\n")
    reg = make_registry(env={"TG_MULTI_COUNT": "5", "TG_MULTI_MODE": "fast"},
                        explicit={"devices": {"MULTI": {"count": 7}}})
    assert reg.device_options("MULTI") == {"flag": False, "count": 7, "scale": 1.5, "mode": "fast"}
    assert reg.config.option_sources("MULTI") == {"count": "explicit argument",
                                                  "mode": "environment variable TG_MULTI_MODE"}
    msg = _registry_error(make_registry, tmp_path, "", env={"TG_MULTI_FLAG": "maybe"}, open_device="MULTI",
                          explicit={"devices": {"MULTI": {"flag": True}}})
    assert "wrong type (str) for TG_MULTI_FLAG: 'maybe'" in msg


def test_renderer_list_error_names_the_file(make_registry, tmp_path):
    msg = _registry_error(make_registry, tmp_path, "devices:\n  MULTI: {renderers: [FAST, SLOW]}\n",
                          open_device="MULTI")
    assert msg.startswith(f"{tmp_path / 'tg.yaml'}: renderer not offered for devices.MULTI.renderers: ['FAST', 'SLOW']")
    assert "FAST, EXACT, EXTRA" in msg


def test_option_range():
    from tg_core.plugins.config import _check_option
    from tg_core.plugins.specs import Option
    cores = Option(int, 0, "cores; 0: all", minimum=0)
    assert cores.describe() == "an int >= 0 (default 0: cores; 0: all)"
    assert _check_option("tg.yaml", "devices.CPU.threads", cores, 3) == 3
    with pytest.raises(ConfigError) as e:
        _check_option("environment variable TG_CPU_THREADS", "TG_CPU_THREADS", cores, -3)
    assert str(e.value) == ("environment variable TG_CPU_THREADS: too small for TG_CPU_THREADS: -3; "
                            "allowed: an int from 0 to 9223372036854775807 (default 0: cores; 0: all)")
    # an int without a maximum of its own is still a 64-bit integer
    with pytest.raises(ConfigError, match=r"too large for TG_CPU_THREADS: 99999999999999999999; allowed: an int "
                                          r"from 0 to 9223372036854775807"):
        _check_option("environment variable TG_CPU_THREADS", "TG_CPU_THREADS", cores, 99999999999999999999)
    few = Option(int, 2, "a few", minimum=1, maximum=4)
    assert few.describe() == "an int from 1 to 4 (default 2: a few)"
    with pytest.raises(ConfigError, match="too large for n: 5; allowed: an int from 1 to 4"):
        _check_option("tg.yaml", "n", few, 5)
    scale = Option(float, 1.0, "a scale", maximum=2.0)
    for bad in (float("nan"), float("inf"), 10 ** 400):
        with pytest.raises(ConfigError, match="not a finite number"):
            _check_option("tg.yaml", "s", scale, bad)
    with pytest.raises(ValueError, match="minimum"):
        Option(int, -1, "a default below its own minimum", minimum=0)
    with pytest.raises(ValueError, match="maximum"):
        Option(int, 5, "a default above its own maximum", maximum=4)
    with pytest.raises(ValueError, match="minimum"):
        Option(str, "x", "a minimum on a string", minimum=0)


def test_option_choices_may_be_asked_for_late():
    from tg_core.plugins.config import _check_option
    from tg_core.plugins.specs import Option
    offered = ["auto", "mock"]
    iface = Option(str, "auto", "an interface", choices=lambda: offered)
    assert _check_option("tg.yaml", "i", iface, "mock") == "mock"
    offered.append("rec")  # a plugin loaded later offers another one
    assert _check_option("tg.yaml", "i", iface, "rec") == "rec"
    with pytest.raises(ConfigError, match="bad value for i: 'bogus'; allowed: 'auto' \\| 'mock' \\| 'rec'"):
        _check_option("tg.yaml", "i", iface, "bogus")


# ---- files that are not YAML text: one line naming the file (and the line) ----

def test_undecodable_file_is_one_line_naming_it(files):
    files["local"].write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError) as e:
        _load(files)
    assert str(e.value) == (f"{files['local']}: not UTF-8 text: byte 0xff at offset 0 cannot be decoded; a config "
                            "file is YAML written in UTF-8")


@pytest.mark.parametrize("text,where", [("device: CPU\ndevices: [unclosed\nplugins: {}\n", "line 3, column 8"),
                                        ("a: b: c\n", "line 1, column 5"), ("\t- x\n", "line 1, column 1"),
                                        ("devices:\n  AMD: {}\ndevices:\n  CPU: {}\n", "line 3, column 1"),
                                        ("devices:\n  AMD: {interface: kfd, interface: kfd}\n", "line 2, column 25")])
def test_yaml_syntax_error_is_one_line_naming_file_and_line(files, text, where):
    msg = _error(files, text)
    assert msg.startswith(f"{files['local']}: not valid YAML at {where}: ") and "\n" not in msg
    if text.startswith("devices:\n  AMD: {}"):  # YAML keeps the last of two equal keys: silently, without this
        assert msg.endswith("duplicate key 'devices' (first at line 1)")


def test_yaml_merge_keys_still_work(files):
    files["local"].write_text("devices:\n  CPU:\n    <<: {threads: 2}\n")
    assert _load(files).get("devices", "CPU", "threads") == 2


# ---- plugin names: installed or first-party, never core in deny; devices.X.plugin must provide X ----

def test_unknown_plugin_lists_installed_and_first_party_only(make_registry, tmp_path):
    msg = _registry_error(make_registry, tmp_path, "plugins:\n  allow: [tg-profiler-sqtt]\n")
    assert "unknown plugin for plugins.allow: 'tg-profiler-sqtt'" in msg and "profiler" not in msg.split("allowed")[1]
    assert "template" in msg and "tg-amd" in msg and "cpu_x86" in msg


def test_first_party_plugins_may_be_named_when_absent(make_registry, tmp_path):
    (tmp_path / "tg.yaml").write_text("plugins:\n  deny: [tg-amd, cpu_x86]\n  order: [mockgpu]\n")
    make_registry()


@pytest.mark.parametrize("source,env", [("tg.yaml", {}), ("environment variable TG_PLUGINS_DENY",
                                                           {"TG_PLUGINS_DENY": "template, core"})])
def test_core_cannot_be_denied(make_registry, tmp_path, source, env):
    text = "" if env else "plugins:\n  deny: [tg-core]\n"
    msg = _registry_error(make_registry, tmp_path, text, env=env)
    assert "cannot deny core for plugins.deny" in msg and "reference device PYTHON" in msg
    assert msg.startswith(str(tmp_path / source) if not env else source)


@pytest.mark.parametrize("text,providers", [
    ("devices:\n  TEMPLATE: {plugin: multi}\n", "plugins providing TEMPLATE: template, tg-template"),
    ("devices:\n  CPU: {plugin: amd}\n", "plugins providing CPU: cpu_x86, tg-cpu-x86"),  # first party, not installed
    ("devices:\n  MULTI: {plugin: extra}\n", "plugins providing MULTI: multi, tg-test-multi"),  # extends MULTI only
])
def test_device_plugin_must_provide_the_device(make_registry, tmp_path, text, providers):
    msg = _registry_error(make_registry, tmp_path, text)
    assert "plugin does not provide it for devices." in msg and f"allowed: {providers}" in msg


def test_misspelt_plugins_variable(files):
    with pytest.raises(ConfigError) as e:
        _load(files, env={"TG_PLUGINS_DENNY": "template"})
    assert str(e.value) == ("environment variable TG_PLUGINS_DENNY: unknown variable for TG_PLUGINS_DENNY: 'template'; "
                            "allowed: variables TG_PLUGINS_ALLOW, TG_PLUGINS_DENY, TG_PLUGINS_ORDER, TG_PLUGINS_PATH; "
                            "did you mean 'TG_PLUGINS_DENY' or 'TG_PLUGINS_ORDER'?")
