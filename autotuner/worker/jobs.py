"""What a worker does with each kind of job: `tune` a problem, or `cross_time` a sweep (its points' winners timed
on each other, once its points are tuned). Each is parsed first (ValueError: a bad job, failed for good) into
work the worker runs under its heartbeat, against the job's store."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import import_op
from autotuner.base.settings import Settings
from autotuner.engine.measure.lanes import Lane
from autotuner.engine.measure.live import KeptProcesses
from autotuner.engine.tune_result import TrialRecord, TuneObserver, TuneResult
from autotuner.store.job_store import JobStore
from autotuner.store.rows import JobRow
from search_spaces.contract import ProblemType


@dataclass(frozen=True)
class Done:
    ok: bool  # False: every measured config failed (the job fails)
    summary: str
    run_id: int | None = None


Work = Callable[[JobStore], Done]


def work_for(job: JobRow, settings: Settings, device: DeviceInfo, kept: KeptProcesses,
             gpus: tuple[int, ...] = (), say: Callable[[str], None] | None = None,
             lanes: Sequence[Lane] | None = None) -> Work:
    """The job's work; ValueError for a job that names no problem this worker can run. `gpus`: a worker's several
    GPUs, which measure a tuning job's configs at once (the first is `device`); `lanes`: further lanes that measure
    them instead (other GPUs' kept trial workers); `say`: where its progress goes."""
    return cross_time_work(job, settings, device, kept) if job.kind == "cross_time" else \
        tune_work(job, settings, device, kept, gpus, say, lanes)


def allowed_modules(settings: Settings) -> list[str]:
    """The modules a job's or sweep's op may import (a decorated kernel's `module:name`): only what the operator
    allowed, never what a row says."""
    return [*settings.kernel_modules, *settings.plugins]


def job_gpus(job: JobRow, gpus: tuple[int, ...]) -> tuple[int, ...]:
    """The worker's GPUs that measure a tuning job's configs: the first `job.gpus` of them (one for a job without a
    count, or a job that is not a tuning; all it has for a job asking more)."""
    if job.kind != "tune":
        return gpus[:1]
    return gpus[:job.gpus] if job.gpus is not None else gpus[:1]


class JobProgress(TuneObserver):
    """A tuning job's progress in the worker's log: each phase as it starts, and during the search a line at most
    every EVERY_S seconds (trials measured, the best so far), so that a long job is never silent."""

    EVERY_S = 10.0

    def __init__(self, job_id: int, say: Callable[[str], None]) -> None:
        self.job_id, self.say = job_id, say
        self.total: int | None = None
        self.measured = 0
        self.last = time.monotonic()

    def phase(self, name: str, total: int | None, result: TuneResult) -> None:
        self.total, self.measured = total, 0
        of = f": {total} configs" if name == "search" and total else ""
        self.say(f"job {self.job_id}: {name}{of}")
        self.last = time.monotonic()

    def step(self, result: TuneResult, record: TrialRecord | None = None) -> None:
        if record is None:
            return
        self.measured += 1
        if time.monotonic() - self.last < self.EVERY_S:
            return
        self.last = time.monotonic()
        of = f"/{self.total}" if self.total else ""
        best = f", best {result.best_ms:.4g} ms" if result.best_ms is not None else ""
        self.say(f"job {self.job_id}: {self.measured}{of} configs measured{best}")


def tune_work(job: JobRow, settings: Settings, device: DeviceInfo, kept: KeptProcesses,
              gpus: tuple[int, ...] = (), say: Callable[[str], None] | None = None,
              lanes: Sequence[Lane] | None = None) -> Work:
    from autotuner.engine.tuner import Plan, tune
    from autotuner.store.regret import bracketing_configs

    op = import_op(job.op, allowed=allowed_modules(settings), probe_s=settings.import_probe_s)
    problem = op.parse_problem(job.shape, job.dtype, **job.options)
    plan = Plan(strategy=job.strategy, trials=job.budget_trials, time_budget_s=job.budget_seconds,
                deadline=time.monotonic() + job.budget_seconds if job.budget_seconds else None,  # the whole job
                gpus=gpus[:1] if lanes is not None else job_gpus(job, gpus))

    own = op.search
    if own is not None:  # a generated kernel (Helion's): searched through its generator, written through the job
        def search(store: JobStore) -> Done:
            config, ms, run_id = own(problem, device, store, job.budget_trials, job.strategy)
            return Done(True, f"best {ms:.4g} ms {config} ({job.strategy} through the kernel's generator)", run_id)

        return search

    def run(store: JobStore) -> Done:
        # between a sweep's points: what was fastest either side is measured first (a miss's job, a midpoint's)
        first = tuple(bracketing_configs(store.store, op, problem, device))
        result = tune(op, problem, store=store, settings=settings, plan=replace(plan, first=first), device=device,
                      job_id=job.id, kept=kept, lanes=lanes,
                      observer=JobProgress(job.id, say) if say is not None else TuneObserver())
        if result.best_config is None:
            return Done(False, f"every measured config failed; see the trials of run {result.run_id}", result.run_id)
        return Done(True, f"best {result.best_ms:.4g} ms {result.best_config}; {len(result.trials)} trials in "
                          f"{result.phase_summary()}", result.run_id)

    return run


def cross_time_work(job: JobRow, settings: Settings, device: DeviceInfo, kept: KeptProcesses) -> Work:
    """Time the sweep's winners on the points next to them, where not timed yet (each winner as it now is); then,
    where the sweep refines, queue the midpoints of the pairs above its target as jobs of the sweep (whose last
    one to finish queues this job again)."""
    from autotuner.engine.sweeps.predict import predict_sweep
    from autotuner.engine.sweeps.refine import insert_points, point_trials, worst_pair
    from autotuner.engine.sweeps.sweep import sweep_round
    from autotuner.store.stored_best import versions

    if job.sweep_id is None:
        raise ValueError("a cross_time job names no sweep")

    def run(store: JobStore) -> Done:
        sweep = store.store.sweep(job.sweep_id or 0)
        if sweep is None:
            raise ValueError(f"sweep {job.sweep_id} is gone")
        op = import_op(sweep.op, allowed=allowed_modules(settings), probe_s=settings.import_probe_s)

        def point(shape: str) -> ProblemType:  # a decorated kernel's: with the call its tuning job carried
            if op.needs_recorded_call:
                return store.store.recorded_problem(op, shape, sweep.dtype)
            return op.parse_problem(shape, sweep.dtype, **sweep.options)

        problems = [point(shape) for shape in sweep.shapes]
        bests = [store.best(op=op, problem=p, device=device) for p in problems]
        winners = [dict(b.config) if b is not None and not b.stale else None for b in bests]
        stored = [c for c in store.cross_timings(sweep.id, device_key=device.key)
                  if c.kernel_hash == op.kernel_hash and c.triton_version == versions()[0]]
        found = sweep_round(op, sweep.id, problems, winners, stored, store=store.store, settings=settings,
                            device=device, runner=kept.trial_runner(settings.trial_timeout_s), target=sweep.target,
                            budget=sweep.budget - len(sweep.refined), tried=sweep.refined, make=point)
        cells, new, target = found.cells, found.new, sweep.target
        measured = sum(c.ms is not None for c in cells)
        summary = f"sweep {sweep.id}: {measured} of {len(cells)} winner-on-point timings measured"
        worst = worst_pair(found.pairs)
        if worst is not None and worst.loss is not None:
            summary += f"; worst neighbouring loss {worst.loss:+.1%} ({worst.low} / {worst.high})"
        if new:  # refinement: the midpoints queued as jobs of the sweep
            jobs = store.store.refine_queued_sweep(
                sweep.id, shapes=[p.shape for p in insert_points(problems, new)],
                added=[(p.shape, op.options_of(p)) for _, p in new], trials=point_trials)
            summary += f"; refining: {len(jobs)} points queued ({', '.join(p.shape for _, p in new)})"
        elif worst is not None and target is not None and worst.above(target):
            why = "; ".join(f"{k}: {v}" for k, v in found.skipped.items()) or "the point budget is spent"
            summary += f"; above the {target:.1%} target ({why})"
        elif worst is not None and target is not None:
            summary += f"; every pair within the {target:.1%} target"
        if not new:  # the sweep is settled: its model of the points' trials, against nearest
            prediction = predict_sweep(store.store, op, sweep.id, problems, [*stored, *cells], device)
            if prediction is not None:
                summary += f"; between the points: {prediction.chosen} ({prediction.why})"
        return Done(True, summary)

    return run
