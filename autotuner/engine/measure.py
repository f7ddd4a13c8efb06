"""The measurement boundary of a tuning run: what the search loop asks a config's time of.

`LiveMeasurer` runs real kernels: an isolated trial worker (autotuner.engine.runner) times each config, and on a GPU
a compile pool (autotuner.engine.compile_pool) compiles the next configs while the current one is timed.
`TableMeasurer` looks times up in a recorded landscape, so `autotuner replay` runs the same search loop
(`run_search`) without a GPU, as Kernel Tuner's simulation runner does.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from autotuner.base.device import current_device
from autotuner.base.settings import Settings
from autotuner.engine import processes
from autotuner.engine.compile_pool import CompilePool
from autotuner.engine.lanes import Lane
from autotuner.engine.outcome import COMPILING, NOT_STARTED, READY, Outcome
from autotuner.engine.runner import TrialRunner
from autotuner.engine.timing import Timing
from autotuner.engine.trial_process import QUICK_SCALE, WorkerSpec
from kernels._backend import cuda_device_count, interpreting
from search_spaces.space import Config, config_key

if TYPE_CHECKING:  # (not at run time: the decorator imports this module, and the search brings Optuna)
    from autotuner.engine.search import Search


T = TypeVar("T")


class Measurer(Protocol):
    def start(self) -> Outcome:
        """Set up (raising WorkerSetupError when the problem cannot be), and time torch's baseline if any."""

    def close(self) -> None:
        """Release what `start` set up."""

    def compile_ahead(self, configs: list[Config]) -> None:
        """Configs about to be measured, in order (a live measurer compiles them ahead)."""

    def speculate(self, configs: list[Config]) -> None:
        """Configs the search may ask next (a live measurer compiles them if it has idle workers; the last call's
        list replaces the one before)."""

    @property
    def lanes(self) -> int:
        """How many configs it measures at once (`measure` is called from that many threads)."""

    def readiness(self, config: Config) -> int:
        """How soon it could measure a config: READY (compiled, or nothing to compile ahead), COMPILING or
        NOT_STARTED (autotuner.engine.outcome)."""

    def first_ready(self, configs: list[Config], wait_for_one: bool = True) -> int:
        """The index of the config to measure first among those asked (a live measurer: the first whose compile
        is done, waiting for one if none is and `wait_for_one`; one slow compile does not hold up the others)."""

    def measure(self, config: Config, lane: int = 0, give_up_ms: float | None = None) -> Outcome:
        """Check one config and time it as long as it takes to rank it (a brief timing on a GPU; a few repetitions
        only where they are slower than `give_up_ms`); `lane`: which of the measurer's `lanes` (trial workers
        measuring at once, one per GPU) measures it."""

    def time(self, config: Config, scale: float = 1.0) -> Outcome:
        """Time a config measured before again, for `scale` of a full timing (a round of the re-time)."""


class LiveMeasurer:
    """Real launches: one trial worker process, and a compile pool ahead of it when `compile_workers` > 1. Further
    lanes (`more`: autotuner.engine.lanes; the trial workers of more GPUs of this host, `local_lanes`) measure
    configs at the same time (`lanes`); the problem's own device does the baseline and every re-time, so a winner
    is chosen on one GPU.

    On a GPU the search times each config briefly (trial_process.QUICK_SCALE of the full warm-up and repetitions:
    ten or more runs, fifteen of a kernel under a third of a millisecond), which ranks it; the
    configs close to the best are timed again in the re-time's interleaved rounds before one is chosen.
    """

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
        # tuner plans the search (`start` takes the result): on an H100 the set-up and the baseline took 0.4-0.5 s
        # after the plan, which itself waited for the compile pool's processes to start (benchmarks/RESULTS.md,
        # session 44).
        self._base: Future[Outcome] = Future()
        threading.Thread(target=self._set_up, name="trial-setup", daemon=True).start()

    def _set_up(self) -> None:
        try:
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
        self._starting: threading.Thread | None = None
        self._runner_started = threading.Event()  # the trial worker asked for (set: none is being started)
        self._runner_started.set()

    def prestart(self, device_index: int | None, compile_workers: int, background: bool = True) -> None:
        """Start the trial worker and `compile_workers` compile processes before any problem is known (in a
        thread: a fork server still importing torch would hold the caller up). All start at once: their CUDA
        contexts, made together, slow the trial worker's set-up, but the search's first configs are compiled
        when it starts, which made `autotuner tune` quicker than starting the pool after the trial worker's
        warm-up or its context (benchmarks/RESULTS.md). A problem is given to them (`for_problem`) once the trial
        worker is asked for, not waiting for the pool's processes, which the fork server makes one by one."""
        runner = self.runner = TrialRunner(None)
        pool = None
        if compile_workers > 1 and self.shared_pool is None:
            pool = self.pool = CompilePool(None, compile_workers, device_index)
        self._runner_started.clear()

        def start() -> None:
            try:
                runner.prestart(device_index)
            finally:
                self._runner_started.set()
            if pool is not None:
                pool.prestart()

        if background:
            self._starting = threading.Thread(target=start, name="prestart", daemon=True)
            self._starting.start()
        else:
            start()

    def _started(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None

    def trial_runner(self, trial_timeout_s: float) -> TrialRunner:
        """The kept trial worker alone (for timing configs checked elsewhere: cross-timing a sweep)."""
        self._started()
        if self.runner is None:
            self.runner = TrialRunner(None, trial_timeout_s)
        return self.runner

    def for_problem(self, spec: WorkerSpec, trial_timeout_s: float,
                    compile_workers: int) -> tuple[TrialRunner, CompilePool | None]:
        self._runner_started.wait()  # (the pool's processes may still be starting: tasks wait for them)
        if self.runner is None:
            self.runner = TrialRunner(spec, trial_timeout_s)
        self.runner.use(spec, trial_timeout_s)
        if self.shared_pool is not None:
            return self.runner, self.shared_pool if compile_workers > 1 else None
        if compile_workers > 1 and (self.pool is None or self.pool.workers != compile_workers):
            self._started()
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


class InOrderMeasurer:
    """A measurer that compiles nothing ahead: configs are measured in the order asked, and it holds nothing to
    release. Subclasses give `start`, `measure` and `time`."""

    def close(self) -> None:
        pass

    def compile_ahead(self, configs: list[Config]) -> None:
        pass

    def speculate(self, configs: list[Config]) -> None:
        pass

    @property
    def lanes(self) -> int:
        return 1

    def readiness(self, config: Config) -> int:
        return READY

    def first_ready(self, configs: list[Config], wait_for_one: bool = True) -> int:
        return 0


class TableMeasurer(InOrderMeasurer):
    """A recorded landscape: a config's time is a look-up (None: it failed when recorded)."""

    def __init__(self, times: Mapping[str, float | None]) -> None:
        self.times = times

    def start(self) -> Outcome:
        return Outcome("invalid", error="a landscape holds no baseline")

    def measure(self, config: Config, lane: int = 0, give_up_ms: float | None = None) -> Outcome:
        ms = self.times[config_key(config)]
        if ms is None:
            return Outcome("crash", error="failed when the landscape was recorded")
        return Outcome("ok", timing=Timing(ms, ms, ms, 1, "landscape"))

    def time(self, config: Config, scale: float = 1.0) -> Outcome:
        return self.measure(config)


# A config whose first few repetitions run this many times the best so far is out of contention: it is timed no
# further (engine.timing.time_cuda's give_up_ms), saving most of its timing.
GIVE_UP = 1.3


def _give_up_ms(search: Search) -> float | None:
    best = search.best(1)
    return best[0][1] * GIVE_UP if best else None


@dataclass
class Measured:
    config: Config
    outcome: Outcome
    lane: int = 0  # the measurer's lane (GPU) that measured it
    at: float = dataclasses.field(default_factory=time.perf_counter)  # when its measurement ended (perf_counter)

    @property
    def ms(self) -> float | None:
        t = self.outcome.timing
        return t.median_ms if self.outcome.status == "ok" and t else None


def _ask_ahead(search: Search, measurer: Measurer, ahead: list[Config], batch: int, *, width: int,
               left: int | None, speculate: bool = True) -> list[Config]:
    """Ask the search for configs until `ahead` holds `width` (as far as `search.max_pending` allows) or `left`
    (what the trial budget leaves, None: no budget), handing them to `measurer.prepare`; then, with a compile pool
    (`batch` > 1), its idle workers compile what the search is likely to ask next. Returns `ahead`."""
    asked: list[Config] = []
    while len(ahead) + len(asked) < search.max_pending(max(1, width), measurer.lanes) and (
            left is None or len(ahead) + len(asked) < left):
        c = search.ask(measurer.readiness)
        if c is None:
            break
        asked.append(c)
    if asked:
        measurer.compile_ahead(asked)
        ahead.extend(asked)
    if batch > 1 and speculate:
        measurer.speculate(search.upcoming(batch))
    return ahead


def _tell(search: Search, m: Measured, done: list[Measured], on_trial: Callable[[Measured], None] | None,
          spent: dict[str, float], t_measure: float) -> None:
    """A measured config told to the search and recorded (`on_trial`), each part's seconds added to `spent`."""
    t_tell = time.perf_counter()
    spent["measure_s"] += t_tell - t_measure
    search.tell(m.config, m.ms)
    done.append(m)
    t_trial = time.perf_counter()
    spent["ask_s"] += t_trial - t_tell
    if on_trial:
        on_trial(m)
    spent["record_trial_s"] += time.perf_counter() - t_trial


def ask_first(search: Search, measurer: Measurer, n: int) -> list[Config]:
    """Before the measurer has started: up to `n` configs whose choice depends on no result (the first configs,
    exploration), handed to `measurer.prepare`, so that they compile while the trial worker sets up; give them
    to `run_search` as its `ahead`."""
    return _ask_ahead(search, measurer, [], n, width=n, left=n, speculate=False)


def run_search(search: Search, measurer: Measurer, *, budget: int | None, time_budget_s: float | None = None,
               batch: int = 1, on_trial: Callable[[Measured], None] | None = None,
               spent: dict[str, float] | None = None, ahead: list[Config] | None = None) -> list[Measured]:
    """Ask, measure, tell until the budget (trials, or seconds of searching) or the space runs out.

    Up to `batch` configs (a compile pool's width, as far as `search.max_pending` allows) are kept asked ahead of
    the one being measured and handed to `measurer.prepare`, so compiling the next configs overlaps timing this
    one; they are measured as their compiles finish (`measurer.first_ready`), and the configs the search is
    likely to ask next are compiled on idle workers (`measurer.speculate`). At least one config is always
    measured. `spent` gets the seconds of the loop's parts added: `ask_s` (the strategy proposing and learning),
    `measure_s` (the measurer, compile waits included) and `record_trial_s` (`on_trial`). `ahead`: configs asked
    before (`ask_first`).
    """
    spent = spent if spent is not None else {}
    for part in ("ask_s", "measure_s", "record_trial_s"):
        spent.setdefault(part, 0.0)
    ahead = list(ahead or [])
    if measurer.lanes > 1:
        return _run_lanes(search, measurer, budget=budget, time_budget_s=time_budget_s, batch=batch,
                          on_trial=on_trial, spent=spent, ahead=ahead)
    t0 = time.perf_counter()
    done: list[Measured] = []

    def out_of_budget() -> bool:
        if budget is not None and len(done) >= budget:
            return True
        return time_budget_s is not None and bool(done) and time.perf_counter() - t0 >= time_budget_s

    # A trial process measures while this process waits: what does not need its answer (writing the last trial,
    # asking the next config, guessing what the pool compiles next) is done meanwhile, the measuring on a thread.
    # Only where the measuring is another process's (a measurer running kernels in this process keeps them on its
    # thread: CUDA's current device and torch's current stream are the thread's).
    overlap = isinstance(measurer, LiveMeasurer)
    unrecorded: list[Measured] = []

    def record() -> None:
        t_record = time.perf_counter()
        for m in unrecorded:
            if on_trial:
                on_trial(m)
        unrecorded.clear()
        spent["record_trial_s"] += time.perf_counter() - t_record

    while not out_of_budget():
        t = time.perf_counter()
        _ask_ahead(search, measurer, ahead, batch, width=batch + 1,
                   left=budget - len(done) if budget is not None else None, speculate=not overlap)
        if not ahead:
            break
        t_measure = time.perf_counter()
        spent["ask_s"] += t_measure - t
        config = ahead.pop(measurer.first_ready(ahead))
        give_up_ms = _give_up_ms(search)
        if overlap:
            answer = on_a_thread(functools.partial(measurer.measure, config, give_up_ms=give_up_ms))
            t_own = time.perf_counter()
            record()
            t_guess = time.perf_counter()
            # the next config asked meanwhile (this one pending, as the others asked ahead are): the trial worker
            # waited for each ask, 5 ms of a strategy's time (benchmarks/RESULTS.md, session 45)
            _ask_ahead(search, measurer, ahead, batch, width=batch + 1,
                       left=budget - len(done) - 1 if budget is not None else None, speculate=False)
            if batch > 1:
                measurer.speculate(search.upcoming(batch))
            spent["ask_s"] += time.perf_counter() - t_guess
            t_measure += time.perf_counter() - t_own  # (measure_s: the time spent waiting for it)
            outcome = answer()
        else:
            outcome = measurer.measure(config, give_up_ms=give_up_ms)
        _tell(search, Measured(config, outcome), done, None, spent, t_measure)  # (written by record())
        unrecorded.append(done[-1])
        if not overlap:
            record()
    record()
    for config in ahead:  # asked, never measured: no longer pending
        search.pending.discard(config_key(config))
    return done


def on_a_thread(fn: Callable[[], T], name: str = "measure") -> Callable[[], T]:
    """`fn` started on a thread of its own; the call returned waits for its answer (raising what it raised). A
    daemon thread, not an executor's: those are joined at exit, where one stuck on a hung trial process would hold
    the command's exit."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            box.append((False, exc))

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()

    def answer() -> T:
        thread.join()
        ok, value = box[0]
        if not ok:
            raise value
        return cast(T, value)

    return answer


def _run_lanes(search: Search, measurer: Measurer, *, budget: int | None, time_budget_s: float | None, batch: int,
               on_trial: Callable[[Measured], None] | None, spent: dict[str, float],
               ahead: list[Config]) -> list[Measured]:
    """`run_search` with several configs measured at once, one per lane (a trial worker on each GPU): each lane
    takes the next config (one whose compile is done, if any), measures it, and tells the search. The search, the
    budget and `on_trial` are used under one lock; the measuring is not. Lane 0 runs in the calling thread, so
    that an interrupt there stops the run (the other lanes then stop after their config, telling nothing)."""
    t0 = time.perf_counter()
    done: list[Measured] = []
    state = {"in_flight": 0, "stop": False}
    failed: list[BaseException] = []
    changed = threading.Condition()

    def out_of_budget() -> bool:
        if budget is not None and len(done) + state["in_flight"] >= budget:
            return True
        return time_budget_s is not None and bool(done) and time.perf_counter() - t0 >= time_budget_s

    def next_config() -> Config | None:
        """Under the lock: the lane's next config, waiting while none can be asked but other lanes may still
        tell (a search that holds few pending asks); None when the run is over."""
        while not state["stop"] and not out_of_budget():
            t = time.perf_counter()
            _ask_ahead(search, measurer, ahead, batch, width=batch + measurer.lanes,
                       left=budget - len(done) - state["in_flight"] if budget is not None else None)
            spent["ask_s"] += time.perf_counter() - t
            if ahead:
                state["in_flight"] += 1
                return ahead.pop(measurer.first_ready(ahead, wait_for_one=False))
            if not state["in_flight"]:
                return None  # nothing left to ask, and no lane will tell anything more
            changed.wait()
        return None

    def lane(index: int) -> None:
        try:
            while True:
                with changed:
                    config = next_config()
                    give_up_ms = _give_up_ms(search)
                if config is None:
                    return
                t_measure = time.perf_counter()
                outcome = measurer.measure(config, lane=index, give_up_ms=give_up_ms)
                with changed:
                    state["in_flight"] -= 1
                    changed.notify_all()
                    if state["stop"]:
                        return
                    _tell(search, Measured(config, outcome, index), done, on_trial, spent, t_measure)
        except BaseException as exc:
            with changed:
                failed.append(exc)
                state["stop"] = True
                changed.notify_all()
            if index == 0:
                raise

    threads = [threading.Thread(target=lane, args=(i,), name=f"lane-{i}", daemon=True)
               for i in range(1, measurer.lanes)]
    for th in threads:
        th.start()
    try:
        lane(0)
    finally:
        with changed:
            if failed or sys.exc_info()[0] is not None:
                state["stop"] = True
            changed.notify_all()
    for th in threads:
        th.join()
    if failed:
        raise failed[0]
    for config in ahead:  # asked, never measured: no longer pending
        search.pending.discard(config_key(config))
    return done
