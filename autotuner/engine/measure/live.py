"""Real launches: an isolated trial worker (autotuner.engine.measure.runner) times each config, and on a GPU a
compile pool (autotuner.engine.measure.compile_pool) compiles the next configs while the current one is timed;
the processes a worker or a command keeps between problems (`KeptProcesses`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait

from autotuner.base.device import current_device
from autotuner.base.settings import Settings
from autotuner.engine.measure import processes
from autotuner.engine.measure.compile_pool import CompilePool
from autotuner.engine.measure.lanes import Lane
from autotuner.engine.measure.outcome import COMPILING, NOT_STARTED, READY, Outcome
from autotuner.engine.measure.runner import TrialRunner
from autotuner.engine.measure.trial_process import QUICK_SCALE, WorkerSpec
from kernels._backend import cuda_device_count, interpreting
from search_spaces.space import Config, config_key


class LiveMeasurer:
    """Real launches: one trial worker process, and a compile pool ahead of it when `compile_workers` > 1. Further lanes
    (`more`, `local_lanes`: trial workers on more GPUs of this host) measure configs at the same time; the problem's own
    device does the baseline and every re-time. The search times each config briefly (trial_process.QUICK_SCALE), enough
    to rank it; those close to the best are timed again in the re-time's interleaved rounds."""

    measures_elsewhere = True

    def __init__(self, spec: WorkerSpec, trial_timeout_s: float, compile_workers: int,
                 kept: KeptProcesses | None = None, more: Sequence[Lane] = ()) -> None:
        self.kept = kept
        self.spec = spec
        if kept is None:
            self.runner = TrialRunner(spec, trial_timeout_s)
            self.pool = CompilePool(spec, compile_workers) if compile_workers > 1 else None
        else:
            self.runner, self.pool = kept.for_problem(spec, trial_timeout_s, compile_workers)
        # the further lanes load what the pool compiled (a local GPU's from Triton's cache: one device type)
        self.more = list(more)
        for lane in self.more:
            lane.use(spec, trial_timeout_s)
        self._owns_more = kept is None
        self._lock = threading.Lock()  # the lanes' threads share what is compiling ahead
        self.trial_timeout_s = trial_timeout_s
        self._ahead: dict[str, Future[Outcome | float]] = {}
        # the interpreter's wall-clock timing has no brief form
        self.scale = QUICK_SCALE if spec.device_index is not None else 1.0
        self.compile_wait_s = 0.0  # time the search waited on the compile pool, measure() by measure()
        self._waited: dict[str, float] = {}  # by config key: waited for in first_ready, not yet measured
        self._speculative: set[str] = set()  # keys in _ahead that the search has not asked for (yet)
        self.compiles = 0  # configs handed to the compile pool and not taken back before it started them
        self.worker_s = 0.0  # the trial processes' own time answering measure() and time() (Outcome.worker_s)
        # The problem is set up in the trial worker and torch's baseline timed from now on, on a thread, while the
        # tuner plans the search (`start` takes the result), instead of after the plan, which itself waits for the
        # compile pool's processes to start (benchmarks/tune_time.py's setup phase).
        self._base: Future[Outcome] = Future()
        self._closing = False
        threading.Thread(target=self._set_up, name="trial-setup", daemon=True).start()

    def _set_up(self) -> None:
        try:
            if self.kept is not None:
                self.kept.wait_for_runner()  # (a process of its own, not a second one, where one is being started)
            if self._closing:  # closed while the trial worker was being started: no problem is set up in it
                raise RuntimeError("the measurer was closed before its trial worker started")
            self._base.set_result(self.runner.baseline())  # (the problem's set-up first: runner._ask)
        except BaseException as exc:  # noqa: BLE001 - raised by start(), in the tuner's thread
            self._base.set_exception(exc)

    @property
    def lanes(self) -> int:
        return 1 + len(self.more)

    def set_deadline(self, deadline: float | None) -> None:
        """Every trial process answers by `deadline` (time.monotonic()) or its request is cut (`Outcome.cut`)."""
        for runner in (self.runner, *self.more):
            if isinstance(runner, TrialRunner):
                runner.deadline = deadline

    def start(self) -> Outcome:
        """Start the trial worker (imports, CUDA context, inputs, reference) and time the torch baseline, the
        other lanes' workers setting up meanwhile; raises runner.WorkerSetupError when the problem cannot be set
        up."""
        failed: list[BaseException] = []

        def set_up(runner: TrialRunner) -> None:
            try:
                runner.setup()
            except BaseException as exc:  # noqa: BLE001 - raised below, in the caller's thread
                failed.append(exc)

        threads = [threading.Thread(target=set_up, args=(r,), name="lane-setup", daemon=True) for r in self.more]
        for th in threads:
            th.start()
        try:
            base = self._base.result()
        finally:
            for th in threads:
                th.join()
        if failed:
            raise failed[0]
        return base

    def compile_ahead(self, configs: list[Config]) -> None:
        if self.pool is not None:
            with self._lock:
                for c in configs:
                    self._speculative.discard(config_key(c))
                    if config_key(c) not in self._ahead:  # handed over twice (the first configs): compiled once
                        self._ahead[config_key(c)] = self.pool.submit(c, self.spec)
                        self.compiles += 1

    def speculate(self, configs: list[Config]) -> None:
        """Compile configs the search may ask next, with the pool's idle workers only: what is asked is never
        queued behind more than a pool's width of guesses, and guesses no longer wanted and not started are
        dropped."""
        if self.pool is None:
            return
        with self._lock:
            self._speculate(configs)

    def _speculate(self, configs: list[Config]) -> None:
        assert self.pool is not None
        wanted = {config_key(c) for c in configs}
        for key in list(self._speculative - wanted):
            if self._ahead[key].cancel():
                del self._ahead[key]
                self._speculative.discard(key)
                self.compiles -= 1
        busy = sum(not f.done() for f in self._ahead.values())
        for c in configs:
            if busy >= self.pool.workers:
                break
            key = config_key(c)
            if key not in self._ahead:
                self._ahead[key] = self.pool.submit(c, self.spec)
                self._speculative.add(key)
                self.compiles += 1
                busy += 1

    def readiness(self, config: Config) -> int:
        if self.pool is None:
            return READY
        with self._lock:
            fut = self._ahead.get(config_key(config))
        return NOT_STARTED if fut is None else READY if fut.done() else COMPILING

    def first_ready(self, configs: list[Config], wait_for_one: bool = True) -> int:
        with self._lock:
            futs = [self._ahead.get(config_key(c)) for c in configs]
        if not futs or None in futs:  # one not compiling ahead (no pool): nothing to wait for
            return futs.index(None) if futs else 0
        waited = 0.0
        if wait_for_one:
            t0 = time.perf_counter()
            wait([f for f in futs if f is not None], timeout=self.trial_timeout_s, return_when=FIRST_COMPLETED)
            waited = time.perf_counter() - t0
        first = next((i for i, f in enumerate(futs) if f is not None and f.done()), 0)
        with self._lock:
            self.compile_wait_s += waited
            key = config_key(configs[first])
            self._waited[key] = self._waited.get(key, 0.0) + waited
        return first

    def measure(self, config: Config, lane: int = 0, give_up_ms: float | None = None) -> Outcome:
        self._base.result()  # (the trial worker is the set-up thread's until it is set up)
        with self._lock:
            fut = self._ahead.pop(config_key(config), None)
            self._speculative.discard(config_key(config))
        t0 = time.perf_counter()
        compiled = self.pool.result(fut, self.trial_timeout_s) if self.pool is not None and fut else None
        with self._lock:
            self.compile_wait_s += time.perf_counter() - t0
            waited = self._waited.pop(config_key(config), 0.0) + time.perf_counter() - t0
        if isinstance(compiled, Outcome):  # a compile error or out of resources, found by the pool
            return dataclasses.replace(compiled, wait_s=waited)
        runner = self.runner if lane == 0 else self.more[lane - 1]
        outcome = runner.measure(config, self.scale, give_up_ms)
        with self._lock:
            self.worker_s += outcome.worker_s or 0.0
        if isinstance(compiled, float):  # the pool's first launch holds the compile time
            outcome = dataclasses.replace(outcome, compile_s=compiled)
        return dataclasses.replace(outcome, wait_s=waited) if self.pool is not None else outcome

    def time(self, config: Config, scale: float = 1.0) -> Outcome:
        self._base.result()
        outcome = self.runner.time(config, scale)
        self.worker_s += outcome.worker_s or 0.0
        return outcome

    def close(self) -> None:
        for lane in self.more:
            if self._owns_more or lane.in_flight:
                lane.close(wait=False)
        self._closing = True
        if not self._base.done():  # stopped before `start` took the set-up: the process is stopped, and the
            self.runner.close(wait=False)  # thread (which answers as soon as its pipe closes) waited for, so that
            wait([self._base], timeout=10)  # no request of this problem reaches a worker's next one
        if self.kept is not None:  # the processes outlive this tuning, unless stopped mid-trial
            for fut in self._ahead.values():
                fut.cancel()
            self._ahead.clear()
            self._speculative.clear()
            if self.runner.in_flight:
                self.runner.close()
            return
        if self.pool is not None:
            self.pool.reset()  # kill, don't wait: a pool process may be compiling a config for minutes
        self.runner.close()


# Compile processes started before the problem is known (the rest start as its first configs come): one builds what
# the trial worker needs first (compile_pool._compile_flush); a pool's width of new interpreters importing the ops at
# once, beside the fork server's import of torch, slowed that import, which the trial worker waits for.
EARLY_COMPILE_PROCESSES = 2


class KeptProcesses:
    """A trial worker and a compile pool kept from one tuning to the next (an `autotuner worker`'s, one per GPU),
    or started ahead of the first (`autotuner tune`): the next problem is set up in processes that have their
    CUDA context already, instead of new ones making it."""

    def __init__(self, shared_pool: CompilePool | None = None) -> None:
        self.runner: TrialRunner | None = None
        # `shared_pool`: one compile pool for the kept processes of several GPUs (a worker's, running a job on
        # each at once), never resized or stopped here
        self.shared_pool = shared_pool
        self.pool: CompilePool | None = shared_pool
        self.lanes: list[TrialRunner] = []  # trial workers on the further GPUs of a worker with several
        self._starting: list[threading.Thread] = []
        self._runner_started = threading.Event()  # the trial worker asked for (set: none is being started)
        self._runner_started.set()
        self._pool_started = threading.Event()  # the pool started by `prestart` has its processes asked for
        self._pool_started.set()

    def prestart(self, device_index: int | None, compile_workers: int, background: bool = True) -> None:
        """Start the trial worker and a pool of `compile_workers` compile processes before any problem is known, on
        two threads (`background`): EARLY_COMPILE_PROCESSES of the pool's processes now, the others as configs come.
        A problem is handed to them (`for_problem`) at once: its first configs compile while the trial worker is
        still being started."""
        runner = self.runner = TrialRunner(None)
        pool = None
        if compile_workers > 1 and self.shared_pool is None:
            pool = self.pool = CompilePool(None, compile_workers, device_index)
        self._runner_started.clear()
        self._pool_started.clear()

        def start_pool() -> None:
            try:
                if pool is not None:
                    pool.prestart(EARLY_COMPILE_PROCESSES)
            finally:
                self._pool_started.set()

        def start_runner() -> None:
            try:
                runner.prestart(device_index)
            finally:
                self._runner_started.set()

        # Each on its own: the trial worker's start waits for the fork server's imports (torch), the pool's processes
        # are new interpreters without torch, ready long before, and the search's first configs compile meanwhile.
        if background:
            self._starting = [threading.Thread(target=start_pool, name="prestart-pool", daemon=True),
                              threading.Thread(target=start_runner, name="prestart", daemon=True)]
            for thread in self._starting:
                thread.start()
        else:
            start_pool()
            start_runner()

    def _started(self) -> None:
        for thread in self._starting:
            thread.join()
        self._starting = []

    def trial_runner(self, trial_timeout_s: float) -> TrialRunner:
        """The kept trial worker alone (for timing configs checked elsewhere: cross-timing a sweep)."""
        self._started()
        if self.runner is None:
            self.runner = TrialRunner(None, trial_timeout_s)
        return self.runner

    def wait_for_runner(self) -> None:
        """Until the trial worker asked for has been started (its process forked, not yet set up); the problem's
        set-up waits for it, where the plan and the first compiles need not."""
        self._runner_started.wait()

    def for_problem(self, spec: WorkerSpec, trial_timeout_s: float,
                    compile_workers: int) -> tuple[TrialRunner, CompilePool | None]:
        """The kept trial worker and pool given `spec`'s problem, without waiting for either to have started: the
        pool queues tasks until its processes are up, and the runner sets the problem up once the prestarted
        process is there (`use` before `prestart` has ended leaves the problem to set up in it)."""
        if self.runner is None:
            self.runner = TrialRunner(spec, trial_timeout_s)
        self.runner.use(spec, trial_timeout_s)
        if self.shared_pool is not None:
            return self.runner, self.shared_pool if compile_workers > 1 else None
        if compile_workers > 1 and (self.pool is None or self.pool.workers != compile_workers):
            self._pool_started.wait()  # (not the trial worker's start, which may wait for the fork server)
            if self.pool is not None:
                self.pool.reset()
            self.pool = CompilePool(spec, compile_workers, spec.device_index)
        if self.pool is not None:
            self.pool.spec = spec
        return self.runner, self.pool if compile_workers > 1 else None

    def lane_runner(self, index: int, spec: WorkerSpec, trial_timeout_s: float) -> TrialRunner:
        """The kept trial worker of the `index`-th further GPU (`spec.device_index`), given this problem."""
        while len(self.lanes) <= index:
            self.lanes.append(TrialRunner(None, trial_timeout_s))
        runner = self.lanes[index]
        if runner.spec is not None and runner.spec.device_index != spec.device_index:  # another GPU: a new process
            runner.close(wait=False)
            runner = self.lanes[index] = TrialRunner(None, trial_timeout_s)
        runner.use(spec, trial_timeout_s)
        return runner

    def close(self) -> None:
        self._started()
        if self.pool is not None and self.pool is not self.shared_pool:
            self.pool.reset()
        if self.runner is not None:
            self.runner.close(wait=False)
        for lane in self.lanes:
            lane.close(wait=False)
        self.runner, self.pool = None, self.shared_pool
        self.lanes = []


def local_lanes(spec: WorkerSpec, devices: Sequence[int | None], trial_timeout_s: float,
                kept: KeptProcesses | None = None) -> list[Lane]:
    """A trial worker on each further GPU of this host (`devices`; None: a CPU process under the interpreter):
    a worker's kept ones where it keeps processes, else new ones the measurer closes."""
    specs = [dataclasses.replace(spec, device_index=d) for d in devices]
    return [kept.lane_runner(i, s, trial_timeout_s) if kept is not None else TrialRunner(s, trial_timeout_s)
            for i, s in enumerate(specs)]


def host_compile_workers(settings: Settings) -> int:
    """Processes compiling ahead of timing for one GPU: its share of the host's cores (`processes.host_share`); a
    worker holding several GPUs takes a share for each."""
    return processes.host_share(settings.compile_workers, cuda_device_count())


def prestarted(settings: Settings, gpu: int | None = None) -> KeptProcesses:
    """A trial worker and compile pool starting now, on CUDA device `gpu` (default: the current one), before any
    problem is known (`autotuner tune` first thing, through cli.prestart, or while it finishes starting; `autotuner
    worker` when it starts)."""
    kept = KeptProcesses()
    if interpreting():
        kept.prestart(None, 0)
    else:
        kept.prestart(gpu if gpu is not None else current_device().index, host_compile_workers(settings))
    return kept


