"""Bytecode for installs that keep none. Where torch was installed without its bytecode (uv's default) and Python may
not write it (PYTHONDONTWRITEBYTECODE, common in container images; or an install this user cannot write), every process
that imports torch compiles its two thousand source files again: seconds of each command's start, on the fork server's
import that a tune's trial worker waits for. There, after a command exits, a process left at the lowest priority
writes the bytecode of what the command and its children import into autotuner's cache folder (never the install;
a tree for each installation), and the commands after it read from there (Python's `sys.pycache_prefix`, inherited by
their children through PYTHONPYCACHEPREFIX). Python then reads bytecode from the tree alone, the standard library's
too, so no command reads from it before it has been filled once: the first command runs as before and waits for
nothing. An install that keeps its bytecode, a prefix the user set, or AUTOTUNER_BYTECODE_CACHE=0 leaves everything
as it is.

Imports nothing beyond the standard library and platformdirs: it runs before the command's own imports."""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from kernels._environment import env_flag

SETTING = "AUTOTUNER_BYTECODE_CACHE"
# What the fork server imports (autotuner.engine.measure.processes.PRELOAD): the first decides, and the writer imports
# all of them, writing the bytecode of everything they import in turn (the standard library's and torch's own
# dependencies included)
PACKAGES = ("torch", "triton", "triton.language")
# Packages compiled whole besides: Triton's compiler imports much of itself (its code generator, Gluon) only when it
# compiles a kernel, in each compile process, which an import of the package leaves uncompiled
WHOLE = ("triton",)
STAMP = "written"  # in a tree: a writer filled it; its modification time: the last command that read the tree
KEPT_S = 30 * 86400  # a tree no command read for this long (an interpreter or torch replaced) is removed
# The program of the process left after a command (with the tree as its prefix): the command's own modules that
# have no bytecode there, compiled as their import would (py_compile: the same header), then the packages imported
# with bytecode written and the WHOLE ones' folders compiled; the stamp once they are; then the trees no command read
# for KEPT_S.
WRITER = ("import compileall, importlib.util, json, os, py_compile, shutil, sys, time\n"
          "os.nice(19)\n"
          "job = json.load(sys.stdin)\n"
          "for path in job['files']:\n"
          "    if not os.path.exists(importlib.util.cache_from_source(path)):\n"
          "        py_compile.compile(path, quiet=2)\n"
          "sys.dont_write_bytecode = False\n"
          "for name in job['packages']:\n"
          "    __import__(name)\n"
          "for path in job['folders']:\n"
          "    compileall.compile_dir(path, quiet=2)\n"
          "open(job['stamp'], 'a').close()\n"
          "for entry in os.scandir(job['folder']):\n"
          "    if entry.is_dir(follow_symlinks=False) and entry.path != job['tree']:\n"
          "        try:\n"
          "            last = os.stat(os.path.join(entry.path, os.path.basename(job['stamp']))).st_mtime\n"
          "        except OSError:\n"
          "            last = entry.stat(follow_symlinks=False).st_mtime\n"
          "        if last < time.time() - job['kept_s']:\n"
          "            shutil.rmtree(entry.path, ignore_errors=True)\n")


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


def keep(packages: tuple[str, ...] = PACKAGES, whole: tuple[str, ...] = WHOLE) -> Path | None:
    """Called first by a command: where packages[0] is imported from source every time, read bytecode from this
    installation's tree of `folder()` (`tree`) in this process and its children once a writer has filled it, and
    leave a writer at exit (`write_behind`) for what this process imported without bytecode there. Returns the tree
    read from, or None where nothing is read from one (yet)."""
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
    atexit.register(write_behind, path, packages, whole)
    stamp = path / STAMP
    if not stamp.exists():
        return None  # the first command: its modules' bytecode beside their sources (the standard library's) stands
    try:
        os.utime(stamp)  # (read now: a writer removes the trees no command read for long)
    except OSError:
        pass
    sys.pycache_prefix = str(path)
    os.environ["PYTHONPYCACHEPREFIX"] = str(path)  # the fork server and spawned processes read it from there
    return path


def _roots(packages: tuple[str, ...]) -> list[str]:
    """The top-level packages of these names (asking for a submodule's file would import its package)."""
    return sorted({name.split(".")[0] for name in packages})


def tree(packages: tuple[str, ...] = PACKAGES) -> Path:
    """This installation's own tree in `folder()`: this interpreter, its standard library and these packages, as
    found now. A cache folder that several installations share (a home folder on NFS, hosts of other images) then
    gives each its own bytecode, never another's to recompile from source; a replaced one starts a new tree."""
    parts = [sys.version, sys.executable]
    for name, source in [("stdlib", Path(os.__file__)), *((name, _source(name)) for name in _roots(packages))]:
        parts.append(f"{name}:{source}:{source.stat().st_mtime_ns if source else 0}")
    return folder() / hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:16]


def write_behind(path: Path, packages: tuple[str, ...], whole: tuple[str, ...] = ()) -> subprocess.Popen[bytes] | None:
    """At the command's exit: a process at the lowest priority, left running, compiles into the tree `path` the
    modules this process imported that have no bytecode there, and, until its stamp is there, imports `packages`
    with bytecode written (what the command's children import: their modules are not this process's to list) and
    compiles the `whole` packages' folders. None: nothing to write."""
    stamp = path / STAMP
    reading = sys.pycache_prefix == str(path)
    files = sorted({file for module in list(sys.modules.values())
                    if isinstance(file := getattr(module, "__file__", None), str) and file.endswith(".py")
                    and os.path.isabs(file)
                    and not (reading and os.path.exists(importlib.util.cache_from_source(file)))})
    filled = stamp.exists()
    names = [] if filled else list(packages)
    folders = [] if filled else [str(source.parent) for name in _roots(whole)
                                 if (source := _source(name)) is not None and source.name == "__init__.py"]
    if not files and not names:
        return None
    job = {"files": files, "packages": names, "folders": folders, "stamp": str(stamp), "tree": str(path),
           "folder": str(path.parent), "kept_s": KEPT_S}
    try:  # (in the tree: the packages it imports are the installed ones, never a folder of the command's own
        # working directory of the same name)
        writer = subprocess.Popen([sys.executable, "-c", WRITER], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True, cwd=path,
                                  env={**os.environ, "PYTHONPYCACHEPREFIX": str(path)})
        assert writer.stdin is not None
        writer.stdin.write(json.dumps(job).encode())
        writer.stdin.close()
    except OSError:
        return None
    return writer
