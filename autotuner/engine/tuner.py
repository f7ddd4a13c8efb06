"""Tuning one problem, in phases: set up, search, re-time and pick, record.

    result = tune(op, problem, store=store, settings=settings, trials=32)

1. setup: the problem is checked against the device's memory, the trial worker starts (imports, CUDA
   context, inputs, reference) and times the torch baseline. Nothing is written before this succeeds.
2. search: the run is started in the database; the search asks for configs, the measurer checks and times
   them (autotuner.engine.measure), and every trial is written as soon as it is measured.
3. re-time: the search's best few and the default are timed again in interleaved rounds; the default stays
   unless another config beats it by more than `DEFAULT_MARGIN`.
4. record: the winner is stored, replacing a stored one only if faster.

A `TuneObserver` hears each phase start and each step (the CLI draws progress from it); `TuneResult.phases`
holds the seconds each phase took.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict

from autotuner.base.device import DeviceInfo, current_device
from autotuner.base.registry import Op
from autotuner.base.roofline import fraction
from autotuner.base.settings import Settings
from autotuner.engine.fits import check_fits
from autotuner.engine.measure import KeptProcesses, LiveMeasurer, Measured, Measurer, run_search
from autotuner.engine.runner import WorkerSpec
from autotuner.engine.search import make_search
from autotuner.engine.timing import CUDA_EVENTS, WALL_CLOCK
from autotuner.engine.tune_result import TrialRecord, TuneObserver, TuneResult
from autotuner.store.database import Store
from autotuner.store.job_store import JobStore
from kernels._backend import interpreting
from search_spaces.contract import ProblemType
from search_spaces.space import Candidates, Config, config_key

RETIME_TOP = 3  # the search's best few are timed again, with the default, before one is chosen
RETIME_ROUNDS = 3  # interleaved rounds of that re-time; each config keeps the median of its rounds
# A config replaces the default only when its re-time beats the default's by more than this fraction. In an
# H100 suite run, softmax and layernorm 4096x4096 stored configs that their single re-time put 0.3% and 2%
# ahead of the default, and the bench's interleaved rounds then found 4% behind it.
DEFAULT_MARGIN = 0.01


def host_compile_workers(settings: Settings) -> int:
    """Processes compiling ahead of timing, sized per host: the CPU cores shared among the GPUs (one worker per
    GPU being how a host is run), less two for each worker's own process and its trial worker. With two workers
    on 32 cores, 15 each left 30 compiling processes and 4 timing ones on 32 cores, and jobs ran 10-15% slower
    than with one worker."""
    if settings.compile_workers:
        return settings.compile_workers
    import torch

    gpus = max(1, torch.cuda.device_count())
    return max(1, (os.cpu_count() or 2) // gpus - 2)


def prestarted(settings: Settings, gpu: int | None = None) -> KeptProcesses:
    """A trial worker and compile pool starting now, on CUDA device `gpu` (default: the current one), before any
    problem is known (`autotuner tune` while it finishes starting, `autotuner worker` when it starts)."""
    kept = KeptProcesses()
    if interpreting():
        kept.prestart(None, 0)
    else:
        import torch

        kept.prestart(gpu if gpu is not None else torch.cuda.current_device(), host_compile_workers(settings))
    return kept


def _compile_workers(settings: Settings, device: DeviceInfo, op: Op, problem: ProblemType) -> int:
    """The host's share (`host_compile_workers`), and no more than half the device's memory holds copies of the
    inputs (each process launches the kernel on its own)."""
    if device.is_interpreter:
        return 0  # the interpreter has nothing to compile
    n = host_compile_workers(settings)
    if not settings.compile_workers and op.bytes_moved is not None and device.total_memory > 0:
        n = min(n, max(1, int(device.total_memory / 2 // max(1.0, op.bytes_moved(problem)))))
    return n


def _retime(measurer: Measurer, configs: list[Config], rounds: int, observer: TuneObserver,
            result: TuneResult) -> dict[str, float]:
    """Median time of each config over interleaved rounds, by config key; a config that fails once is left out."""
    times: dict[str, list[float]] = {config_key(c): [] for c in configs}
    for _ in range(rounds):
        for config in configs:
            key = config_key(config)
            if key in times:
                outcome = measurer.time(config)
                if outcome.status == "ok" and outcome.timing:
                    times[key].append(outcome.timing.median_ms)
                else:
                    del times[key]
            observer.step(result)
    return {key: statistics.median(ts) for key, ts in times.items()}


def tune(
    op: Op,
    problem: ProblemType,
    *,
    store: Store | JobStore,  # a worker's JobStore rides out database outages
    settings: Settings,
    strategy: str = "tpe",
    trials: int | None = None,
    time_budget_s: float | None = None,
    seed: int = 0,
    device: DeviceInfo | None = None,
    observer: TuneObserver | None = None,
    job_id: int | None = None,
    measurer: Measurer | None = None,
    reuse: bool = False,
    candidates: list[Config] | None = None,
    kept: KeptProcesses | None = None,
) -> TuneResult:
    """Tune `problem`; raises ProblemError (too large for the device), WorkerSetupError (the problem cannot be
    set up) before anything is written, and re-raises what stops the run after marking it failed or
    interrupted.

    `measurer`: how configs are measured (default: an isolated trial worker, autotuner.engine.measure.LiveMeasurer).
    `kept`: the trial worker and compile pool to measure in, kept from one tuning to the next (a worker's).
    `candidates`: only these of the space's valid configs (a pruned config list).
    `reuse`: configs measured for this problem before (same kernel hash and Triton version) count as measured:
    only the others are timed, and the winner is chosen among all (`autotuner.autotune` kernels, so that adding
    a config to a list times only that one); the re-time phase is then left out."""
    t_start = time.perf_counter()
    observer = observer or TuneObserver()
    device = device or current_device()
    check_fits(op, problem, device, settings.max_problem_bytes)
    cands = op.space.enumerate(problem, device)
    if candidates is not None:
        allowed = {config_key(c) for c in candidates}
        cands = Candidates([c for c in cands.valid if config_key(c) in allowed], cands.rejected)
    default = op.space.default(problem, device)
    budget = min(trials, len(cands.valid)) if trials is not None else \
        (None if time_budget_s else max(1, min(len(cands.valid), 64)))
    clock = WALL_CLOCK if device.is_interpreter else CUDA_EVENTS
    result = TuneResult(None, op.name, problem.key, device.key, clock, strategy, None, None, default, None, None,
                        None, budget=budget, candidates=len(cands.valid), rejected=len(cands.rejected))
    spec = WorkerSpec(op.name, asdict(problem), tuple(settings.plugins),
                      None if device.is_interpreter else int(device.torch_device.split(":")[1]),
                      settings.warmup_ms, settings.rep_ms)
    n_workers = _compile_workers(settings, device, op, problem) if measurer is None else 0
    measurer = measurer or LiveMeasurer(spec, settings.trial_timeout_s, n_workers, kept)
    known = store.trial_times(op=op, problem=problem, device=device) if reuse else {}
    status = "failed"
    try:
        # 1. setup: a problem that cannot be set up leaves nothing behind in the database.
        observer.phase("setup", None, result)
        t_phase = time.perf_counter()
        # Warm starts: the nearest tuned problems' winners, the causal twin or another epilogue too (on the
        # H100 the causal 2048 winner ran the full problem 6% faster than the best of 80 trials of its own
        # search). Completed: a config stored before a parameter existed means that parameter's implied
        # value. Then the space's seeds (configs that won hand sweeps on some GPU), if it names any.
        near = store.nearest(op=op, problem=problem, device=device, any_options=True)
        first = [default, *[op.space.complete(r.config) for _, r in near], *op.space.seeds(problem, device)]
        valid_keys = {config_key(c) for c in cands.valid}
        known = {k: v for k, v in known.items() if k in valid_keys}
        # The first configs are known now: they compile while the trial worker starts and times torch.
        measurer.prepare(list({config_key(c): c for c in first if config_key(c) in valid_keys
                               and config_key(c) not in known}.values())[:max(1, n_workers)])
        base = measurer.start()
        result.torch_ms = base.timing.median_ms if base.status == "ok" and base.timing else None
        if known:  # measured before: not again; a budget counts new measurements
            budget = min(budget, len(cands.valid) - len(known)) if budget is not None else None
            result.budget = budget
        search = make_search(strategy, cands.valid, op.space.params, budget, seed, first=first)
        for config, ms in known.values():
            search.tell(config, ms)
        if config_key(default) in known:
            result.default_ms = known[config_key(default)][1]
        result.run_id = store.start_run(op=op, problem=problem, device=device, strategy=strategy,
                                        budget_trials=budget, budget_seconds=time_budget_s, clock=clock,
                                        job_id=job_id)
        store.record_rejections(run_id=result.run_id, rejected=cands.rejected)
        result.phases["setup_s"] = time.perf_counter() - t_phase

        # 2. search: the time budget starts here, and at least one config is always measured.
        observer.phase("search", budget, result)
        t_phase = time.perf_counter()
        trial_ids: dict[str, int] = {}

        def on_trial(m: Measured) -> None:
            o, t = m.outcome, m.outcome.timing
            key = config_key(m.config)
            trial_ids[key] = store.record_trial(
                run_id=result.run_id, config=m.config, config_key=key, status=o.status,
                median_ms=t.median_ms if t else None, p20_ms=t.p20_ms if t else None,
                p80_ms=t.p80_ms if t else None, compile_s=o.compile_s, error=o.error)
            if m.config == default:
                result.default_ms = m.ms
            record = TrialRecord(len(result.trials) + 1, m.config, o.status, m.ms, o.error, o.compile_s)
            result.trials.append(record)
            best = search.best(1)
            if best:
                result.best_config, result.best_ms = best[0]
            observer.step(result, record)

        if budget != 0:
            run_search(search, measurer, budget=budget, time_budget_s=time_budget_s, batch=max(1, n_workers),
                       on_trial=on_trial, spent=result.phases)
            if isinstance(measurer, LiveMeasurer):
                result.phases["compile_wait_s"] = measurer.compile_wait_s
                result.phases["full_timing_s"] = measurer.full_timing_s
        if known and result.best_config is None and search.best(1):
            result.best_config, result.best_ms = search.best(1)[0]
        result.phases["search_s"] = time.perf_counter() - t_phase
        result.phases["compile_s"] = sum(t.compile_s or 0.0 for t in result.trials)

        # 3. re-time the top few and the default in interleaved rounds: the search's first times favour
        # whichever configs were lucky, and one slow measurement (an H100 suite run once re-timed gelu's
        # default at 3.1x its first time) must not decide either.
        retime = [c for c, _ in search.best(RETIME_TOP)] if not known else []
        if result.default_ms is not None and default not in retime and retime:
            retime.append(default)
        observer.phase("retime", len(retime) * RETIME_ROUNDS, result)
        t_phase = time.perf_counter()
        again = _retime(measurer, retime, RETIME_ROUNDS, observer, result)
        for key, ms in again.items():
            store.set_retimed(trial_id=trial_ids[key], retimed_ms=ms)
        if again:
            finalists = [(again[config_key(c)], c) for c in retime if config_key(c) in again]
            result.best_ms, result.best_config = min(finalists, key=lambda f: f[0])
            default_ms = again.get(config_key(default))
            if default_ms is not None:
                result.default_ms = default_ms
                if result.best_ms > default_ms * (1 - DEFAULT_MARGIN):  # a tie within the noise
                    result.best_ms, result.best_config = default_ms, default
        result.phases["retime_s"] = time.perf_counter() - t_phase

        # 4. record
        observer.phase("record", None, result)
        t_phase = time.perf_counter()
        if result.best_config is not None and result.best_ms is not None:
            result.stored_as_best = store.save_best(
                op=op, problem=problem, device=device, config=result.best_config, median_ms=result.best_ms,
                default_ms=result.default_ms, torch_ms=result.torch_ms, run_id=result.run_id)
            if not device.is_interpreter and op.flops is not None and op.bytes_moved is not None:
                result.roofline_fraction = fraction(device, op.flops(problem), op.bytes_moved(problem),
                                                    result.best_ms, problem.dtype)
            status = "done"
        store.finish_run(run_id=result.run_id, status=status,
                         error=None if status == "done" else "every measured config failed")
        result.phases["record_s"] = time.perf_counter() - t_phase
    except BaseException as exc:
        if result.run_id is not None:
            status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            store.finish_run(run_id=result.run_id, status=status, error=f"{type(exc).__name__}: {exc}"[:2000])
        raise
    finally:
        measurer.close()
        result.elapsed_s = time.perf_counter() - t_start
    return result
