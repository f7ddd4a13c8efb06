"""Cross-timing a sweep: each point's winner timed on its neighbours, interleaved with their own winners, in a trial
process set up for each point. The loss against a neighbour's winner is what a bucket or nearest answer can expect
(`expected_regret`).

    cells = cross_time(op, problems, winners, settings=settings, device=device)
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import Op
from autotuner.base.settings import Settings
from autotuner.engine.measure.runner import TrialRunner
from autotuner.engine.measure.timing import interleaved
from autotuner.engine.measure.trial_process import QUICK_SCALE, WorkerSpec
from autotuner.engine.sweeps.refine import REACH
from search_spaces.contract import ProblemType
from search_spaces.space import Config, config_key

ROUNDS = 3  # interleaved rounds per point, each 1/ROUNDS of a full timing; each config keeps its rounds' median


@dataclass(frozen=True, kw_only=True)
class Cell:
    winner_key: str  # the point whose winner was timed
    on_key: str  # the point it was timed on
    config: Config
    ms: float | None  # None: not valid on that point, or it failed there
    own_ms: float | None  # the point's own winner, the same rounds

    def as_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def cross_time(op: Op, problems: list[ProblemType], winners: list[Config | None], *, settings: Settings,
               device: DeviceInfo, runner: TrialRunner | None = None, reach: int = REACH, rounds: int = ROUNDS,
               on_point: Callable[[ProblemType], None] | None = None, only: Collection[int] | None = None) -> list[Cell]:
    """Each point's winner (None: not tuned) timed on the points within `reach`, against their own winners; `runner`:
    the trial process (default: its own), `only`: the points to time on."""
    own_runner = runner is None
    runner = runner or TrialRunner(None, settings.trial_timeout_s)
    cells: list[Cell] = []
    try:
        for j, on in enumerate(problems):
            if winners[j] is None or (only is not None and j not in only):
                continue
            if on_point is not None:
                on_point(on)
            cells += _on_point(op, problems, winners, j, settings, device, runner, reach, rounds)
    finally:
        if own_runner:
            runner.close()
    return cells


def _on_point(op: Op, problems: list[ProblemType], winners: list[Config | None], j: int, settings: Settings,
              device: DeviceInfo, runner: TrialRunner, reach: int, rounds: int) -> list[Cell]:
    on = problems[j]
    near = [i for i in range(max(0, j - reach), min(len(problems), j + reach + 1)) if winners[i] is not None]
    valid: dict[str, Config] = {}
    for i in near:
        config = winners[i]
        assert config is not None
        if not op.space.violations(config, on, device):
            valid[config_key(config)] = config
    runner.use(WorkerSpec(op.name, dataclasses.asdict(on), (*settings.plugins, *op.imports),
                          device.index,
                          settings.warmup_ms, settings.rep_ms), settings.trial_timeout_s)

    def time_one(key: str) -> float | None:
        outcome = runner.time(valid[key], 1.0 / rounds)
        return outcome.timing.median_ms if outcome.status == "ok" and outcome.timing is not None else None

    times = interleaved([k for k, c in valid.items() if runner.measure(c, QUICK_SCALE).status == "ok"], rounds,
                        time_one)
    ms = {k: statistics.median(v) for k, v in times.items() if v}
    own_config = winners[j]
    assert own_config is not None
    own = ms.get(config_key(own_config))
    cells = []
    for i in near:
        config = winners[i]
        assert config is not None
        cells.append(Cell(winner_key=problems[i].key, on_key=on.key, config=config, ms=ms.get(config_key(config)),
                          own_ms=own))
    return cells
