"""The fill of a bytecode tree (autotuner.base.bytecode): the bytecode of whole packages, written into the tree on
every core but two, at the lowest priority, while the command that started it goes on. Run as a script, in isolated mode
(`python -I -S -X pycache_prefix=TREE bytecode_fill.py`), with its job on standard input: it imports the standard
library alone, so that no folder of the command's (its working folder, PYTHONPATH) decides what it runs.

A module with bytecode beside its source has it copied into the tree (where a prefix is set, Python reads the tree
alone and would compile it); one without is compiled, with the header Python's own import writes. Each file lands
whole (written aside, then renamed), so a command reading the tree meanwhile finds a module's bytecode or none.
The files go in the order imports need them: every package's shallowest files first, so that the command's own
imports (its command line's packages first) and its fork server's (torch's) are both met early."""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
import time

SKIPPED = {"__pycache__", "test", "tests"}  # folders no command imports from
# the standard library's folders besides that no command of autotuner's imports
STDLIB_SKIPPED = SKIPPED | {"idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages",
                            "dist-packages"}


def in_tree(tree: str, source: str) -> str:
    """Where Python, with `tree` as its pycache prefix, reads this source's bytecode (as importlib lays it out: the
    file's name as beside it, under the tree's copy of the source's folder)."""
    folder = os.path.dirname(source if os.path.isabs(source) else os.path.join(os.getcwd(), source))
    return os.path.join(tree, folder.lstrip(os.sep), os.path.basename(importlib.util.cache_from_source(source)))


def fill_one(tree: str, source: str, compile_missing: bool = True) -> None:
    """This source's bytecode into the tree, unless there: copied from beside it, else compiled (`compile_missing`)."""
    target = in_tree(tree, source)
    if os.path.exists(target):
        return
    beside = os.path.join(os.path.dirname(source), "__pycache__", os.path.basename(target))
    aside = f"{target}.{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.exists(beside):
            shutil.copyfile(beside, aside)
            os.replace(aside, target)
        elif compile_missing:  # (py_compile writes aside and renames, as the import does)
            py_compile.compile(source, cfile=target, quiet=2,
                               invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    except OSError:  # (a file that cannot be read or written: its import compiles it, as before)
        if os.path.exists(aside):
            os.unlink(aside)


def walk(folder: str, skipped: set[str] = SKIPPED) -> list[str]:
    """Every source file under `folder`, but in `skipped` folders."""
    found: list[str] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in skipped]
        found.extend(os.path.join(root, f) for f in files if f.endswith(".py"))
    return found


def required(name: str, path: list[str], below: set[str]) -> list[str]:
    """The source files of distribution `name` and of those it requires (their own requirements too, but those of
    the `below` ones: torch's and Triton's, which a command does not import), found on `path`."""
    import importlib.metadata  # (here: the command that imports this module for `fill_one` has no need of it)

    files: list[str] = []
    queue, seen = [name], set()
    while queue:
        key = re.split(r"[\s<>=!~;\[(]", queue.pop(0).strip(), maxsplit=1)[0].lower().replace("_", "-")
        if not key or key in seen:
            continue
        seen.add(key)
        dist = next(iter(importlib.metadata.distributions(name=key, path=path)), None)
        if dist is None:
            continue
        files.extend(str(f.locate()) for f in dist.files or []
                     if f.name.endswith(".py") and not SKIPPED.intersection(f.parts))
        if key not in below:
            queue.extend(r for r in dist.requires or [] if "extra ==" not in r)
    return files


def ordered(files: list[str], roots: list[str]) -> list[str]:
    """Each file once, the shallowest under the folder it is imported from (`roots`: sys.path's) first: the packages'
    `__init__` and top modules before what they import further down."""
    roots = [r for r in roots if os.path.isabs(r)]

    def depth(path: str) -> int:
        root = max((r for r in roots if path.startswith(r + os.sep)), key=len, default=os.path.dirname(path))
        return path[len(root):].count(os.sep)

    return sorted(dict.fromkeys(files), key=lambda p: (depth(p), p))


def stripes(files: list[str], workers: int) -> list[list[str]]:
    """Each worker a stripe through the order, so that all of them work on its head first."""
    return [files[i::workers] for i in range(workers) if files[i::workers]]


def fill(job: dict) -> None:
    """The coordinator: a worker process a stripe, started first; then the files, `job["folders"]` whole (what the
    fork server imports, and autotuner's own), then the distributions `job["requires"]` names, each handed to the
    workers as soon as listed; then the stamp, the marker of a fill in progress removed, the trees no command read
    for `job["kept_s"]` removed."""
    os.nice(19)  # (below the command's own processes, its compile pool's too; its workers inherit it)
    tree = job["tree"]
    workers = [subprocess.Popen([sys.executable, "-I", "-S", "-X", f"pycache_prefix={tree}", __file__, "--worker",
                                 tree], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                text=True) for _ in range(job["workers"])]
    roots = [*(os.path.dirname(f) for f in job["folders"]), *job["path"]]
    first = ordered([f for folder in job["folders"] for f in walk(folder)], roots)
    rest = required(job["requires"], job["path"], set(job["below"])) if job["requires"] else []
    listed = set(first)
    for wave in (first, ordered([f for f in rest if f not in listed], roots)):
        for worker, stripe in zip(workers, stripes(wave, len(workers)), strict=False):
            assert worker.stdin is not None
            try:
                worker.stdin.write("".join(f"{path}\n" for path in stripe))
                worker.stdin.flush()
            except OSError:  # (a worker that died: its files are compiled by the imports that need them)
                pass
    for worker in workers:
        assert worker.stdin is not None
        try:
            worker.stdin.close()
        except OSError:
            pass
        worker.wait()
    open(job["stamp"], "a").close()
    try:
        os.unlink(job["filling"])
    except OSError:
        pass
    for entry in os.scandir(os.path.dirname(tree)):
        if entry.is_dir(follow_symlinks=False) and entry.path != tree:
            try:
                last = os.stat(os.path.join(entry.path, os.path.basename(job["stamp"]))).st_mtime
            except OSError:
                last = entry.stat(follow_symlinks=False).st_mtime
            if last < time.time() - job["kept_s"]:
                shutil.rmtree(entry.path, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:  # its stripes, a path a line, as the coordinator lists them
        for line in sys.stdin:
            fill_one(sys.argv[2], line.rstrip("\n"))
    else:
        fill(json.load(sys.stdin))
