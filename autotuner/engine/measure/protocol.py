"""The measurement boundary of a tuning run: what the search loop (autotuner.engine.search.loop) asks a config's
time of. Two answer it: real launches (autotuner.engine.measure.live) and a recorded landscape's table
(autotuner.engine.measure.table).
"""

from __future__ import annotations

from typing import Protocol

from autotuner.engine.measure.outcome import Outcome
from search_spaces.space import Config


class Measurer(Protocol):
    def start(self) -> Outcome:
        """Set up (raising WorkerSetupError when the problem cannot be), and time torch's baseline if any."""

    def close(self) -> None:
        """Release what `start` set up."""

    def compile_ahead(self, configs: list[Config]) -> None:
        """Configs about to be measured, in order (a live measurer compiles them ahead)."""

    def speculate(self, configs: list[Config]) -> None:
        """Configs the search may ask next (a live measurer compiles them if it has idle workers; the last call's
        list replaces the one before)."""

    measures_elsewhere: bool
    """Whether another process runs the kernels (a trial worker): the search loop then waits on a thread and
    records and asks meanwhile; one running them in this process keeps them on the caller's thread (CUDA's
    current device and torch's current stream are the thread's)."""

    @property
    def lanes(self) -> int:
        """How many configs it measures at once (`measure` is called from that many threads)."""

    def readiness(self, config: Config) -> int:
        """How soon it could measure a config: READY (compiled, or nothing to compile ahead), COMPILING or
        NOT_STARTED (autotuner.engine.measure.outcome)."""

    def first_ready(self, configs: list[Config], wait_for_one: bool = True) -> int:
        """The index of the config to measure first among those asked (a live measurer: the first whose compile
        is done, waiting for one if none is and `wait_for_one`; one slow compile does not hold up the others)."""

    def measure(self, config: Config, lane: int = 0, give_up_ms: float | None = None) -> Outcome:
        """Check one config and time it as long as it takes to rank it (a brief timing on a GPU; a few repetitions
        only where they are slower than `give_up_ms`); `lane`: which of the measurer's `lanes` (trial workers
        measuring at once, one per GPU) measures it."""

    def time(self, config: Config, scale: float = 1.0) -> Outcome:
        """Time a config measured before again, for `scale` of a full timing (a round of the re-time)."""


