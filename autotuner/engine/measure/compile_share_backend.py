"""Triton's remote-cache backend over the autotuner database (autotuner.store.compiled_files), and the manager that asks
it. Triton asks `get` before it compiles and `put`s each file it wrote; a database out of reach or a file that does not
verify means a compile as usual, never a failed one. More: docs/design/engine.md."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from triton.runtime.cache import RemoteCacheBackend, RemoteCacheManager

from autotuner.engine.measure.compile_share import SECRET_VAR, URL_VAR
from autotuner.store.compiled_files import CompiledFiles

log = logging.getLogger(__name__)
GROUP = "__grp__"  # Triton's prefix for the file listing a compile's files
NOT_KEPT = frozenset({"source", "ttir", "ttgir", "llir", "ptx", "amdgcn"})  # intermediate IR, by extension
_said: set[str] = set()


def _say_once(what: str, message: str) -> None:
    if what not in _said:
        _said.add(what)
        log.warning(message)


def kept(filename: str) -> bool:
    return filename.rsplit(".", 1)[-1] not in NOT_KEPT


def _kept_group(data: bytes) -> bytes:
    """A group file listing only the files that are kept."""
    group = json.loads(data)
    group["child_paths"] = [p for p in group.get("child_paths", []) if kept(p)]
    return json.dumps(group).encode()


def prepare() -> None:
    """Make now what this process's first `get` needs (the database modules, the engine where one is used): a
    process about to compile calls it while it starts. Failing here is left to that `get` to report."""
    try:
        backend = DatabaseBackend("")
        if backend.secret:
            backend.files.prepare()
    except Exception:  # noqa: S110 - said by the first get, which meets it again
        pass


class DatabaseBackend(RemoteCacheBackend):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key
        # as autotuner.engine.measure.compile_share handed them to this process (the command's settings, resolved there)
        self.secret, self.url = os.environ.get(SECRET_VAR, ""), os.environ.get(URL_VAR) or None
        self.files = CompiledFiles(self.url, self.secret)

    def get(self, filenames: list[str]) -> dict[str, bytes]:
        if not self.secret:
            return {}
        try:
            found, bad = self.files.get(self.key, list(filenames))
        except Exception as exc:  # a database away or at an older schema: compile here
            _say_once("get", f"compiled files not read from the database ({type(exc).__name__}: {exc}); compiling")
            return {}
        for name in bad:
            _say_once(f"bad:{name}", f"compiled file {name} of {self.key} does not verify under this host's "
                                     "AUTOTUNER_COMPILE_SECRET: not loaded")
        return found

    def put(self, filename: str, data: bytes) -> None:
        if not self.secret or not kept(filename):
            return
        try:
            if filename.startswith(GROUP):
                data = _kept_group(data)
            self.files.put(self.key, filename, data)
        except Exception as exc:
            _say_once("put", f"compiled files not kept in the database ({type(exc).__name__}: {exc})")


class LocalFirstManager(RemoteCacheManager):
    """Triton's RemoteCacheManager, looking in this host's file cache before asking the backend; a group is served only
    whole. The local folder keeps Triton's FileCacheManager layout, group files included, so a process that shares
    nothing reads what a sharing one left."""

    def get_file(self, filename: str) -> str | None:
        local = self._file_cache_manager.get_file(filename)
        return local if local is not None else super().get_file(filename)

    def get_group(self, filename: str) -> dict[str, str] | None:
        if getattr(self, "_dump", False) or getattr(self, "_override", False):
            return super().get_group(filename)  # (Triton's: its dump and override folders are local)
        local = _local_group(self._file_cache_manager, filename)
        if local is not None:
            return local
        try:
            listed = json.loads(self._backend.get([GROUP + filename]).get(GROUP + filename, b"")).get("child_paths")
        except (ValueError, AttributeError):  # none kept, or a torn or foreign file: a compile
            return None
        if not isinstance(listed, list) or not listed:
            return None
        found = self._backend.get(listed)
        if set(found) != set(listed):  # one missing or not verifying: a compile, as for no group at all
            return None
        group = {name: self._file_cache_manager.put(data, name, binary=True) for name, data in found.items()}
        self._file_cache_manager.put_group(filename, group)
        return group

    def put_group(self, filename: str, group: dict[str, str]) -> str:
        if getattr(self, "_dump", False) or getattr(self, "_override", False):
            return super().put_group(filename, group)
        self._backend.put(GROUP + filename, json.dumps({"child_paths": sorted(group)}).encode())
        return self._file_cache_manager.put_group(filename, group)


def _local_group(files: Any, filename: str) -> dict[str, str] | None:
    """The files of group `filename` in the file cache `files`, by name (None: its group file or one of its files
    is not there, or the group file is torn or foreign: asked for again or compiled over, as Triton does)."""
    try:
        with open(files.get_file(GROUP + filename)) as f:
            listed = json.load(f).get("child_paths")
    except (TypeError, OSError, ValueError, AttributeError):
        return None
    if not isinstance(listed, (list, dict)) or not listed:
        return None
    found = {name: files.get_file(name) for name in listed}
    if any(path is None for path in found.values()):
        return None
    if isinstance(listed, list):  # RemoteCacheManager's layout, left by an earlier version: Triton's own again
        files.put_group(filename, found)
    return found
