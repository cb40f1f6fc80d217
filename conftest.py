"""Hypothesis profiles for the whole suite (tests/ and plugins/*/tests).

"ci" makes property tests deterministic across runs and machines: the examples come from a fixed seed
(derandomize), nothing is replayed from a local example database, timing never fails a test (emulated and
JIT-compiled examples vary widely in speed), and a failure prints the blob that reproduces it. It is selected
when the CI environment variable is set; HYPOTHESIS_PROFILE names a profile explicitly ("ci" or "default").
"""
from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("default", settings.get_profile("default"))

_profile = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default")
if _profile not in ("ci", "default"):
    raise ValueError(f"HYPOTHESIS_PROFILE={_profile!r}: the suite's Hypothesis profiles are 'ci' and 'default'")
settings.load_profile(_profile)
