"""tg_core.plugin_api: the one module plugins import core from, its helper for named hook results, and the
typed hook contracts."""
from __future__ import annotations

import ast
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import tg_core.plugin_api as api
from tg_core.plugins import hookspecs
from tg_core.plugins.errors import PluginBrokenError

from .conftest import clean_env

REPO = Path(__file__).parents[2]
# a plugin's own modules (not its tests): tg's plugins and the templates under examples/
PLUGIN_SOURCES = sorted([*REPO.glob("plugins/*/tg_*/**/*.py"), *REPO.glob("examples/*/tg_*/**/*.py")])


def core_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a tg_core module other than tg_core.plugin_api in `path`."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            # `from tg_core import plugin_api` is the module itself; any other name of tg_core is not
            names = [node.module] if node.module != "tg_core" else \
                [f"tg_core.{a.name}" for a in node.names]
        else:
            continue
        bad += [(node.lineno, n) for n in names if n.split(".")[0] == "tg_core" and n != "tg_core.plugin_api"]
    return bad


def test_the_scan_finds_the_plugins():
    # the glob must keep matching real plugin code, or the next test checks nothing
    names = {p.relative_to(REPO).as_posix() for p in PLUGIN_SOURCES}
    assert {"plugins/amd/tg_amd/device.py", "plugins/cpu_x86/tg_cpu_x86/x86/isel.py",
            "plugins/mockgpu/tg_mockgpu/plugin.py", "examples/plugin_template/tg_template/plugin.py"} <= names


def test_plugins_import_core_only_through_plugin_api():
    found = {f"{p.relative_to(REPO)}:{line}": mod for p in PLUGIN_SOURCES for line, mod in core_imports(p)}
    assert found == {}, f"plugin modules must import core from tg_core.plugin_api only; found: {found}"


def test_the_scan_catches_every_form(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import tg_core.device\nfrom tg_core.uop import UOp\nfrom tg_core import Tensor\n"
                   "from tg_core import plugin_api\nfrom tg_core.plugin_api import UOp\nimport numpy\n"
                   "def f():\n    from tg_core.interpreter import run_kernel\n")
    assert core_imports(src) == [(1, "tg_core.device"), (2, "tg_core.uop"), (3, "tg_core.Tensor"),
                                 (8, "tg_core.interpreter")]


def test_every_name_of_the_api_resolves_and_is_listed_once():
    assert len(api.__all__) == len(set(api.__all__))
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    public = {n for n in vars(api) if not n.startswith("_") and n not in ("annotations", "TYPE_CHECKING", "Any",
                                                                          "Callable")}
    assert public - {"DeviceConformance"} == set(api.__all__) - {"DeviceConformance"}


def test_unknown_name_lists_the_api():
    with pytest.raises(AttributeError, match="no attribute 'Linear'; the plugin API is: .*Compiled"):
        api.Linear  # noqa: B018


def test_importing_the_api_needs_no_pytest():
    # a backend at run time has no pytest: only asking for the conformance suite imports it
    code = ("import sys, tg_core.plugin_api as a; assert 'pytest' not in sys.modules; "
            "a.DeviceConformance; assert 'pytest' in sys.modules")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_hook_specs_are_typed_and_documented():
    specs = [getattr(hookspecs, n) for n in dir(hookspecs) if n.startswith("tg_")]
    assert len(specs) == 10
    for spec in specs:
        hints = typing.get_type_hints(spec, vars(hookspecs) | vars(api) | {"pluggy": __import__("pluggy")})
        assert "return" in hints and "Any" not in str(hints), (spec.__name__, hints)
        doc = spec.__doc__ or ""
        assert "Called " in doc and ":returns:" in doc, spec.__name__
        for param in hints:
            if param != "return":
                assert f":param {param}:" in doc, (spec.__name__, param)


def test_contracts_are_checkable():
    class Prof:
        def start(self) -> None: ...
        def stop(self) -> None: ...
        def collect(self) -> list: return []

    assert isinstance(Prof(), api.Profiler) and not isinstance(object(), api.Profiler)
    assert isinstance(api.Compiled, api.DeviceFactory) and isinstance(api.LLVMRenderer, api.Named)
    assert isinstance(lambda bufs, var_vals: None, api.Runner)


# ---- collect_named, over the test plugins: MULTI's own plugin and `extra`, which extends MULTI ----

def test_collect_named_keeps_plugin_order_and_the_first_of_each_name(make_registry):
    reg = make_registry()
    got = reg.collect_named("tg_renderers", "MULTI")
    assert list(got) == ["FAST", "EXACT", "EXTRA"] and got["EXTRA"].__module__ == "tg_test_multi.extra"
    assert list(api.collect_named("tg_renderers", "MULTI", str.lower)) == ["fast", "exact", "extra"]
    reg = make_registry(env={"TG_PLUGINS_ORDER": "extra"})
    assert list(reg.collect_named("tg_renderers", "MULTI")) == ["EXTRA", "FAST", "EXACT"]


def test_collect_named_of_a_device_nobody_offers_to(make_registry):
    assert make_registry().collect_named("tg_renderers", "TEMPLATE") == {}


def test_collect_named_names_the_plugin_of_a_bad_result(make_registry):
    reg = make_registry()
    # MULTI's profilers are plain strings: fine for tg_profilers, not for a hook of named results
    with pytest.raises(PluginBrokenError, match=r"tg-test-multi.*tg_profilers\('MULTI'\) returned 'multi-profiler', "
                                                r"which has no str attribute `name`"):
        reg.collect_named("tg_profilers", "MULTI")


def test_collect_named_of_an_unknown_hook(make_registry):
    with pytest.raises(ValueError, match=r"no hook 'tg_renderer' has a spec; hooks: .*did you mean 'tg_renderers'"):
        make_registry().collect_named("tg_renderer", "MULTI")


# ---- the compiling template (examples/llvm_template) ----

def test_llvm_template_passes_the_conformance_suite(llvm_template_site, tmp_path):
    """The template's own tests, run as its author would: pytest against the installed plugin, which compiles every
    kernel (core's LLVM IR renderer -> llvmlite object file -> ctypes)."""
    tests = REPO / "examples" / "llvm_template" / "tests"
    env = clean_env(HOME=str(tmp_path), PYTHONPATH=f"{llvm_template_site}:{REPO}",
                    TG_PLUGINS_PATH=str(llvm_template_site))
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                          str(tests)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    passed = int(res.stdout.split(" passed")[0].split()[-1])
    assert passed >= 60 and "skipped" not in res.stdout and "failed" not in res.stdout


def test_llvm_template_is_short():
    root = REPO / "examples" / "llvm_template"
    lines = sum(len(p.read_text().splitlines()) for p in (root / "tg_llvm_template").glob("*.py"))
    assert lines < 200  # a page or two: read in one sitting
