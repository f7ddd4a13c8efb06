"""`autotuner tune` over a sweep: several values of one dimension (`--M 1-8192:pow2`), tuned here one after the
other, cross-timed and refined (`--regret`, `--refine-points`), or queued as jobs for the workers (`--queue`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.table import Table

from autotuner.cli.common import console, err, ms, print_json
from autotuner.engine.tune_result import TuneObserver
from autotuner.store.prediction import MODEL, Prediction

if TYPE_CHECKING:
    from autotuner.base.registry import Op
    from autotuner.base.settings import Settings
    from autotuner.engine.measure.live import KeptProcesses
    from autotuner.engine.sweeps.sweep import SweepResult
    from autotuner.engine.tuner import Plan
    from autotuner.store.interfaces import Storage
    from search_spaces.contract import ProblemType


@dataclass(frozen=True)
class Refine:
    """How a sweep refines: the loss neighbouring winners may have on each other, and at most how many points it
    adds (None: as many as the sweep names)."""

    target: float
    points: int | None = None

    def budget(self, probs: list[Any]) -> int:
        return len(probs) if self.points is None else self.points


def queue_sweep(op: Op, probs: list[ProblemType], dim: str, store: Storage, plan: Plan, as_json: bool,
                gpus: int | None = None, refine: Refine | None = None) -> None:
    """The sweep stored and a job queued per point (`gpus` each); the last point done queues the cross-timing, which
    queues refinement's points as jobs of the sweep."""
    query = {o.name for o in op.query_options}
    budget = refine.budget(probs) if refine is not None else 0
    sweep_id = store.create_sweep(op=op.name, dtype=probs[0].dtype, dim=dim, shapes=[p.shape for p in probs],
                                  options={k: v for k, v in op.options_of(probs[0]).items() if k in query},
                                  target=refine.target if refine is not None else None, budget=budget)
    if not isinstance(plan.strategy, str):
        raise ValueError("a queued sweep names a registered strategy (autotuner.engine.search.strategies), not an object")
    jobs = [store.queue_job(op=op.name, shape=p.shape, dtype=p.dtype, options=op.options_of(p),
                            strategy=plan.strategy, budget_trials=plan.trials, budget_seconds=plan.time_budget_s,
                            sweep_id=sweep_id, gpus=gpus) for p in probs]
    if as_json:
        print_json({"sweep_id": sweep_id, "jobs": jobs, "points": [p.key for p in probs]})
        return
    console.print(f"sweep {sweep_id}: {len(jobs)} jobs queued ({op.name} {dim} = "
                  f"{', '.join(p.shape for p in probs)}), jobs {jobs[0]}-{jobs[-1]}; `autotuner worker` on each GPU "
                  "tunes them, and the last one done queues the cross-timing of their winners" +
                  (f", which queues up to {budget} points between neighbours losing more than "
                   f"{refine.target:.1%} on each other" if refine is not None and budget else ""))


class _PointProgress(TuneObserver):
    def __init__(self, number: int, given: int, problem: ProblemType) -> None:
        self.label = f"[{number}/{given}] {problem.key}" if number <= given else f"[refining] {problem.key}"

    def phase(self, name: str, total: int | None, result: Any) -> None:
        if name == "search":
            err.print(f"{self.label}: searching {total if total is not None else 'until the time budget'} configs")

    def step(self, result: Any, record: Any = None) -> None:
        pass


def run_sweep_here(op: Op, probs: list[ProblemType], dim: str, s: Settings, store: Storage, kept: KeptProcesses,
                   plan: Plan, as_json: bool, quiet: bool, refine: Refine | None = None) -> None:
    from autotuner.base.device import current_device
    from autotuner.cli import handed_run
    from autotuner.engine.plan import plan_device
    from autotuner.engine.sweeps.sweep import run_sweep

    by = handed_run.current()
    device = current_device(by.gpu if by is not None else plan_device(plan))
    budget = refine.budget(probs) if refine is not None else 0
    counter = iter(range(1, len(probs) + budget + 1))
    result = run_sweep(
        op, probs, dim=dim, store=store, settings=s, plan=plan, device=device, kept=kept,
        observer=(lambda p: _PointProgress(next(counter), len(probs), p)) if not quiet else None,
        on_point=(lambda p: err.print(f"cross-timing: the winners near {p.key} on it")) if not quiet else None,
        target=refine.target if refine is not None else None, budget=budget,
        make=(lambda shape: store.recorded_problem(op, shape, probs[0].dtype)) if op.needs_recorded_call else None)
    handed_run.release(kept)  # killed, not waited for: before the output (a worker's are kept)
    if as_json:
        print_json(sweep_summary(result))
    else:
        _print(result, device.key, dim)


def sweep_summary(result: SweepResult) -> dict[str, Any]:
    worst = result.worst
    return {"sweep_id": result.sweep_id, "tune_s": result.tune_s, "cross_time_s": result.cross_time_s,
            "predict_s": result.predict_s,
            "errors": result.errors,
            "points": [{"problem": p.key, "winner": w, "best_ms": r.best_ms if r else None,
                        "trials": len(r.trials) if r else 0, "refined": p.key in result.refined,
                        "phases": {k: round(v, 3) for k, v in r.phases.items()} if r else {}}
                       for p, w, r in zip(result.problems, result.winners, result.results, strict=True)],
            "target": result.target, "refined": result.refined, "unrefined": result.unrefined,
            "worst_loss": _loss_json(worst.loss) if worst is not None else None,
            "worst_between": [worst.low, worst.high] if worst is not None else None,
            "within_target": (worst is None or not worst.above(result.target)) if result.target is not None else None,
            "pairs": [{"low": p.low, "high": p.high, "loss": _loss_json(p.loss)} for p in result.pairs],
            "cross_timings": [c.as_row() for c in result.cells],
            "between_points": _prediction_json(result.prediction)}


def _prediction_json(p: Prediction | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {"served": p.chosen, "why": p.why, "left_out": p.left_out, "model_loss": p.model_loss,
            "model_worst": p.model_worst, "nearest_loss": p.nearest_loss, "nearest_worst": p.nearest_worst}


def prediction_text(p: Prediction | None) -> str:
    """What is served between the swept points: the model's picks or nearest, and why."""
    if p is None:
        return ("between the points: nearest (no model of the trials was made: it needs three tuned points and "
                "scikit-learn, `pip install autotuner[predict]`)")
    served = "the model's picks" if p.chosen == MODEL else "the nearest point's winner"
    return (f"between the points: {served}; leaving each inner point out in turn, {p.why}")


def _loss_json(loss: float | None) -> float | str | None:
    return "not valid on the other" if loss == float("inf") else loss


def worst_text(result: SweepResult) -> str:
    """The sweep's worst neighbouring loss, and where it stands against the target."""
    worst = result.worst
    if worst is None:
        return "no neighbouring pair was measured"
    loss = "neither winner is valid on the other's point" if worst.loss == float("inf") else \
        f"the better of the two winners loses {worst.loss:+.1%} on the other's point"
    text = f"worst neighbouring pair {worst.low} / {worst.high}: {loss}"
    if result.target is None:
        return text
    if not worst.above(result.target):
        return f"{text}; every pair within the {result.target:.1%} target"
    left = sum(p.above(result.target) for p in result.pairs)
    why = "; ".join(f"{k}: {v}" for k, v in result.unrefined.items())
    return f"{text}; {left} pair(s) above the {result.target:.1%} target" + (f" ({why})" if why else
                                                                               " (the point budget is spent)")


def _print(result: SweepResult, device: str, dim: str) -> None:
    table = Table(title=f"sweep {result.sweep_id} over {dim} on {device}: each winner on its neighbours")
    for column in ("point", "winner", "its time", "on the point below", "on the point above"):
        table.add_column(column)
    keys = [p.key for p in result.problems]
    loss = {(c.winner_key, c.on_key): (c.ms / c.own_ms - 1 if c.ms and c.own_ms else None) for c in result.cells}

    def cell(winner: str, j: int) -> str:
        if not 0 <= j < len(keys) or (winner, keys[j]) not in loss:
            return ""
        value = loss[(winner, keys[j])]
        return "not valid there" if value is None else f"{value:+.1%}"

    for i, (p, w, r) in enumerate(zip(result.problems, result.winners, result.results, strict=True)):
        table.add_row(p.key + (" (refined)" if p.key in result.refined else ""),
                      json.dumps(w) if w else result.errors.get(p.key, "not tuned"),
                      ms(r.best_ms) if r else "n/a", cell(p.key, i - 1), cell(p.key, i + 1))
    console.print(table)
    added = f" ({len(result.refined)} added by refinement)" if result.refined else ""
    console.print(f"tuned {len(keys)} points{added} in {result.tune_s:.1f} s, cross-timed in "
                  f"{result.cross_time_s:.1f} s; a winner's loss on a neighbour is what serving that neighbour's "
                  "bucket or nearest answer with it can be expected to cost")
    console.print(prediction_text(result.prediction))
    console.print(worst_text(result))
