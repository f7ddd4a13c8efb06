"""A sweep: problems of one op, dtype and options that differ in one dimension (`--M 1-8192:pow2`), tuned ahead of the
workload. Here, the points are tuned in one trial process and pool, then cross-timed and refined; queued, each point is
a job and the cross-timing a job queued after the last. More: docs/design/engine.md."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import Op
from autotuner.base.settings import Settings
from autotuner.engine.measure.live import KeptProcesses
from autotuner.engine.sweeps.cross_time import Cell, cross_time
from autotuner.engine.sweeps.predict import predict_sweep, warm_up
from autotuner.engine.sweeps.refine import (
    DEFAULT_TARGET,
    Pair,
    insert_points,
    neighbour_losses,
    point_trials,
    refinements,
    stale_points,
    worst_pair,
)
from autotuner.engine.tune_result import TuneObserver, TuneResult
from autotuner.engine.tuner import Plan, tune
from autotuner.store.interfaces import SweepStore
from autotuner.store.prediction import Prediction
from autotuner.store.regret import fastest_either_side
from search_spaces.contract import ProblemType
from search_spaces.problem import ProblemError

RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*:\s*pow2\s*$")
MAX_POINTS = 256


def is_sweep(text: str) -> bool:
    """Whether a value names several points: a range `A-B:pow2` or a list `a,b,c`."""
    return bool(RANGE.match(text)) or ("," in text and all(p.strip().isdigit() for p in text.split(",")))


def points(text: str) -> list[int]:
    """The values a sweep names: `A-B:pow2` (the powers of two from A to B, and A and B themselves), a list
    `a,b,c`, or one value. ProblemError naming what is accepted."""
    m = RANGE.match(text)
    if m:
        low, high = int(m.group(1)), int(m.group(2))
        if not 1 <= low <= high:
            raise ProblemError(f"bad sweep {text!r}: give 1 <= A <= B in A-B:pow2")
        values = sorted({low, high, *(1 << k for k in range(high.bit_length()) if low <= 1 << k <= high)})
    elif all(p.strip().isdigit() and int(p) > 0 for p in text.split(",")):
        values = sorted({int(p) for p in text.split(",")})
    else:
        raise ProblemError(f"bad value {text!r}: a positive integer, a list a,b,c, or a range A-B:pow2")
    if len(values) > MAX_POINTS:
        raise ProblemError(f"sweep {text!r} names {len(values)} points; at most {MAX_POINTS}")
    return values


@dataclass
class SweepResult:
    sweep_id: int
    problems: list[ProblemType]  # in order along the dimension, refinement's points among them
    results: list[TuneResult | None]  # None: that point could not be tuned (its error in `errors`)
    winners: list[dict[str, int] | None]  # the stored best each point now serves
    cells: list[Cell] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    tune_s: float = 0.0
    cross_time_s: float = 0.0
    predict_s: float = 0.0  # fitting and measuring the model of the points' trials
    target: float | None = None  # refinement's target (None: not refined)
    refined: list[str] = field(default_factory=list)  # the keys of the points refinement added
    unrefined: dict[str, str] = field(default_factory=dict)  # a pair above the target that could not be refined
    pairs: list[Pair] = field(default_factory=list)  # each neighbouring pair's loss, as last measured
    prediction: Prediction | None = None  # a model of the points' trials, and whether it beat nearest

    @property
    def worst(self) -> Pair | None:
        return worst_pair(self.pairs)


@dataclass
class Round:
    """One round of a sweep: its winners cross-timed where they were not (`cells`), each neighbouring pair's loss, and
    the midpoints refinement asks for next, with why each pair above the target was left."""

    cells: list[Cell]
    pairs: list[Pair]
    new: list[tuple[int, ProblemType]]
    skipped: dict[str, str]


def sweep_round(op: Op, sweep_id: int, problems: list[ProblemType], winners: list[dict[str, int] | None],
                cells: list[Any], *, store: SweepStore, settings: Settings, device: DeviceInfo, runner: Any,
                target: float | None, budget: int, tried: Collection[str], make: Callable[[str], ProblemType],
                on_point: Callable[[ProblemType], None] | None = None) -> Round:
    """The round both ways of running a sweep go through: cross-time what is stale against the stored `cells`, store it,
    measure the pairs, and ask refinement for the next midpoints (tuned here, or queued as jobs)."""
    new_cells = cross_time(op, problems, winners, settings=settings, device=device, runner=runner, on_point=on_point,
                           only=set(stale_points(problems, winners, cells)))
    store.save_cross_timings(sweep_id=sweep_id, op=op, device=device, cells=[c.as_row() for c in new_cells])
    pairs = neighbour_losses(problems, winners, [*cells, *new_cells])
    new, skipped = ([], {}) if target is None or budget <= 0 else refinements(
        problems, pairs, target=target, budget=budget, make=make, tried=tried)
    return Round(new_cells, pairs, new, skipped)


def run_sweep(op: Op, problems: list[ProblemType], *, dim: str, store: SweepStore, settings: Settings, plan: Plan,
              device: DeviceInfo, kept: KeptProcesses | None = None,
              observer: Callable[[ProblemType], TuneObserver] | None = None,
              on_point: Callable[[ProblemType], None] | None = None, target: float | None = DEFAULT_TARGET,
              budget: int | None = None, make: Callable[[str], ProblemType] | None = None) -> SweepResult:
    """Tune every point here, cross-time the winners and store both; a point that cannot be set up is left out with its
    error. With a `target`, refine: tune the midpoint of each pair whose winners lose more than it on each other
    (`point_trials` each), cross-time what changed, and again, until no pair is above it or `budget` points were added.
    `make`: a midpoint's shape as a problem."""
    query = {o.name for o in op.query_options}
    budget = len(problems) if budget is None else budget
    sweep_id = store.create_sweep(op=op.name, dtype=problems[0].dtype, dim=dim, shapes=[p.shape for p in problems],
                                  options={k: v for k, v in op.options_of(problems[0]).items() if k in query},
                                  target=target, budget=budget if target is not None else 0)
    out = SweepResult(sweep_id, [], [], [], target=target)
    runner = kept.trial_runner(settings.trial_timeout_s) if kept is not None else None

    def tune_points(points: list[ProblemType], plans: list[Plan] | None = None
                    ) -> tuple[list[TuneResult | None], list[dict[str, int] | None]]:
        started = time.perf_counter()
        results: list[TuneResult | None] = []
        winners: list[dict[str, int] | None] = []
        for i, p in enumerate(points):
            try:
                results.append(tune(op, p, store=store, settings=settings, plan=plans[i] if plans else plan,
                                    device=device, kept=kept, observer=observer(p) if observer else None))
            except ProblemError as exc:
                results.append(None)
                out.errors[p.key] = str(exc)
            best = store.best(op=op, problem=p, device=device)
            winners.append(dict(best.config) if best is not None and not best.stale else None)
        out.tune_s += time.perf_counter() - started
        return results, winners

    make = make or (lambda shape: op.parse_problem(shape, problems[0].dtype, **op.options_of(problems[0])))
    tried: set[str] = set()

    def next_round() -> Round:
        started = time.perf_counter()
        found = sweep_round(op, sweep_id, out.problems, out.winners, out.cells, store=store, settings=settings,
                            device=device, runner=runner, target=target, budget=budget - len(tried), tried=tried,
                            make=make, on_point=on_point)
        out.cells += found.cells
        out.pairs = found.pairs
        out.unrefined.update(found.skipped)
        out.cross_time_s += time.perf_counter() - started
        return found

    warming = warm_up()  # the model's library loads while the points are tuned
    try:
        out.problems = list(problems)
        out.results, out.winners = tune_points(out.problems)
        found = next_round()
        while found.new:  # refinement: the midpoints tuned here, now
            new = found.new
            tried.update(p.shape for _, p in new)
            # a midpoint measures first what was fastest either side of it, and a share of a point's budget
            results, winners = tune_points([p for _, p in new], [
                replace(plan, trials=point_trials(plan.trials),
                        first=tuple(fastest_either_side(store, op, out.problems[at - 1], out.problems[at], device)))
                for at, _ in new])
            kept_new = []
            for n, r, w in zip(new, results, winners, strict=True):
                if w is None:  # not tuned (its error in `errors`): the pair stays as it was
                    out.unrefined[n[1].shape] = out.errors.get(n[1].key, "no config passed")
                else:
                    kept_new.append((n, r, w))
            if kept_new:
                out.problems = insert_points(out.problems, [n for n, _, _ in kept_new])
                out.results = insert_points(out.results, [(n[0], r) for n, r, _ in kept_new])
                out.winners = insert_points(out.winners, [(n[0], w) for n, _, w in kept_new])
                out.refined += [n[1].key for n, _, _ in kept_new]
                store.add_sweep_points(sweep_id, shapes=[p.shape for p in out.problems],
                                       added=[n[1].shape for n, _, _ in kept_new])
            found = next_round()
        started = time.perf_counter()
        out.prediction = predict_sweep(store, op, sweep_id, out.problems, out.cells, device)
        out.predict_s = time.perf_counter() - started
    finally:
        warming.join()
    return out
