"""tg-amd's named kernels (the `tg_kernels` hook): custom kernels core's LLM code asks for by name, each with a
`supports` that sends every other case to core's Tensor code."""
from __future__ import annotations

from typing import Any


def named_kernels() -> list[Any]:
    from tg_amd.kernels.flash_decode import FlashDecode
    from tg_amd.kernels.flash_prefill import FlashPrefill
    from tg_amd.kernels.gated_delta import GatedDelta
    from tg_amd.kernels.gemv import F16Gemv
    from tg_amd.kernels.q4k import Q4KLinear
    from tg_amd.kernels.q8 import Q8Quantize
    return [Q8Quantize(), F16Gemv(), Q4KLinear(), FlashDecode(), FlashPrefill(), GatedDelta()]
