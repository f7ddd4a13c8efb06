"""Tuning a decorated kernel in the launching process, on the launch's own arguments (the `tune` miss policy):
through the engine with every trial stored, one process per key (a `tune_claims` row; the others wait for its
winner), or in memory when no database can be written."""

from __future__ import annotations

import importlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import torch

from autotuner.decorator.engine_view import EngineView
from autotuner.decorator.keys import Miss
from autotuner.decorator.lanes import QUEUE_SLACK_S, Lane, lane_devices, on, set_up
from autotuner.engine.measure import l2_flush
from autotuner.engine.measure.outcome import Outcome, classify, short_error
from autotuner.engine.measure.table import InOrderMeasurer
from autotuner.engine.measure.timing import Timing, time_fn
from autotuner.engine.measure.trial_process import QUICK_SCALE
from autotuner.launch.lookup import resolver
from kernels._backend import interpreting
from search_spaces.space import config_key

if TYPE_CHECKING:  # not at run time: a launching process never imports SQLAlchemy
    from autotuner.store.interfaces import Storage

log = logging.getLogger(__name__)
REFERENCE_TRIES = 8  # configs of the list tried in turn for the reference output


class CallMeasurer(InOrderMeasurer):
    """Measures configs in this process on a launch's own arguments, as triton.autotune does: hooks around each launch,
    `do_bench` or the engine's timing, and a check against the reference. With `more_devices` (AUTOTUNER_GPUS) the
    arguments and reference are copied to those GPUs, each a further lane measured from its own thread
    (autotuner.decorator.lanes); the launch's device gives the reference and every re-time. In the interpreter the lanes
    take turns."""

    def __init__(self, view: EngineView, miss: Miss, more_devices: Sequence[int | None] = ()) -> None:
        self.view, self.miss = view, miss
        self.ref: Any = None
        self.more_devices = list(more_devices)
        self.more: list[Lane] = []  # set up by start()
        self._turns = threading.Lock() if interpreting() else None

    @property
    def lanes(self) -> int:
        return 1 + len(self.more)

    def _run(self, config: dict[str, Any], capture: bool, lane: Lane | None = None) -> Any:
        named, hooks = (lane.named, lane.hooks) if lane is not None else (self.miss.named, None)
        return self.view.call(named, self.miss.grid, {**config, **self.miss.extra}, capture=capture, hooks=hooks)

    def start(self) -> Outcome:
        self.ref = self._reference()
        if self.more_devices:
            self.more = set_up(self.miss.named, self.ref, self.view.spec.hooks, self.more_devices)
        return Outcome("invalid", error="a decorated kernel has no torch baseline")

    def _reference(self) -> Any:
        m, spec = self.miss, self.view.spec
        if spec.reference is not None:
            return self.view.reference({"args": m.named, "grids": m.grid})
        # the reference is the default config's output, or, where it cannot run (a static_assert, out of
        # resources), the next config's of the list, as triton.autotune skips a config that fails
        pruned = spec.pruned(m) or []
        errors = []
        for config in [spec.default(m), *pruned[1:REFERENCE_TRIES]]:
            try:
                return self._run(config, capture=True)
            except Exception as exc:
                errors.append(f"{config_key(config)}: {short_error(exc)}")
        raise RuntimeError(f"{spec.name} {m.problem.key}: no config ran to give the reference output: "
                           + "; ".join(errors))

    def measure(self, config: dict[str, Any], lane: int = 0, give_up_ms: float | None = None) -> Outcome:
        where = self.more[lane - 1] if lane else None
        with on(where.device if where is not None else None), self._turns or nullcontext():
            return self._measure(config, where, give_up_ms)

    def _measure(self, config: dict[str, Any], lane: Lane | None, give_up_ms: float | None) -> Outcome:
        t0 = time.perf_counter()
        try:
            out = self._run(config, capture=True, lane=lane)
            if self.miss.device.torch_device.startswith("cuda"):
                torch.cuda.synchronize()
        except Exception as exc:
            return Outcome(classify(exc), error=short_error(exc))
        compile_s = time.perf_counter() - t0
        verdict = self.view.op.check(out, lane.ref if lane is not None else self.ref, self.miss.problem)
        if not verdict.ok:
            return Outcome("wrong_result", compile_s=compile_s, error=verdict.message)
        try:
            timing = self._time(lambda: self._run(config, capture=False, lane=lane), QUICK_SCALE, give_up_ms)
        except Exception as exc:
            return Outcome(classify(exc), compile_s=compile_s, error=short_error(exc))
        return Outcome("ok", timing=timing, compile_s=compile_s)

    def time(self, config: dict[str, Any], scale: float = 1.0) -> Outcome:
        try:
            return Outcome("ok", timing=self._time(lambda: self._run(config, capture=False), scale))
        except Exception as exc:
            return Outcome(classify(exc), error=short_error(exc))

    def _time(self, fn: Callable[[], Any], scale: float, give_up_ms: float | None = None) -> Timing:
        """The decorator's own `do_bench` as it is given, or the engine's timing for `scale` of its full warm-up and
        repetitions (the decorator's `warmup` and `rep`, else the engine's; a few repetitions only where they are
        slower than `give_up_ms`; queued further ahead while other lanes' threads run)."""
        spec = self.view.spec
        if spec.do_bench is not None:
            r = spec.do_bench(fn, quantiles=(0.5, 0.2, 0.8))
            ms = list(r) if isinstance(r, (list, tuple)) else [float(r)] * 3
            return Timing(float(ms[0]), float(ms[1]), float(ms[2]), 0, "do_bench (the decorator's)")
        return time_fn(fn, interpreting(), spec.warmup_ms or 25.0, spec.rep_ms or 100.0, give_up_ms,
                       QUEUE_SLACK_S if self.more else 0.0, scale=scale)


def untried(view: EngineView, store: Any, miss: Miss) -> bool:
    """Whether a config of the (pruned) list has never been measured for this problem: one added since."""
    pruned = view.spec.pruned(miss)
    if pruned is None:
        return False
    known = store.trial_times(op=view.op, problem=miss.problem, device=miss.device)
    return any(config_key(c) not in known for c in pruned)


def tune_here(view: EngineView, miss: Miss) -> tuple[dict[str, Any], str]:
    """Tune in this process, storing every trial and the winner; when another process is tuning this key, wait
    for its winner. The config and where it came from."""
    Plan, tune = _tuner()
    spec, problem, device = view.spec, miss.problem, miss.device
    settings = resolver().settings
    pruned = spec.pruned(miss)
    if pruned is not None and len(pruned) == 1:
        return pruned[0], "the only config left after pruning"
    try:
        store = resolver().store.writer()  # tuning is a write: it may create the database
    except Exception as exc:
        log.warning("autotuner: no database for %s (%s): tuning in memory, nothing is stored", spec.name, str(exc))
        return tune_in_memory(view, miss, pruned), "tuned (not stored)"
    owner = f"{socket.gethostname()}:{os.getpid()}"
    if not store.claim_tuning(op=spec.name, problem_key=problem.key, device_key=device.key, owner=owner,
                              lease_s=max(60.0, settings.tune_wait_s)):
        return wait_for_winner(view, store, miss)
    try:
        best = store.best(op=view.op, problem=problem, device=device)  # tuned meanwhile, by the claim's last holder
        if best is not None and not best.stale and not untried(view, store, miss) and spec.allows(miss, best.config):
            return best.config, "tuned by another process (stored before this one took the claim)"
        n, seconds = view.compile_ahead(miss.named, miss.grid, pruned)
        ahead = f", {n} compiled ahead in {seconds:.1f} s" if n else ""
        plan = Plan(strategy="exhaustive" if pruned is not None else "tpe",
                    trials=spec.trials or (len(pruned) if pruned is not None else None), reuse=True,
                    candidates=tuple(pruned) if pruned is not None else None)
        measurer = CallMeasurer(view, miss, lane_devices(spec, miss.device, settings.gpus))
        result = tune(view.op, problem, store=store, settings=settings, plan=plan, device=device, measurer=measurer)
    finally:
        store.release_tuning(op=spec.name, problem_key=problem.key, device_key=device.key, owner=owner)
        l2_flush.release()  # the launching process keeps no flush buffer between tunings
    if result.best_config is None:
        cause = next((t.error for t in result.trials if t.error), None)
        if cause is None:  # nothing measured: every config failed twice before with one cause, kept for a while
            from autotuner.store.row_checks import FAILURE_KEPT_S

            cause = (f"every config failed twice with the same cause in earlier runs (their trials say which), kept "
                     f"as its answer for {FAILURE_KEPT_S / 3600:g} h")
        raise RuntimeError(f"{spec.name} {problem.key}: every config failed; see run {result.run_id}: {cause}")
    winner = dict(result.best_config)
    spec.hooks.pre_hook({**miss.named, **miss.kwargs, **winner}, reset_only=True)  # as triton.autotune does
    on_gpus = f" on {measurer.lanes} GPUs" if measurer.lanes > 1 else ""
    return winner, (f"tuned here (run {result.run_id}, {len(result.trials)} configs measured{on_gpus}{ahead}; "
                    f"{result.phase_summary()})")


def _tuner() -> tuple[Any, Any]:
    """The engine's tuner, imported once on a thread of its own: an import error a package keeps for later holds its
    traceback, which on the launching thread would hold the launch's tensors."""
    if "autotuner.engine.tuner" not in sys.modules:
        thread = threading.Thread(target=importlib.import_module, args=("autotuner.engine.tuner",),
                                  name="autotuner-import")
        thread.start()
        thread.join()
    from autotuner.engine.tuner import Plan, tune

    return Plan, tune


def tune_in_memory(view: EngineView, miss: Miss, pruned: list[dict[str, Any]] | None) -> dict[str, Any]:
    view.compile_ahead(miss.named, miss.grid, pruned)
    measurer = CallMeasurer(view, miss)
    measurer.start()
    times = {}
    for c in pruned if pruned is not None else view.spec.space.candidates(miss.problem, miss.device):
        o = measurer.measure(c)
        if o.status == "ok" and o.timing is not None:
            times[config_key(c)] = (o.timing.median_ms, c)
    l2_flush.release()
    if not times:
        raise RuntimeError(f"{view.spec.name} {miss.problem.key}: every config failed")
    winner = min(times.values(), key=lambda t: t[0])[1]
    view.spec.hooks.pre_hook({**miss.named, **miss.kwargs, **winner}, reset_only=True)
    return winner


def wait_for_winner(view: EngineView, store: Storage, miss: Miss) -> tuple[dict[str, Any], str]:
    deadline = time.monotonic() + resolver().settings.tune_wait_s
    while time.monotonic() < deadline:
        best = store.best(op=view.op, problem=miss.problem, device=miss.device)
        if best is not None and not best.stale and view.spec.allows(miss, best.config):
            return best.config, "tuned by another process (waited for its winner)"
        time.sleep(0.2)
    default = view.spec.default(miss)
    return default, "default (another process was still tuning)"
