"""The database opened on first use (`LazyStore`). A launching process on a plain SQLite file reads through
`LaunchReads` (stdlib sqlite3, db.sqlite_reads) and never imports SQLAlchemy."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from autotuner.store import open_store
from autotuner.store.nearest import current_problems, rank
from autotuner.store.row_checks import trial_times
from autotuner.store.rows import CrossTimingRow, SweepRow, cross_timing_row, sweep_row
from autotuner.store.stored_best import StoredBest, best_of, versions
from db.basics import DatabaseUnavailable, NotAutotunerDatabase
from db.sqlite_reads import SqliteReads  # at import: a launch's first lookup must not pay for it
from search_spaces.contract import ProblemType

if TYPE_CHECKING:
    from autotuner.base.device import DeviceInfo
    from autotuner.base.registry import Op
    from autotuner.store.interfaces import Storage


T = TypeVar("T")
E = TypeVar("E", bound=BaseException)
# A launching process reads an op's results for its nearest lookups at most this often; past it, the rows held are
# served while a background thread reads them again (the launching thread reads only what it never read before).
OP_ROWS_S = 5.0


class LaunchReads:
    """A launching process's reads: `best` and `trial_times` as Store answers them, through sqlite3; every other
    attribute is the full Store's (opened for reads on first use)."""

    def __init__(self, reads: SqliteReads, url: str | None, timeout_s: float | None,
                 refresh: Callable[[Callable[[], None]], None] | None = None) -> None:
        self.reads, self.url, self.timeout_s = reads, url, timeout_s
        self.refresh = refresh  # runs a read of held rows elsewhere (the resolver's background thread); None: here
        self._full: Storage | None = None
        self._lock = threading.Lock()
        self._reads_held: dict[tuple[Any, ...], tuple[float, Any]] = {}  # what is read at most once per OP_ROWS_S
        self._refreshing: set[tuple[Any, ...]] = set()

    @property
    def full(self) -> Storage:
        with self._lock:
            if self._full is None:
                self._full = open_store(self.url, create=False, timeout_s=self.timeout_s)
            return self._full

    def __getattr__(self, name: str) -> Any:
        return getattr(self.full, name)

    def best(self, *, op: Op, problem: ProblemType, device: DeviceInfo, kernel_hash: str | None = None,
             triton_version: str | None = None) -> StoredBest | None:
        """Store.best: the fastest current stored best of this exact problem, else the newest stale one."""
        rows = self.reads.best_rows(op=op.name, device_key=device.key, problem_key=problem.key)
        return best_of(rows, kernel_hash or op.kernel_hash, triton_version, op.space)

    def nearest(self, *, op: Op, problem: ProblemType, device: DeviceInfo, limit: int = 3,
                kernel_hash: str | None = None, triton_version: str | None = None,
                any_options: bool = False) -> list[tuple[ProblemType, StoredBest]]:
        """Store.nearest: the current stored bests of the nearest tuned problems on this device. The op's current
        results are read once per OP_ROWS_S (a process meeting many new keys ranks them in memory; a result
        stored meanwhile is seen within that time and one background read)."""
        current = self._current(op, device.key, kernel_hash, triton_version)
        return [(p, r) for _, p, r in rank(problem, current, any_options)[:limit]]

    def _current(self, op: Op, device_key: str, kernel_hash: str | None = None,
                 triton_version: str | None = None) -> list[tuple[ProblemType, StoredBest]]:
        return self._held(("nearest", op.name, device_key, kernel_hash, triton_version), lambda: current_problems(
            op, self.reads.best_rows(op=op.name, device_key=device_key), kernel_hash=kernel_hash,
            triton_version=triton_version))

    def warm(self, op: Op) -> None:
        """Read now what a first nearest lookup of `op` reads (its results, sweeps and their cross timings, on each
        device that has results of it), so that lookup finds them held (a kernel prepared ahead of its launch)."""
        sweeps = self.sweeps(op=op.name)
        for device_key in self.reads.device_keys(op=op.name):
            self._current(op, device_key)
            for s in sweeps:
                self.cross_timings(s.id, device_key=device_key)

    def sweeps(self, *, op: str | None = None) -> list[SweepRow]:
        """Store.sweeps of one op, through sqlite3 (read at most once per OP_ROWS_S)."""
        if op is None:
            return self.full.sweeps()
        return self._held(("sweeps", op), lambda: [sweep_row(s) for s in self.reads.sweeps(op=op)])

    def cross_timings(self, sweep_id: int, *, device_key: str | None = None) -> list[CrossTimingRow]:
        """Store.cross_timings of one sweep on one device, through sqlite3 (read at most once per OP_ROWS_S)."""
        if device_key is None:
            return self.full.cross_timings(sweep_id)
        return self._held(("cross", sweep_id, device_key), lambda: [
            cross_timing_row(c) for c in self.reads.cross_timings(sweep_id=sweep_id, device_key=device_key)])

    def _held(self, key: tuple[Any, ...], read: Callable[[], list[T]]) -> list[T]:
        """`read()`, read at most once per OP_ROWS_S: past it, the rows held are answered while `refresh` reads
        them again (where there is no `refresh`, read here)."""
        held = self._reads_held.get(key)
        if held is not None and held[0] >= time.monotonic():
            return held[1]
        if held is not None and self.refresh is not None:
            with self._lock:
                if key in self._refreshing:
                    return held[1]
                self._refreshing.add(key)

            def again() -> None:
                try:
                    self._reads_held[key] = (time.monotonic() + OP_ROWS_S, read())
                finally:
                    self._refreshing.discard(key)

            self.refresh(again)
            return held[1]
        held = self._reads_held[key] = (time.monotonic() + OP_ROWS_S, read())
        return held[1]

    def queue_job(self, *, op: str, shape: str, dtype: str, options: dict[str, Any], strategy: str = "tpe",
                  budget_trials: int | None = None, budget_seconds: float | None = None, priority: int = 0,
                  sweep_id: int | None = None, gpus: int | None = None) -> int:
        """Store.queue_job through sqlite3 (a launching process queueing a key it met untuned)."""
        if sweep_id is not None or gpus is not None:
            return self.full.queue_job(op=op, shape=shape, dtype=dtype, options=options, strategy=strategy,
                                       budget_trials=budget_trials, budget_seconds=budget_seconds, priority=priority,
                                       sweep_id=sweep_id, gpus=gpus)
        return self.reads.add_job(op=op, shape=shape, dtype=dtype, options=options, strategy=strategy,
                                  budget_trials=budget_trials, budget_seconds=budget_seconds, priority=priority)

    def raise_priority(self, job_id: int, *, by: int) -> bool:
        """Store.raise_priority through sqlite3."""
        return bool(self.reads.raise_priority(job_id, by=by))

    def trial_times(self, *, op: Op, problem: ProblemType, device: DeviceInfo) -> dict[str, tuple[dict[str, Any], float | None]]:
        """Store.trial_times: configs measured (or failed: None) before, at the running kernel hash and Triton."""
        return trial_times(self.reads.trial_times(op=op.name, problem_key=problem.key, device_key=device.key,
                                                  kernel_hash=op.kernel_hash, triton_version=versions()[0]))


class LazyStore:
    """A Store opened on first use. A failure to open is remembered for `retry_s`, so callers do not hammer a dead
    database; `get` raises it, `peek` hands it back as text. `create=False` (a launching process's lookups) on a
    plain SQLite file at this code's schema gives LaunchReads."""

    def __init__(self, url: str | None, *, create: bool, retry_s: float, timeout_s: float | None = None,
                 refresh: Callable[[Callable[[], None]], None] | None = None) -> None:
        self.url = url
        self.refresh = refresh  # LaunchReads' background reads
        self.create = create
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self._store: Storage | LaunchReads | None = None
        self._failed_at = float("-inf")
        self._error: DatabaseUnavailable | NotAutotunerDatabase | None = None
        self._lock = threading.Lock()

    def _open(self) -> Storage | LaunchReads:
        if not self.create:
            reads = SqliteReads.open(self.url)
            if reads is not None:
                return LaunchReads(reads, self.url, self.timeout_s, self.refresh)
        return open_store(self.url, create=self.create, timeout_s=self.timeout_s)

    def get(self) -> Storage | LaunchReads:
        return self._opened(remember=True)

    def prefetch(self) -> Storage | LaunchReads | None:
        """Open the database now if it can be opened (a launching process readying itself ahead of its first
        lookup); a failure is not remembered: the first lookup tries again, and finds a database created since."""
        try:
            return self._opened(remember=False)
        except (DatabaseUnavailable, NotAutotunerDatabase):
            return None

    def _opened(self, *, remember: bool) -> Storage | LaunchReads:
        """The store, opened on first use; `remember`: a failure is raised again, without retrying, for retry_s."""
        if self._store is not None:
            return self._store
        with self._lock:
            if self._store is None:
                if remember and self._error is not None and time.monotonic() - self._failed_at < self.retry_s:
                    raise _detached(self._error)
                try:
                    self._store = self._open()
                    self._error = None
                except (DatabaseUnavailable, NotAutotunerDatabase) as exc:
                    if remember:
                        self._failed_at, self._error = time.monotonic(), _detached(exc)
                    raise
            return self._store

    def full(self) -> Storage:
        """`get`, as a full Store (the worker's and the service's, opened with create=True, always are)."""
        store = self.get()
        return store.full if isinstance(store, LaunchReads) else store

    def peek(self) -> tuple[Storage | LaunchReads | None, str | None]:
        """The store, or None and why it could not be opened."""
        try:
            return self.get(), None
        except (DatabaseUnavailable, NotAutotunerDatabase) as exc:
            return None, f"{type(exc).__name__}: {exc}"

    def job_writer(self) -> Storage | LaunchReads:
        """Where a launching process's jobs are written: a plain SQLite file at this schema through sqlite3, as its
        lookups read it (no SQLAlchemy to import); else the full store (`writer`)."""
        store = self.peek()[0]
        return store if isinstance(store, LaunchReads) else self.writer()

    def warm(self, op: Op | None) -> list[SweepRow]:
        """Open the database if it can be, and ready a launching process's reads of `op` ahead of its first lookup
        (LaunchReads.warm); the op's sweeps, read now (none without an op, or where the reads are not a launching
        process's)."""
        store = self.prefetch()
        if op is None or not isinstance(store, LaunchReads):
            return []
        store.warm(op)
        return store.sweeps(op=op.name)

    def writer(self) -> Storage:
        """The store for a write: the one opened, or else the database is created now (and kept for reads)."""
        store = self.peek()[0]
        if isinstance(store, LaunchReads):
            return store.full
        if store is None:
            store = open_store(self.url, create=True, timeout_s=self.timeout_s)
            with self._lock:
                self._store, self._error = store, None
        return store


def _detached(exc: E) -> E:
    """A copy of an exception without its traceback or context: kept (and raised again) without keeping the frames
    it passed through, and their locals (a launch's tensors), alive."""
    copied = copy.copy(exc)
    copied.__traceback__ = copied.__context__ = copied.__cause__ = None
    return copied
