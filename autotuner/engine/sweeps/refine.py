"""Refining a sweep: where two neighbouring winners each lose more than the target (`--regret`) on the other's point,
the log-midpoint is tuned and cross-timed too, until every pair is within it or the budget is spent. More:
docs/design/engine.md."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from autotuner.engine.search.contract import DEFAULT_TRIALS
from search_spaces.space import Config, config_key

DEFAULT_TARGET = 0.02  # a neighbouring pair's winners may each lose this much on the other's point
REACH = 1  # a winner is timed on the points this many steps away on either side (autotuner.engine.sweeps.cross_time)
POINT_SHARE = 4  # a midpoint's search measures this fraction (1 / POINT_SHARE) of a point's budget ...
MIN_POINT_TRIALS = 16  # ... and at least this many configs


def point_trials(trials: int | None) -> int:
    """The configs a refinement's midpoint measures, where each point of the sweep measured `trials` (None: the
    default): its search starts from the configs fastest either side of it, so a share of the budget suffices."""
    budget = DEFAULT_TRIALS if trials is None else trials
    return min(budget, max(MIN_POINT_TRIALS, budget // POINT_SHARE))


class Point(Protocol):
    """A swept point (a ProblemType, or anything with its key and shape)."""

    @property
    def key(self) -> str: ...

    @property
    def shape(self) -> str: ...


P = TypeVar("P", bound=Point)


class Timed(Protocol):
    """A cross timing (autotuner.engine.sweeps.cross_time.Cell, or a stored CrossTimingRow)."""

    @property
    def winner_key(self) -> str: ...

    @property
    def on_key(self) -> str: ...

    @property
    def config(self) -> Config: ...

    @property
    def ms(self) -> float | None: ...

    @property
    def own_ms(self) -> float | None: ...


@dataclass(frozen=True)
class Pair:
    """Two neighbouring swept points and what serving one's winner on the other costs."""

    low: str  # the point below (its key)
    high: str  # the point above
    loss: float | None  # the smaller of the winners' losses on each other (inf: neither valid on the other);
    #                     None: not measured (a point not tuned, or its cross timing missing)
    between: str | None  # the shape of the log-midpoint; None where no integer lies between the two values

    def above(self, target: float) -> bool:
        return self.loss is not None and self.loss > target


def current_cells(cells: Iterable[Timed], winners: dict[str, Config | None]) -> dict[tuple[str, str], Timed]:
    """The cells that time each point's current winner, by (winner key, on key); the later of two for one pair."""
    out: dict[tuple[str, str], Timed] = {}
    for c in cells:
        winner = winners.get(c.winner_key)
        if winner is not None and config_key(dict(c.config)) == config_key(winner):
            out[(c.winner_key, c.on_key)] = c
    return out


def _loss(cell: Timed | None) -> float | None:
    """A winner's loss on a point: inf where it is not valid there or failed; None where not timed."""
    if cell is None:
        return None
    if cell.ms is None or not cell.own_ms:
        return math.inf if cell.own_ms else None
    return max(0.0, cell.ms / cell.own_ms - 1.0)


def neighbour_losses(problems: Sequence[Point], winners: Sequence[Config | None],
                     cells: Iterable[Timed]) -> list[Pair]:
    """Each pair of neighbouring points with its loss (see the module's text), in order along the sweep."""
    by_key = {p.key: w for p, w in zip(problems, winners, strict=True)}
    timed = current_cells(cells, by_key)
    out = []
    for a, b, wa, wb in zip(problems, problems[1:], winners, winners[1:], strict=False):
        loss: float | None
        if wa is None or wb is None:
            loss = None
        elif config_key(wa) == config_key(wb):
            loss = 0.0
        else:
            ab, ba = _loss(timed.get((a.key, b.key))), _loss(timed.get((b.key, a.key)))
            loss = None if ab is None or ba is None else min(ab, ba)
        out.append(Pair(a.key, b.key, loss, midpoint_shape(a.shape, b.shape)))
    return out


def worst_pair(pairs: Iterable[Pair]) -> Pair | None:
    """The measured pair that loses most (None: none measured)."""
    measured = [p for p in pairs if p.loss is not None]
    return max(measured, key=lambda p: p.loss or 0.0) if measured else None


def midpoint_shape(low: str, high: str) -> str | None:
    """The shape between two swept shapes that differ in one number: that number at the log-midpoint of the two
    (rounded, strictly between them); None where no integer lies between or the shapes differ otherwise."""
    a, b = re.split(r"(\d+)", low), re.split(r"(\d+)", high)
    if len(a) != len(b):
        return None
    differing = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    if len(differing) != 1 or not a[differing[0]].isdigit() or not b[differing[0]].isdigit():
        return None
    i = differing[0]
    x, y = sorted((int(a[i]), int(b[i])))
    if y - x < 2:
        return None
    mid = min(y - 1, max(x + 1, round(math.sqrt(x * y))))
    return "".join([*a[:i], str(mid), *a[i + 1:]])


def refinements(problems: Sequence[Point], pairs: Sequence[Pair], *, target: float, budget: int,
                make: Callable[[str], P], tried: Collection[str] = ()) -> tuple[list[tuple[int, P]], dict[str, str]]:
    """The midpoints to tune next, (index, problem) for each pair above the target, worst first, at most `budget`, none
    `tried` before (`make`: ValueError leaves a pair); and why each pair left was left."""
    index = {p.key: i for i, p in enumerate(problems)}
    out: list[tuple[int, P]] = []
    skipped: dict[str, str] = {}
    for pair in sorted((p for p in pairs if p.above(target)), key=lambda p: -(p.loss or 0.0)):
        if len(out) >= budget:
            break
        if pair.between is None:
            skipped[f"{pair.low} - {pair.high}"] = "no point lies between"
        elif pair.between not in tried:
            try:
                out.append((index[pair.high], make(pair.between)))
            except ValueError as exc:  # ProblemError: too large for the device, no recorded call, ...
                skipped[pair.between] = str(exc)
    return out, skipped


def insert_points(problems: list[Any], new: Sequence[tuple[int, Any]]) -> list[Any]:
    """`problems` with each new point placed at its index (indices of the list before any was placed)."""
    out = list(problems)
    for at, item in sorted(new, key=lambda n: -n[0]):
        out.insert(at, item)
    return out


def stale_points(problems: Sequence[Point], winners: Sequence[Config | None], cells: Iterable[Timed],
                 reach: int = REACH) -> list[int]:
    """The points to cross-time (again): those on which a current winner within `reach` (its own included) has
    no timing of its current config."""
    by_key = {p.key: w for p, w in zip(problems, winners, strict=True)}
    timed = current_cells(cells, by_key)
    out = []
    for j, on in enumerate(problems):
        if winners[j] is None:
            continue
        near = range(max(0, j - reach), min(len(problems), j + reach + 1))
        if any(winners[i] is not None and (problems[i].key, on.key) not in timed for i in near):
            out.append(j)
    return out
