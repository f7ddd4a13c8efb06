"""Replay a recorded landscape: the same search engine, with a table look-up as the measurement.

A landscape (format in DESIGN.md) holds every config of a space timed on one problem; the space is the
set of configs in the file. A search's quality is how many distinct measurements it needs to come within
2% of the file's best.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotuner.search import make_search
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
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        names = list(data["params"])
        trials = data["trials"]
    except FileNotFoundError:
        raise ValueError(f"no landscape file at {path}") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a landscape (expected 'params' and 'trials'; see DESIGN.md): {exc}") from None
    configs = [{n: int(t["config"][n]) for n in names} for t in trials]
    params = [Param(n, tuple(sorted({c[n] for c in configs}))) for n in names]
    times = {config_key(c): (float(t["ms"]) if t.get("ms") is not None else None) for c, t in zip(configs, trials, strict=False)}
    return Landscape(path.stem, params, times, configs, data.get("problem", {}))


def default_for(landscape: Landscape) -> Config:
    """The config a user would try first: tutorial-style 128x128x64 (or the closest in the file)."""
    target = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3, "num_warps": 8}

    def distance(c: Config) -> float:
        return sum(abs(c[k] - v) / v for k, v in target.items() if k in c)

    return min(landscape.configs, key=distance)


def replay(landscape: Landscape, budget: int, seed: int, strategy: str = "tpe") -> dict[str, Any]:
    search = make_search(strategy, landscape.configs, landscape.params, budget, seed, first=[default_for(landscape)])
    evaluations = 0
    while evaluations < budget:
        config = search.ask()
        if config is None:
            break
        search.tell(config, landscape.times[config_key(config)])
        evaluations += 1
    best_config, best_ms = search.best(1)[0]
    return {
        "landscape": landscape.name, "strategy": strategy, "seed": seed, "budget": budget,
        "evaluations": evaluations, "best_ms": best_ms, "optimum_ms": landscape.optimum_ms,
        "within_2pct": best_ms <= 1.02 * landscape.optimum_ms, "best_config": best_config,
    }
