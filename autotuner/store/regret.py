"""What serving a problem with another's winner can be expected to cost, from a sweep's cross timings, and which winner
to serve between two points. More: docs/design/store.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from autotuner.store.nearest import distance
from autotuner.store.prediction import MODEL, Prediction
from autotuner.store.rows import CrossTimingRow, SweepRow
from autotuner.store.stored_best import StoredBest, versions
from search_spaces.contract import ProblemType
from search_spaces.space import config_key

if TYPE_CHECKING:
    from autotuner.base.device import DeviceInfo
    from autotuner.base.registry import Op


class SweepReader(Protocol):
    def sweeps(self, *, op: str | None = None) -> list[SweepRow]: ...

    def cross_timings(self, sweep_id: int, *, device_key: str | None = None) -> list[CrossTimingRow]: ...


class TrialReader(Protocol):
    def trial_times(self, *, op: Op, problem: ProblemType, device: DeviceInfo
                    ) -> dict[str, tuple[dict[str, Any], float | None]]: ...


class SweepTrialReader(SweepReader, TrialReader, Protocol):
    pass


PER_SIDE = 4  # configs taken from each swept point beside a problem to measure first (bracketing_configs)


@dataclass(frozen=True)
class Regret:
    loss: float  # 0.031: expected 3.1% slower than the problem's own winner
    measured_on: tuple[str, ...]  # the swept point whose cross timing it is interpolated from
    sweep_id: int
    measured_loss: float = 0.0  # the loss measured there (the interval's far end)
    position: float = 1.0  # where the problem lies from the served point (0) to `measured_on` (1)


_POINTS: dict[tuple[str, int, tuple[str, ...]], list[ProblemType]] = {}  # a sweep's points never change


def sweep_points(op: Op, sweep: SweepRow) -> list[ProblemType]:
    """A sweep's points as problems of the op (those another version of the op cannot parse left out); parsed
    once per process."""
    key = (op.name, sweep.id, sweep.shapes)
    held = _POINTS.get(key)
    if held is None:
        held = []
        for shape in sweep.shapes:
            try:
                held.append(op.parse_problem(shape, sweep.dtype, **sweep.options))
            except ValueError:
                continue
        if len(_POINTS) > 1024:
            _POINTS.clear()
        _POINTS[key] = held
    return held


def _current(op: Op, kernel_hash: str | None, triton_version: str | None) -> tuple[str, str]:
    return kernel_hash or op.kernel_hash, triton_version or versions()[0]


def prefer_measured(store: SweepReader, op: Op, problem: ProblemType, device: DeviceInfo,
                    ranked: list[tuple[ProblemType, StoredBest]], kernel_hash: str | None = None,
                    triton_version: str | None = None) -> list[tuple[ProblemType, StoredBest]]:
    """`ranked` (the nearest tuned problems, nearest first), with the winner of the swept point on `problem`'s
    other side first where a sweep measured it losing less on the nearest point than the nearest point's winner
    loses on it; otherwise as given."""
    if len(ranked) < 2:
        return ranked
    kernel_hash, triton_version = _current(op, kernel_hash, triton_version)
    nearest_key = ranked[0][0].key
    for sweep in reversed(store.sweeps(op=op.name)):
        points = sweep_points(op, sweep)
        keys = [p.key for p in points]
        if nearest_key not in keys:
            continue
        i = keys.index(nearest_key)
        between = [j for j in (i - 1, i + 1) if 0 <= j < len(points)
                   and _closer(problem, points[j], points[i])]  # `problem` lies between points i and j
        if not between:
            return ranked
        j = between[0]
        mine = theirs = None
        for c in store.cross_timings(sweep.id, device_key=device.key):
            if c.kernel_hash == kernel_hash and c.triton_version == triton_version:
                if (c.winner_key, c.on_key) == (keys[i], keys[j]):
                    mine = c.regret
                elif (c.winner_key, c.on_key) == (keys[j], keys[i]):
                    theirs = c.regret
        at = next((n for n, (p, _) in enumerate(ranked) if p.key == keys[j]), None)
        t = position(problem, points[i], points[j])
        if mine is None or theirs is None or at is None or t is None or (1 - t) * theirs >= t * mine:
            return ranked
        return [ranked[at], *ranked[:at], *ranked[at + 1:]]
    return ranked


def inside_refined_sweep(store: SweepReader, op: Op, problem: ProblemType, device: DeviceInfo,
                         kernel_hash: str | None = None, triton_version: str | None = None) -> tuple[str, str] | None:
    """The two neighbouring points of the newest refining sweep with current cross timings on `device` that `problem`
    lies strictly between; None where none. Between them a built-in op's bucket is not served."""
    kernel_hash, triton_version = _current(op, kernel_hash, triton_version)
    for sweep in reversed(store.sweeps(op=op.name)):
        if sweep.target is None:
            continue
        points = sweep_points(op, sweep)
        pair = next(((a, b) for a, b in zip(points, points[1:], strict=False)
                     if problem.key not in (a.key, b.key) and position(problem, a, b) is not None), None)
        if pair is None:
            continue
        if any(c.kernel_hash == kernel_hash and c.triton_version == triton_version
               for c in store.cross_timings(sweep.id, device_key=device.key)):
            return pair[0].key, pair[1].key
    return None


def position(problem: ProblemType, a: ProblemType, b: ProblemType) -> float | None:
    """Where `problem` lies from swept point `a` (0) to `b` (1) on the nearest scale; None when it is not
    between them."""
    span, from_a, from_b = distance(a, b), distance(problem, a), distance(problem, b)
    if span is None or from_a is None or from_b is None or span <= 0 or from_a > span or from_b > span:
        return None
    return from_a / span


def _closer(problem: ProblemType, other: ProblemType, nearest: ProblemType) -> bool:
    """Whether `problem` is nearer `other` than `nearest` is: it lies between them."""
    d_problem, d_points = distance(problem, other), distance(nearest, other)
    return d_problem is not None and d_points is not None and d_problem < d_points


def expected_regret(store: SweepReader, op: Op, problem: ProblemType, from_key: str, device: DeviceInfo,
                    kernel_hash: str | None = None, triton_version: str | None = None) -> Regret | None:
    """The expected loss of serving `problem` with `from_key`'s winner: the newest sweep's measured loss on the point
    beside it, times `problem`'s position between the two; None where not measured."""
    if from_key == problem.key:
        return None
    kernel_hash, triton_version = _current(op, kernel_hash, triton_version)
    for sweep in reversed(store.sweeps(op=op.name)):
        points = sweep_points(op, sweep)
        keys = [p.key for p in points]
        if from_key not in keys:
            continue
        cells = {c.on_key: c for c in store.cross_timings(sweep.id, device_key=device.key)
                 if c.winner_key == from_key and c.kernel_hash == kernel_hash and c.triton_version == triton_version
                 and c.on_key != from_key and c.regret is not None}
        own = points[keys.index(from_key)]
        for beside in (p for p in points if p.key in cells):
            t = position(problem, own, beside)
            if t is not None:
                loss = cells[beside.key].regret
                assert loss is not None
                return Regret(t * loss, (beside.key,), sweep.id, measured_loss=loss, position=t)
        return None  # outside the swept points: not measured
    return None


@dataclass(frozen=True)
class Pick:
    """A sweep's model's pick for a problem between its points."""

    config: dict[str, Any]
    prediction: Prediction
    sweep_id: int


def predicted_pick(store: SweepReader, op: Op, problem: ProblemType, device: DeviceInfo,
                   kernel_hash: str | None = None, triton_version: str | None = None) -> Pick | None:
    """The model's pick for `problem` from the newest sweep whose points bracket it and whose prediction on `device`
    (current for the kernel and Triton) chose the model; None where none does (a swept point is never predicted)."""
    kernel_hash, triton_version = _current(op, kernel_hash, triton_version)
    for sweep in reversed(store.sweeps(op=op.name)):
        pick = _pick_of(sweep, op, problem, device, kernel_hash, triton_version)
        if pick is not None:
            return pick
    return None


def _pick_of(sweep: SweepRow, op: Op, problem: ProblemType, device: DeviceInfo, kernel_hash: str,
             triton_version: str) -> Pick | None:
    """`sweep`'s model's pick for `problem`, where its prediction on `device` is current and chose the model and
    its points bracket the problem (a swept point is never predicted); else None."""
    prediction = sweep.predictions.get(device.key)
    if prediction is None or prediction.chosen != MODEL or prediction.kernel_hash != kernel_hash \
            or prediction.triton_version != triton_version:
        return None
    points = sweep_points(op, sweep)
    if len(points) < 2 or problem.key in {p.key for p in points}:
        return None
    t = position(problem, points[0], points[-1])
    return Pick(prediction.pick_at(t), prediction, sweep.id) if t is not None else None


def fastest_either_side(store: TrialReader, op: Op, low: ProblemType, high: ProblemType, device: DeviceInfo,
                        per_side: int = PER_SIDE) -> list[dict[str, Any]]:
    """The `per_side` configs measured fastest on each of two swept points (at the running kernel and Triton),
    alternating sides, fastest first, each once: what tuning a problem between them measures first."""
    sides = [sorted(((ms, config) for config, ms in store.trial_times(op=op, problem=p, device=device).values()
                     if ms is not None and ms > 0), key=lambda t: t[0])[:per_side] for p in (low, high)]
    out: dict[str, dict[str, Any]] = {}
    for i in range(per_side):
        for side in sides:
            if i < len(side):
                out.setdefault(config_key(side[i][1]), dict(side[i][1]))
    return list(out.values())


def bracket(store: SweepReader, op: Op, problem: ProblemType) -> tuple[SweepRow, ProblemType, ProblemType] | None:
    """The newest sweep holding `problem` strictly between two neighbouring points, and those points; None where
    none does (a swept point itself is not between)."""
    for sweep in reversed(store.sweeps(op=op.name)):
        points = sweep_points(op, sweep)
        if problem.key in {p.key for p in points}:
            continue
        pair = next(((a, b) for a, b in zip(points, points[1:], strict=False) if position(problem, a, b) is not None),
                    None)
        if pair is not None:
            return sweep, pair[0], pair[1]
    return None


def bracketing_configs(store: SweepTrialReader, op: Op, problem: ProblemType, device: DeviceInfo,
                       per_side: int = PER_SIDE) -> list[dict[str, Any]]:
    """What tuning `problem` should measure first where a sweep brackets it: the sweep model's pick there, then the
    configs fastest on the two points, each once; [] where no sweep does."""
    found = bracket(store, op, problem)
    if found is None:
        return []
    sweep, low, high = found
    pick = _pick_of(sweep, op, problem, device, *_current(op, None, None))
    first = [pick.config] if pick is not None else []
    out = {config_key(c): c for c in [*first, *fastest_either_side(store, op, low, high, device, per_side=per_side)]}
    return list(out.values())
