"""Bytecode for installs that keep none. Where torch was installed without its bytecode (uv's default) and Python may
not write it (PYTHONDONTWRITEBYTECODE, common in container images; or an install this user cannot write), every process
that imports torch compiles its two thousand source files again: seconds of each command's start, on the fork server's
import that a tune's trial worker waits for. There a command reads and writes bytecode in a tree of autotuner's cache
folder (a tree for each installation; never the install), through Python's `sys.pycache_prefix`, which its children
inherit as PYTHONPYCACHEPREFIX. Python then reads every module's bytecode from the tree alone, the standard library's
too, so a tree's first command copies the standard library's bytecode into it (tens of milliseconds) and starts its
fill (autotuner.base.bytecode_fill): torch, Triton, NumPy and autotuner's own packages compiled whole, then the
distributions autotuner requires, on every core but two at the lowest priority, while the command goes on; what the
command imports before the fill has reached it is compiled as before, and written by the command itself. An install
that keeps its bytecode, a prefix the user set, or AUTOTUNER_BYTECODE_CACHE=0 leaves everything as it is.

Imports nothing beyond the standard library and platformdirs: it runs before the command's own imports."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from autotuner.base import bytecode_fill
from kernels._environment import env_flag

SETTING = "AUTOTUNER_BYTECODE_CACHE"
# What decides (the first: where it keeps no bytecode) and names a tree: what the fork server imports
# (autotuner.engine.measure.processes.PRELOAD), top-level packages alone (finding a submodule's file would import
# its package)
PACKAGES = ("torch", "triton")
# Filled whole, first: those, NumPy (which torch imports where it is installed) and autotuner's own packages; then
# the distributions that REQUIRES requires, but below BELOW (torch's own requirements: no command imports them)
FILLED = ("torch", "triton", "numpy", "autotuner", "kernels", "search_spaces", "db", "api")
REQUIRES, BELOW = "autotuner", ("torch", "triton")
STAMP = "written"  # in a tree: a fill ended; its modification time: the last command that read the tree
FILLING = "filling"  # in a tree: a fill began (when: its modification time)
FILL_S = 600  # a fill begun this long ago has died: the next command starts another
# A fill's workers: every core but two (the command's own process and its fork server), at most this many (a fill is
# a few thousand files of milliseconds each: past this, a worker's own start is a large part of its share)
FILL_WORKERS = 32
KEPT_S = 30 * 86400  # a tree no command read for this long (an interpreter or torch replaced) is removed


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


def keep(packages: tuple[str, ...] = PACKAGES, filled: tuple[str, ...] = FILLED,
         requires: str | None = REQUIRES) -> Path | None:
    """Called first by a command: where packages[0] is imported from source every time, read and write bytecode in
    this installation's tree of `folder()` (`tree`), in this process and its children; in a tree no fill has ended
    in, copy the standard library's bytecode there and start one (`fill`). Returns the tree, or None where nothing is
    kept."""
    if sys.pycache_prefix is not None or not env_flag(SETTING, default=True) or not hasattr(os, "getuid"):
        return None  # (no owner to check on Windows: left as it is there)
    source = _source(packages[0])
    if source is None or not lacks_bytecode(source):
        return None
    base = folder()
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        made = base.stat()
        if made.st_uid != os.getuid() or made.st_mode & 0o022:  # bytecode is code: a folder no one else may write
            return None
        path = tree(packages)
        path.mkdir(exist_ok=True, mode=0o700)
    except OSError:
        return None
    stamp = path / STAMP
    if stamp.exists():
        try:
            os.utime(stamp)  # (read now: a fill removes the trees no command read for long)
        except OSError:
            pass
    else:  # the standard library's first (it has its bytecode beside it, which Python no longer reads), then the rest
        stdlib = os.path.dirname(os.__file__)
        for file in bytecode_fill.walk(stdlib, bytecode_fill.STDLIB_SKIPPED):
            bytecode_fill.fill_one(str(path), file, compile_missing=False)
        fill(path, filled, requires)
    sys.pycache_prefix = str(path)
    os.environ["PYTHONPYCACHEPREFIX"] = str(path)  # the fork server and spawned processes read it from there
    # and what this process (and what it spawns) compiles is written there, for the next; the fork server, started
    # with -B by multiprocessing where this process was, writes nothing
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    return path


def fill(path: Path, filled: tuple[str, ...] = FILLED,
         requires: str | None = REQUIRES) -> subprocess.Popen[bytes] | None:
    """Start the fill of the tree `path` (autotuner.base.bytecode_fill), left running past this command; None where
    another began one less than FILL_S ago, or it could not start."""
    marker = path / FILLING
    try:
        if marker.exists() and marker.stat().st_mtime > time.time() - FILL_S:
            return None
        marker.touch()
    except OSError:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    folders = [str(source.parent) for name in filled
               if (source := _source(name)) is not None and source.name == "__init__.py"]
    job = {"tree": str(path), "stamp": str(path / STAMP), "filling": str(marker), "kept_s": KEPT_S,
           "folders": folders, "requires": requires, "below": list(BELOW), "path": sys.path,
           "workers": max(1, min(cores - 2, FILL_WORKERS))}
    try:  # (isolated: no folder of the command's own decides what it imports; its working folder the tree's)
        process = subprocess.Popen([sys.executable, "-I", "-S", "-X", f"pycache_prefix={path}",
                                    bytecode_fill.__file__],
                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True, cwd=path)
        assert process.stdin is not None
        process.stdin.write(json.dumps(job).encode())
        process.stdin.close()
    except OSError:
        return None
    return process


def tree(packages: tuple[str, ...] = PACKAGES) -> Path:
    """This installation's own tree in `folder()`: this interpreter, its standard library and these packages, as
    found now. A cache folder that several installations share (a home folder on NFS, hosts of other images) then
    gives each its own bytecode, never another's to recompile from source; a replaced one starts a new tree."""
    parts = [sys.version, sys.executable]
    for name, source in [("stdlib", Path(os.__file__)), *((name, _source(name)) for name in packages)]:
        parts.append(f"{name}:{source}:{source.stat().st_mtime_ns if source else 0}")
    return folder() / hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:16]
