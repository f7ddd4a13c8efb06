"""The first launch of a key in a process: the database, then the service (autotuner.launch.lookup, no fallback),
then the miss policy (`on_miss=` or AUTOTUNER_ON_MISS):

    tune     tune now in this process (autotuner.decorator.in_process)
    default  launch the default config at once, and queue a tuning job carrying the recorded call
    error    raise KernelNotTuned, naming the kernel, the key and how to tune it

A result stored for another kernel source or Triton version is launched (said to be stale) while a re-tune is
queued. With AUTOTUNER_RECORD=1 every new key queues a job with its recorded call.
"""

from __future__ import annotations

import logging
from typing import Any

from autotuner.decorator.engine_view import EngineView
from autotuner.decorator.in_process import tune_here, untried
from autotuner.decorator.kernel_problem import record_call
from autotuner.decorator.keys import Miss
from autotuner.launch.lookup import NotFound, resolver
from search_spaces.space import config_key

log = logging.getLogger(__name__)


class KernelNotTuned(LookupError):
    """A launch under `on_miss="error"` of a key with no stored result."""


def resolve_miss(view: EngineView, miss: Miss) -> tuple[dict[str, Any], str]:
    """The config a new key launches with, and where it came from (exact, stale, tuned here, default...)."""
    spec, problem, device = view.spec, miss.problem, miss.device
    r = resolver()
    policy = spec.on_miss or r.settings.on_miss
    store = r.store.peek()[0]
    config: dict[str, Any] | None = None
    source = ""
    try:
        res = r.resolve(view.op, problem, device, fallback="none")
        config, source = res.config, f"exact ({res.step})"
        if policy == "tune" and store is not None and untried(view, store, miss):
            config = None  # the list grew since the result was stored: time the new configs
    except NotFound as exc:
        if exc.stale is not None and not spec.space.violations(exc.stale.config, problem, device):
            config, source = exc.stale.config, f"stale ({exc.stale.stale_reason}); a re-tune is queued"
            record(view, miss)
        elif policy == "error":
            raise KernelNotTuned(
                f"{spec.name} has no tuned config for key {problem.key} on {device.key} (and AUTOTUNER_ON_MISS="
                f"error): tune it in a process with AUTOTUNER_ON_MISS=tune, or record it with AUTOTUNER_RECORD=1 "
                "and run `autotuner worker`") from None
    if config is None:
        if policy == "default" or r.settings.record:
            record(view, miss)
        if policy == "tune":
            config, source = tune_here(view, miss)
        else:
            config = spec.default(miss.named, miss.kwargs, problem, device)
            source = "default (a tuning job is queued)"
    log.info("autotuner: %s %s on %s: %s %s", spec.name, problem.key, device.key, source, config)
    return config, source


def _grids(miss: Miss, candidates: list[dict[str, Any]]) -> dict[str, tuple[int, ...]]:
    out = {}
    for c in candidates:
        g = miss.grid({**miss.named, **miss.kwargs, **c}) if callable(miss.grid) else miss.grid
        out[config_key(c)] = tuple(int(x) for x in g)
    return out


def record(view: EngineView, miss: Miss) -> None:
    """Queue a tuning job holding what a worker needs to replay this launch."""
    spec = view.spec
    try:
        candidates = spec.space.candidates(miss.problem, miss.device)
        call = record_call(spec.keys.arg_names, miss.named, _grids(miss, candidates))
        resolver().queue(view.op, spec.keys.problem(miss.named, call), miss.device)
    except Exception as exc:  # recording must never stop a launch
        log.warning("autotuner: could not record %s %s: %s", spec.name, miss.problem.key, exc)
