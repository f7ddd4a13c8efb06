"""A sweep: problems of one op, dtype and options that differ in one dimension (`autotuner tune matmul --M
1-8192:pow2 --N 4096 --K 4096`), tuned ahead of the workload that will meet them. Run here, the points are tuned
one after the other in the same trial process and compile pool, and then cross-timed (autotuner.engine.cross_time);
queued, each point is a job for the workers, and the cross-timing a job queued when the last point is done.

    values = points("1-8192:pow2")           # 1, 2, 4, ..., 8192
    result = run_sweep(op, problems, dim="M", store=store, settings=settings, plan=Plan(), device=device)
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import Op
from autotuner.base.settings import Settings
from autotuner.engine.cross_time import Cell, cross_time
from autotuner.engine.measure import KeptProcesses
from autotuner.engine.tune_result import TuneObserver, TuneResult
from autotuner.engine.tuner import Plan, tune
from autotuner.store.interfaces import SweepStore
from search_spaces.contract import ProblemType
from search_spaces.problem import ProblemError

RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*:\s*pow2\s*$")
MAX_POINTS = 256


def is_sweep(text: str) -> bool:
    """Whether a value names several points: a range `A-B:pow2` or a list `a,b,c`."""
    return bool(RANGE.match(text)) or ("," in text and all(p.strip().isdigit() for p in text.split(",")))


def points(text: str) -> list[int]:
    """The values a sweep names: `A-B:pow2` (the powers of two from A to B, and A and B themselves), a list
    `a,b,c`, or one value. ProblemError naming what is accepted."""
    m = RANGE.match(text)
    if m:
        low, high = int(m.group(1)), int(m.group(2))
        if not 1 <= low <= high:
            raise ProblemError(f"bad sweep {text!r}: give 1 <= A <= B in A-B:pow2")
        values = sorted({low, high, *(1 << k for k in range(high.bit_length()) if low <= 1 << k <= high)})
    elif all(p.strip().isdigit() and int(p) > 0 for p in text.split(",")):
        values = sorted({int(p) for p in text.split(",")})
    else:
        raise ProblemError(f"bad value {text!r}: a positive integer, a list a,b,c, or a range A-B:pow2")
    if len(values) > MAX_POINTS:
        raise ProblemError(f"sweep {text!r} names {len(values)} points; at most {MAX_POINTS}")
    return values


@dataclass
class SweepResult:
    sweep_id: int
    problems: list[ProblemType]
    results: list[TuneResult | None]  # None: that point could not be tuned (its error in `errors`)
    winners: list[dict[str, int] | None]  # the stored best each point now serves
    cells: list[Cell] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    tune_s: float = 0.0
    cross_time_s: float = 0.0


def run_sweep(op: Op, problems: list[ProblemType], *, dim: str, store: SweepStore, settings: Settings, plan: Plan,
              device: DeviceInfo, kept: KeptProcesses | None = None,
              observer: Callable[[ProblemType], TuneObserver] | None = None,
              on_point: Callable[[ProblemType], None] | None = None) -> SweepResult:
    """Tune every point here, then cross-time the winners; the sweep and its cross timings are stored. A point
    that cannot be set up (too large for the device, say) is left out with its error; the others go on."""
    query = {o.name for o in op.query_options}
    sweep_id = store.create_sweep(op=op.name, dtype=problems[0].dtype, dim=dim, shapes=[p.shape for p in problems],
                                  options={k: v for k, v in op.options_of(problems[0]).items() if k in query})
    out = SweepResult(sweep_id, problems, [], [])
    started = time.perf_counter()
    for p in problems:
        try:
            out.results.append(tune(op, p, store=store, settings=settings, plan=plan, device=device, kept=kept,
                                    observer=observer(p) if observer else None))
        except ProblemError as exc:
            out.results.append(None)
            out.errors[p.key] = str(exc)
        best = store.best(op=op, problem=p, device=device)
        out.winners.append(dict(best.config) if best is not None and not best.stale else None)
    out.tune_s = time.perf_counter() - started
    started = time.perf_counter()
    out.cells = cross_time(op, problems, out.winners, settings=settings, device=device,
                           runner=kept.trial_runner(settings.trial_timeout_s) if kept is not None else None,
                           on_point=on_point)
    store.save_cross_timings(sweep_id=sweep_id, op=op, device=device, cells=[c.as_row() for c in out.cells])
    out.cross_time_s = time.perf_counter() - started
    return out
