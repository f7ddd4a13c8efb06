"""Bytecode for installs that keep none. Where torch was installed without its bytecode (uv's default) and Python may
not write it (PYTHONDONTWRITEBYTECODE, common in container images; or an install this user cannot write), every process
that imports torch compiles its two thousand source files again: seconds of each command's start, on the fork server's
import that a tune's trial worker waits for. There, autotuner's commands keep the bytecode of what they import in its
cache folder (Python's `sys.pycache_prefix`, inherited by their children through PYTHONPYCACHEPREFIX), never in the
install; a process started in the background writes torch's and Triton's the first time, since the children that
import them run under `-B`. An install that keeps its bytecode, a prefix the user set, or AUTOTUNER_BYTECODE_CACHE=0
leaves everything as it is.

Imports nothing beyond the standard library and platformdirs: it runs before the command's own imports."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from kernels._environment import env_flag

SETTING = "AUTOTUNER_BYTECODE_CACHE"
# What the fork server imports (autotuner.engine.measure.processes.PRELOAD): the first decides, all are written ahead
WRITTEN_AHEAD = ("torch", "triton", "triton.language")
_WRITE = ("import os, sys\n"
          "os.nice(19)\n"
          "sys.dont_write_bytecode = False\n"
          "for name in sys.argv[2:]:\n"
          "    __import__(name)\n"
          "open(sys.argv[1], 'w').close()\n")


def folder() -> Path:
    """Where the bytecode is kept: a pycache folder in the user's cache dir."""
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("autotuner", appauthor=False)) / "pycache"


def _source(name: str) -> Path | None:
    """The file a module is imported from, found without importing it (None: not installed, or not from source)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None


def lacks_bytecode(source: Path) -> bool:
    """Whether every import of this module compiles it: no bytecode beside it, and none may be written there."""
    cached = Path(importlib.util.cache_from_source(str(source)))  # (no prefix set: beside the source)
    if cached.exists():
        return False
    return sys.dont_write_bytecode or not os.access(source.parent, os.W_OK)


def keep(modules: tuple[str, ...] = WRITTEN_AHEAD) -> Path | None:
    """Called first by a command: where modules[0] is imported from source every time, keep the bytecode of this
    process and its children in `folder()`, and write `modules`' there in the background if no process has yet.
    Returns the folder, or None where nothing changed."""
    if sys.pycache_prefix is not None or not env_flag(SETTING, default=True):
        return None
    source = _source(modules[0])
    if source is None or not lacks_bytecode(source):
        return None
    path = folder()
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)  # (bytecode is code: the user's own folder)
    except OSError:
        return None
    sys.pycache_prefix = str(path)
    os.environ["PYTHONPYCACHEPREFIX"] = str(path)  # the fork server and spawned processes read it from there
    sys.dont_write_bytecode = False  # this process writes what it imports: into the cache folder, not the install
    _write_ahead(path, modules)
    return path


def _stamp(path: Path, modules: tuple[str, ...]) -> Path:
    """The file the writer leaves once it imported `modules` from these sources with this interpreter: another
    version of any (its source's modification time moves) or another interpreter writes again."""
    parts = [sys.version, sys.executable]
    for name in modules:
        source = _source(name)
        parts.append(f"{name}:{source}:{source.stat().st_mtime_ns if source else 0}")
    return path / f"written-{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:16]}"


def _write_ahead(path: Path, modules: tuple[str, ...]) -> subprocess.Popen[bytes] | None:
    """A background process at the lowest priority importing `modules` with bytecode written (the first command
    on this install: later ones find the stamp)."""
    stamp = _stamp(path, modules)
    if stamp.exists():
        return None
    try:
        return subprocess.Popen([sys.executable, "-c", _WRITE, str(stamp), *modules], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None
