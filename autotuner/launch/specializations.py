"""Triton's specialization of a launch's arguments, kept per call signature, so a new process's first launch skips
Triton's native specialization. More: docs/design/launch.md."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from search_spaces.errors import AutotunerError

log = logging.getLogger(__name__)
VERSION = "1"
_SCALARS = (int, float, bool, str, type(None))
_native_used = False  # Triton's binder has run in this process: its specialization is loaded
# A replay binds in Python, an order of magnitude slower than Triton's binder once loaded
# (benchmarks/launch_overhead.py): a process replays at most this many calls, its first launches (two binder calls per launcher), and then loads
# Triton's.
REPLAYS = 64
_replays_left = REPLAYS
REMEMBERED = 8  # calls kept per kernel and process: a process's first launches are what a kept one spares


class Unkeyed(AutotunerError):
    """A call this module keeps nothing for: Triton's binder answers it."""


def _arg_key(value: Any) -> tuple[Any, ...]:
    t = type(value)
    if isinstance(value, torch.Tensor):
        return (t.__module__, t.__qualname__, str(value.dtype), value.data_ptr() % 16 == 0)
    if t in _SCALARS:
        return (t.__name__, value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a host TensorDescriptor, say: keyed
        # by everything it holds
        return (t.__module__, t.__qualname__, *[(f.name, _field_key(getattr(value, f.name)))
                                                for f in dataclasses.fields(value)])
    raise Unkeyed(t.__qualname__)


def _field_key(value: Any) -> Any:
    """A descriptor's field, exactly: a tensor by its dtype, alignment, shape and strides, a list by its items."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), value.data_ptr() % 16 == 0, tuple(value.shape), tuple(value.stride()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *[_field_key(v) for v in value])
    if type(value) in _SCALARS:
        return (type(value).__name__, value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__qualname__, *[(f.name, _field_key(getattr(value, f.name)))
                                            for f in dataclasses.fields(value)])
    raise Unkeyed(type(value).__qualname__)


def _entry(spec: Any) -> list[Any] | None:
    """A specialization entry as kept: [type, attribute] (strings or null); None where it is not that shape."""
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str) and (spec[1] is None or
                                                                                     isinstance(spec[1], str)):
        return list(spec)
    return None


class KeptSpecializations:
    """One JITFunction's kept specializations on one target: the binder wrapper and what it remembers."""

    def __init__(self, jit_fn: Any, native: Callable[..., Any], identity: str,
                 directory: Callable[[], Path | None]) -> None:
        self.native = native
        self.directory = directory
        self.signature: inspect.Signature = jit_fn.signature
        params = list(jit_fn.params)
        self.names = [p.name for p in params]
        self.constexpr = [bool(p.is_constexpr) for p in params]
        self.supported = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
                             for p in self.signature.parameters.values()) and len(params) == len(self.signature.parameters)
        declaration = [(p.name, bool(p.is_constexpr), bool(p.is_const), bool(p.do_not_specialize),
                        bool(getattr(p, "do_not_specialize_on_alignment", False)), str(p.annotation)) for p in params]
        self.static = json.dumps([VERSION, identity, declaration])
        self.memory: dict[tuple[Any, ...], list[Any]] = {}
        self.remembered = 0

    # -- the binder ------------------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        global _native_used, _replays_left
        if not _native_used:
            if _replays_left > 0:
                try:
                    answer = self._replay(args, kwargs)
                    _replays_left -= 1
                    return answer
                except Exception as exc:  # nothing kept, or not keyable: Triton's binder, which is always right
                    log.debug("autotuner: Triton specializes this call: %s", str(exc))
            _native_used = True
        return self.native(*args, **kwargs)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Triton's binder's bound arguments (every parameter in order, defaults applied) and options."""
        if not self.supported:
            raise Unkeyed("a signature with *args or keyword-only parameters")
        bound = self.signature.bind(*args, **{k: v for k, v in kwargs.items() if k in self.signature.parameters})
        bound.apply_defaults()
        return dict(bound.arguments), {k: v for k, v in kwargs.items() if k not in self.signature.parameters}

    def _key(self, params: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(_arg_key(params[n]) for n, c in zip(self.names, self.constexpr, strict=True) if not c)

    def _path(self, key: tuple[Any, ...]) -> Path | None:
        root = self.directory()
        if root is None:
            return None
        digest = hashlib.sha256((self.static + repr(key)).encode()).hexdigest()
        return root / "specializations" / digest[:2] / f"{digest}.json"

    def _read(self, path: Path, key: tuple[Any, ...]) -> list[Any]:
        kept = json.loads(path.read_text())
        entries = kept["entries"]
        if kept["key"] != json.loads(json.dumps(key)) or not isinstance(entries, list) or len(entries) != len(self.names):
            raise ValueError(f"{path}: kept for another call")
        if not all(e is None or (not c and isinstance(e, list) and _entry(tuple(e)) is not None)
                   for e, c in zip(entries, self.constexpr, strict=True)):
            raise ValueError(f"{path}: an entry of another shape")
        return entries

    def _replay(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        params, options = self._bind(args, kwargs)
        key = self._key(params)
        entries = self.memory.get(key)
        if entries is None:
            path = self._path(key)
            if path is None:
                raise Unkeyed("kept kernels are off")
            entries = self.memory[key] = self._read(path, key)  # FileNotFoundError: not kept yet
        specialization = [("constexpr", params[n]) if e is None else tuple(e) for n, e in zip(self.names, entries,
                                                                                               strict=True)]
        return params, specialization, options

    # -- keeping ---------------------------------------------------------------------------------------------
    def remember(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Keep Triton's specialization of this call for later processes (once; never raises). A process keeps
        at most REMEMBERED calls per kernel: only launches before Triton's binder first runs can use a kept one."""
        try:
            params, _ = self._bind(args, kwargs)
            key = self._key(params)
            if key in self.memory or self.remembered >= REMEMBERED:
                return
            path = self._path(key)
            if path is None:
                return
            self.remembered += 1
            try:
                self.memory[key] = self._read(path, key)
                return
            except (OSError, ValueError, KeyError, TypeError):
                pass  # not kept yet, or damaged: kept (again) below
            global _native_used
            _native_used = True
            _, specialization, _ = self.native(*args, **kwargs)
            entries: list[Any] = []
            for name, constexpr, spec in zip(self.names, self.constexpr, specialization, strict=True):
                if constexpr or (isinstance(spec, tuple) and spec[:1] == ("constexpr",)):
                    entries.append(None)  # replayed from the call's own value (the key holds it exactly)
                    continue
                entry = _entry(spec)
                if entry is None:
                    raise Unkeyed(f"{name}: Triton specialized it as {spec!r}")
                entries.append(entry)
            self.memory[key] = entries
            _write(path, {"key": json.loads(json.dumps(key)), "entries": entries})
        except Unkeyed:
            pass
        except Exception as exc:  # keeping must never stop a launch
            log.debug("autotuner: specialization not kept: %s", str(exc))


def _write(path: Path, content: dict[str, Any]) -> None:
    """Written whole or not at all: a temporary file renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(content, f)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def wrap(jit_fn: Any, native: Callable[..., Any], identity: str, directory: Callable[[], Path | None]) -> Any:
    """Triton's binder for `jit_fn`, answered from kept specializations where it can be; `identity` names the
    Triton installation and the target."""
    try:
        return KeptSpecializations(jit_fn, native, identity, directory)
    except Exception as exc:  # a Triton without these internals
        log.debug("autotuner: no kept specializations for %s: %s", jit_fn, str(exc))
        return native


def remember(binder: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Keep the specialization of a launch through `binder` (a JITFunction's, from its device cache)."""
    if isinstance(binder, KeptSpecializations):
        binder.remember(args, kwargs)
