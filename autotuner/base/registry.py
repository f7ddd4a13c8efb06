"""The ops the engine can tune, by name: the built-in ones (every module of `search_spaces` that declares an
`OP`, a TunableOp: adding `search_spaces/<op>.py` adds the op, its CLI options, its HTTP schema and, if it declares
one, its library call), plugins named in AUTOTUNER_PLUGINS, and kernels wrapped by `autotuner.autotune`.

    op = get_op("softmax")
    problem = op.parse_problem("4096x4096", "float16")
    inputs = op.make_inputs(problem, "cuda:0")
    out = op.run(inputs, op.space.default(problem, device))
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

import search_spaces
from search_spaces.contract import TunableOp

Op = TunableOp  # the engine's name for the contract


class UnknownOpError(ValueError):
    pass


def builtin_ops() -> list[TunableOp[Any]]:
    """The `OP` of every module of the search_spaces package that declares one, by module name."""
    found = []
    for module in sorted(m.name for m in pkgutil.iter_modules(search_spaces.__path__)):
        op = getattr(importlib.import_module(f"search_spaces.{module}"), "OP", None)
        if isinstance(op, TunableOp):
            found.append(op)
    return found


_OPS: dict[str, TunableOp[Any]] = {op.name: op for op in builtin_ops()}


def register_op(op: TunableOp[Any], *, replace: bool = False) -> None:
    """Add an op (a plugin module named in AUTOTUNER_PLUGINS, or an `autotuner.autotune` kernel); a name is
    registered once, unless `replace` (a decorated kernel's module imported again replaces its op)."""
    if op.name in _OPS and _OPS[op.name] is not op and not replace:
        raise ValueError(f"an op named {op.name!r} is already registered")
    _OPS[op.name] = op


def unregister_op(name: str) -> None:
    """Forget an op (a test's, or a kernel whose module is gone); an unknown name is no error."""
    _OPS.pop(name, None)


class PluginError(ValueError):
    """A module named in AUTOTUNER_PLUGINS that cannot be imported."""


def load_plugins(modules: list[str]) -> None:
    """Import modules that register ops (worker processes do this before looking ops up); PluginError naming a
    module that cannot be imported, and why."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise PluginError(f"AUTOTUNER_PLUGINS names {name!r}, which cannot be imported: {type(exc).__name__}: "
                              f"{exc} (run from where it imports, or set PYTHONPATH)") from exc


def op_names() -> list[str]:
    return list(_OPS)


def ops() -> list[TunableOp[Any]]:
    return list(_OPS.values())


def get_op(name: str) -> TunableOp[Any]:
    try:
        return _OPS[name]
    except (KeyError, TypeError):
        raise UnknownOpError(f"unknown op {name!r}; known ops: {', '.join(_OPS)}") from None


def library_of(op_name: str) -> str | None:
    """A kernel's library: the top-level package of its module (`liger_kernel` for
    `liger_kernel.ops.rms_norm:_rms_norm_forward_kernel`); None for the built-in ops and plugins' ops."""
    return op_name.split(":", 1)[0].split(".", 1)[0] if ":" in op_name else None


_FINDERS: list[Callable[[str], TunableOp[Any] | None]] = []


def add_op_finder(finder: Callable[[str], TunableOp[Any] | None]) -> None:
    """A way to reach a kernel's op once its module is imported, when importing it registers none (a plain
    `@triton.autotune` kernel that autotuner.install covers registers its op at its first launch)."""
    if finder not in _FINDERS:
        _FINDERS.append(finder)


def import_op(name: str) -> TunableOp[Any]:
    """The op named; for a decorated kernel's `module:qualname` not yet registered, its module is imported first
    (the worker and `autotuner tune module:kernel` reach recorded kernels this way), then the finders asked."""
    if name not in _OPS and ":" in name:
        module = name.split(":", 1)[0]
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise UnknownOpError(f"cannot import {module!r} for the kernel {name!r}: {type(exc).__name__}: {exc} "
                                 "(run from where that module imports, or set PYTHONPATH)") from None
        for finder in _FINDERS:
            if name in _OPS:
                break
            op = finder(name)
            if op is not None:
                register_op(op, replace=True)
    return get_op(name)
