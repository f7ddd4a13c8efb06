"""Compiled kernels kept by autotuner, so a process launching a tuned kernel skips Triton's compile-cache key. More:
docs/design/launch.md."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotuner.launch import specializations
from kernels._compile_key import compile_key, triton_fingerprint

log = logging.getLogger(__name__)


def _passthrough() -> bool:
    """Whether Triton has been asked for something this cache would skip: dumps, overrides, forced compiles."""
    try:
        from triton import knobs

        c = knobs.compilation
        return bool(c.always_compile or c.override or c.dump_ir or c.listener)
    except (ImportError, AttributeError):
        return True


def _load(entry: Path, src: Any) -> Any:
    from triton.compiler.compiler import CompiledKernel

    meta = json.loads((entry / "entry.json").read_text())
    group = {name: str(entry / name) for name in meta["files"]}
    if not all(os.path.exists(p) for p in group.values()):
        raise FileNotFoundError(f"{entry}: a kept file is missing")
    kernel = CompiledKernel(src, group, meta["hash"])
    if hashlib.sha256(kernel.kernel).hexdigest() != meta["binary_sha256"]:
        raise ValueError(f"{entry}: the binary is not the one kept")
    return kernel


def _keep(entry: Path, kernel: Any) -> None:
    """Keep a compiled kernel's files under `entry`, written whole or not at all; a folder that cannot be
    written keeps nothing (the launch goes on)."""
    group: dict[str, str] = dict(getattr(kernel, "metadata_group", None) or {})
    if not group or entry.exists():
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    except OSError as exc:
        log.warning("autotuner: cannot keep compiled kernels in %s: %s", entry.parent.parent, str(exc))
        return
    try:
        for name, path in group.items():
            if os.path.basename(name) != name:
                return
            try:
                os.link(path, tmp / name)
            except OSError:
                shutil.copyfile(path, tmp / name)
        (tmp / "entry.json").write_text(json.dumps({"hash": kernel.hash, "files": sorted(group),
                                                     "binary_sha256": hashlib.sha256(kernel.kernel).hexdigest()}))
        os.rename(tmp, entry)  # atomic; another process that kept it first wins, and this copy goes
    except OSError:
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cached_compile(compile_fn: Callable[..., Any], directory: Callable[[], Path | None]) -> Callable[..., Any]:
    """`triton.compile` answered from the kept kernels where it can be."""

    def compile(src: Any, target: Any = None, options: dict[str, Any] | None = None, **kw: Any) -> Any:
        try:
            root = directory()
        except Exception as exc:  # bad settings, say: compiling must not fail for the kept binaries' sake
            log.warning("autotuner: kept binaries off for this compile: %s", str(exc))
            root = None
        # `_env_vars`: Triton's own list of its cache-invalidating variables, handed over by a compile started in
        # its AsyncCompileMode (compile_key reads them itself); any other keyword is one this does not know
        if root is None or target is None or set(kw) - {"_env_vars"} or not hasattr(src, "fn") or _passthrough():
            return compile_fn(src, target=target, options=options, **kw)
        try:
            key = compile_key(src, target, options)
        except Exception as exc:  # a Triton without these internals: its own path, which is always right
            log.debug("autotuner: no key for a kept kernel: %s", str(exc))
            return compile_fn(src, target=target, options=options, **kw)
        entry = root / key[:2] / key
        if entry.exists():
            try:
                return _load(entry, src)
            except Exception as exc:  # a damaged entry: dropped, and kept again from Triton's compile
                log.warning("autotuner: dropping damaged kept kernel %s: %s", entry, str(exc))
                shutil.rmtree(entry, ignore_errors=True)
        kernel = compile_fn(src, target=target, options=options, **kw)
        _keep(entry, kernel)
        return kernel

    compile._autotuner_kept = True  # type: ignore[attr-defined]
    return compile


def kept_dir() -> Path | None:
    """Where kept binaries live (AUTOTUNER_KERNEL_CACHE_DIR, default a kernels folder in the user's cache dir);
    None when AUTOTUNER_KERNEL_CACHE=0."""
    from autotuner.launch.lookup import resolver

    settings = resolver().settings
    if not settings.kernel_cache:
        return None
    if settings.kernel_cache_dir:
        return Path(settings.kernel_cache_dir)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("autotuner", appauthor=False)) / "kernels"


def install(jit_fn: Any, directory: Callable[[], Path | None] = kept_dir) -> bool:
    """Route `jit_fn`'s compiles through the kept kernels, and its binder through the kept specializations; False where
    this Triton has no per-device cache to hook."""
    caches = getattr(jit_fn, "device_caches", None)
    if not isinstance(caches, defaultdict) or caches.default_factory is None:
        return False
    make = caches.default_factory
    if getattr(make, "_autotuner_kept", False):
        return True

    def factory() -> Any:
        made = make()
        current = getattr(jit_fn, "compile", None)
        if current is not None and not getattr(current, "_autotuner_kept", False):
            jit_fn.compile = cached_compile(current, directory)
        # (kernel cache, key cache, target, backend, binder): the binder answers from kept specializations
        if isinstance(made, tuple) and len(made) == 5 and callable(made[4]) and made[2] is not None:
            made = (*made[:4], specializations.wrap(jit_fn, made[4], f"{triton_fingerprint()}|{made[2]!r}", directory))
        return made

    factory._autotuner_kept = True  # type: ignore[attr-defined]
    caches.default_factory = factory
    return True
