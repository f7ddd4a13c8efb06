"""What a tuning run reports: its trials, its result and its progress; apart from the tuner so a progress display can
subclass TuneObserver without importing torch or Triton."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

Config = dict[str, Any]
PHASES = ("setup", "search", "retime", "record")


@dataclass(kw_only=True)
class TrialRecord:
    index: int
    config: Config
    status: str  # autotuner.engine.measure.outcome.Status
    median_ms: float | None
    error: str | None = None
    compile_s: float | None = None
    lane: int = 0  # which of the run's GPUs measured it (an index into Plan.gpus; 0 without --gpus)
    at_s: float | None = None  # seconds into the search phase when its result came
    wait_s: float | None = None  # seconds the search waited for its compile (a compile pool's run)


@dataclass(kw_only=True)
class TuneResult:
    op: str
    problem_key: str
    device: str
    clock: str
    strategy: str
    default_config: Config
    run_id: int | None = None
    best_config: Config | None = None
    best_ms: float | None = None
    default_ms: float | None = None
    torch_ms: float | None = None
    roofline_fraction: float | None = None
    trials: list[TrialRecord] = field(default_factory=list)
    budget: int | None = None
    candidates: int = 0
    rejected: int = 0
    elapsed_s: float = 0.0
    # Seconds per phase (plan_s: the space enumerated and the measurer made; setup_s, search_s, retime_s,
    # record_s; startup_s from the CLI), the setup's parts (setup_worker_s: the trial process setting the problem up
    # and timing torch, of it setup_inputs_s and setup_reference_s), and the search's: ask_s, measure_s (of it
    # compile_wait_s: waiting on the compile pool, and search_worker_s: the trial processes' own time answering),
    # record_trial_s; retime_worker_s, the trial process's own time in the re-time; compile_s is the compile time
    # summed over trials (spent in parallel by the compile pool);
    # compiles (a count, not seconds): the configs the compile pool compiled, those the search asked for and those
    # it compiled on a guess of what the search would ask next.
    phases: dict[str, float] = field(default_factory=dict)
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

    def phase_summary(self) -> str:
        """One line: where the time went."""
        p = self.phases
        ready = f" (the trial worker ready {p['worker_ready_s']:.1f} s after its start)" if "worker_ready_s" in p else ""
        parts = [f"plan {p.get('plan_s', 0):.1f}", f"setup {p.get('setup_s', 0):.1f}{ready}",
                 f"search {p.get('search_s', 0):.1f} (waiting on compiles {p.get('compile_wait_s', 0):.1f}, "
                 f"measuring {p.get('measure_s', 0) - p.get('compile_wait_s', 0):.1f},"
                 f" asking {p.get('ask_s', 0):.1f}, storing {p.get('record_trial_s', 0):.1f})",
                 f"re-time {p.get('retime_s', 0):.1f}", f"record {p.get('record_s', 0):.1f}"]
        startup = f"start-up {p['startup_s']:.1f} + " if "startup_s" in p else ""
        return f"{startup}{self.elapsed_s:.1f} s: " + ", ".join(parts)

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
