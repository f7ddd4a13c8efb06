"""Optuna's multivariate TPE over the parameters as ordinal indices, then a local refinement around the best found; and
a user's own Optuna sampler over the whole budget (`SamplerSearch`). The only search module that imports Optuna and
NumPy."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import optuna

from autotuner.engine.search.contract import Search
from search_spaces.space import Config, config_key


def additive_model(rows: Sequence[tuple[Mapping[str, Any], float]]) -> Callable[[Mapping[str, Any]], float]:
    """A prediction of y from which value each parameter holds: least squares over one-hot (parameter, value)
    columns and a constant, damped (ridge, the constant free) so that a value seen once moves it little. Values
    never seen add nothing. Fewer than four rows: no model (every prediction 0)."""
    columns: dict[tuple[str, Any], int] = {}
    for values, _ in rows:
        for item in values.items():
            columns.setdefault(item, len(columns))
    if len(rows) < 4 or not columns:
        return lambda values: 0.0
    x = np.zeros((len(rows), len(columns) + 1))
    x[:, -1] = 1.0
    for r, (values, _) in enumerate(rows):
        x[r, [columns[item] for item in values.items()]] = 1.0
    damp = np.eye(len(columns) + 1)
    damp[-1, -1] = 0.0
    weights = np.linalg.solve(x.T @ x + damp, x.T @ np.array([y for _, y in rows]))

    def predict(values: Mapping[str, Any]) -> float:
        return float(weights[-1] + sum(weights[columns[item]] for item in values.items() if item in columns))
    return predict


class TPESearch(Search):
    """Optuna TPE over ordinal parameter indices, then local refinement around the best configs."""

    EXPLORE_FRACTION = 0.3  # of the trial budget spent on TPE before refining locally

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.dists: dict[str, optuna.distributions.BaseDistribution] = {p.name: optuna.distributions.IntDistribution(0, len(p.values) - 1) for p in self.params}
        self.study = optuna.create_study(direction="minimize", sampler=self._sampler())
        self._grid: np.ndarray | None = None  # the candidates' parameter indices, built on first use
        self._grid_keys: list[str] = []
        self._repairs: dict[tuple[tuple[int, ...], str], str | None] = {}  # (point, moved parameter) -> config key
        self._fitted: tuple[int, Callable[[dict[str, int]], float]] | None = None  # (results it saw, the model)

    def _sampler(self) -> optuna.samplers.BaseSampler:
        return optuna.samplers.TPESampler(seed=self.seed, multivariate=True, n_startup_trials=8, n_ei_candidates=64)

    def _index(self, c: Config) -> dict[str, int]:
        return {p.name: p.values.index(c[p.name]) for p in self.params}

    def _config(self, idx: dict[str, Any]) -> Config:
        base = dict(next(iter(self.candidates.values())))
        for p in self.params:
            base[p.name] = p.values[int(idx[p.name])]
        return base

    def _penalty(self) -> float:
        ok = [v for v in self.results.values() if v is not None]
        return 2.0 * max(ok) if ok else 1e9

    def _learn(self, config: Config, ms: float | None) -> None:
        trial = optuna.trial.create_trial(
            params=self._index(config), distributions=self.dists,
            value=ms if ms is not None else self._penalty(),
        )
        self.study.add_trial(trial)

    def _explore(self) -> Iterator[Config]:
        """TPE's proposals, each snapped to the nearest valid config not yet asked (a proposal breaking a constraint is
        no measurement, and asking TPE again costs a step each time)."""
        while self.measured + len(self.pending) < self.EXPLORE_FRACTION * self.budget:
            trial = self.study.ask(self.dists)
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)  # the real result arrives via _learn
            config = self._nearest_fresh(trial.params)
            if config is None:
                return
            yield config

    def _index_grid(self) -> np.ndarray:
        """The candidates' parameter indices, one row per candidate (in `_grid_keys` order), built on first use."""
        if self._grid is None:
            self._grid_keys = list(self.candidates)
            self._grid = np.array([list(self._index(self.candidates[k]).values()) for k in self._grid_keys],
                                  dtype=np.int64).reshape(len(self._grid_keys), -1)
        return self._grid

    def _repaired(self, idx: dict[str, int], moved: str) -> Config | None:
        """A move that breaks a constraint, repaired: the valid config nearest to it that keeps the moved parameter's
        new value (PERSIST=1 from a chunked row takes the whole row, one stage); None where none has it."""
        point = tuple(int(idx[p.name]) for p in self.params)
        if (point, moved) not in self._repairs:  # the refinement asks for the same moves again and again
            grid = self._index_grid()
            keep = grid[:, [p.name for p in self.params].index(moved)] == idx[moved]
            distance = np.abs(grid - np.array(point, dtype=np.int64)).sum(axis=1)
            distance[~keep] = np.iinfo(np.int64).max
            self._repairs[point, moved] = self._grid_keys[int(np.argmin(distance))] if keep.any() else None
        key = self._repairs[point, moved]
        return dict(self.candidates[key]) if key is not None else None

    def _nearest_fresh(self, idx: dict[str, Any]) -> Config | None:
        """The valid config not yet asked nearest to a point of the index grid (fewest steps summed over the
        parameters; a tie broken by the seeded generator)."""
        grid = self._index_grid()
        fresh = np.fromiter((k not in self.results and k not in self.pending for k in self._grid_keys), dtype=bool,
                            count=len(self._grid_keys))
        if not fresh.any():
            return None
        point = np.array([int(idx[p.name]) for p in self.params], dtype=np.int64)
        distance = np.abs(grid - point).sum(axis=1)
        distance[~fresh] = np.iinfo(np.int64).max
        nearest = np.flatnonzero(distance == distance.min())
        return dict(self.candidates[self._grid_keys[int(nearest[self.rng.randrange(len(nearest))])]])

    def _exploring(self) -> bool:
        return bool(self._first) or self.measured + len(self.pending) < self.EXPLORE_FRACTION * self.budget

    def max_pending(self, width: int, lanes: int = 1) -> int:
        if self._exploring():
            return max(1, width)
        return max(1, min(width, lanes))  # refinement: each lane's step from the best so far

    def upcoming(self, n: int) -> list[Config]:
        """Refinement's next configs from the best so far, in its order; not climbs from the configs being measured,
        which would have the pool compile twice what is measured."""
        if self._exploring():
            return super().upcoming(n)
        out: dict[str, Config] = {}
        for c in self._refine_order():
            if len(out) >= n:
                break
            out.setdefault(config_key(c), c)
        return list(out.values())

    def _tiers(self, c: Config) -> Iterator[list[Config]]:
        """The fresh moves from c in the order refinement tries them, a tier at a time: one step in one parameter
        (a step that breaks a constraint repaired), held equal; then one step in two parameters and one parameter
        moved further, together, those the model of the times so far predicts fastest first (`_model`). Each tier
        is listed only once the one before it is used up.

        Two-parameter steps and jumps compete for the same budget, and which pays depends on the landscape: on a
        softmax whose search strayed onto the persistent kernel's plateau, two-step moves tried first spent the
        budget before the jump back (PERSIST 4 -> 0), while jumps tried first cost matmuls their two-step gains
        (benchmarks/replay_efficiency.py). The measurements decide instead."""
        near = [n for n in self._neighbours(c, 1) if self._fresh(n)]
        if near:
            yield near
        far = [n for n in self._neighbours(c, 2) + self._axis_moves(c) if self._fresh(n)]
        if far:
            predict = self._model()
            yield sorted(far, key=lambda n: predict(self._index(n)))  # (stable: equal predictions keep their order)

    def _model(self) -> Callable[[dict[str, int]], float]:
        """The additive model of the measured configs' log times (`additive_model`), refitted when results came."""
        if self._fitted is None or self._fitted[0] != len(self.results):
            rows = [(self._index(self.candidates[k]), math.log(ms)) for k, ms in self.results.items()
                    if ms is not None and ms > 0]
            self._fitted = (len(self.results), additive_model(rows))
        return self._fitted[1]

    def _climb_from(self, c: Config) -> Iterator[Config]:
        for tier in self._tiers(c):
            for n in tier:
                if self._fresh(n):  # (not measured or asked since the tier was listed)
                    yield n

    def _axis_moves(self, c: Config) -> list[Config]:
        """Configs differing from c in one parameter by more than one step: a mode switch (PERSIST 4 -> 0, TMA 3
        -> 0) is a jump in its parameter's values, which one- and two-step moves do not make."""
        out: list[Config] = []
        idx = self._index(c)
        for p in self.params:
            for j in range(len(p.values)):
                if abs(j - idx[p.name]) > 1:
                    cand = self._config({**idx, p.name: j})
                    if config_key(cand) in self.candidates:
                        out.append(cand)
                    elif (fixed := self._repaired({**idx, p.name: j}, p.name)) is not None:
                        out.append(fixed)
        return out

    def _neighbours(self, c: Config, span: int) -> list[Config]:
        """Configs differing from c by one step in one parameter (span 1; a step that breaks a constraint
        repaired, `_repaired`), or in two parameters (span 2)."""
        out: list[Config] = []
        idx = self._index(c)
        names = [p.name for p in self.params]
        steps = [(n, d) for n in names for d in (-1, 1)]
        moves = [[s] for s in steps] if span == 1 else [[a, b] for i, a in enumerate(steps) for b in steps[i + 1:]
                                                          if a[0] != b[0]]
        for move in moves:
            j = dict(idx)
            for name, d in move:
                j[name] += d
            if all(0 <= j[p.name] < len(p.values) for p in self.params):
                cand = self._config(j)
                if config_key(cand) in self.candidates:
                    out.append(cand)
                elif span == 1 and (fixed := self._repaired(j, move[0][0])) is not None:
                    out.append(fixed)
        return out

    # A second basin: the best config more than BASIN_STEPS steps (summed over the parameters) from the best, if
    # within BASIN_WITHIN of its time, is climbed from right after the best. The runners-up alone are usually the
    # best's own neighbours, so a search can climb a plateau near the optimum while the optimum's own basin, a
    # little slower at its entry, is never climbed from (benchmarks/replay_efficiency.py on the recorded
    # landscapes).
    BASIN_STEPS = 2
    BASIN_WITHIN = 1.10

    def _steps(self, a: Config, b: Config) -> int:
        ia, ib = self._index(a), self._index(b)
        return sum(abs(ia[k] - ib[k]) for k in ia)

    def _climb_starts(self) -> list[Config]:
        """The configs refinement climbs from, in order: the best so far, the best of another basin, then the
        runners-up."""
        ranked = self.best(len(self.results))
        if not ranked:
            return []
        best, best_ms = ranked[0]
        other = next((c for c, ms in ranked[1:] if ms <= best_ms * self.BASIN_WITHIN
                      and self._steps(c, best) > self.BASIN_STEPS), None)
        starts = [best, *([other] if other is not None else []), *(c for c, _ in ranked[1:3])]
        return list({config_key(c): c for c in starts}.values())

    def _refine_order(self) -> Iterator[Config]:
        """Fresh configs in the order refinement would try them now: the best config's neighbours one step away,
        then two steps, then one parameter moved further, then another basin's and the runners-up's."""
        for start in self._climb_starts():
            yield from self._climb_from(start)

    def _tier_now(self) -> list[Config]:
        """The fresh moves refinement holds equal now: the first tier of `_refine_order` with any left."""
        for start in self._climb_starts():
            for tier in self._tiers(start):
                return tier
        return []

    def _refine(self) -> Iterator[Config]:
        """Hill-climb from the best config so far and the runners-up (`_tiers`), re-ranked after every measurement (of a
        tier's moves, the one measurable soonest); then the rest in random order."""
        while tier := self._tier_now():
            yield min(tier, key=self._ready)  # (min keeps the tier's order among equals)
        rest = self._unmeasured()
        self.rng.shuffle(rest)
        yield from rest

    def _propose(self) -> Iterator[Config]:
        yield from self._explore()
        yield from self._refine()


class SamplerSearch(TPESearch):
    """A user's Optuna sampler proposing every config of the budget over the ordinal indices, each snapped to the
    nearest valid config not yet asked; no refinement (`Plan(strategy=sampler)`)."""

    EXPLORE_FRACTION = 1.0

    def __init__(self, sampler: optuna.samplers.BaseSampler, *args: Any, **kwargs: Any) -> None:
        self._user_sampler = sampler
        super().__init__(*args, **kwargs)

    def _sampler(self) -> optuna.samplers.BaseSampler:
        return self._user_sampler

    def _propose(self) -> Iterator[Config]:
        yield from self._explore()
        rest = self._unmeasured()  # the sampler stopped proposing new configs (the space is used up near it)
        self.rng.shuffle(rest)
        yield from rest

