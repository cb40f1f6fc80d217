"""Real plugin distributions for the plugin tests, built and installed once per session.

The distributions under dists/ and examples/plugin_template are built into wheels by their own build
backend and installed with `pip install --no-deps --target SITE` (the compiling template, examples/llvm_template,
into a site of its own, so the registry tests see exactly the test plugins). In-process tests put SITE on
sys.path for one test and give the registry `path=[SITE]`; subprocess tests put it on PYTHONPATH.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tg_core.device import Device
from tg_core.plugins.manager import PluginRegistry

HERE = Path(__file__).parent
REPO = HERE.parents[1]
SOURCES = sorted((HERE / "dists").iterdir()) + [REPO / "examples" / "plugin_template"]
LLVM_TEMPLATE = REPO / "examples" / "llvm_template"
TEST_MODULES = ("tg_template", "tg_test_", "tg_llvm_template")
# variables the config reads; a test's environment starts without them
CONFIG_VARS = ("DEV", "TG_CONFIG", "TG_PLUGINS_ALLOW", "TG_PLUGINS_DENY", "TG_PLUGINS_ORDER", "LRU")


def _digest(sources: list[Path]) -> str:
    h = hashlib.sha256(sys.version.encode())
    for src in sources:
        for f in sorted(src.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and ".egg-info" not in str(f) and "build" not in f.parts:
                h.update(str(f.relative_to(src.parent)).encode() + f.read_bytes())
    return h.hexdigest()[:16]


def _install(site: Path, work: Path, sources: list[Path]) -> None:
    srcs = []
    for src in sources:
        # build from a copy: in-tree builds leave build/ and *.egg-info behind
        dst = work / "src" / src.name
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
        srcs.append(str(dst))
    wheels = work / "wheels"
    wheels.mkdir()
    subprocess.run([sys.executable, str(HERE / "build_dists.py"), str(wheels), *srcs], check=True,
                   capture_output=True, text=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(site), *map(str, sorted(wheels.glob("*.whl")))], check=True, capture_output=True, text=True)


def _built_site(tmp_path_factory: pytest.TempPathFactory, name: str, sources: list[Path]) -> Path:
    """A directory with `sources` installed: built once, shared by xdist workers and by later sessions while the
    sources are unchanged (pytest's own temp root holds it)."""
    root = tmp_path_factory.getbasetemp().parent
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # a worker's basetemp is <root>/pytest-N/popen-gwK
    site = root / f"{name}-{_digest(sources)}"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (site / ".complete").exists():
            for stale in root.glob(f"{name}-*"):  # builds of earlier versions of the sources
                shutil.rmtree(stale, ignore_errors=True)
            work = Path(tmp_path_factory.mktemp("build"))
            _install(site, work, sources)
            (site / ".complete").touch()
    return site


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory the test distributions are installed into."""
    return _built_site(tmp_path_factory, "tg-plugin-site", SOURCES)


@pytest.fixture(scope="session")
def llvm_template_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory the compiling template is installed into, alone."""
    return _built_site(tmp_path_factory, "tg-llvm-template-site", [LLVM_TEMPLATE])


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CONFIG_VARS and not k.startswith("TG_")}
    env.update(extra)
    return env


def _forget_test_modules() -> None:
    for name in [m for m in sys.modules if m.startswith(TEST_MODULES)]:
        del sys.modules[name]


@pytest.fixture
def site(plugin_site: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The test plugins importable for one test; the process-wide Device registry is reset around it."""
    monkeypatch.syspath_prepend(str(plugin_site))
    monkeypatch.chdir(tmp_path)
    _forget_test_modules()
    Device.reset()
    yield plugin_site
    Device.reset()
    _forget_test_modules()


@pytest.fixture
def make_registry(site: Path, tmp_path: Path):
    """Build a registry over the test plugins only, with a clean environment, cwd and home."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)

    def make(env: dict[str, str] | None = None, explicit: dict | None = None, use: bool = True) -> PluginRegistry:
        reg = PluginRegistry.create(explicit, path=[str(site)], env=clean_env(HOME=str(home), **(env or {})),
                                    cwd=tmp_path, home=home)
        if use:
            Device.reset(reg)
        return reg
    return make


def loaded_test_modules() -> list[str]:
    return sorted(m for m in sys.modules if m.startswith(TEST_MODULES))


@pytest.fixture
def run_tg(plugin_site: Path, tmp_path: Path):
    """Run `python -m tg_core ARGS` with the test plugins installed, in a clean cwd/home."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)

    def run(*args: str, env: dict[str, str] | None = None, code: str | None = None) -> subprocess.CompletedProcess:
        full_env = clean_env(HOME=str(home), PYTHONPATH=os.pathsep.join([str(plugin_site), str(REPO)]),
                             TG_PLUGINS_PATH=str(plugin_site), **(env or {}))
        cmd = [sys.executable, "-c", code] if code is not None else [sys.executable, "-m", "tg_core", *args]
        return subprocess.run(cmd, cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=120)
    return run


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # the test plugins include broken ones on purpose; tests that check the warnings record them explicitly
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.filterwarnings("ignore::tg_core.plugins.manager.PluginWarning"))
