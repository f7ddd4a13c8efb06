"""autotuner: an autotuning service for Triton GPU kernels with a persistent result database.

    import autotuner
    y = autotuner.softmax(x)                 # a built-in kernel, launched with its tuned config
    y = autotuner.matmul(a, b, bias, activation="gelu")

    @autotuner.autotune(configs=[...], key=["M", "N", "K"])   # any Triton kernel (see autotuner.decorator.autotuned)
    @triton.jit
    def my_kernel(...): ...

Importing the package picks Triton's backend first (kernels._backend: the interpreter where there is no CUDA
device), so kernels decorated after `import autotuner` run on this machine; its names load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from kernels import _backend  # noqa: F401  (before any @triton.jit in the importing module)

__version__ = "0.1.0"

_LAZY = {
    "softmax": "autotuner.launch.library", "layer_norm": "autotuner.launch.library", "gelu": "autotuner.launch.library",
    "matmul": "autotuner.launch.library", "attention": "autotuner.launch.library", "clear_cache": "autotuner.launch.library",
    "autotune": "autotuner.decorator.autotuned", "KernelNotTuned": "autotuner.decorator.autotuned",
    "Space": "search_spaces.space", "Param": "search_spaces.space",
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
