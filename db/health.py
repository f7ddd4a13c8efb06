"""Whether a database can keep what is written to it, and why not, in words a client can be given. More:
docs/design/store.md."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from db.basics import CORRUPT, DELETED, LOST, NO_PRIVILEGE, REPLACED, StorageLost  # noqa: F401  (re-exported)
from db.engine import DatabaseUnavailable, sqlite_path

MIN_FREE_BYTES = 16 * 2**20  # a disk with less free space than this is full for a database writer
WRITTEN = ("jobs", "tuning_runs", "trials", "best_configs")  # the tables the service and the workers write


@dataclass(frozen=True)
class FileIdentity:
    """The SQLite file an engine opened: a file at the same path with another identity replaced it."""

    device: int
    inode: int


def file_identity(engine: Engine) -> FileIdentity | None:
    path = sqlite_path(engine)
    if path is None:
        return None
    try:
        st = path.stat()
    except OSError:
        return None
    return FileIdentity(st.st_dev, st.st_ino)


def storage_problem(engine: Engine, opened: FileIdentity | None, *,
                    min_free_bytes: int = MIN_FREE_BYTES) -> str | None:
    """The first reason the database cannot keep a write, or None. Raises what the database raises when it
    does not answer at all (the caller's "unreachable")."""
    path = sqlite_path(engine)
    if path is not None:
        try:
            st = path.stat()
        except FileNotFoundError:
            return DELETED
        if opened is not None and (st.st_dev, st.st_ino) != (opened.device, opened.inode):
            return REPLACED
        if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
            return "the database file or its folder is read-only: nothing can be written"
        vfs = os.statvfs(path.parent)
        if vfs.f_flag & os.ST_RDONLY:
            return "the database is on a read-only file system: nothing can be written"
        free = shutil.disk_usage(path.parent).free
        if free < min_free_bytes:
            return f"the disk holding the database is full ({free // 2**20} MiB free)"
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                # a write of page 1 that changes nothing: a file that is not a database, one opened read-only or
                # a disk that cannot take the write says so
                version = conn.exec_driver_sql("PRAGMA user_version").scalar()
                conn.exec_driver_sql(f"PRAGMA user_version = {int(version or 0)}")
            elif engine.dialect.name == "postgresql":
                if conn.exec_driver_sql("SHOW transaction_read_only").scalar() == "on":
                    return "the database accepts no writes (a standby, or transactions are read-only)"
                denied = [f"{privilege} on {table}" for table in WRITTEN for privilege in ("INSERT", "UPDATE")
                          if not conn.exec_driver_sql("SELECT has_table_privilege(current_user, %s, %s)",
                                                      (table, privilege)).scalar()]
                if denied:
                    return f"{NO_PRIVILEGE} ({', '.join(denied[:4])}{', ...' if len(denied) > 4 else ''})"
            else:
                conn.exec_driver_sql("SELECT 1")
    except DBAPIError as exc:
        cause = cause_of(exc)
        if cause is None:
            raise
        return cause
    return None


def cause_of(exc: BaseException) -> str | None:
    """The storage problem a database error reports (read-only, full, corrupt), or None for another error."""
    if not isinstance(exc, SQLAlchemyError | OSError | DatabaseUnavailable):
        return None
    text = str(getattr(exc, "orig", None) or exc).lower()
    if "readonly" in text or "read-only" in text or "read only" in text:
        return "the database is read-only: nothing can be written"
    if "disk is full" in text or "no space left" in text or "disk full" in text:
        return "the disk holding the database is full"
    if "not a database" in text or "malformed" in text or "disk image" in text:
        return CORRUPT
    if "permission denied" in text or "insufficient privilege" in text or "insufficientprivilege" in text:
        return NO_PRIVILEGE
    return None
