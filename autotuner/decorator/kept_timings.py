"""Timings that last for library Autotuners whose own `run` chooses the config (autotuner.decorator.install). More:
docs/design/launch.md."""

from __future__ import annotations

import atexit
import logging
import math
import threading
from typing import TYPE_CHECKING, Any

import triton

from autotuner.decorator.autotuned import Autotuned
from autotuner.decorator.configs import config_dict
from autotuner.engine.measure.timing import CUDA_EVENTS, WALL_CLOCK
from autotuner.launch.lookup import resolver
from search_spaces.space import config_key

if TYPE_CHECKING:
    from triton.runtime.autotuner import Autotuner

    from autotuner.store.interfaces import Storage

log = logging.getLogger(__name__)
STRATEGY = "the library's own"  # the run's strategy: the subclass chose which configs to time


class KeptTimings:
    """One Autotuner's timings, by problem: those stored, and the run each new one is recorded in."""

    def __init__(self, kernel: Autotuned) -> None:
        self.kernel = kernel
        self.known: dict[str, dict[str, float | None]] = {}  # problem key -> config key -> median ms (None: failed)
        self.runs: dict[str, int] = {}  # problem key -> the run this process records into
        self.measured = 0  # configs timed in this process
        self.reused = 0  # configs answered from the database
        self.lock = threading.Lock()

    def bench(self, tr: Autotuner, own_bench: Any, args: tuple[Any, ...], meta: dict[str, Any],
              config: triton.Config) -> list[float]:
        miss = self.kernel.spec.keys.miss(args, meta, None)
        problem, device = miss.problem, miss.device
        op = self.kernel.op
        store: Storage = resolver().store.writer()
        key, ck = problem.key, config_key(config_dict(config))
        with self.lock:
            if key not in self.known:
                self.known[key] = {k: ms for k, (_, ms) in store.trial_times(op=op, problem=problem,
                                                                             device=device).items()}
            if ck in self.known[key]:
                self.reused += 1
                ms = self.known[key][ck]
                return [math.inf] * 3 if ms is None else [ms] * 3
        timings = [float(t) for t in own_bench(tr, *args, config=config, **meta)]
        ok = all(math.isfinite(t) for t in timings)
        with self.lock:
            if key not in self.runs:
                self.runs[key] = store.start_run(op=op, problem=problem, device=device, strategy=STRATEGY,
                                                 budget_trials=None, budget_seconds=None,
                                                 clock=WALL_CLOCK if device.is_interpreter else CUDA_EVENTS)
                _open_runs.append(self.runs[key])
            run_id = self.runs[key]
            self.known[key][ck] = timings[0] if ok else None
            self.measured += 1
            store.record_trial(run_id=run_id, config=config_dict(config), config_key=ck,
                               status="ok" if ok else "compile_error", median_ms=timings[0] if ok else None,
                               p20_ms=timings[1] if ok else None, p80_ms=timings[2] if ok else None,
                               error=None if ok else "the Autotuner's _bench returned inf (out of resources or a "
                                                     "compile-time failure)")
            fastest = min((ms for ms in self.known[key].values() if ms is not None), default=None)
        if ok and fastest == timings[0]:
            store.save_best(op=op, problem=problem, device=device, config=config_dict(config), median_ms=timings[0],
                            default_ms=None, torch_ms=None, run_id=run_id)
        return timings


_open_runs: list[int] = []


@atexit.register
def _finish_runs() -> None:
    if not _open_runs:
        return
    try:
        store = resolver().store.writer()
        for run_id in _open_runs:
            store.finish_run(run_id=run_id, status="done")
    except Exception as exc:  # the process is ending: say so, lose nothing else
        log.warning("autotuner: could not mark %d timing run(s) done: %s", len(_open_runs), str(exc))
