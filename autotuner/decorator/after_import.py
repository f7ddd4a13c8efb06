"""Work done on a module once it is imported: `when_imported(name, fn)` runs `fn()` now if `name` is imported,
else right after its import, so a process that never imports a heavy library (Helion, Inductor) never pays for
importing it. Used by `autotuner.install()`."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from collections.abc import Callable
from typing import Any

_waiting: dict[str, list[Callable[[], None]]] = {}
_lock = threading.Lock()


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _waiting:
            return None
        sys.meta_path.remove(self)  # (the module's own spec, as the rest of sys.meta_path finds it)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_run(module: Any) -> None:
            exec_module(module)
            with _lock:
                waiting = _waiting.pop(name, [])
            for fn in waiting:
                fn()

        spec.loader.exec_module = exec_then_run  # type: ignore[method-assign]
        return spec


_finder = _Finder()


def when_imported(name: str, fn: Callable[[], None]) -> None:
    """`fn()` now if module `name` is imported, else once it is (once)."""
    if name in sys.modules:
        fn()
        return
    with _lock:
        _waiting.setdefault(name, []).append(fn)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)


def forget(fn: Callable[[], None]) -> None:
    """`fn` no longer waits for any import."""
    with _lock:
        for name in list(_waiting):
            _waiting[name] = [f for f in _waiting[name] if f is not fn]
            if not _waiting[name]:
                del _waiting[name]
