"""The search contract (`Search`) over a finite list of valid configs, ask and tell. More: docs/design/engine.md."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence

from autotuner.engine.measure.outcome import READY
from search_spaces.space import Config, Param, config_key

DEFAULT_TRIALS = 64  # a search's budget when none is given (a tune's, a sweep point's)


def _all_ready(config: Config) -> int:
    return READY


class Search:
    """Base: measures `first`, then whatever `_propose` yields, skipping duplicates and non-candidates."""

    def __init__(self, candidates: Sequence[Config], params: Sequence[Param], budget: int | None, seed: int,
                 first: Sequence[Config] = ()) -> None:
        self.params = [p for p in params if any(c[p.name] != candidates[0][p.name] for c in candidates)] \
            if candidates else []
        self.all_params = list(params)
        self.candidates = {config_key(c): dict(c) for c in candidates}
        self.budget = budget if budget is not None else len(self.candidates)
        self.rng = random.Random(seed)
        self.seed = seed
        self.results: dict[str, float | None] = {}
        self.pending: set[str] = set()
        self._first = [dict(c) for c in first if config_key(c) in self.candidates]
        self._proposals: Iterator[Config] | None = None
        self._ready: Callable[[Config], int] = _all_ready

    # -- public ---------------------------------------------------------------------------------------
    def ask(self, ready: Callable[[Config], int] | None = None) -> Config | None:
        """The next config to measure, reserved until told; None when the space is used up. `ready`: how soon the
        tuner could measure a config (READY, COMPILING, NOT_STARTED), for choosing among configs held equal."""
        self._ready = ready or _all_ready
        while self._first:
            c = self._first.pop(0)
            if self._fresh(c):
                return self._take(c)
        if self._proposals is None:
            self._proposals = self._propose()
        for c in self._proposals:
            if self._fresh(c):
                return self._take(c)
        return None

    def tell(self, config: Config, ms: float | None) -> None:
        key = config_key(config)
        self.pending.discard(key)
        self.results[key] = ms
        self._learn(config, ms)

    def max_pending(self, width: int, lanes: int = 1) -> int:
        """Configs asked and not yet told that this strategy accepts now, given a tuner that can use `width` and
        measures `lanes` configs at once."""
        return max(1, width)

    def upcoming(self, n: int) -> list[Config]:
        """Up to n configs this strategy would propose next if no result changed its mind (not reserved)."""
        return [dict(self.candidates[config_key(c)]) for c in self._first if self._fresh(c)][:n]

    @property
    def measured(self) -> int:
        return len(self.results)

    def best(self, n: int = 1) -> list[tuple[Config, float]]:
        ok = [(self.candidates[k], v) for k, v in self.results.items() if v is not None]
        return sorted(ok, key=lambda kv: kv[1])[:n]

    # -- for subclasses -------------------------------------------------------------------------------
    def _propose(self) -> Iterator[Config]:
        raise NotImplementedError

    def _learn(self, config: Config, ms: float | None) -> None:
        pass

    def _fresh(self, c: Config) -> bool:
        key = config_key(c)
        return key in self.candidates and key not in self.results and key not in self.pending

    def _take(self, c: Config) -> Config:
        self.pending.add(config_key(c))
        return dict(self.candidates[config_key(c)])

    def _unmeasured(self) -> list[Config]:
        return [c for k, c in self.candidates.items() if k not in self.results and k not in self.pending]
