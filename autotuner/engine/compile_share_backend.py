"""Triton's remote-cache backend over the autotuner database (db.compiled_files), for the processes that
autotuner.engine.compile_share set it up in. Triton constructs one per cache key, asks `get` before it compiles
and calls `put` with each file it wrote; a database that cannot be reached, or a file that does not verify, is a
compile as usual (said once in the log), never a failed one.

The intermediate IR a compile leaves (TTIR, TTGIR, LLVM IR, PTX: four fifths of the bytes) is not kept: a kernel
loads from its binary and metadata (`CompiledKernel` reads `asm[binary_ext]`), and the group file that lists a
compile's files lists what was kept, so a host that loads it has a kernel whose `asm` holds the binary alone.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from triton.runtime.cache import RemoteCacheBackend

from autotuner.engine.compile_share import SECRET_VAR, URL_VAR

log = logging.getLogger(__name__)
GROUP = "__grp__"  # Triton's prefix for the file listing a compile's files
NOT_KEPT = frozenset({"source", "ttir", "ttgir", "llir", "ptx", "amdgcn"})  # intermediate IR, by extension
_engines: dict[str, Any] = {}
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


def _engine(url: str | None) -> Any:
    """Where the files are: a plain SQLite file's path (read and written through sqlite3, no SQLAlchemy imported:
    db.compiled_files), else an engine, made once per URL."""
    from db.sqlite_reads import plain_path

    path = plain_path(url)
    if path is not None:
        return path
    from db.basics import default_url
    from db.engine import make_engine

    url = url or default_url()
    if url not in _engines:
        _engines[url] = make_engine(url)
    return _engines[url]


def prepare() -> None:
    """Make now what this process's first `get` needs (the database modules, the engine where one is used): a
    process about to compile calls it while it starts. Failing here is left to that `get` to report."""
    try:
        backend = DatabaseBackend("")
        if backend.secret:
            from db import compiled_files  # noqa: F401

            _engine(backend.url)
    except Exception:  # noqa: S110 - said by the first get, which meets it again
        pass


class DatabaseBackend(RemoteCacheBackend):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key
        # as autotuner.engine.compile_share handed them to this process (the command's settings, resolved there)
        self.secret, self.url = os.environ.get(SECRET_VAR, ""), os.environ.get(URL_VAR) or None

    def get(self, filenames: list[str]) -> dict[str, bytes]:
        if not self.secret:
            return {}
        from db import compiled_files

        try:
            found, bad = compiled_files.get(_engine(self.url), self.secret, self.key, list(filenames))
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
        from db import compiled_files

        try:
            if filename.startswith(GROUP):
                data = _kept_group(data)
            compiled_files.put(_engine(self.url), self.secret, self.key, filename, data)
        except Exception as exc:
            _say_once("put", f"compiled files not kept in the database ({type(exc).__name__}: {exc})")
