"""`autotuner worker`: claim queued jobs, run the tuning engine on them, write their results. More:
docs/design/service.md."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from types import FrameType

from sqlalchemy.exc import SQLAlchemyError

from autotuner.base.device import current_device
from autotuner.base.registry import load_plugins
from autotuner.base.settings import Settings
from autotuner.engine.measure.compile_share import share
from autotuner.engine.measure.lanes import Lane
from autotuner.engine.measure.live import KeptProcesses
from autotuner.store.errors import LOST, utcnow
from autotuner.store.errors import StoreLost as StorageLost
from autotuner.store.errors import StoreUnavailable as DatabaseUnavailable
from autotuner.store.interfaces import Storage
from autotuner.store.job_store import JobLost, JobStore
from autotuner.store.lazy import LazyStore
from autotuner.store.rows import JobRow
from autotuner.worker.command_socket import CommandSocket, Request, runtime_dir
from autotuner.worker.heartbeat import LOST_SIGNAL, Heartbeat
from autotuner.worker.job_endings import EndingWriter, StopWorker
from autotuner.worker.jobs import job_gpus, work_for
from autotuner.worker.slots import Slot, Slots, start_slots
from kernels._backend import interpreting

log = logging.getLogger(__name__)

# Runs a command handed over through the command socket, in the worker's kept processes; True: a signal sent to the worker
# stopped it (the worker stops too).
Serve = Callable[[Request, KeptProcesses], bool]


def started(job: JobRow, used: tuple[int, ...], own: tuple[int, ...], gpu: int | None) -> str:
    """A job's start as the worker says it: its kind, problem and attempt, and which of the worker's GPUs (`own`)
    measure it, where it has several or the job asks for several."""
    kind = "" if job.kind == "tune" else f"{job.kind} of sweep {job.sweep_id}: "
    line = f"job {job.id}: {kind}{job.op} {job.shape} {job.dtype} {job.options or ''} (attempt {job.attempts}) started"
    if len(own) <= 1 and not job.gpus:
        return line
    used = used or ((gpu,) if gpu is not None else (0,))
    short = f", of the {job.gpus} it asks for" if job.gpus is not None and job.gpus > len(used) else ""
    return line + f" on {len(used)} GPU{'s' * (len(used) > 1)} ({','.join(map(str, used))}{short})"


class Worker:
    def __init__(self, settings: Settings, *, gpu: int | None = None, name: str | None = None,
                 on_event: Callable[[str], None] | None = None, serve: Serve | None = None,
                 gpus: tuple[int, ...] = ()) -> None:
        """`gpus`: several GPUs that measure each tuning job's configs at once (the first is `gpu`)."""
        self.settings = settings
        self.gpus = gpus
        self.gpu = gpus[0] if gpus and not interpreting() else gpu
        on = f":gpus{','.join(map(str, gpus))}" if gpus else f":gpu{gpu}" if gpu is not None else ""
        self.name = name or f"{socket.gethostname()}:{os.getpid()}" + on
        self.on_event = on_event or (lambda message: log.info("%s", message))
        self.store = LazyStore(settings.db_url, create=True, retry_s=0.0, timeout_s=settings.db_timeout_s)
        self._stopping = False
        self.stopped_by: int | None = None  # the signal that stopped it (the command exits 128 + it)
        self._running: int | None = None  # the job it runs, from its claim to its end (the command socket says so)
        self._last_job: int | None = None  # the job it ended last: its next claim prefers jobs of the same kernels
        self._busy = False
        self._job: JobStore | None = None
        self._down_since: float | None = None  # when claiming started to fail (the database away)
        self.ledger = EndingWriter(self._store, worker=self.name, retry_s=settings.db_retry_s,
                             max_attempts=settings.max_attempts, on_event=self.on_event, stopping=lambda: self._stopping)
        share(settings.compile_secret, settings.db_url)  # the compiles of its processes, with other hosts
        self.kept = KeptProcesses()  # one trial worker and compile pool for all its jobs (started ahead by run())
        self.serve = serve if settings.local_worker else None
        self.socket: CommandSocket | None = None
        self.slots: Slots | None = None  # a worker with several GPUs: a job on each at once (run())
        self._ending = threading.Lock()  # the slots' threads end their jobs one at a time

    # -- plumbing ---------------------------------------------------------------------------------------
    def _store(self) -> Storage:
        return self.store.full()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == LOST_SIGNAL:
            if self._busy and self._job is not None and self._job.lost.is_set():
                raise JobLost(f"job {self._job.job_id} was taken back from {self.name}")
            return
        self._stopping = True
        self.stopped_by = signum
        if self.slots is not None:  # the jobs run in threads: each is stopped from here, and this thread goes on
            self.slots.interrupt_all(StopWorker(f"stopped by signal {signum}"))
            if self.kept.pool is not None:
                self.kept.pool.reset()  # a compile a job waits for ends now
            return
        if self._busy:
            raise StopWorker(f"stopped by signal {signum}")

    # -- the loop ---------------------------------------------------------------------------------------
    def requeue_stale(self) -> None:
        cutoff = utcnow() - timedelta(seconds=self.settings.lease_s)
        for job_id, state in self._store().requeue_stale(older_than=cutoff, max_attempts=self.settings.max_attempts):
            self.on_event(f"job {job_id}: its worker stopped heartbeating; now {state}")

    def run(self, *, once: bool = False, until_empty: bool = False) -> int:
        """Work until stopped; `once`: one job then return; `until_empty`: return when nothing is queued or
        running. Returns the number of jobs this worker finished (done or failed)."""
        from autotuner.engine.measure.live import prestarted

        load_plugins(self.settings.plugins)
        several = len(self.gpus) > 1
        if several:
            self.kept, self.slots = start_slots(self.settings, self.gpus, self.kept)
        else:
            self.kept = prestarted(self.settings, self.gpu)  # ready when the first job comes
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT, LOST_SIGNAL)}
        handled = 0
        self._down_since = None
        self._open_socket()
        try:
            if several:
                return self._run_slots(once=once, until_empty=until_empty)
            while not self._stopping:
                if self._serve_next(0.0):
                    continue
                job, counts = self._claim(give_up=once or until_empty)
                if job is None:
                    if counts is not None and (once or (until_empty and not counts["queued"] and not counts["running"])):
                        break
                    if self.socket is not None:
                        self._serve_next(self.settings.poll_s)  # idle: a command typed here is taken at once
                    else:
                        time.sleep(self.settings.poll_s)
                    continue
                self.run_job(job)
                handled += 1
                if once:
                    break
        finally:
            if self.socket is not None:
                self.socket.close()
                self.socket = None
            if self.slots is not None:
                self.slots.join()
                for slot in self.slots.slots:
                    slot.kept.close()
                if self.kept.shared_pool is not None:
                    self.kept.shared_pool.reset()
            self.kept.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return handled

    # -- several GPUs: a job on each at once --------------------------------------------------------------
    def _run_slots(self, *, once: bool, until_empty: bool) -> int:
        """Claim a job whenever a GPU is free and run it there; a job asking for several GPUs waits for them (its
        lease kept meanwhile). `once`: one job, then its end; `until_empty`: until nothing is queued or running."""
        slots = self.slots
        assert slots is not None
        started = 0
        while not self._stopping:
            if not slots.busy and self._serve_next(0.0):
                continue
            if not slots.free():
                slots.wait(self.settings.poll_s)
                continue
            job, counts = self._claim(give_up=once or until_empty)
            if job is None:
                idle = not slots.busy
                if counts is not None and idle and (once or (until_empty and not counts["queued"]
                                                              and not counts["running"])):
                    break
                if idle and self.socket is not None:
                    self._serve_next(self.settings.poll_s)
                else:
                    slots.wait(self.settings.poll_s)
                continue
            chosen = self._slots_for(job)
            if not isinstance(chosen, list):  # the worker stopping (given back) or the job taken back meanwhile
                with self._ending:
                    self.ledger.end(job.id, chosen, "this worker")
                continue
            slots.start(job, chosen, self._run_on_slots)
            started += 1
            if once:
                break
        slots.join()
        return started

    def _slots_for(self, job: JobRow) -> list[Slot] | BaseException:
        """As many free slots as the job asks GPUs (one for a job without a count), waited for under the job's
        heartbeat; else why the wait ended: the worker stopping, or the job taken back."""
        slots = self.slots
        assert slots is not None
        want = max(1, len(job_gpus(job, self.gpus)))
        if len(slots.free()) >= want:
            return slots.free()[:want]
        waiting = JobStore(self._store(), job_id=job.id, worker=self.name, retry_s=self.settings.db_retry_s,
                           on_event=self.on_event)
        with Heartbeat(self._store, waiting, worker=self.name, every_s=self.settings.heartbeat_s,
                       on_event=self.on_event, busy=lambda: False, on_lost=lambda: None):
            while len(slots.free()) < want:
                if self._stopping:
                    return StopWorker("stopping")
                if waiting.lost.is_set():
                    return JobLost(f"job {job.id} was taken back from {self.name} while it waited for GPUs")
                slots.wait(self.settings.poll_s)
        return slots.free()[:want]

    def _run_on_slots(self, slot: Slot, others: list[Slot]) -> None:
        """A job in its slot's thread; whatever escapes `_run_job` (it ends the jobs it runs) still ends the job,
        as a failed attempt, and never the thread silently."""
        job = slot.job
        assert job is not None
        try:
            lanes = [o.kept.trial_runner(self.settings.trial_timeout_s) for o in others]
            self._run_job(job, gpu=None if interpreting() else slot.gpu, kept=slot.kept,
                          gpus=tuple(s.gpu for s in (slot, *others) if s.gpu is not None), lanes=lanes, slot=slot)
        except Exception as exc:  # noqa: BLE001 - a thread's last word: the job's end, written
            log.exception("job %s on GPU %s", job.id, slot.gpu)
            with self._ending:
                self.ledger.end(job.id, exc, f"GPU {slot.gpu}")

    # -- commands typed on this host ----------------------------------------------------------------------
    def _open_socket(self) -> None:
        if self.serve is None:
            return
        sock = CommandSocket(runtime_dir(self.settings.runtime_dir), self.name, busy=self._busy_with)
        try:
            sock.open()
        except OSError as exc:
            self.on_event(f"commands on this host cannot hand their problems to this worker: {sock.path}: {exc}")
            return
        self.socket = sock

    def _busy_with(self) -> str | None:
        """The job(s) this worker runs, or None when it is idle."""
        if self.slots is not None:
            busy = [s.job.id for s in self.slots.busy if s.job is not None]
            return f"job{'s' * (len(busy) > 1)} {', '.join(map(str, busy))}" if busy else None
        return f"job {self._running}" if self._running is not None else None

    def _serve_next(self, wait_s: float) -> bool:
        """Run the next command handed over (waiting up to `wait_s` for one); False if none came."""
        request = self.socket.take(wait_s) if self.socket is not None else None
        if request is None or self.serve is None:
            return False
        command = " ".join(["tune", *request.argv])
        self.on_event(f"{command}: from a command on this host")
        t0 = time.perf_counter()
        if self.serve(request, self.kept):
            self._stopping = True
        self.on_event(f"{command}: over in {time.perf_counter() - t0:.1f} s")
        return True

    def _claim(self, *, give_up: bool) -> tuple[JobRow | None, dict[str, int] | None]:
        """The next job (stale ones queued again first), or None with the count of jobs by state; None and None
        while the database is away. A worker asked to drain the queue and stop (`give_up`) raises after
        db_wait_s of that; a long-running one keeps waiting."""
        try:
            problem = self._store().health(self.settings.min_free_bytes)
            if problem in LOST:
                # what this worker writes would be lost (a deleted file) or go elsewhere than its jobs came from
                raise StorageLost(f"{problem}; worker {self.name} stops")
            if problem is not None:  # read-only, full or corrupt: nothing is claimed until it is fixed
                raise DatabaseUnavailable(problem)
            self.requeue_stale()
            job, counts = self._store().claim_job(self.name, after=self._last_job)
        except (SQLAlchemyError, DatabaseUnavailable) as exc:
            now = time.monotonic()
            self._down_since = self._down_since if self._down_since is not None else now
            if give_up and now - self._down_since >= self.settings.db_wait_s:
                raise DatabaseUnavailable(f"gave up after {now - self._down_since:.0f} s (AUTOTUNER_DB_WAIT_S="
                                          f"{self.settings.db_wait_s:g}): {exc}") from None
            self.on_event(f"database unavailable, retrying in {self.settings.poll_s:g} s: {exc}")
            return None, None
        self._down_since = None
        return job, counts

    def run_job(self, job: JobRow) -> str:
        """Run one claimed job (autotuner.worker.jobs: tune a problem, or cross-time a sweep) and record how it
        ended; returns the job's new state (or "taken", "unknown"). The command socket says this worker is busy from here
        to the end, so a command typed meanwhile is not held back by the job."""
        self._running = job.id
        try:
            return self._run_job(job, gpu=self.gpu, kept=self.kept, gpus=self.gpus)
        finally:
            self._running = None

    def _run_job(self, job: JobRow, *, gpu: int | None, kept: KeptProcesses, gpus: tuple[int, ...],
                 lanes: Sequence[Lane] | None = None, slot: Slot | None = None) -> str:
        """A job in the main thread, or on a slot's GPUs (`slot`: in the slot's thread, stopped through it)."""
        try:
            return self._attempt(job, gpu=gpu, kept=kept, gpus=gpus, lanes=lanes, slot=slot)
        finally:
            self._last_job = job.id

    def _attempt(self, job: JobRow, *, gpu: int | None, kept: KeptProcesses, gpus: tuple[int, ...],
                 lanes: Sequence[Lane] | None, slot: Slot | None) -> str:
        with self._ending:
            self.ledger.attempts += 1
        self.on_event(started(job, gpus if lanes is not None else job_gpus(job, gpus), self.gpus, self.gpu))
        where = f"GPU {gpu}" if gpu is not None else "this device"
        try:
            work = work_for(job, self.settings, current_device(gpu), kept, gpus, self.on_event, lanes)
        except ValueError as exc:  # an unknown op, shape, dtype or option
            with self._ending:
                return self.ledger.fail(job.id, f"bad job: {exc}", permanent=True)
        store = JobStore(self._store(), job_id=job.id, worker=self.name, retry_s=self.settings.db_retry_s,
                         on_event=self.on_event)
        on_lost = None
        if slot is not None:
            slot.store = store
            if slot.stop_reason is not None:
                store.stop(slot.stop_reason)
            on_lost = lambda: slot.interrupt(JobLost(f"job {job.id} was taken back from {self.name}"))  # noqa: E731
        beat = Heartbeat(self._store, store, worker=self.name, every_s=self.settings.heartbeat_s,
                         on_event=self.on_event, busy=lambda: self._busy, on_lost=on_lost)
        if slot is None:
            self._busy, self._job = True, store
        try:
            with beat:
                if self._stopping:
                    raise StopWorker("stopping")
                done = work(store)
        except (Exception, StopWorker, JobLost) as exc:
            if slot is None:
                self._busy = False
            # on a slot: what stopped it, not what its interrupted trial raised
            reason = slot.stop_reason if slot is not None and slot.stop_reason is not None else exc
            with self._ending:
                return self.ledger.end(job.id, reason, where)
        finally:
            if slot is None:
                self._busy, self._job = False, None
        with self._ending:
            if not done.ok:
                return self.ledger.fail(job.id, done.summary)
            return self.ledger.done_with(job.id, done.run_id, done.summary)

