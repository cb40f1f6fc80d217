"""Fixtures of the LLM tests: the packaged SmolLM2 file (installed by the README's commands: a missing
package fails, it does not skip) and its parsed GGUF, shared by the tests of one worker."""
from __future__ import annotations

import pytest
from llm_helpers import write_tiny_llama  # tests/llm is on sys.path (no __init__.py)

from tg_core.llm.gguf import GGUFFile
from tg_core.llm.packaged import packaged_model


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    try:
        return packaged_model("smollm2")
    except FileNotFoundError as e:
        pytest.fail(f"{e} (the README's setup commands install it)")


@pytest.fixture(scope="session")
def smollm2(smollm2_path) -> GGUFFile:
    return GGUFFile(smollm2_path)


@pytest.fixture(scope="session")
def tiny_llama_path(tmp_path_factory) -> str:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny_llama") / "tiny-llama.gguf")
