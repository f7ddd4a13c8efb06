"""autotuner: an autotuning service for Triton GPU kernels with a persistent result database.

    import autotuner
    y = autotuner.softmax(x)                 # a built-in kernel, launched with its tuned config
    @autotuner.autotune(configs=[...], key=["M", "N", "K"])   # any Triton kernel
    autotuner.install()      # every @triton.autotune kernel of the process (`python -m autotuner run -- x.py`)

Importing the package picks Triton's backend first (kernels._backend: the interpreter where there is no CUDA device);
its names load on first use. A name not listed below is looked up among the registered ops' library calls
(autotuner.launch.library)."""

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
