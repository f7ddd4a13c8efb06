"""Tuning one problem, in phases: set up, search, re-time and pick, record. More: docs/design/engine.md."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

from autotuner.base.device import DeviceInfo, current_device
from autotuner.base.registry import Op
from autotuner.base.roofline import fraction
from autotuner.base.settings import Settings
from autotuner.engine.fits import check_fits
from autotuner.engine.measure.compile_share import share
from autotuner.engine.measure.lanes import Lane
from autotuner.engine.measure.live import KeptProcesses, LiveMeasurer, local_lanes
from autotuner.engine.measure.protocol import Measurer
from autotuner.engine.measure.timing import CUDA_EVENTS, WALL_CLOCK, interleaved
from autotuner.engine.measure.trial_process import WorkerSpec
from autotuner.engine.plan import SEARCH_SHARE, Plan, compile_workers, more_devices
from autotuner.engine.search.contract import DEFAULT_TRIALS, Search
from autotuner.engine.search.loop import Measured, ask_first, on_a_thread, run_search
from autotuner.engine.search.strategies import make_search, preload, strategy_label
from autotuner.engine.tune_result import TrialRecord, TuneObserver, TuneResult
from autotuner.store.interfaces import RunStore
from autotuner.store.resolution import warm_start
from search_spaces.contract import ProblemType
from search_spaces.space import Candidates, Config, config_key

# The search's best few are timed again before one is chosen: those within RETIME_WINDOW of the best search time
# (the search times each config only as long as it takes to rank it), at most RETIME_TOP, and the default where it
# could stay (`_retime_configs`).
RETIME_TOP = 4
RETIME_TOP_BRACKETED = 2  # ... or this many where the search started from the configs fastest either side of it
# (Plan.first: between a sweep's points), whose first timings already ranked them on both neighbours
RETIME_WINDOW = 0.05
# Interleaved rounds of that re-time, each RETIME_SCALE of a full timing; a config keeps its rounds' median: the
# spread between timings, not within one, is what decides among finalists a few percent apart, and interleaving is
# what evens it out (benchmarks/tune_ab.py compares such settings on a GPU).
RETIME_ROUNDS = 3
RETIME_SCALE = 0.125


def _retime(measurer: Measurer, configs: list[Config], rounds: int, observer: TuneObserver,
            result: TuneResult, deadline: float | None = None, scale: float = RETIME_SCALE) -> dict[str, float]:
    """Median time of each config over interleaved rounds (each `scale` of a full timing), by config key; a
    config that fails once is left out. Under a `deadline`, no round starts that the last one says would end
    after it (none: an empty answer, and the search's times decide)."""
    by_key = {config_key(c): c for c in configs}
    began: list[float] = []  # each round's start

    def go_on(r: int) -> bool:
        began.append(time.monotonic())
        round_s = began[-1] - began[-2] if r else 0.0
        if deadline is not None and began[-1] + round_s > deadline:
            result.phases["retime_rounds_cut"] = rounds - r
            return False
        return True

    def time_one(key: str) -> float | None:
        outcome = measurer.time(by_key[key], scale)
        observer.step(result)
        return outcome.timing.median_ms if outcome.status == "ok" and outcome.timing else None

    times = interleaved(list(by_key), rounds, time_one, go_on=go_on)  # cut before any round: all empty
    return {key: statistics.median(ts) for key, ts in times.items() if ts}


@dataclass(kw_only=True)
class _Tuning:
    """What the phases of one tuning share."""

    op: Op
    problem: ProblemType
    store: RunStore
    settings: Settings
    plan: Plan
    device: DeviceInfo
    observer: TuneObserver
    measurer: Measurer
    result: TuneResult
    cands: Candidates
    default: Config
    budget: int | None
    compile_workers: int
    job_id: int | None
    known: dict[str, tuple[Config, float | None]] = field(default_factory=dict)
    search: Search | None = None
    ahead: list[Config] = field(default_factory=list)  # asked before the search phase (compiling during set-up)
    run_id: int = 0
    trial_ids: dict[str, int] = field(default_factory=dict)


@contextmanager
def _phase(t: _Tuning, name: str, steps: int | None) -> Iterator[None]:
    """One phase: announced to the observer, its seconds kept in `result.phases[name + "_s"]`."""
    t.observer.phase(name, steps, t.result)
    started = time.perf_counter()
    try:
        yield
    finally:
        t.result.phases[f"{name}_s"] = time.perf_counter() - started


def _setup(t: _Tuning) -> None:
    """Start the measurer and the run. Warm starts come first: the plan's configs, what the launch path would serve
    (resolution.warm_start), the nearest problems' winners, a causal or epilogue twin's (a parameter a stored config
    predates takes its implied value); then the space's seeds. The first configs compile while the trial worker starts.
    A problem that cannot be set up leaves nothing in the database."""
    op, problem, device, result = t.op, t.problem, t.device, t.result
    near = t.store.nearest(op=op, problem=problem, device=device, any_options=True)
    served = warm_start(op, problem, device, t.store)  # what the launch path's steps would serve it
    first = [t.default, *t.plan.first, *[op.space.complete(c) for c in served],
             *[op.space.complete(r.config) for _, r in near], *op.space.seeds(problem, device)]
    valid_keys = {config_key(c) for c in t.cands.valid}
    t.known = {k: v for k, v in t.known.items() if k in valid_keys}
    if t.known:  # measured before: not again; a budget counts new measurements
        t.budget = min(t.budget, len(t.cands.valid) - len(t.known)) if t.budget is not None else None
        result.budget = t.budget
    t.search = make_search(t.plan.strategy, t.cands.valid, op.space.params, t.budget, t.plan.seed, first=first)
    for config, ms in t.known.values():
        t.search.tell(config, ms)
    if t.budget != 0 and t.compile_workers > 1:
        t.ahead = ask_first(t.search, t.measurer, min(t.compile_workers, t.budget or t.compile_workers))
    started = time.perf_counter()
    base = t.measurer.start()
    result.phases["setup_worker_s"] = time.perf_counter() - started  # the trial process's set-up and torch's time
    if isinstance(t.measurer, LiveMeasurer):
        result.phases.update({f"setup_{part}": s for part, s in t.measurer.runner.setup_s.items()})
        result.phases.update({f"worker_{part}": s for part, s in t.measurer.runner.take_warm_s().items()})
    result.torch_ms = base.timing.median_ms if base.status == "ok" and base.timing else None
    if config_key(t.default) in t.known:
        result.default_ms = t.known[config_key(t.default)][1]
    t.run_id = result.run_id = t.store.start_run(
        op=op, problem=problem, device=device, strategy=strategy_label(t.plan.strategy), budget_trials=t.budget,
        budget_seconds=t.plan.time_budget_s, clock=result.clock, job_id=t.job_id)
    t.store.record_rejections(run_id=t.run_id, rejected=t.cands.rejected)


def _search(t: _Tuning) -> None:
    """Ask, measure, tell, writing each trial as it is measured; the time budget starts here, and at least one
    config is always measured."""
    result, search = t.result, t.search
    assert search is not None
    t0 = time.perf_counter()

    def on_trial(m: Measured) -> None:
        o, timing = m.outcome, m.outcome.timing
        if o.cut:  # the budget ran out mid-trial: nothing learnt about the config, nothing stored
            return
        key = config_key(m.config)
        t.trial_ids[key] = t.store.record_trial(
            run_id=t.run_id, config=m.config, config_key=key, status=o.status,
            median_ms=timing.median_ms if timing else None, p20_ms=timing.p20_ms if timing else None,
            p80_ms=timing.p80_ms if timing else None, compile_s=o.compile_s, error=o.error)
        if m.config == t.default:
            result.default_ms = m.ms
        record = TrialRecord(index=len(result.trials) + 1, config=m.config, status=o.status, median_ms=m.ms,
                             error=o.error, compile_s=o.compile_s, lane=m.lane, at_s=m.at - t0,
                             wait_s=o.wait_s)
        result.trials.append(record)
        best = search.best(1)
        if best:
            result.best_config, result.best_ms = best[0]
        t.observer.step(result, record)

    time_budget_s = t.plan.time_budget_s
    if t.plan.deadline is not None:  # the whole command's budget: what is left, less the re-time's share
        time_budget_s = max(0.0, (t.plan.deadline - time.monotonic()) * SEARCH_SHARE)
    if t.budget != 0:
        run_search(search, t.measurer, budget=t.budget, time_budget_s=time_budget_s,
                   batch=max(1, t.compile_workers), on_trial=on_trial, spent=result.phases, ahead=t.ahead)
        if isinstance(t.measurer, LiveMeasurer):
            result.phases["compile_wait_s"] = t.measurer.compile_wait_s
            result.phases["compiles"] = t.measurer.compiles  # (a count: configs the pool compiled, asked or guessed)
            result.phases["search_worker_s"] = t.measurer.worker_s
    if t.known and result.best_config is None and search.best(1):
        result.best_config, result.best_ms = search.best(1)[0]
    result.phases["compile_s"] = sum(r.compile_s or 0.0 for r in result.trials)


def _retime_configs(t: _Tuning) -> list[Config]:
    """The search's best few (within RETIME_WINDOW of its best, at most RETIME_TOP, or RETIME_TOP_BRACKETED after a
    bracketed start), unless measured before (`Plan.reuse`), and the default where its search time is within the window
    widened by the plan's margin. A lone finalist that is the default needs no re-time."""
    assert t.search is not None
    best = t.search.best(RETIME_TOP_BRACKETED if t.plan.first else RETIME_TOP) if not t.known else []
    retime = [c for c, ms in best if ms <= best[0][1] * (1 + RETIME_WINDOW)]
    default_ms = t.result.default_ms
    if retime and t.default not in retime and default_ms is not None and \
            default_ms * (1 - t.plan.margin) <= best[0][1] * (1 + RETIME_WINDOW):
        retime.append(t.default)
    return [] if retime == [t.default] else retime


def _retime_and_pick(t: _Tuning, configs: list[Config]) -> None:
    """The search's first times favour whichever configs were lucky, and one slow measurement must not decide
    either (benchmarks/tune_time.py): the finalists are timed again in interleaved rounds, and the
    default stays unless beaten by more than the plan's margin (DEFAULT_MARGIN)."""
    result = t.result
    before = t.measurer.worker_s if isinstance(t.measurer, LiveMeasurer) else 0.0
    again = _retime(t.measurer, configs, RETIME_ROUNDS, t.observer, result, t.plan.deadline)
    if isinstance(t.measurer, LiveMeasurer):
        result.phases["retime_worker_s"] = t.measurer.worker_s - before
    for key, ms in again.items():
        t.store.set_retimed(trial_id=t.trial_ids[key], retimed_ms=ms)
    if not again:
        return
    finalists = [(again[config_key(c)], c) for c in configs if config_key(c) in again]
    result.best_ms, result.best_config = min(finalists, key=lambda f: f[0])
    default_ms = again.get(config_key(t.default))
    if default_ms is not None:
        result.default_ms = default_ms
        if result.best_ms > default_ms * (1 - t.plan.margin):  # a tie within the noise
            result.best_ms, result.best_config = default_ms, t.default


def _record(t: _Tuning) -> str:
    """Store the winner (replacing a stored one only if faster) and end the run; its status."""
    result, op, problem = t.result, t.op, t.problem
    status = "failed"
    if result.best_config is not None and result.best_ms is not None:
        result.stored_as_best = t.store.save_best(
            op=op, problem=problem, device=t.device, config=result.best_config, median_ms=result.best_ms,
            default_ms=result.default_ms, torch_ms=None if t.device.is_interpreter else result.torch_ms,
            run_id=t.run_id)  # (an interpreter's wall-clock does not compare with torch's: Resolution.launches_torch)
        if not t.device.is_interpreter and op.flops is not None and op.bytes_moved is not None:
            result.roofline_fraction = fraction(t.device, op.flops(problem), op.bytes_moved(problem), result.best_ms,
                                                problem.dtype)
        status = "done"
    t.store.finish_run(run_id=t.run_id, status=status,
                       error=None if status == "done" else "every measured config failed")
    return status


def _only(cands: Candidates, keys: Iterable[str]) -> Candidates:
    """The valid candidates whose config keys are among `keys` (the rejected ones as they were)."""
    wanted = set(keys)
    return Candidates([c for c in cands.valid if config_key(c) in wanted], cands.rejected)


def _plan(op: Op, problem: ProblemType, *, store: RunStore, settings: Settings, plan: Plan, device: DeviceInfo,
             observer: TuneObserver, measurer: Measurer | None, kept: KeptProcesses | None,
             job_id: int | None, lanes: Sequence[Lane] | None = None) -> _Tuning:
    """Everything decided before a process starts: the problem fits, the candidates, the budget, the measurer."""
    check_fits(op, problem, device, settings.max_problem_bytes)
    # The space is enumerated (and the strategy's modules imported) on a thread, while this one waits for the trial
    # worker's start below, which the measurer's making does, and is off the tune's critical path
    # (benchmarks/tune_time.py's phases).
    def enumerate_space() -> Candidates:
        preload(plan.strategy)
        return op.space.enumerate(problem, device)

    enumerated = on_a_thread(enumerate_space, "enumerate")
    n_workers = compile_workers(settings, device, op, problem, max(1, len(plan.gpus))) if measurer is None else 0
    known = store.trial_times(op=op, problem=problem, device=device) if plan.reuse else {}
    made = measurer is None
    if measurer is None:  # (a LiveMeasurer starts setting the problem up in the trial worker when made)
        share(settings.compile_secret, settings.db_url)  # before the trial worker and the compile pool start
        spec = WorkerSpec(op.name, asdict(problem), (*settings.plugins, *op.imports), device.index,
                          settings.warmup_ms, settings.rep_ms)
        more = list(lanes) if lanes is not None else \
            local_lanes(spec, more_devices(device, plan.gpus), settings.trial_timeout_s, kept)
        measurer = LiveMeasurer(spec, settings.trial_timeout_s, n_workers, kept, more=more)
    try:
        return _planned(op, problem, enumerated(), store=store, settings=settings, plan=plan, device=device,
                        observer=observer, measurer=measurer, n_workers=n_workers, known=known, job_id=job_id)
    except BaseException:
        if made:  # (nothing else will close it)
            measurer.close()
        raise


def _planned(op: Op, problem: ProblemType, cands: Candidates, *, store: RunStore, settings: Settings, plan: Plan,
             device: DeviceInfo, observer: TuneObserver, measurer: Measurer, n_workers: int,
             known: dict[str, tuple[Config, float | None]], job_id: int | None) -> _Tuning:
    """The rest of the plan, once the space is enumerated: the candidates the plan allows, the budget, the result."""
    if plan.candidates is not None:
        cands = _only(cands, map(config_key, plan.candidates))
    left = op.allowed(problem) if op.allowed is not None else None
    if left is not None:  # (a pruned list that leaves none of these: recorded before the kernel's configs changed)
        narrowed = _only(cands, left)
        cands = narrowed if narrowed.valid else cands
    default = op.space.default(problem, device)
    budget = min(plan.trials, len(cands.valid)) if plan.trials is not None else \
        (None if plan.time_budget_s else max(1, min(len(cands.valid), DEFAULT_TRIALS)))
    clock = WALL_CLOCK if device.is_interpreter else CUDA_EVENTS
    result = TuneResult(op=op.name, problem_key=problem.key, device=device.key, clock=clock,
                        strategy=strategy_label(plan.strategy), default_config=default, budget=budget,
                        candidates=len(cands.valid), rejected=len(cands.rejected))
    return _Tuning(op=op, problem=problem, store=store, settings=settings, plan=plan, device=device,
                   observer=observer, measurer=measurer, result=result, cands=cands, default=default, budget=budget,
                   compile_workers=n_workers, job_id=job_id, known=known)


def tune(op: Op, problem: ProblemType, *, store: RunStore, settings: Settings, plan: Plan | None = None,
         device: DeviceInfo | None = None, observer: TuneObserver | None = None, measurer: Measurer | None = None,
         kept: KeptProcesses | None = None, job_id: int | None = None,
         lanes: Sequence[Lane] | None = None) -> TuneResult:
    """Tune `problem`: ProblemError (too large) or WorkerSetupError (cannot be set up) before anything is written; what
    stops the run is re-raised after marking it failed or interrupted. `store`: a Store or a worker's JobStore;
    `measurer`: default an isolated trial worker (LiveMeasurer); `kept`: a worker's kept processes; `lanes`: further
    lanes instead of trial workers on `plan.gpus[1:]`."""
    t_start = time.perf_counter()
    t = _plan(op, problem, store=store, settings=settings, plan=plan or Plan(),
                 device=device or current_device(), observer=observer or TuneObserver(), measurer=measurer,
                 kept=kept, job_id=job_id, lanes=lanes)
    t.result.phases["plan_s"] = time.perf_counter() - t_start  # the space enumerated, the measurer made
    if isinstance(t.measurer, LiveMeasurer):  # a trial still running when the whole command's budget ends is cut
        t.measurer.set_deadline(t.plan.deadline)
    try:
        with _phase(t, "setup", None):
            _setup(t)
        with _phase(t, "search", t.budget):
            _search(t)
        configs = _retime_configs(t)
        with _phase(t, "retime", len(configs) * RETIME_ROUNDS):
            _retime_and_pick(t, configs)
        with _phase(t, "record", None):
            _record(t)
    except BaseException as exc:
        if t.run_id:
            status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            store.finish_run(run_id=t.run_id, status=status, error=f"{type(exc).__name__}: {exc}"[:2000])
        raise
    finally:
        if isinstance(t.measurer, LiveMeasurer):
            t.measurer.set_deadline(None)  # (kept processes serve the next tuning)
        t.measurer.close()
        t.result.elapsed_s = time.perf_counter() - t_start
    return t.result
