"""The store's errors as every room names them: unavailable, not an autotuner database, not there, lost under a running
process, or unable to keep a write (`cause_of` says why). The database layer's own classes under the store's names;
importing this imports no SQLAlchemy."""

from __future__ import annotations

from typing import Any

from db.basics import JOB_STATES, LOST
from db.basics import DatabaseUnavailable as StoreUnavailable
from db.basics import NoDatabase as NoStore
from db.basics import NotAutotunerDatabase as NotAStore
from db.basics import StorageLost as StoreLost

__all__ = ["JOB_STATES", "LOST", "NoStore", "NotAStore", "StoreLost", "StoreUnavailable", "cause_of", "describe",
           "same_store", "utcnow"]


def cause_of(exc: BaseException) -> str | None:
    """The storage problem a database error reports (read-only, full, corrupt, no privilege), or None."""
    from db.health import cause_of as cause

    return cause(exc)


def describe(url: str | None) -> str:
    """The database's URL as an operator is told it: the password hidden."""
    from db.engine import make_engine

    return str(make_engine(url).url.render_as_string(hide_password=True))


def same_store(url: str | None) -> str:
    """What names one database, whichever way its URL is written (two URLs of one SQLite file are the same)."""
    from db.engine import identity

    return identity(url)


def utcnow() -> Any:
    """The time now, as the store writes it."""
    from db.models import utcnow as now

    return now()
