"""Core's own tensor tests on DEV=AMD (the mock KFD where there is no /dev/kfd), through the AQL queue on GPUs of
two XCCs: the paths the op matrix (test_amd_conformance.py) does not reach, such as JIT replays, in-place writes
and the math functions' edge values, run on the queues a multi-XCC card uses. The default PM4 queue runs the
whole tensor suite as `DEV=AMD pytest tests/test_tensor_*.py` (minutes on the emulator, so not in CI)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tg_core.testing.devices import why_unavailable

ROOT = Path(__file__).resolve().parents[3]
CORE_TESTS = ("tests/test_jit.py", "tests/test_tensor_writes.py", "tests/test_tensor_math.py")

_why = why_unavailable("AMD")
pytestmark = pytest.mark.skipif(_why is not None, reason=f"the AMD device does not open: {_why}")


@pytest.mark.slow
def test_core_tensor_tests_on_aql_with_two_xccs():
    env = {**os.environ, "DEV": "AMD", "TG_AMD_QUEUE": "aql", "TG_AMD_MOCK_XCCS": "2"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *CORE_TESTS],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout
