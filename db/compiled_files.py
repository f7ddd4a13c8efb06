"""Triton compile-cache files kept for other hosts, each with an HMAC-SHA256 under the operator's secret and its signer:
`get` returns only this signer's files whose mac verifies. More: docs/design/store.md."""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from db.basics import SQLITE_BUSY_TIMEOUT_MS
from db.sqlite_reads import sqlite_now

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

TABLE = "compiled_files"  # (db.models.CompiledFile)


def mac(secret: str, key: str, filename: str, data: bytes) -> str:
    """The file's signature: what it is (its cache key and name) and what it holds, under the secret."""
    h = hmac.new(secret.encode(), digestmod=hashlib.sha256)
    for part in (key.encode(), b"\0", filename.encode(), b"\0", data):
        h.update(part)
    return h.hexdigest()


def signer(secret: str) -> str:
    """Which secret signs: an HMAC of a constant under it, shortened (it says nothing of the secret)."""
    return hmac.new(secret.encode(), b"autotuner compiled files", hashlib.sha256).hexdigest()[:16]


def _sqlite(path: Path) -> sqlite3.Connection:
    """The file, opened for reading and writing (never made: a missing one is an error, as a database away is),
    in autocommit, waiting on a writer as the engines do."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000,
                           isolation_level=None)


def get(engine: Engine | Path, secret: str, key: str, filenames: list[str]) -> tuple[dict[str, bytes], list[str]]:
    """The files of `key` among `filenames` whose mac verifies, and the names of those stored that did not."""
    rows: list[tuple[str, bytes, str]]
    if isinstance(engine, Path):
        conn = _sqlite(engine)
        try:
            rows = conn.execute(f"SELECT filename, data, mac FROM {TABLE} WHERE signer = ? AND cache_key = ? AND "
                                f"filename IN ({', '.join('?' * len(filenames))})",
                                (signer(secret), key, *filenames)).fetchall()
        finally:
            conn.close()
    else:
        from sqlalchemy import select

        from db.engine import session_scope
        from db.models import CompiledFile

        query = select(CompiledFile.filename, CompiledFile.data, CompiledFile.mac).where(
            CompiledFile.signer == signer(secret), CompiledFile.cache_key == key, CompiledFile.filename.in_(filenames))
        with session_scope(engine) as s:
            rows = [(r[0], r[1], r[2]) for r in s.execute(query).all()]
    good: dict[str, bytes] = {}
    bad: list[str] = []
    for name, data, signed in rows:
        if hmac.compare_digest(signed, mac(secret, key, name, bytes(data))):
            good[name] = bytes(data)
        else:
            bad.append(name)
    return good, bad


def put(engine: Engine | Path, secret: str, key: str, filename: str, data: bytes) -> None:
    """Keep a file. One this signer already kept under that key and name stays where it verifies (another host
    wrote the same compile), and is replaced where it does not (a row no one with the secret wrote)."""
    signed = mac(secret, key, filename, data)
    if isinstance(engine, Path):
        _put_sqlite(engine, secret, key, filename, data, signed)
        return
    from sqlalchemy import select
    from sqlalchemy.exc import IntegrityError

    from db.engine import session_scope
    from db.models import CompiledFile

    try:
        with session_scope(engine) as s:
            s.add(CompiledFile(signer=signer(secret), cache_key=key, filename=filename, data=data, mac=signed))
    except IntegrityError:
        with session_scope(engine) as s:
            row = s.scalars(select(CompiledFile).where(CompiledFile.signer == signer(secret),
                                                       CompiledFile.cache_key == key,
                                                       CompiledFile.filename == filename)).one_or_none()
            if row is not None and not hmac.compare_digest(row.mac, mac(secret, key, filename, bytes(row.data))):
                row.data, row.mac = data, signed


def _put_sqlite(path: Path, secret: str, key: str, filename: str, data: bytes, signed: str) -> None:
    """`put` through sqlite3, in one write transaction: the row added, or the one there kept or replaced."""
    who = signer(secret)
    conn = _sqlite(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute(f"SELECT id, data, mac FROM {TABLE} WHERE signer = ? AND cache_key = ? AND filename = ?",
                           (who, key, filename)).fetchone()
        if row is None:
            conn.execute(f"INSERT INTO {TABLE} (signer, cache_key, filename, data, mac, created_at) "
                         "VALUES (?, ?, ?, ?, ?, ?)", (who, key, filename, data, signed, sqlite_now()))
        elif not hmac.compare_digest(row[2], mac(secret, key, filename, bytes(row[1]))):
            conn.execute(f"UPDATE {TABLE} SET data = ?, mac = ? WHERE id = ?", (data, signed, row[0]))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()
