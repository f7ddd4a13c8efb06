"""torch.compile's remote caches kept in the database: under `autotuner.install()` with AUTOTUNER_COMPILE_SECRET set,
Inductor's compiled graphs (which hold each max-autotune choice), its pointwise and reduction kernels' tuned
configs, and AOTAutograd's entries are stored signed, as compiled files are (db.compiled_files),
so a process or host compiling the same model loads them instead of benchmarking again. Inductor reaches its
remote caches through one hook, each cache class's `backend_override_cls`; its switch for each is turned on where
the user left it unset. More: docs/inductor.md."""

from __future__ import annotations

import hashlib
import importlib
import logging
from typing import Any

from autotuner.decorator.after_import import forget, when_imported
from autotuner.store.compiled_files import CompiledFiles

log = logging.getLogger(__name__)
# Inductor's remote cache classes (in torch._inductor.remote_cache) -> the config switch that turns each on. Not its
# bundle of a graph's kernel configs (the configs themselves are kept one by one): the bundle asserts a GPU
# backend's hash, so a compile for the CPU with it on fails.
CACHES = {
    "RemoteFxGraphCache": ("torch._inductor.config", "fx_graph_remote_cache"),
    "RemoteAutotuneCache": ("torch._inductor.config", "autotune_remote_cache"),
    "RemoteAOTAutogradCache": ("torch._functorch.config", "enable_remote_autograd_cache"),
}
MODULE = "torch._inductor.remote_cache"
_installed: dict[str, Any] = {}  # what install changed -> what it was, to put back
_target: list[tuple[str | None, str]] = []  # the database and secret, while installed
_said: set[str] = set()
_made: list[bool] = []  # the database was made (or found) by this process's first put


def _say_once(what: str, message: str) -> None:
    if what not in _said:
        _said.add(what)
        log.warning(message)


def _backend_class(cache: str) -> type:
    from torch._inductor.remote_cache import RemoteCacheBackend

    class DatabaseBackend(RemoteCacheBackend[bytes]):  # type: ignore[misc]
        """One Inductor cache's entries as signed compiled files under `inductor/<cache>`; a database out of
        reach or an entry that does not verify is a miss (Inductor compiles and benchmarks as without it)."""

        def __init__(self) -> None:
            super().__init__()
            url, secret = _target[0]
            self.files, self.key = CompiledFiles(url, secret), f"inductor/{cache}"

        @staticmethod
        def _file(key: str) -> str:
            return key if len(key) <= 400 else hashlib.sha256(key.encode()).hexdigest()

        def _get(self, key: str) -> bytes | None:
            name = self._file(key)
            try:
                if self.files.missing():
                    return None
                found, bad = self.files.get(self.key, [name])
            except Exception as exc:  # noqa: BLE001 - a database away: a miss
                _say_once("get", f"autotuner: Inductor's {cache} not read from the database ({type(exc).__name__}: "
                                 f"{exc}); compiling")
                return None
            if bad:
                _say_once(f"bad:{cache}", f"autotuner: an entry of Inductor's {cache} does not verify under this "
                                          "host's AUTOTUNER_COMPILE_SECRET: not loaded")
            return found.get(name)

        def _put(self, key: str, data: bytes) -> None:
            try:
                if not _made:  # a write may make the database, as a tune's first write does
                    from autotuner.launch.lookup import resolver

                    resolver().store.writer()
                    _made.append(True)
                self.files.put(self.key, self._file(key), bytes(data))
            except Exception as exc:  # noqa: BLE001 - kept in Inductor's local cache as without it
                _say_once("put", f"autotuner: Inductor's {cache} not kept in the database ({type(exc).__name__}: "
                                 f"{exc})")

    DatabaseBackend.__qualname__ = DatabaseBackend.__name__ = f"Database{cache}Backend"
    return DatabaseBackend


def _patch() -> None:
    """Each of Inductor's remote caches over the database, and its switch on where unset (once)."""
    remote = importlib.import_module(MODULE)
    if _installed:
        return
    for cache, (module, switch) in CACHES.items():
        cls = getattr(remote, cache, None)
        config = importlib.import_module(module)
        if cls is None or not hasattr(config, switch):  # a torch without this cache
            continue
        _installed[f"{cache}.backend_override_cls"] = cls.backend_override_cls
        cls.backend_override_cls = _backend_class(cache)
        if getattr(config, switch) is None:
            _installed[f"{module}.{switch}"] = None
            setattr(config, switch, True)


def install(url: str | None, secret: str | None) -> bool:
    """Inductor's remote caches over the database at `url` (None: the default one), signed under `secret`: now if
    Inductor is imported, else when it is. Whether they will be (nothing without a secret)."""
    if not secret or _target:
        return bool(_target)
    _target.append((url, secret))
    when_imported(MODULE, _patch)
    return True


def uninstall() -> None:
    """Inductor's caches as they were."""
    forget(_patch)
    if _installed:
        remote = importlib.import_module(MODULE)
        for name, value in _installed.items():
            owner, attr = name.rsplit(".", 1)
            setattr(getattr(remote, owner) if owner in CACHES else importlib.import_module(owner), attr, value)
        _installed.clear()
    _target.clear()
