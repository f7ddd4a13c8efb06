"""What every way to the database needs without importing SQLAlchemy: the errors, the default location, the
schema revision this code reads and writes, and SQLite's busy timeout. db.engine (SQLAlchemy) and
db.sqlite_reads (a launching process's lookups, stdlib sqlite3) both use these."""

from __future__ import annotations

from pathlib import Path

from platformdirs import user_data_dir  # at import: a launch's first lookup must not pay for it

from search_spaces.errors import AutotunerError

SQLITE_BUSY_TIMEOUT_MS = 60_000
DB_HINT = "use sqlite:///PATH or postgresql+psycopg://USER@HOST:PORT/DB (--db or AUTOTUNER_DB_URL)"
# The newest migration's revision: a database at it is used without loading Alembic (a launching process opens
# its database on the first launch of a problem; tests/integration/test_db.py holds this equal to the scripts' head).
HEAD = "0009"


class DatabaseUnavailable(AutotunerError, RuntimeError):
    """The database cannot be reached or opened (dead server, unreadable file, bad URL)."""


class NotAutotunerDatabase(AutotunerError, RuntimeError):
    """The database holds tables that autotuner did not create, or a schema newer than this version knows."""


class NoDatabase(DatabaseUnavailable):
    """A read found no database where it looked (it never creates one)."""


class NotJSON(str):
    """A JSON column's stored text that does not parse (a writer's own tools can store any text in SQLite): handed
    on as this marker instead of raising inside the driver, so the store's row checks (autotuner.store.row_checks)
    name the row and skip it instead of one row failing every read of its table."""


# What a storage check finds (db.health), in words a client can be given; here, without SQLAlchemy, for every room
# that names them (autotuner.store.errors).
CORRUPT = "the database file is corrupt (not a database SQLite can read)"
DELETED = ("the database file was deleted while this process had it open: nothing written now would be kept "
           "(restart on a database that exists)")
REPLACED = "the database file was replaced while this process had it open (restart to use the new one)"
NO_PRIVILEGE = "the database role may not write its tables: nothing can be written (grant it INSERT and UPDATE)"
LOST = (DELETED, REPLACED)  # a long-running process stops on these; it waits out the others


class StorageLost(AutotunerError, RuntimeError):
    """A database file deleted or replaced under a long-running process: what it would write is lost, or goes
    elsewhere than what it read (a worker stops)."""


JOB_STATES = ("queued", "running", "done", "failed")


def loads(text: str | bytes) -> object:
    """A JSON column's value: the parsed JSON, or NotJSON holding the text that does not parse."""
    import json

    try:
        return json.loads(text)
    except ValueError:
        return NotJSON(text.decode(errors="replace") if isinstance(text, bytes) else text)


def default_url() -> str:
    path = Path(user_data_dir("autotuner", appauthor=False)) / "autotuner.db"
    return f"sqlite:///{path}"
