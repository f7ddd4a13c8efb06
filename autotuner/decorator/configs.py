"""What `autotuner.autotune` reads of the Triton objects it is given: the kernel under its wrappers, its
constexpr parameters, its importable name, and `triton.Config`s as the database keeps them."""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import triton

from search_spaces.kernel_identity import python_function

try:  # what Triton's Autotuner raises when no config is left (a Triton before it raised a RuntimeError)
    from triton.runtime.errors import AutotunerError
except ImportError:  # pragma: no cover - an older Triton
    class AutotunerError(RuntimeError):  # type: ignore[no-redef]
        """No config is left to launch."""

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "ir_override")


def base_fn(fn: Any) -> Any:
    """The Python function under `fn` (a JITFunction, the interpreter's, or one wrapped by triton.heuristics)."""
    inner = fn if inspect.isfunction(fn) else python_function(fn)
    if inner is None:
        raise TypeError(f"autotuner.autotune wraps a @triton.jit kernel, got {type(fn).__name__}")
    return inner


def constexprs(fn: Any, base: Any) -> list[str]:
    """The kernel's tl.constexpr parameters (from the JITFunction, or the annotations under the interpreter)."""
    inner = fn
    while not hasattr(inner, "params") and hasattr(inner, "fn") and not inspect.isfunction(inner):
        inner = inner.fn
    if hasattr(inner, "params"):
        return [p.name for p in inner.params if p.is_constexpr]
    return [n for n, p in inspect.signature(base).parameters.items()
            if p.annotation is triton.language.constexpr or "constexpr" in str(p.annotation)]


def module_name(fn: Any) -> str:
    """The importable name of fn's module: a script run as `python -m pkg.mod` is `pkg.mod`, not `__main__`, so
    the name a worker imports is the one another process records."""
    module = fn.__module__
    if module == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        if spec is not None and spec.name:
            return str(spec.name)
        path = getattr(sys.modules["__main__"], "__file__", None)
        if path:
            return os.path.splitext(os.path.basename(path))[0]
    return str(module)


def config_dict(c: triton.Config) -> dict[str, Any]:
    """A triton.Config as the database keeps it: its meta-parameters and launch options, by name."""
    out: dict[str, Any] = {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}
    if getattr(c, "num_ctas", 1) not in (None, 1):
        out["num_ctas"] = c.num_ctas
    if getattr(c, "maxnreg", None) is not None:
        out["maxnreg"] = c.maxnreg
    if getattr(c, "ir_override", None) is not None:  # (a file of IR the compile takes instead: a config's own)
        out["ir_override"] = c.ir_override
    return out


@functools.cache
def compile_options() -> tuple[str, ...]:
    """The names a config's kwargs may give besides the kernel's constexprs: the launch options and every compile
    option of Triton's backends (`ir_override`, `enable_fp_fusion`...), which Triton's launch takes as keywords."""
    import dataclasses

    names = list(LAUNCH_OPTIONS)
    for module, cls in (("triton.backends.nvidia.compiler", "CUDAOptions"), ("triton.backends.amd.compiler", "HIPOptions")):
        try:
            options = getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError):  # a Triton without that backend
            continue
        names += [f.name for f in dataclasses.fields(options) if f.name not in names]
    return tuple(names)


def hook_args(named: Mapping[str, Any], config: Mapping[str, Any], grid: Any, warmup: bool = False) -> dict[str, Any]:
    """What Triton's Autotuner hands a hook: the launch's arguments by name, `grid` and `warmup`, and the config's
    meta-parameters and every launch option (`triton.Config.all_kwargs()`: num_ctas included)."""
    return {**named, "grid": grid, "warmup": warmup, **to_config(config).all_kwargs()}


def to_config(d: Mapping[str, Any]) -> triton.Config:
    kwargs = {k: v for k, v in d.items() if k not in LAUNCH_OPTIONS}
    options = {k: d[k] for k in LAUNCH_OPTIONS if k in d and (k != "ir_override" or d[k] is not None)}
    return triton.Config(kwargs, **options)


def check_names(kernel: str, what: str, names: Iterable[str], accepted: Iterable[str], noun: str) -> None:
    """ValueError naming the names that are not among those accepted."""
    accepted = list(accepted)
    unknown = [n for n in names if n not in accepted]
    if unknown:
        raise ValueError(f"{kernel}: {what} {', '.join(map(repr, unknown))}, which "
                         f"{'is' if len(unknown) == 1 else 'are'} not {noun} of the kernel; accepted: "
                         f"{', '.join(accepted) or 'none'}")
