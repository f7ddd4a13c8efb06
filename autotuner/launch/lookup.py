"""What a launching process keeps between lookups (`Resolver`): its database (opened on first use, never created), the
service (with a back-off after a failure) and the jobs it queued on a miss. Which config answers is
autotuner.store.resolution's; nothing here caches answers: each launching caller keeps its own."""

from __future__ import annotations

import atexit
import logging
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import Op, get_op
from autotuner.base.settings import Settings
from autotuner.launch.service_client import Service
from autotuner.store.errors import NoStore
from autotuner.store.lazy import LazyStore
from autotuner.store.regret import PER_SIDE, Pick, bracket, predicted_pick, prefer_measured, sweep_points
from autotuner.store.resolution import Resolution, resolve
from autotuner.store.stored_best import StoredBest
from search_spaces.contract import ProblemType

log = logging.getLogger(__name__)
BACKGROUND_EXIT_S = 5.0  # at exit, queueing still under way gets this long to finish
_now = time.monotonic
MISS_TRIALS = 2 * PER_SIDE + 2  # a miss between a sweep's points: the default, the model's pick, and the
# PER_SIDE fastest configs on each point beside it (autotuner.store.regret.bracketing_configs)
SERVICE_JOB = -1  # a job the service queued for this process: its id is the service's, its priority its own


class Resolver:
    """What a launching process keeps between lookups: its database (opened on first use, never created by a
    lookup), the service and its back-off, and the tuning jobs it queued on a miss."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.store = LazyStore(self.settings.db_url, create=False, retry_s=self.settings.recheck_s,
                               refresh=self.in_background)
        self.service = Service(self.settings.url)
        # (op, problem, device) -> the id of the tuning job this process queued for it (None until it is written,
        # or where the service queued it), and the meets counted for it before the id was known
        self._queued: dict[tuple[str, str, str], int | None] = {}
        self._unapplied: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()
        self._pending: queue.Queue[Callable[[], None]] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._warned_db = False  # a database that cannot be opened is said once, not at every launch

    def resolve(self, op: Op | str, problem: ProblemType, device: DeviceInfo, fallback: str = "nearest") -> Resolution:
        """`resolve` with this process's database and service; NotFound under `fallback="none"` with nothing
        exact."""
        op = get_op(op) if isinstance(op, str) else op
        store, error = self.store.peek()
        if error is not None and not error.startswith(f"{NoStore.__name__}:") and not self._warned_db:
            # (no database yet is a new user's normal state: nothing is tuned, and nothing to say)
            self._warned_db = True
            log.warning("autotuner: the database cannot be opened, so launches use default configs until it can "
                        "(%s)", error.splitlines()[0])
        res = resolve(op, problem, device, store=store, store_error=error, service=self.service, fallback=fallback)
        if not res.final and (self.settings.tune_on_miss or self.settings.on_miss == "nearest"):
            # the bucket's representative serves every problem of its bucket, but not one between a refined or
            # predicting sweep's points: that one is queued itself
            self._tune_on_miss(op, problem if res.between_points else problem.bucket(), device)
        return res

    def _tune_on_miss(self, op: Op, problem: ProblemType, device: DeviceInfo) -> None:
        if self._first(op, problem, device):
            self.in_background(lambda: self._queue_job(op, problem, device))

    def _first(self, op: Op, problem: ProblemType, device: DeviceInfo) -> bool:
        key = (op.name, problem.key, device.key)
        with self._lock:
            if key in self._queued:
                return False
            self._queued[key] = None
            return True

    def met(self, op: Op, problem: ProblemType, device: DeviceInfo, meets: int) -> None:
        """`meets` more launches were served a non-exact answer for `problem`: the tuning job its miss queued here
        (the bucket's representative's, or its own between a sweep's points) rises by as much in priority,
        so workers drain the most-met first; on the background thread, after the queueing handed to it before."""
        self.in_background(lambda: self._raise(op, problem, device, meets))

    def _raise(self, op: Op, problem: ProblemType, device: DeviceInfo, meets: int) -> None:
        with self._lock:
            key = next((k for k in ((op.name, p.key, device.key) for p in (problem, problem.bucket()))
                        if k in self._queued), None)
            if key is None:
                return
            job_id = self._queued[key]
            if job_id == SERVICE_JOB:
                return
            if job_id is None:  # not written yet: applied when it is
                self._unapplied[key] = self._unapplied.get(key, 0) + meets
                return
        self._writer().raise_priority(job_id, by=meets)

    def queued(self, op: Op, problem: ProblemType, device: DeviceInfo) -> bool:
        """Whether this process queued a tuning job for this problem already."""
        with self._lock:
            return (op.name, problem.key, device.key) in self._queued

    def queue(self, op: Op, problem: ProblemType, device: DeviceInfo) -> None:
        """Queue a tuning job for this problem, once per process (a recorded call of a decorated kernel)."""
        if self._first(op, problem, device):
            self._queue_job(op, problem, device)

    def keep_call(self, op: Op, problem: ProblemType, device: DeviceInfo) -> None:
        """Keep a key this process tuned itself (a decorated kernel's recorded call in its options) as a tuning job
        it did, once per process: what a sweep of the kernel makes its points' calls from. Never raises."""
        if not self._first(op, problem, device):
            return
        try:
            self.store.writer().keep_tuned_call(op=op.name, shape=problem.shape, dtype=problem.dtype,
                                                options=op.options_of(problem),
                                                worker=f"{socket.gethostname()}:{os.getpid()} (tuned in place)")
        except Exception as exc:
            log.warning("autotuner: could not keep the call of %s %s: %s", op.name, problem.key, str(exc))

    def in_background(self, work: Callable[[], None]) -> None:
        """Run `work` (queueing a job: a write, which may import SQLAlchemy and wait on the database) on this
        resolver's background thread, so a launch never waits for it; the process's exit waits up to
        BACKGROUND_EXIT_S for what is still pending."""
        self.start_background()
        self._pending.put(work)

    def start_background(self) -> None:
        """Start the background thread `in_background` hands work to, if it is not running."""
        with self._lock:
            if self._worker is None:
                self._worker = threading.Thread(target=self._drain, daemon=True, name="autotuner-queue")
                self._worker.start()
                atexit.register(self._join_background)

    def _drain(self) -> None:
        while True:
            work = self._pending.get()
            try:
                work()
            except Exception as exc:  # the work logs its own failures; nothing may stop this thread
                log.warning("autotuner: background work failed: %s", str(exc))
            finally:
                del work  # the closure holds what its launch saw (tensors): never past its own run
                self._pending.task_done()

    def _join_background(self) -> None:
        """Wait until the background work is done, for up to BACKGROUND_EXIT_S."""
        deadline = time.monotonic() + BACKGROUND_EXIT_S
        while self._pending.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def predicted(self, op: Op, problem: ProblemType, device: DeviceInfo) -> Pick | None:
        """The model's pick for `problem` from a sweep that chose its model (autotuner.store.regret.predicted_pick);
        None where none does or the database cannot be read."""
        store, _ = self.store.peek()
        if store is None:
            return None
        try:
            return predicted_pick(store, op, problem, device)
        except Exception as exc:  # a database that went away after opening: nearest or the default then
            log.warning("autotuner: predicted lookup for %s %s failed: %s", op.name, problem.key, str(exc))
            return None

    def nearest(self, op: Op, problem: ProblemType, device: DeviceInfo,
                limit: int = 8) -> list[tuple[ProblemType, StoredBest]]:
        """The current stored bests of the tuned problems nearest this one on this device, nearest first (a swept
        point's winner expected to lose less there first: autotuner.store.regret.prefer_measured); none while the
        database cannot be read."""
        store, _ = self.store.peek()
        if store is None:
            return []
        try:
            ranked = store.nearest(op=op, problem=problem, device=device, limit=limit)
            return prefer_measured(store, op, problem, device, ranked)
        except Exception as exc:  # a database that went away after opening: a launch goes on with the default
            log.warning("autotuner: nearest lookup for %s %s failed: %s", op.name, problem.key, str(exc))
            return []

    def _writer(self) -> Any:
        """Where this process's jobs are written (LazyStore.job_writer); queueing may create the database that a
        lookup never would."""
        return self.store.job_writer()

    def _queue_job(self, op: Op, problem: ProblemType, device: DeviceInfo) -> None:
        options = op.options_of(problem)
        key = (op.name, problem.key, device.key)
        try:
            if self.settings.url and self.settings.token and not op.needs_recorded_call:
                import httpx

                httpx.post(self.settings.url.rstrip("/") + "/jobs", timeout=2.0,
                           headers={"Authorization": f"Bearer {self.settings.token}"},
                           json={"op": op.name, "shape": problem.shape, "dtype": problem.dtype, "options": options})
                with self._lock:  # the service's job keeps its priority: no write here reaches it
                    self._queued[key] = SERVICE_JOB
                    self._unapplied.pop(key, None)
                return
            writer = self._writer()
            with self._lock:
                meets = self._unapplied.pop(key, 0)
            # between a sweep's points, the job measures what was fastest either side first: a few trials do
            trials = MISS_TRIALS if bracket(writer, op, problem) is not None else None
            job_id = writer.queue_job(op=op.name, shape=problem.shape, dtype=problem.dtype, options=options,
                                      priority=meets, budget_trials=trials, strategy=op.default_strategy)
            with self._lock:
                self._queued[key] = job_id
                meets = self._unapplied.pop(key, 0)  # met while it was being written
            if meets:
                writer.raise_priority(job_id, by=meets)
        except Exception as exc:
            log.warning("autotuner: could not queue a tuning job for %s %s: %s", op.name, problem.key, str(exc))


class Pending:
    """An answer that is not settled, as a launching cache keeps it: asked again after `Settings.recheck_s`, and
    its meets counted and handed to `Resolver.met` in doubling steps (1, 2, 4, 8, ... launches: a few writes a
    key), so that the tuning job its miss queued rises in priority by how often the key is met."""

    __slots__ = ("at", "meets", "_reported", "_report")

    def __init__(self, at: float, report: Callable[[int], None]) -> None:
        self.at, self.meets, self._reported, self._report = at, 0, 0, report

    def met(self) -> bool:
        """One more launch of the key; whether its answer is due to be asked again."""
        self.meets += 1
        if self.meets >= 2 * self._reported:
            self._report(self.meets - self._reported)
            self._reported = self.meets
        return self.at < _now()


def pending(op: Op, problem: ProblemType, device: DeviceInfo) -> Pending:
    """A launching cache's record of a non-exact answer for `problem` (see Pending), reporting to the process's
    resolver against the job its miss queued."""
    r = resolver()
    return Pending(_now() + r.settings.recheck_s, lambda meets: r.met(op, problem, device, meets))


_RESOLVER: Resolver | None = None
_AHEAD_ENV: tuple[tuple[str, str], ...] | None = None  # the AUTOTUNER_* variables a resolver built ahead read
_RESOLVER_LOCK = threading.Lock()
_WARMING: queue.Queue[Op | None] = queue.Queue()
_WARMER: threading.Thread | None = None
# CPython 3.11 before 3.11.8 (and 3.12.0) keeps one AST recursion counter for every thread: a source hash parsed
# here while the launching thread parses too (pytest rewriting a test module, Triton reading a kernel) can fail
# that thread's ast.parse with a SystemError (python/cpython#106905). There the hash is left to the first launch.
AST_COUNTER_SHARED = (3, 11) <= sys.version_info[:3] < (3, 11, 8) or sys.version_info[:3] == (3, 12, 0)
_EXITING = threading.Event()  # the process is exiting: readying stops (_stop_warming)


def _autotuner_env() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AUTOTUNER_")))


def resolver() -> Resolver:
    """The process-wide resolver, built from AUTOTUNER_* settings on first use (or ahead of it by `prepare`, and
    then built again if those variables changed since)."""
    global _RESOLVER, _AHEAD_ENV
    if _AHEAD_ENV is not None:
        with _RESOLVER_LOCK:
            if _AHEAD_ENV is not None and _AHEAD_ENV != _autotuner_env():
                _RESOLVER = None
            _AHEAD_ENV = None
    if _RESOLVER is None:
        with _RESOLVER_LOCK:
            if _RESOLVER is None:
                _RESOLVER = Resolver(launch_settings())
    return _RESOLVER


def launch_settings() -> Settings:
    """The AUTOTUNER_* settings of a launching process. A bad one is the user's process's business only in one
    warning line: its default stands in (an unknown miss policy, a number that is not one), never a traceback out
    of a library call or a kernel's launch."""
    from pydantic import ValidationError

    from autotuner.base.settings import settings_error

    try:
        return Settings()
    except ValidationError as exc:
        bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
        log.warning("autotuner: %s; the defaults stand in for them", settings_error(exc))
        fields = Settings.model_fields
        try:
            return Settings(**{n: fields[n].get_default(call_default_factory=True) for n in bad if n in fields})
        except ValidationError:
            return Settings.model_construct()  # (settings that are bad only together): every default


def set_resolver(r: Resolver | None) -> None:
    global _RESOLVER, _AHEAD_ENV
    with _RESOLVER_LOCK:
        _RESOLVER, _AHEAD_ENV = r, None


def warm_up(op: Op | None = None) -> None:
    """Ready, on a background thread, what the first launch of `op` in this process would otherwise pay for on the
    launching thread: the settings, the database opened for reads, the kernel's source hash (a decorated kernel
    calls this when it is decorated, `autotuner.install()` when it installs). Nothing is created or written."""
    global _WARMER
    _WARMING.put(op)
    with _RESOLVER_LOCK:
        if _WARMER is None:
            _WARMER = threading.Thread(target=_warm_queued, daemon=True, name="autotuner-warm-up")
            _WARMER.start()
            atexit.register(_stop_warming)


def _stop_warming() -> None:
    """At exit, the readying under way finishes (up to BACKGROUND_EXIT_S) and nothing more starts: a daemon thread
    stopped inside native code as the interpreter shuts down can abort the process ("FATAL: exception not
    rethrown")."""
    _EXITING.set()
    _WARMING.put(None)  # wakes a waiting thread, which then stops
    if _WARMER is not None:
        _WARMER.join(BACKGROUND_EXIT_S)


def _warm_queued() -> None:
    global _RESOLVER, _AHEAD_ENV
    while True:
        op = _WARMING.get()
        if _EXITING.is_set():
            _WARMING.task_done()
            return
        try:
            if _RESOLVER is None:
                env, ahead = _autotuner_env(), Resolver()
                with _RESOLVER_LOCK:
                    if _RESOLVER is None:  # else one was set or built meanwhile: it stays
                        _RESOLVER, _AHEAD_ENV = ahead, env
            if _RESOLVER is not None:
                sweeps = _RESOLVER.store.warm(op)
                _RESOLVER.start_background()  # a miss's queueing then starts no thread on the launching one
                if op is not None:
                    for sweep in sweeps:
                        sweep_points(op, sweep)  # parsed once per process
            if op is not None and not AST_COUNTER_SHARED:
                op.kernel_hash  # noqa: B018  (a cached property: computed once, here)
        except Exception as exc:  # readying is an optimisation: the launch does it itself if this fails
            log.debug("autotuner: could not prepare %s: %s", op.name if op is not None else "the resolver", str(exc))
        finally:
            _WARMING.task_done()


def warmed_up() -> None:
    """Wait until what `warm_up` was handed is ready (for tests and benchmarks)."""
    _WARMING.join()
