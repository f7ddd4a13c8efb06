"""A measurement lane: where one problem's configs are checked and timed, one at a time. More: docs/design/engine.md."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from autotuner.engine.measure.outcome import Outcome
from autotuner.engine.measure.trial_process import WorkerSpec


@runtime_checkable
class Lane(Protocol):
    @property
    def in_flight(self) -> bool:
        """A request sent and not answered: the lane may be stuck in a kernel (`close` does not wait for it)."""

    def use(self, spec: WorkerSpec, trial_timeout_s: float) -> None:
        """The problem the next requests are of (set up at `setup` or the first request)."""

    def setup(self) -> None:
        """Set the problem up now (raises runner.WorkerSetupError when it cannot be)."""

    def baseline(self) -> Outcome:
        """Time the problem's torch baseline, if the op has one."""

    def measure(self, config: dict[str, Any], scale: float = 1.0, give_up_ms: float | None = None) -> Outcome:
        """Check a config against the reference and time it (`scale` of a full timing; a few repetitions only
        where they are slower than `give_up_ms`)."""

    def time(self, config: dict[str, Any], scale: float = 1.0) -> Outcome:
        """Time a config checked before."""

    def close(self, wait: bool = True) -> None:
        """Release the lane (`wait`: let it finish cleanly; else stop it at once)."""
