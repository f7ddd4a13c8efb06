"""One compile of a kernel binary at a time on a host: processes about to compile the same binary wait for the first.
More: docs/design/engine.md."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kernels._compile_key import compile_key

WAIT_S = 300.0
_DIR = ".autotuner-compile-locks"  # inside Triton's cache folder: processes sharing a cache share its locks


def cache_dir() -> Path:
    """Triton's cache folder in this process (TRITON_CACHE_DIR, else Triton's default)."""
    if os.environ.get("TRITON_CACHE_DIR"):
        return Path(os.environ["TRITON_CACHE_DIR"])
    try:
        from triton import knobs

        return Path(knobs.cache.dir)
    except (ImportError, AttributeError):  # an older Triton
        return Path.home() / ".triton" / "cache"


@contextlib.contextmanager
def held(path: Path, wait_s: float = WAIT_S) -> Iterator[bool]:
    """An exclusive flock on `path` (made if missing), waited for up to `wait_s`; yields whether it was taken (a
    folder that cannot be written, or a wait that ran out, goes on without it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    try:
        deadline, pause = time.monotonic() + wait_s, 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                taken = True
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                    taken = False
                    break
            time.sleep(pause)
            pause = min(0.05, pause * 2)
        yield taken
    finally:
        os.close(fd)  # (releases the lock)


def locked(compile_fn: Callable[..., Any]) -> Callable[..., Any]:
    """`compile_fn` (Triton's compile) run under the lock of the binary it is asked for."""

    def compile(src: Any, target: Any = None, options: dict[str, Any] | None = None, **kw: Any) -> Any:
        try:
            key = compile_key(src, target, options)
        except Exception:  # a Triton without these internals: compiled as before
            return compile_fn(src, target=target, options=options, **kw)
        with held(cache_dir() / _DIR / key[:2] / key):
            return compile_fn(src, target=target, options=options, **kw)

    compile._autotuner_locked = True  # type: ignore[attr-defined]
    return compile


def install() -> bool:
    """Route this process's Triton compiles through the locks, for kernels first launched from now on (a kernel
    binds `triton.compiler.compile` at its first launch on a device). False where this Triton has no such entry
    point."""
    try:
        import triton.compiler as compiler
    except ImportError:
        return False
    current = getattr(compiler, "compile", None)
    if current is None:
        return False
    if not getattr(current, "_autotuner_locked", False):
        compiler.compile = locked(current)
    return True
