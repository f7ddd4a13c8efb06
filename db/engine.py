"""Engines and sessions: SQLite with WAL, a busy timeout and foreign keys; a new database migrated on first use; a file
that is not ours, or from a newer schema, refused untouched."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from db import deadline as db_deadline
from db.basics import (  # noqa: F401  (re-exported: the errors and constants of every way to the database)
    DB_HINT,
    HEAD,
    SQLITE_BUSY_TIMEOUT_MS,
    DatabaseUnavailable,
    NoDatabase,
    NotAutotunerDatabase,
    default_url,
    loads,
)
from kernels._environment import env_flag

MIGRATIONS = Path(__file__).parent / "migrations"
MIGRATION_LOCK = 0x6175746F  # pg_advisory_xact_lock key held while migrating
T = TypeVar("T")


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA synchronous = NORMAL")
    cur.execute("PRAGMA foreign_keys = ON")
    cur.close()


# Bounds for a database that stalls or vanishes. PostgreSQL: the server's statement and lock timeouts, TCP
# keepalives and a user timeout for a peer that is gone, and a client-side deadline (db.deadline) a little
# longer than the statement timeout for a server that never answers. SQLite: the busy timeout.
DEFAULT_TIMEOUT_S = 30.0


def _pg_connect_args(timeout_s: float) -> dict[str, object]:
    ms = int(timeout_s * 1000)
    return {"connect_timeout": max(1, int(timeout_s + 0.999)),
            "options": f"-c statement_timeout={ms} -c lock_timeout={ms} -c idle_in_transaction_session_timeout="
                       f"{max(ms * 12, 60_000)}",
            "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
            "tcp_user_timeout": ms}


def make_engine(url: str | None = None, *, timeout_s: float | None = None) -> Engine:
    """An engine for `url` (default: a SQLite file in the user's data directory); nothing is created, migrated or
    connected. On PostgreSQL `timeout_s` (default 30 s) bounds every wait on the database; SQLite keeps a 60 s busy
    timeout so several processes share one file."""
    url = url or default_url()
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise DatabaseUnavailable(f"bad database URL {url!r}: {exc}; {DB_HINT}") from None
    try:
        if parsed.get_backend_name() == "sqlite":
            database = parsed.database
            if database and database != ":memory:" and not database.startswith("file:"):
                # a relative path names a file in the current folder now, not in whichever folder the process is
                # in when the pool opens its next connection (a worker enters a handed command's folder)
                parsed = parsed.set(database=os.path.abspath(os.path.expanduser(database)))
            engine = create_engine(parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
                                   json_deserializer=loads)
            event.listen(engine, "connect", _sqlite_pragmas)
            return engine
        if parsed.get_backend_name() != "postgresql":
            return create_engine(parsed, pool_pre_ping=True)
        bound = timeout_s if timeout_s is not None else DEFAULT_TIMEOUT_S
        args = _pg_connect_args(bound)
        args.update(parsed.query)  # what the URL sets itself wins (?connect_timeout=1)
        engine = create_engine(parsed.set(query={}), pool_pre_ping=True, pool_timeout=bound, connect_args=args)
        db_deadline.install(engine, bound + 1.0)  # the server's statement timeout answers first when it can
        return engine
    except NoSuchModuleError:
        raise DatabaseUnavailable(f"unknown database scheme {parsed.drivername!r} in {url!r}; {DB_HINT}") from None
    except ImportError as exc:
        raise DatabaseUnavailable(f"the driver for {parsed.drivername!r} is not installed ({exc}); for PostgreSQL: "
                                  "pip install 'autotuner[postgres]'") from None


def identity(url: str | None) -> str:
    """What names one database, whichever way its URL is written: a SQLite file's resolved path (relative to the
    current folder), or the URL without its password. An in-memory database is never the same as another."""
    engine = make_engine(url)
    try:
        if engine.dialect.name == "sqlite":
            path = sqlite_path(engine)
            return f"sqlite:{path.resolve()}" if path is not None else f"memory:{os.urandom(8).hex()}"
        return engine.url.set(password=None).render_as_string(hide_password=False)
    finally:
        engine.dispose()


def sqlite_path(engine: Engine) -> Path | None:
    """The file of a SQLite engine (None for another backend or an in-memory database)."""
    if engine.dialect.name != "sqlite":
        return None
    database = engine.url.database
    if not database or database == ":memory:":
        return None
    if database.startswith("file:"):  # a URI filename (?uri=true)
        database = database.removeprefix("file:").split("?", 1)[0]
    return Path(database).expanduser()


if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig


def _alembic_config(connection) -> AlembicConfig:  # type: ignore[no-untyped-def]
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def _at_head(engine: Engine) -> bool:
    """Whether the database is at HEAD, read with one query (no Alembic)."""
    try:
        with engine.connect() as conn:
            return bool(conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD)
    except (OperationalError, DatabaseError):
        return False  # no such table, or no database: the full check says which


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    assert head is not None
    return head


def schema_state(engine: Engine) -> str:
    """'empty', 'current', 'old' (migratable), or raise NotAutotunerDatabase / DatabaseUnavailable."""
    try:
        with engine.connect() as conn:
            return _state_of(conn, engine)
    except (OperationalError, DatabaseError) as exc:
        raise DatabaseUnavailable(f"cannot open the database at {engine.url!r}: {exc.orig}") from None


def _state_of(conn: Connection, engine: Engine) -> str:
    tables = set(inspect(conn).get_table_names())
    current = conn.execute(text("SELECT version_num FROM alembic_version")).scalar() \
        if "alembic_version" in tables else None
    if not tables:
        return "empty"
    if current is None:
        raise NotAutotunerDatabase(
            f"{engine.url!r} holds tables ({', '.join(sorted(tables)[:5])}) but is not an autotuner database; "
            "it was left untouched. Point AUTOTUNER_DB_URL or --db elsewhere."
        )
    if current == HEAD:
        return "current"
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(MIGRATIONS))
    try:
        script.get_revision(current)
    except Exception:
        raise NotAutotunerDatabase(
            f"{engine.url!r} has schema revision {current!r}, newer than this autotuner knows "
            f"(latest {head_revision()!r}); upgrade autotuner. The database was left untouched."
        ) from None
    return "old"


def _create_at_head(conn) -> None:  # type: ignore[no-untyped-def]
    """A new database: the models' tables as they stand at HEAD, and HEAD stamped, in one transaction, without
    loading Alembic or replaying every migration (a new user's first command waits on this). tests/integration/test_db.py
    holds the migrations' result equal to these models."""
    from db.models import Base

    Base.metadata.create_all(conn)
    conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
                      "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"))
    conn.execute(text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": HEAD})


def upgrade(engine: Engine) -> str:
    """Bring the schema to the latest revision; returns the state it was found in ('empty', 'old', 'current').
    Several processes may start at once on a new or old database: one makes or migrates it, in one transaction
    under the database's write lock, and the others wait for that lock and find it done ('current'), so none ever
    sees a half-made schema."""
    state = schema_state(engine)
    if engine.dialect.name == "sqlite":
        # WAL is a property of the file: set only once the file is known to be ours (or new).
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA journal_mode = WAL")
        except OperationalError:
            pass  # a read-only file keeps its journal mode; reads still work, and a write says what is wrong
    if state == "current":
        return state
    try:
        with _migration_lock(engine) as conn:
            now = _state_of(conn, engine)  # what the process that held the lock before this one left
            if now == "empty":
                _create_at_head(conn)
            elif now == "old":  # Alembic only to migrate an old database: a new one is made from the models
                from alembic import command

                command.upgrade(_alembic_config(conn), "head")
    except (OperationalError, DatabaseError) as exc:
        raise DatabaseUnavailable(f"cannot write the schema of the database at {engine.url!r}: {exc.orig}") from None
    return now  # "current" where another process made or migrated it meanwhile


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that holds the database's write lock until it commits: PostgreSQL's advisory
    lock (no timeouts: a migration may take long on a large database, and other workers wait for it), SQLite's
    BEGIN IMMEDIATE (its busy timeout bounds the wait). Both make DDL part of the transaction."""
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn, db_deadline.without_deadline(conn.connection.dbapi_connection):
            conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
            conn.exec_driver_sql("SET LOCAL lock_timeout = 0")
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
            yield conn
        return
    with engine.connect() as conn:
        # the driver leaves DDL outside any transaction it opens itself: the transaction is begun here by hand
        conn.exec_driver_sql("BEGIN IMMEDIATE")
        yield conn
        conn.commit()


def make_folder(engine: Engine) -> None:
    """The folder a new SQLite file goes in; DatabaseUnavailable naming the path when it cannot be made."""
    path = sqlite_path(engine)
    if path is None:
        return
    blocker = next((p for p in path.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise DatabaseUnavailable(f"cannot create a database at {path}: {blocker} is a file, not a folder; {DB_HINT}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseUnavailable(f"cannot create a database at {path}: {exc.strerror} ({exc.filename}); "
                                  f"{DB_HINT}") from None


_READY: set[str] = set()
_MIGRATING = threading.RLock()


def open_engine(url: str | None = None, *, create: bool = True, timeout_s: float | None = None) -> Engine:
    """An engine whose schema is current. `create`: a missing database is created at the latest schema (the
    tuner, the worker, the service); otherwise (reads: show, export, report, library lookups) a missing
    file or an empty database raises NoDatabase and nothing is written. `timeout_s`: see make_engine."""
    engine = make_engine(url, timeout_s=timeout_s)
    path = sqlite_path(engine)
    if path is not None and not path.exists():
        if not create:
            raise NoDatabase(f"no database at {path}: nothing has been tuned there yet (check --db or "
                             "AUTOTUNER_DB_URL, or run `autotuner tune` first)")
        make_folder(engine)
    key = str(engine.url)
    recheck = env_flag("AUTOTUNER_RECHECK_SCHEMA")
    if key not in _READY and not recheck and _at_head(engine):
        _READY.add(key)
    if key not in _READY or recheck:
        with _MIGRATING:  # Alembic's context is process-global: one thread of a process migrates at a time
            if not create and schema_state(engine) == "empty":
                raise NoDatabase(f"{engine.url.render_as_string(hide_password=True)} holds no autotuner tables "
                                 "yet: nothing has been tuned there")
            upgrade(engine)
            _READY.add(key)
    return engine


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """One transaction: committed on success, rolled back on error."""
    with session_factory(engine)() as session, session.begin():
        yield session


def in_session(engine: Engine, fn: Callable[..., T], /, **kwargs: Any) -> T:
    """`fn(session, **kwargs)` in one transaction (session_scope)."""
    with session_scope(engine) as session:
        return fn(session, **kwargs)
