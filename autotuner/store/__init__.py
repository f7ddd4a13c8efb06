"""The engine's view of the database: what reads results, what writes a tuning run, and the job queue, as small
interfaces (`interfaces`) with one SQL implementation (`database.Store`, through `db`), a launching process's
reads in stdlib sqlite3 (`lazy.LaunchReads`), the database opened on first use (`lazy.LazyStore`) and a
worker's writes through outages (`job_store.JobStore`). Also: how a stored best is judged current or stale
(`stored_best`), which tuned problem is nearest (`nearest`), which config a problem is served, as ordered steps,
and what its tuning measures first (`resolution`), the frozen rows handed to the service and the command line
(`rows`), and export and import (`transfer`).

Every caller outside this package opens a database with `open_store(url)`, and reads the interfaces, never which
class answers (tests/test_architecture.py holds them to it; tests/test_store_conformance.py holds every reader to
the same answers).

May import: `autotuner.base`, `db`, the ground floor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotuner.store.interfaces import Storage


def open_store(url: str | None, *, create: bool = True, timeout_s: float | None = None) -> Storage:
    """The database at `url` (None: the default SQLite file in the user's data folder), at the current schema.
    `create=False` for readers: a missing database raises db.engine.NoDatabase instead of being made. `timeout_s`
    bounds every wait on it. SQLAlchemy is imported here, on first use, not with the package."""
    from autotuner.store.database import Store

    return Store(url, create=create, timeout_s=timeout_s)
