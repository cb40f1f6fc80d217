"""Build wheels of plugin source trees with each tree's own PEP 517 backend: `python build_dists.py OUT SRC...`.

Run in a subprocess by conftest.py, so the backend's global state and output stay out of the test process.
"""
import contextlib
import importlib
import io
import os
import sys
import tomllib

out, srcs = sys.argv[1], sys.argv[2:]
for src in srcs:
    with open(os.path.join(src, "pyproject.toml"), "rb") as f:
        backend = importlib.import_module(tomllib.load(f)["build-system"]["build-backend"])
    os.chdir(src)
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            backend.build_wheel(out)
    except Exception:
        sys.stderr.write(log.getvalue())
        raise
