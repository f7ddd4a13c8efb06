"""The engine's view of the database: small interfaces (`interfaces`) with one SQL implementation (`database.Store`), a
launching process's sqlite3 reads (`lazy`), a worker's writes through outages (`job_store`), and what is judged, served
and handed out from rows. Every caller opens a database with `open_store(url)` and reads the interfaces
(tests/unit/house/test_architecture.py). More: docs/design/store.md.

May import: `autotuner.base`, `db`, the ground floor."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotuner.store.interfaces import Storage

Opener = Callable[..., "Storage"]  # (url, *, create, timeout_s) -> a store answering every interface


def _sql(url: str | None, *, create: bool = True, timeout_s: float | None = None) -> Storage:
    from autotuner.store.database import Store  # SQLAlchemy is imported on first use, not with the package

    return Store(url, create=create, timeout_s=timeout_s)


_BACKENDS: dict[str, Opener] = {"sqlite": _sql, "postgresql": _sql}


def register_backend(scheme: str, opener: Opener) -> None:
    """Open URLs of `scheme` (`memory://...`; a driver's `+name` is not part of it) with `opener`, a callable taking
    the URL and `create` and `timeout_s` as keywords and answering every interface of autotuner.store.interfaces
    (tests/unit/store/test_store_conformance.py runs the suite over a backend registered so)."""
    if not scheme.isidentifier():
        raise ValueError(f"a URL scheme is a plain name, got {scheme!r}")
    _BACKENDS[scheme] = opener


def scheme_of(url: str | None) -> str:
    """The scheme a URL names its backend by: `postgresql+psycopg://...` -> postgresql; none (the default file) ->
    sqlite."""
    return (url or "sqlite://").split(":", 1)[0].split("+", 1)[0].lower()


def open_store(url: str | None, *, create: bool = True, timeout_s: float | None = None) -> Storage:
    """The database at `url` (None: the default SQLite file), at the current schema, through the backend registered for
    its scheme (else SQLAlchemy). `create=False` for readers: NoStore where missing. `timeout_s` bounds every wait."""
    return _BACKENDS.get(scheme_of(url), _sql)(url, create=create, timeout_s=timeout_s)
