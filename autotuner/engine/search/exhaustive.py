"""Every candidate, in the space's order."""

from __future__ import annotations

from collections.abc import Iterator

from autotuner.engine.search.contract import Search
from search_spaces.space import Config


class Exhaustive(Search):
    def _propose(self) -> Iterator[Config]:
        yield from list(self.candidates.values())
