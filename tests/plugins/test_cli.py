"""The `tg` command, run as a user runs it (a subprocess with the test plugins installed)."""
from __future__ import annotations

import json
import tomllib

import pytest

from tg_core.plugins.version import API_VERSION_STR

from .conftest import REPO


@pytest.fixture(scope="module")
def listing(plugin_site, tmp_path_factory):
    import subprocess
    import sys

    from .conftest import clean_env
    cwd = tmp_path_factory.mktemp("cli")
    env = clean_env(HOME=str(cwd), PYTHONPATH=f"{plugin_site}:{REPO}", TG_PLUGINS_PATH=str(plugin_site))
    res = subprocess.run([sys.executable, "-m", "tg_core", "devices", "--json", "--probe"], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.stderr == ""
    return res.returncode, json.loads(res.stdout)


def _plugin(listing, name):
    return next(p for p in listing[1]["plugins"] if p["name"] == name)


def test_devices_json_core(listing):
    code, data = listing
    assert code == 1  # NOHW's probe fails: its hardware is absent
    assert data["core"] == {"version": "0.1.0", "api": API_VERSION_STR}
    assert [p["name"] for p in data["plugins"]] == ["core", "badmanifest", "broken", "brokenext", "clash_a", "clash_b",
                                                    "extra", "incompatible", "multi", "nohw", "template"]
    assert data["clashes"] == {"CLASH": ["tg-test-clash-a", "tg-test-clash-b"]}


def test_devices_json_template(listing):
    t = _plugin(listing, "template")
    assert t["distribution"] == "tg-template" and t["version"] == "0.1.0"
    assert t["entry_point"] == "template = tg_template.manifest" and t["builtin"] is False
    assert t["status"] == "loaded" and t["reason"] is None and t["traceback"] is None
    assert t["api"] == ">=1.0,<2" and t["hooks_module"] == "tg_template.plugin" and t["extends"] == []
    assert t["hooks"] == ["tg_devices"] and t["renderers"] == {"TEMPLATE": []}
    (dev,) = t["devices"]
    assert dev["name"] == "TEMPLATE" and dev["priority"] == 10 and dev["clash_with"] == []
    assert dev["options"]["max_bytes"] == {"type": "int", "default": 1 << 30,
                                           "help": "bytes the device may have allocated at once", "choices": None,
                                           "minimum": 1, "maximum": None, "allowed": "an int >= 1",
                                           "value": 1 << 30, "source": "default of plugin template"}
    assert dev["options"]["zero"]["type"] == "bool" and dev["options"]["zero"]["default"] is True
    assert dev["probe"]["result"] == "PASS" and dev["probe"]["steps"] == ["buffer copy in/out", "tiny kernel"]


def test_devices_json_multi_and_extra(listing):
    m = _plugin(listing, "multi")
    assert m["hooks"] == ["tg_devices", "tg_pm_encode", "tg_pm_lower", "tg_profilers", "tg_renderers"]
    assert m["renderers"] == {"MULTI": ["FAST", "EXACT"]}
    assert m["devices"][0]["options"]["mode"]["choices"] == ["fast", "slow"]
    e = _plugin(listing, "extra")
    assert e["status"] == "loaded" and e["devices"] == [] and e["extends"] == ["MULTI"]
    assert e["renderers"] == {"MULTI": ["EXTRA"]} and e["api"] == ">=1.0"


def test_devices_json_broken_refused_clash(listing):
    b = _plugin(listing, "broken")
    assert b["status"] == "broken" and "RuntimeError: tg-test-broken fails on purpose" in b["reason"]
    assert "_load_native_library" in b["traceback"]
    assert b["devices"][0]["name"] == "BROKEN" and "probe" not in b["devices"][0]
    bm = _plugin(listing, "badmanifest")
    assert bm["status"] == "broken" and bm["devices"] == [] and "DEVICES" in bm["reason"]
    i = _plugin(listing, "incompatible")
    assert i["status"] == "refused" and i["api"] == ">=99.0,<100" and f"API {API_VERSION_STR}" in i["reason"]
    assert i["hooks"] == [] and i["hooks_module"] == "tg_test_incompatible.plugin"
    a = _plugin(listing, "clash_a")
    assert a["devices"][0]["clash_with"] == ["tg-test-clash-b"]
    assert a["devices"][0]["probe"]["result"] == "FAIL" and "DeviceClashError" in a["devices"][0]["probe"]["error"]
    nohw = _plugin(listing, "nohw")
    probe = nohw["devices"][0]["probe"]
    assert probe == {"result": "FAIL", "steps": [], "seconds": probe["seconds"],
                     "error": "DeviceUnavailable: no /dev/nohw on this machine"}
    core = _plugin(listing, "core")
    assert core["builtin"] and core["devices"][0]["name"] == "PYTHON"
    assert core["devices"][0]["probe"]["result"] == "PASS"


def test_devices_without_probe_opens_nothing(run_tg):
    res = run_tg("devices", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert all("probe" not in d for p in data["plugins"] for d in p["devices"])


def test_devices_human_output(run_tg):
    res = run_tg("devices")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert f"plugin API {API_VERSION_STR}" in out
    assert "template  tg-template 0.1.0  [loaded]" in out and "device:      TEMPLATE (priority 10)" in out
    assert "incompatible  tg-test-incompatible 0.1.0  [refused]" in out
    assert "ALSO PROVIDED BY tg-test-clash-b" in out
    assert "renderers FAST, EXACT, EXTRA" not in out and "renderers FAST, EXACT" in out
    assert "  renderers:   EXTRA for MULTI" in out


def test_config_explain(run_tg, tmp_path):
    (tmp_path / "tg.yaml").write_text("devices:\n  MULTI: {count: 4}\n")
    res = run_tg("--set", "devices.MULTI.mode=slow", "config", "--explain", "--json", env={"DEV": "MULTI:EXACT"})
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["config"]["device"] == "MULTI:EXACT"
    assert data["config"]["devices"]["MULTI"] == {"count": 4, "mode": "slow", "flag": False, "scale": 1.5}
    ex = data["explain"]
    assert ex["layers"] == ["built-in defaults", str(tmp_path / "tg.yaml"), "environment", "command line (tg --set)"]
    values = {v["key"]: v["source"] for v in ex["values"]}
    assert values["device"] == "environment variable DEV"
    assert values["devices.MULTI.count"] == str(tmp_path / "tg.yaml")
    assert values["devices.MULTI.mode"] == "command line (tg --set)"
    assert ex["options"]["MULTI"]["flag"] == {"value": False, "source": "default of plugin multi"}
    assert ex["default_device"] == {"device": "MULTI", "reason": "device: MULTI:EXACT from environment variable DEV"}
    assert ex["renderer"]["renderer"] == "EXACT"
    assert ex["renderer"]["reason"] == "EXACT: preferred by device: MULTI:EXACT from environment variable DEV"


def test_config_explain_text_auto_default(run_tg):
    res = run_tg("config", "--explain")
    assert res.returncode == 0, res.stderr
    assert "# default device TEMPLATE: highest-priority working device (priority 10); skipped: BROKEN" in res.stdout
    assert "# renderer None: no plugin offers a renderer for this device" in res.stdout
    assert "tg: skipping plugin 'broken'" in res.stderr  # reported once, briefly


def test_config_error_exit_code(run_tg, tmp_path):
    (tmp_path / "tg.yaml").write_text("devcie: MULTI\n")
    res = run_tg("config")
    assert res.returncode == 2
    assert res.stderr.strip() == (f"tg config: error: {tmp_path / 'tg.yaml'}: unknown key for devcie: 'MULTI'; "
                                  "allowed: keys device, plugins, devices, profile; did you mean 'device' or 'devices'?")


def test_doctor(run_tg):
    res = run_tg("doctor")
    assert res.returncode == 1
    out = res.stdout
    assert "[FAIL] plugin 'broken'" in out and "TG_PLUGINS_DENY=broken" in out
    assert "[WARN] plugin 'incompatible'" in out
    assert "[FAIL] device CLASH is provided by tg-test-clash-a and tg-test-clash-b" in out
    assert "[INFO] device AMD is not installed (`python -m pip install tg-amd`)" in out
    assert "[OK  ] default device TEMPLATE" in out


def test_doctor_healthy(run_tg):
    res = run_tg("--set", "plugins.allow=[template, multi, extra]", "doctor")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[FAIL]" not in res.stdout and "blocked: not in plugins.allow (set in command line (tg --set))" in res.stdout


def test_bad_set_argument(run_tg):
    res = run_tg("--set", "device", "devices")
    assert res.returncode == 2 and "KEY=VALUE" in res.stderr


def test_no_command_prints_help(run_tg):
    res = run_tg()
    assert res.returncode == 2 and "devices" in res.stdout and "doctor" in res.stdout


def test_console_script_is_declared():
    with open(REPO / "pyproject.toml", "rb") as f:
        assert tomllib.load(f)["project"]["scripts"]["tg"] == "tg_core.cli:main"


def test_subcommands_are_extensible(capsys):
    from tg_core import cli

    @cli.command("hello-test", "say hello", lambda p: p.add_argument("--name", default="tg"))
    def hello(args):
        print(f"hello {args.name}")
        return 0
    try:
        assert cli.main(["hello-test", "--name", "you"]) == 0
        assert capsys.readouterr().out == "hello you\n"
        with pytest.raises(ValueError, match="registered twice"):
            cli.command("hello-test", "again")(hello)
    finally:
        del cli.COMMANDS["hello-test"]


# ---- bad input: one-line errors, values checked the same way by every command ----

@pytest.mark.parametrize("content", [b"\xff\xfe", b"devices: [unclosed\n"], ids=["undecodable", "syntax"])
@pytest.mark.parametrize("command", ["devices", "config", "doctor"])
def test_bad_yaml_is_one_line_in_every_command(run_tg, tmp_path, content, command):
    (tmp_path / "tg.yaml").write_bytes(content)
    res = run_tg(command)
    why = "not UTF-8 text: byte 0xff at offset 0" if content.startswith(b"\xff") else "not valid YAML at line 2"
    if command == "doctor":  # the doctor reports it among its checks
        assert res.returncode == 1 and f"[FAIL] config: {tmp_path / 'tg.yaml'}: {why}" in res.stdout
    else:
        assert res.returncode == 2 and res.stdout == ""
        assert res.stderr.startswith(f"tg {command}: error: {tmp_path / 'tg.yaml'}: {why}")
        assert res.stderr.count("\n") == 1
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("args,error", [
    (("--set", "devices.MULTI.renderers=[FOO]"), "renderer not offered for devices.MULTI.renderers: ['FOO']"),
    (("--set", "devices.MULTI.count=99999999999999999999"), "too large for devices.MULTI.count"),
    (("--set", "devices.MULTI.mode=bogus"), "bad value for devices.MULTI.mode: 'bogus'"),
    (("--set", "device=MULTI:FOO"), "renderer not offered for device: 'MULTI:FOO'"),
])
def test_every_command_checks_values_alike(run_tg, args, error):
    """tg config, tg config --explain, tg devices and tg doctor reject the same values with the same message."""
    for command in (("config",), ("config", "--explain"), ("devices",)):
        res = run_tg(*args, *command)
        # skipped plugins are one line each ("tg: skipping ..."), then the error
        lines = res.stderr.splitlines()
        assert res.returncode == 2 and error in lines[-1] and all(ln.startswith("tg") for ln in lines), res.stderr
    res = run_tg(*args, "doctor")
    assert res.returncode == 1 and "[FAIL]" in res.stdout and error in res.stdout


def test_conflicting_and_unparsable_set_arguments(run_tg):
    res = run_tg("--set", "devices.MULTI=3", "--set", "devices.MULTI.count=2", "config")
    assert res.returncode == 2 and "conflicting --set arguments for devices.MULTI: 3" in res.stderr
    res = run_tg("--set", "device=[", "config")
    assert res.returncode == 2
    assert res.stderr.startswith("tg config: error: tg --set device=[: not valid YAML at line 1")


def test_devices_shows_each_option_with_its_value(run_tg):
    res = run_tg("devices", env={"TG_MULTI_COUNT": "5"})
    assert res.returncode == 0, res.stderr
    assert ("    option:    count = 5 (from environment variable TG_MULTI_COUNT): an int (default 3; an int)"
            in res.stdout)
    assert "    option:    mode = 'fast': a choice (default 'fast'; 'fast' | 'slow')" in res.stdout
    assert "    option:    zero = True: fill new allocations" in res.stdout


def test_devices_into_a_closed_pipe_exits_quietly(plugin_site, tmp_path):
    """`tg devices | head`: the reader goes away before tg writes; tg exits as SIGPIPE would, without a traceback."""
    import subprocess
    import sys

    from .conftest import clean_env
    env = clean_env(HOME=str(tmp_path), PYTHONPATH=f"{plugin_site}:{REPO}", TG_PLUGINS_PATH=str(plugin_site))
    proc = subprocess.Popen([sys.executable, "-m", "tg_core", "devices"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the child has even started: its first write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == ""


# ---- the installed first-party plugins (not the test plugins) ----

@pytest.fixture
def run_installed(tmp_path):
    """Run `python -m tg_core ARGS` over the installed plugins (tg-cpu-x86, tg-amd, tg-mockgpu) in a clean cwd/home."""
    import subprocess
    import sys

    from .conftest import clean_env

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tg_core", *args], cwd=tmp_path,
                              env=clean_env(HOME=str(tmp_path), **(env or {})), capture_output=True, text=True,
                              timeout=120)
    return run


def _needs_first_party():
    import importlib.util
    for mod in ("tg_cpu_x86", "tg_amd", "tg_mockgpu"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not installed")


def test_set_examples_in_help_and_errors_work(run_installed):
    import re
    _needs_first_party()
    help_text = run_installed("--help").stdout
    examples = re.findall(r"--set\s+([a-z][\w.]*=[^\s)]+)", help_text)
    bad = run_installed("--set", "nonsense", "config")
    assert bad.returncode == 2
    examples += re.findall(r"\b([a-z][\w.]*=[^\s;,]+)", bad.stderr.split("e.g.", 1)[1])
    assert len(examples) >= 4, (help_text, bad.stderr)
    for example in examples:
        res = run_installed("--set", example, "config")
        assert res.returncode == 0, (example, res.stderr)


@pytest.mark.parametrize("var,value,allowed", [
    ("TG_CPU_THREADS", "99999999999999999999", "allowed: an int from 0 to 1024"),
    ("TG_AMD_INTERFACE", "bogus", "allowed: 'auto' | 'kfd'"),
])
def test_doctor_fails_on_a_bad_value(run_installed, var, value, allowed):
    _needs_first_party()
    res = run_installed("doctor", env={var: value})
    assert res.returncode == 1, res.stdout
    assert f"[FAIL] device config: environment variable {var}: " in res.stdout and allowed in res.stdout


def test_bad_cpu_threads_is_a_config_error_not_a_fallback(run_installed):
    """With a huge TG_CPU_THREADS the default device used to become the AMD emulator."""
    _needs_first_party()
    res = run_installed("config", "--explain", env={"TG_CPU_THREADS": "99999999999999999999"})
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == ("tg config: error: environment variable TG_CPU_THREADS: too large for TG_CPU_THREADS: "
                          "99999999999999999999; allowed: an int from 0 to 1024 (default 0: cores a large kernel is "
                          "split across; 0: every core)\n")


@pytest.mark.parametrize("dev,error", [
    ("NOHW", "tg config: error: no /dev/nohw on this machine"),
    ("MULTI:-1", "tg config: error: environment variable DEV: bad device (a device index is a whole number >= 0"),
])
def test_explain_with_a_device_that_cannot_open_is_one_line(run_tg, dev, error):
    res = run_tg("config", "--explain", env={"DEV": dev})
    assert res.returncode == 2 and res.stdout == "" and "Traceback" not in res.stderr
    assert res.stderr.splitlines()[-1].startswith(error)
