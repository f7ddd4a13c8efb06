"""The candidates in a random order (the search's seed)."""

from __future__ import annotations

from collections.abc import Iterator

from autotuner.engine.search.contract import Search
from search_spaces.space import Config


class RandomSearch(Search):
    def _propose(self) -> Iterator[Config]:
        order = list(self.candidates.values())
        self.rng.shuffle(order)
        yield from order
