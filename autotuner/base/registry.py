"""The ops the engine can tune, by name: every module of `search_spaces` that declares an `OP`, plugins named in
AUTOTUNER_PLUGINS, and kernels wrapped by `autotuner.autotune`. More: docs/design/launch.md."""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import search_spaces
from search_spaces.contract import TunableOp
from search_spaces.errors import AutotunerError

Op = TunableOp  # the engine's name for the contract


class UnknownOpError(AutotunerError, ValueError):
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


class PluginError(AutotunerError, ValueError):
    """A module named in AUTOTUNER_PLUGINS that cannot be imported."""


_SCANNERS: list[Callable[[ModuleType], list[TunableOp[Any]]]] = []


def add_module_scanner(scan: Callable[[ModuleType], list[TunableOp[Any]]]) -> None:
    """A way to find the ops a plugin module defines that importing it does not register (a Helion kernel's op is
    made at its first search): `load_plugins` registers what `scan(module)` gives."""
    if scan not in _SCANNERS:
        _SCANNERS.append(scan)


def load_plugins(modules: list[str]) -> None:
    """Import modules that register ops (worker processes do this before looking ops up), and register the ops the
    scanners find in them; PluginError naming a module that cannot be imported, and why."""
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            raise PluginError(f"AUTOTUNER_PLUGINS names {name!r}, which cannot be imported: {type(exc).__name__}: "
                              f"{exc} (run from where it imports, or set PYTHONPATH)") from exc
        for scan in _SCANNERS:
            for op in scan(module):
                register_op(op, replace=True)


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


class ModuleNotAllowed(UnknownOpError):
    """A kernel's module that a name read from data (a job, a sweep) asks to import, and the operator never
    allowed (Settings.kernel_modules, Settings.plugins)."""


def check_importable(module: str, allowed: list[str]) -> None:
    """ModuleNotAllowed unless `module` is a dotted name, none of its parts `__main__`, equal to or under one of
    `allowed` (module or package names)."""
    parts = module.split(".")
    if not module or not all(p.isidentifier() for p in parts) or "__main__" in parts:
        raise ModuleNotAllowed(f"{module!r} is not a kernel module this worker imports (a module name, never a "
                               "__main__)")
    if not any(module == a or module.startswith(a + ".") for a in allowed):
        raise ModuleNotAllowed(
            f"kernel module {module!r} is not allowed on this worker; the operator allows it with "
            f"AUTOTUNER_KERNEL_MODULES={parts[0] if len(parts) > 1 else module} (modules or packages, separated by "
            f"commas){'; allowed now: ' + ', '.join(allowed) if allowed else ''}")


PROBE_S = 300.0  # a kernel module whose import takes longer in a child process is taken to hang
_PROBED: set[str] = set()  # modules whose import a child process survived


def probe_import(module: str, timeout_s: float = PROBE_S) -> None:
    """Import `module` first in a child process (once per module and process), so that an import which ends its
    process (os._exit, a crash) or hangs costs a child, not this worker: UnknownOpError saying which."""
    if module in _PROBED or module in sys.modules:
        return
    code = "import importlib, sys; importlib.import_module(sys.argv[1])"
    try:
        done = subprocess.run([sys.executable, "-c", code, module], capture_output=True, text=True,
                              timeout=timeout_s, cwd=os.getcwd(), env=dict(os.environ))
    except subprocess.TimeoutExpired:
        raise UnknownOpError(f"importing kernel module {module!r} took longer than {timeout_s:g} s in a child "
                             "process (does it hang on import?); not imported here") from None
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [""])[-1][:300]
        raise UnknownOpError(f"importing kernel module {module!r} failed in a child process (exit status "
                             f"{done.returncode}{': ' + said if said else ''}); not imported here")
    _PROBED.add(module)


def import_op(name: str, *, trusted: bool = False, allowed: list[str] | None = None,
              probe_s: float = PROBE_S) -> TunableOp[Any]:
    """The op named; a decorated kernel's `module:qualname` not yet registered has its module imported first. A name
    read from data (a job's or sweep's op) imports only a module the operator allowed (`allowed`: Settings'
    kernel_modules and plugins), and only after a child process survived importing it within `probe_s`; `trusted`: a
    name the operator gave, or a parent that holds the op already."""
    if name not in _OPS and ":" in name:
        module = name.split(":", 1)[0]
        if not trusted:
            if allowed is None:
                from autotuner.base.settings import Settings

                settings = Settings()
                allowed = [*settings.kernel_modules, *settings.plugins]
            check_importable(module, allowed)
            probe_import(module, probe_s)
        try:
            importlib.import_module(module)
        except (Exception, SystemExit) as exc:  # a module that exits on import fails its job, not the worker
            raise UnknownOpError(f"cannot import {module!r} for the kernel {name!r}: {type(exc).__name__}: {exc} "
                                 "(run from where that module imports, or set PYTHONPATH)") from None
        for finder in _FINDERS:
            if name in _OPS:
                break
            op = finder(name)
            if op is not None:
                register_op(op, replace=True)
    return get_op(name)
