"""Kernel variants side by side (benchmarks/matmul_kinds.py, attention_kinds.py): each config of a problem checked
against the op's reference, then timed with torch's own calls in interleaved rounds."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Mapping
from typing import Any

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import Op
from autotuner.engine.measure.timing import interleaved, time_cuda
from search_spaces.contract import ProblemType


def checked_medians(op: Op, problem: ProblemType, device: DeviceInfo, inputs: dict[str, Any],
                    configs: Mapping[str, dict[str, Any]], baselines: Mapping[str, Callable[[], Any]], rounds: int,
                    unsearched: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Median ms over `rounds` interleaved rounds of each baseline and each config the space allows (`unsearched`:
    options fixed for the space's check). A config failing the op's check stops the run (SystemExit)."""
    assert op.reference is not None
    ref = op.reference(inputs)
    runs = dict(baselines)
    for name, cfg in configs.items():
        if op.space.violations(op.space.complete({**cfg, **(unsearched or {})}), problem, device):
            continue
        check = op.check(op.run(inputs, cfg), ref, problem)
        if not check.ok:
            raise SystemExit(f"{problem.key} {name}: {check.message}")
        runs[name] = functools.partial(op.run, inputs, cfg)
    times = interleaved(list(runs), rounds, lambda name: time_cuda(runs[name]).median_ms)
    return {name: statistics.median(t) for name, t in times.items()}
