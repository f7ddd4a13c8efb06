"""autotuner: an autotuning service for Triton GPU kernels with a persistent result database.

    import autotuner
    y = autotuner.softmax(x)                 # a built-in kernel, launched with its tuned config
    y = autotuner.matmul(a, b, bias, activation="gelu")

    @autotuner.autotune(configs=[...], key=["M", "N", "K"])   # any Triton kernel (see autotuner.decorator)
    @triton.jit
    def my_kernel(...): ...

Names are loaded on first use, so `import autotuner` (and the CLI) starts without importing torch or Triton.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "softmax": "autotuner.library", "layer_norm": "autotuner.library", "gelu": "autotuner.library",
    "matmul": "autotuner.library", "attention": "autotuner.library", "clear_cache": "autotuner.library",
}
__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'autotuner' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
