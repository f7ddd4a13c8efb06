"""autotuner: an autotuning service for Triton GPU kernels with a persistent result database.

    import autotuner
    y = autotuner.softmax(x)                 # a built-in kernel, launched with its tuned config
    y = autotuner.matmul(a, b, bias, activation="gelu")

    @autotuner.autotune(configs=[...], key=["M", "N", "K"])   # any Triton kernel (see autotuner.decorator)
    @triton.jit
    def my_kernel(...): ...

    autotuner.install()      # every @triton.autotune kernel of the process too (autotuner.decorator.install);
                             # AUTOTUNER_INSTALL=1 does it on import, `python -m autotuner run -- x.py` without

Importing the package picks Triton's backend first (kernels._backend: the interpreter where there is no CUDA
device), so kernels decorated after `import autotuner` run on this machine; its names load on first use. The
library calls (`softmax`, `matmul` ...) are those the registered ops declare (autotuner.launch.library): a
name not listed below is looked up there, which imports the registry and torch.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

IMPORTED_AT = time.monotonic()  # the package's first import: a start-up measure that no earlier program shares

from kernels import _backend  # noqa: F401, E402  (before any @triton.jit in the importing module)
from kernels._environment import env_flag  # noqa: E402

__version__ = "0.1.0"

_LAZY = {
    "autotune": "autotuner.decorator", "KernelNotTuned": "autotuner.decorator",
    "install": "autotuner.decorator.install", "uninstall": "autotuner.decorator.install",
    "clear_cache": "autotuner.launch.library",
    "Space": "search_spaces.space", "Param": "search_spaces.space",
    "AutotunerError": "search_spaces.errors",
}


def _names() -> list[str]:
    from autotuner.launch import library

    return [*library.names(), *_LAZY, "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return _names()
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif name.startswith("_"):
        raise AttributeError(f"module 'autotuner' has no attribute {name!r}")
    else:
        from autotuner.launch import library

        try:
            value = library.call(name)
        except LookupError:
            raise AttributeError(f"module 'autotuner' has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(_names())


if env_flag("AUTOTUNER_INSTALL"):
    importlib.import_module("autotuner.decorator.install").install()
