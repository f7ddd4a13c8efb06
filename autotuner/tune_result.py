"""What a tuning run reports: its trials, its result, and the progress it tells an observer.

Kept apart from autotuner.tuner so that progress displays (the CLI) can subclass TuneObserver without
importing the engine, torch or Triton.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

Config = dict[str, Any]
PHASES = ("setup", "search", "retime", "record")


@dataclass
class TrialRecord:
    index: int
    config: Config
    status: str
    median_ms: float | None
    error: str | None
    compile_s: float | None = None


@dataclass
class TuneResult:
    run_id: int | None
    op: str
    problem_key: str
    device: str
    clock: str
    strategy: str
    best_config: Config | None
    best_ms: float | None
    default_config: Config
    default_ms: float | None
    torch_ms: float | None
    roofline_fraction: float | None
    trials: list[TrialRecord] = field(default_factory=list)
    budget: int | None = None
    candidates: int = 0
    rejected: int = 0
    elapsed_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase, and compile_s summed over trials
    stored_as_best: bool = False

    @property
    def failures(self) -> int:
        return sum(t.status != "ok" for t in self.trials)

    @property
    def speedup_vs_default(self) -> float | None:
        return self.default_ms / self.best_ms if self.default_ms and self.best_ms else None

    @property
    def speedup_vs_torch(self) -> float | None:
        return self.torch_ms / self.best_ms if self.torch_ms and self.best_ms else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(failures=self.failures, speedup_vs_default=self.speedup_vs_default,
                 speedup_vs_torch=self.speedup_vs_torch)
        return d


class TuneObserver:
    """Hears a run's progress; the default hears nothing. `phase` starts one of PHASES with its number of
    steps (None: unknown, as for a search bounded by seconds); `step` reports one step done."""

    def phase(self, name: str, total: int | None, result: TuneResult) -> None:
        pass

    def step(self, result: TuneResult, record: TrialRecord | None = None) -> None:
        pass
