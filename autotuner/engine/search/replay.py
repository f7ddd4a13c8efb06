"""Replay a recorded landscape (format: docs/design/engine.md) with a table look-up as the measurement; a search's
quality is how many distinct measurements it needs to come within 2% of the file's best."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotuner.engine.measure.table import TableMeasurer
from autotuner.engine.search.loop import run_search
from autotuner.engine.search.strategies import make_search
from search_spaces.space import Config, Param, config_key


@dataclass(frozen=True)
class Landscape:
    name: str
    params: list[Param]
    times: dict[str, float | None]  # config key -> ms (None: failed)
    configs: list[Config]
    problem: dict[str, Any]

    @property
    def optimum_ms(self) -> float:
        return min(v for v in self.times.values() if v is not None)


def load_landscape(path: str | Path) -> Landscape:
    """A landscape file, checked: every trial names every parameter with an int, and at least one has a time."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        names = list(data["params"])
        trials = list(data["trials"])
    except FileNotFoundError:
        raise ValueError(f"no landscape file at {path}") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a landscape (expected 'params' and 'trials'; see docs/design/engine.md): "
                         f"{type(exc).__name__}: {exc}") from None
    configs = []
    for i, t in enumerate(trials):
        config = t.get("config") if isinstance(t, dict) else None
        missing = [n for n in names if not isinstance(config, dict) or n not in config]
        if missing or not isinstance(config, dict):
            raise ValueError(f"{path}: trial {i} has no value for {', '.join(missing)} (every trial's config "
                             f"names each of the params: {', '.join(names)})")
        try:
            configs.append({n: int(config[n]) for n in names})
        except (TypeError, ValueError):
            raise ValueError(f"{path}: trial {i} has a parameter value that is not an integer: {config}") from None
    times = {config_key(c): (float(t["ms"]) if t.get("ms") is not None else None) for c, t in zip(configs, trials, strict=True)}
    if not any(v is not None for v in times.values()):
        raise ValueError(f"{path}: no trial has a time (all {len(trials)} failed when recorded); nothing to replay")
    params = [Param(n, tuple(sorted({c[n] for c in configs}))) for n in names]
    return Landscape(path.stem, params, times, configs, data.get("problem", {}))


def default_for(landscape: Landscape) -> Config:
    """The config a user would try first: tutorial-style 128x128x64 (or the closest in the file)."""
    target = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3, "num_warps": 8}

    def distance(c: Config) -> float:
        return sum(abs(c[k] - v) / v for k, v in target.items() if k in c)

    return min(landscape.configs, key=distance)


# The tuner asks as far ahead as its compile pool is wide (autotuner.engine.plan.compile_workers): 14 on a one-GPU,
# 16-core host. Replays ask ahead the same way, since how far ahead a search asks changes what it finds.
TUNER_WIDTH = 14


def replay(landscape: Landscape, budget: int, seed: int, strategy: str = "tpe",
           width: int = TUNER_WIDTH) -> dict[str, Any]:
    """The tuner's search loop (autotuner.engine.search.loop.run_search) with the landscape as the measurement, asking
    ahead as a tuner with a compile pool of `width` does."""
    search = make_search(strategy, landscape.configs, landscape.params, budget, seed, first=[default_for(landscape)])
    measured = run_search(search, TableMeasurer(landscape.times), budget=budget, batch=width)
    best = search.best(1)
    best_config, best_ms = best[0] if best else (None, None)
    return {
        "landscape": landscape.name, "strategy": strategy, "seed": seed, "budget": budget, "width": width,
        "evaluations": len(measured), "best_ms": best_ms, "optimum_ms": landscape.optimum_ms,
        "within_2pct": best_ms is not None and best_ms <= 1.02 * landscape.optimum_ms, "best_config": best_config,
    }
