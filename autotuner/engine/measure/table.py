"""Measurers without a trial process: configs measured in the order asked (`InOrderMeasurer`), and times looked up
in a recorded landscape (`TableMeasurer`), so `autotuner replay` runs the same search loop without a GPU, as
Kernel Tuner's simulation runner does.
"""

from __future__ import annotations

from collections.abc import Mapping

from autotuner.engine.measure.outcome import READY, Outcome
from autotuner.engine.measure.timing import Timing
from search_spaces.space import Config, config_key


class InOrderMeasurer:
    """A measurer that compiles nothing ahead: configs are measured in the order asked, and it holds nothing to
    release. Subclasses give `start`, `measure` and `time`."""

    measures_elsewhere = False

    def close(self) -> None:
        pass

    def compile_ahead(self, configs: list[Config]) -> None:
        pass

    def speculate(self, configs: list[Config]) -> None:
        pass

    @property
    def lanes(self) -> int:
        return 1

    def readiness(self, config: Config) -> int:
        return READY

    def first_ready(self, configs: list[Config], wait_for_one: bool = True) -> int:
        return 0


class TableMeasurer(InOrderMeasurer):
    """A recorded landscape: a config's time is a look-up (None: it failed when recorded)."""

    def __init__(self, times: Mapping[str, float | None]) -> None:
        self.times = times

    def start(self) -> Outcome:
        return Outcome("invalid", error="a landscape holds no baseline")

    def measure(self, config: Config, lane: int = 0, give_up_ms: float | None = None) -> Outcome:
        ms = self.times[config_key(config)]
        if ms is None:
            return Outcome("crash", error="failed when the landscape was recorded")
        return Outcome("ok", timing=Timing(ms, ms, ms, 1, "landscape"))

    def time(self, config: Config, scale: float = 1.0) -> Outcome:
        return self.measure(config)


# A config whose first few repetitions run this many times the best so far is out of contention: it is timed no
# further (engine.timing.time_cuda's give_up_ms), saving most of its timing.
