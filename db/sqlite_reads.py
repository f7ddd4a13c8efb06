"""A launching process's reads of a SQLite database through stdlib sqlite3 (the best rows of a problem or an op, and the
configs measured for it), and its one write, queueing a job for a key met untuned: importing SQLAlchemy would cost more
than the first launch. tests/integration/test_sqlite_reads.py holds these equal to db.repository's and db.queue's."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from db.basics import HEAD, SQLITE_BUSY_TIMEOUT_MS, default_url, loads

PREFIX = "sqlite:///"
BEST_ROWS = """
SELECT b.id, b.op, b.problem_key, b.problem, b.kernel_hash, b.triton_version, b.config, b.median_ms, b.default_ms,
       b.torch_ms, b.run_id, b.updated_at
FROM best_configs AS b JOIN devices AS d ON b.device_id = d.id
WHERE b.op = ? AND d.key = ? AND b.problem_key = ?
ORDER BY b.id"""
BEST_ROWS_OF_OP = BEST_ROWS.replace(" AND b.problem_key = ?", "")
DEVICE_KEYS = """
SELECT DISTINCT d.key FROM best_configs AS b JOIN devices AS d ON b.device_id = d.id WHERE b.op = ? ORDER BY d.key"""
TRIAL_TIMES = """
SELECT t.config_key, t.config, t.status, t.median_ms, t.retimed_ms, t.error, t.created_at
FROM trials AS t JOIN tuning_runs AS r ON t.run_id = r.id JOIN devices AS d ON r.device_id = d.id
WHERE r.op = ? AND r.problem_key = ? AND d.key = ? AND r.kernel_hash = ? AND r.triton_version = ?
      AND t.status != 'invalid'
ORDER BY t.id"""


SWEEPS = "SELECT id, op, dtype, options, dim, points, created_at FROM sweeps WHERE op = ? ORDER BY id"
CROSS_TIMINGS = """
SELECT c.winner_key, c.on_key, c.config, c.ms, c.own_ms, d.key, c.kernel_hash, c.triton_version
FROM cross_timings AS c JOIN devices AS d ON c.device_id = d.id
WHERE c.sweep_id = ? AND d.key = ?
ORDER BY c.id"""
ADD_JOB = """
INSERT INTO jobs (op, shape, dtype, options, strategy, budget_trials, budget_seconds, priority, state, attempts,
                  created_at, kind)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'queued', 0, ?, 'tune')"""

RAISE_PRIORITY = "UPDATE jobs SET priority = priority + ? WHERE id = ? AND state = 'queued'"


def plain_path(url: str | None) -> Path | None:
    """The file of a plain `sqlite:///PATH` URL, as SQLAlchemy's pysqlite dialect opens it; None for anything else."""
    url = url or default_url()
    if not url.startswith(PREFIX) or "?" in url:
        return None
    database = url[len(PREFIX):]
    if not database or database == ":memory:" or database.startswith(("file:", "~")):
        return None
    return Path(database)


def _json(value: Any) -> Any:
    return loads(value) if isinstance(value, str) else value


def _datetime(value: Any) -> Any:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def sqlite_now() -> str:
    """The time now as SQLAlchemy writes a DATETIME column in SQLite (UTC), for rows written through sqlite3."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


class SqliteReads:
    """One SQLite file, read-only, from one connection per process (a forked child opens its own)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._write_lock = threading.Lock()
        self._writer: sqlite3.Connection | None = None
        self._writer_pid = -1

    @classmethod
    def open(cls, url: str | None) -> SqliteReads | None:
        path = plain_path(url)
        if path is None or not path.is_file():
            return None
        reads = cls(path)
        try:
            at_head = reads._query("SELECT version_num FROM alembic_version", ()) == [(HEAD,)]
        except sqlite3.Error:
            at_head = False  # no such table, not a database: SQLAlchemy's path says which
        return reads if at_head else None

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                               check_same_thread=False)

    def _connection(self) -> sqlite3.Connection:
        """This process's reading connection (autocommit), the lock held by the caller."""
        if self._conn is None or self._pid != os.getpid():
            # not the parent's connection after a fork (SQLite forbids carrying one across)
            self._conn = self._connect()
            self._pid = os.getpid()
        return self._conn

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._connection().execute(sql, params).fetchall()

    def best_rows(self, *, op: str, device_key: str, problem_key: str | None = None) -> list[SimpleNamespace]:
        """repository.find_best_rows: every stored best of one problem (with no `problem_key`: of every problem
        of the op) on one device (any kernel hash or Triton version), oldest first, columns by name, JSON and
        times decoded as SQLAlchemy decodes them."""
        rows = self._query(BEST_ROWS, (op, device_key, problem_key)) if problem_key is not None else \
            self._query(BEST_ROWS_OF_OP, (op, device_key))
        return [SimpleNamespace(id=r[0], op=r[1], problem_key=r[2], problem=_json(r[3]), kernel_hash=r[4],
                                triton_version=r[5], config=_json(r[6]), median_ms=r[7], default_ms=r[8],
                                torch_ms=r[9], run_id=r[10], updated_at=_datetime(r[11])) for r in rows]

    def device_keys(self, *, op: str) -> list[str]:
        """The devices that hold stored bests of one op."""
        return [r[0] for r in self._query(DEVICE_KEYS, (op,))]

    def sweeps(self, *, op: str) -> list[SimpleNamespace]:
        """repository.list_sweeps of one op: its sweeps, oldest first, columns by name."""
        return [SimpleNamespace(id=r[0], op=r[1], dtype=r[2], options=_json(r[3]), dim=r[4], points=_json(r[5]),
                                created_at=_datetime(r[6])) for r in self._query(SWEEPS, (op,))]

    def cross_timings(self, *, sweep_id: int, device_key: str) -> list[SimpleNamespace]:
        """repository.cross_timings of one sweep on one device, oldest first (`device` as its key)."""
        return [SimpleNamespace(winner_key=r[0], on_key=r[1], config=_json(r[2]), ms=r[3], own_ms=r[4],
                                device=SimpleNamespace(key=r[5]), kernel_hash=r[6], triton_version=r[7])
                for r in self._query(CROSS_TIMINGS, (sweep_id, device_key))]

    def _writing(self) -> sqlite3.Connection:
        """This process's writing connection (under `_write_lock`)."""
        if self._writer is None or self._writer_pid != os.getpid():
            self._writer = self._connect()
            self._writer_pid = os.getpid()
        return self._writer

    def add_job(self, *, op: str, shape: str, dtype: str, options: dict[str, Any], strategy: str = "tpe",
                budget_trials: int | None = None, budget_seconds: float | None = None, priority: int = 0) -> int:
        """queue.add_job: a queued tuning job, its columns written as SQLAlchemy writes them; its id."""
        now = sqlite_now()
        with self._write_lock:  # a connection of its own: a launch's lookups never wait behind this write
            cursor = self._writing().execute(ADD_JOB, (op, shape, dtype, json.dumps(options), strategy, budget_trials,
                                                    budget_seconds, priority, now))
            return int(cursor.lastrowid or 0)

    def raise_priority(self, job_id: int, *, by: int) -> bool:
        """queue.raise_priority: a queued job's priority up `by`; False where it is no longer queued."""
        with self._write_lock:
            return self._writing().execute(RAISE_PRIORITY, (by, job_id)).rowcount == 1

    def trial_times(self, *, op: str, problem_key: str, device_key: str, kernel_hash: str,
                    triton_version: str) -> list[SimpleNamespace]:
        """repository.trial_times: the trials measured or failed, in order, columns by name."""
        rows = self._query(TRIAL_TIMES, (op, problem_key, device_key, kernel_hash, triton_version))
        return [SimpleNamespace(config_key=key, config=_json(config), status=status, median_ms=median,
                                retimed_ms=retimed, error=error, created_at=_datetime(created))
                for key, config, status, median, retimed, error, created in rows]
