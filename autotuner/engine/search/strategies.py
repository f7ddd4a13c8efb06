"""The search strategies, registered by name in one place, which the CLI, the HTTP schema, the docs and the tests read.
A plugin registers its own with `register_strategy`; a job or row names a registered strategy, never code. The Python
API may also pass an Optuna sampler, or a function making a Search."""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union, cast

from autotuner.engine.search.contract import Search
from autotuner.engine.search.exhaustive import Exhaustive
from autotuner.engine.search.random_search import RandomSearch
from search_spaces.space import Config, Param

if TYPE_CHECKING:
    import optuna

# (candidates, params, budget, seed, first) -> a Search over them (autotuner.engine.search's contract)
StrategyFactory = Callable[[Sequence[Config], Sequence[Param], int | None, int, Sequence[Config]], Search]
StrategyLike = Union[str, "optuna.samplers.BaseSampler", StrategyFactory]  # what Plan.strategy may hold


@dataclass(frozen=True)
class Strategy:
    name: str
    make: StrategyFactory
    help: str
    imports: tuple[str, ...] = ()  # modules `make` imports (imported ahead by `preload`)


_REGISTRY: dict[str, Strategy] = {}


def register_strategy(name: str, make: StrategyFactory, help: str, imports: Sequence[str] = ()) -> None:
    """Make `name` a strategy (a lowercase word, at most 32 characters: it is stored with each run); a name taken by
    another factory is refused. `imports`: modules `make` imports on its first call, which a tuner imports ahead
    while it waits for its trial worker (`preload`)."""
    if not (name.isidentifier() and name == name.lower() and len(name) <= 32):
        raise ValueError(f"a strategy's name is a lowercase identifier of at most 32 characters; got {name!r}")
    if name in _REGISTRY and _REGISTRY[name].make is not make:
        raise ValueError(f"strategy {name!r} is registered already")
    _REGISTRY[name] = Strategy(name, make, help, tuple(imports))


def preload(strategy: StrategyLike) -> None:
    """Import what making a search of `strategy` will import (a registered name's `imports`; nothing for an
    object): the tuner does this on a thread while its trial worker starts (Optuna and NumPy for TPE), off the
    tune's critical path (benchmarks/tune_time.py's phases)."""
    if isinstance(strategy, str) and strategy in _REGISTRY:
        for module in _REGISTRY[strategy].imports:
            importlib.import_module(module)


def strategy_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def strategies_help() -> str:
    """One line naming each strategy and what it does, for help texts."""
    return "; ".join(f"{s.name}: {s.help}" for s in _REGISTRY.values())


def check_strategy(name: str) -> None:
    """ValueError naming the registered strategies where `name` is not one."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown strategy {name!r}; accepted: {', '.join(_REGISTRY)}")


def strategy_label(strategy: StrategyLike) -> str:
    """What a run stores as its strategy: the name, or for an object what it is (`sampler:CmaEsSampler`)."""
    if isinstance(strategy, str):
        return strategy
    kind = "sampler" if _is_sampler(strategy) else "custom"
    return f"{kind}:{getattr(strategy, '__name__', type(strategy).__name__)}"[:32]


def _is_sampler(strategy: Any) -> bool:
    optuna = sys.modules.get("optuna")  # a sampler object means Optuna was imported to make it
    return optuna is not None and isinstance(strategy, optuna.samplers.BaseSampler)


def make_search(strategy: StrategyLike, candidates: Sequence[Config], params: Sequence[Param],
                budget: int | None = None, seed: int = 0, first: Sequence[Config] = ()) -> Search:
    """The search a strategy makes over the candidates: a registered name, an Optuna sampler, or a factory."""
    make: StrategyFactory
    if isinstance(strategy, str):
        check_strategy(strategy)
        make = _REGISTRY[strategy].make
    elif _is_sampler(strategy):
        from autotuner.engine.search.tpe import SamplerSearch

        make = functools.partial(SamplerSearch, cast("optuna.samplers.BaseSampler", strategy))
    elif callable(strategy):
        make = strategy
    else:
        raise ValueError(f"a strategy is a registered name, an Optuna sampler or a function making a Search; got "
                         f"{type(strategy).__name__}")
    if not candidates:
        raise ValueError("the space has no valid config for this problem on this device")
    search = make(candidates, params, budget, seed, first)
    if not isinstance(search, Search):
        raise ValueError(f"strategy {strategy_label(strategy)} made a {type(search).__name__}, not a Search")
    return search


def _tpe(candidates: Sequence[Config], params: Sequence[Param], budget: int | None, seed: int,
         first: Sequence[Config]) -> Search:
    from autotuner.engine.search.tpe import TPESearch  # Optuna and NumPy: imported when a TPE search is made

    return TPESearch(candidates, params, budget, seed, first)


register_strategy("tpe", _tpe, "Optuna's multivariate TPE, then a local refinement around the best configs",
                  imports=("autotuner.engine.search.tpe",))
register_strategy("random", RandomSearch, "configs in a seeded random order")
register_strategy("exhaustive", Exhaustive, "every valid config, in the space's order")
