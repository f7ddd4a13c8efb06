"""The first launch of a key in a process: the database, then the service, then the miss policy (`on_miss=` or
AUTOTUNER_ON_MISS). More: docs/design/launch.md."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotuner.decorator.engine_view import EngineView
from autotuner.decorator.in_process import tune_here, untried
from autotuner.decorator.kernel_problem import forms, record_call
from autotuner.decorator.keys import Miss
from autotuner.launch.lookup import resolver
from autotuner.store.resolution import NotFound
from search_spaces.errors import AutotunerError
from search_spaces.space import config_key

log = logging.getLogger(__name__)


class KernelNotTuned(AutotunerError, LookupError):
    """A launch under `on_miss="error"` of a key with no stored result."""


@dataclass(frozen=True)
class Answer:
    config: dict[str, Any]
    source: str  # where it came from, for people: "exact (database)", "nearest (n=64's winner) ...", ...
    settled: bool  # exact or tuned here; otherwise asked again after Settings.recheck_s, its meets counted


def resolve_miss(view: EngineView, miss: Miss) -> Answer:
    """The config a new key launches with, and where it came from (exact, stale, tuned here, nearest, default)."""
    spec, problem, device = view.spec, miss.problem, miss.device
    r = resolver()
    policy = spec.on_miss or r.settings.on_miss
    store = r.store.peek()[0]
    answer: Answer | None = None
    try:
        res = r.resolve(view.op, problem, device, fallback="none")
        where = f" for this key's bucket {problem.shape}" if miss.bucketed else ""
        if policy == "tune" and store is not None and untried(view, store, miss):
            answer = None  # the list grew since the result was stored: time the new configs
        elif spec.allows(miss, res.config):
            answer = Answer(res.config, f"exact ({res.step}){where}", True)
        else:  # its winner is no longer listed (or is pruned here): the fastest stored config still listed
            answer = redecided(view, miss, store, res.config)
    except NotFound as exc:
        if exc.stale is not None and spec.allows(miss, exc.stale.config):
            answer = Answer(exc.stale.config, f"stale ({exc.stale.stale_reason}); a re-tune is queued", False)
            record(view, miss, background=policy == "nearest")
    if answer is None and policy == "error":
        raise KernelNotTuned(
            f"{spec.name} has no tuned config for key {problem.key} on {device.key} that it may launch (and "
            f"AUTOTUNER_ON_MISS=error): tune it in a process with AUTOTUNER_ON_MISS=tune, or record it with "
            "AUTOTUNER_RECORD=1 and run `autotuner worker`")
    if answer is None:
        if policy == "nearest":
            answer = nearest_answer(view, miss)
            record(view, miss, background=True)
        else:
            recorded = policy == "default" or r.settings.record
            if recorded:
                record(view, miss)
            if policy == "tune":
                answer = Answer(*tune_here(view, miss), True)
                if not recorded:  # kept with its result: a sweep of the kernel can make its points' calls from it
                    record(view, miss, background=True, tuned=True)
            else:
                answer = Answer(spec.default(miss),
                                "default (a tuning job is queued)", False)
    log.info("autotuner: %s %s on %s: %s %s", spec.name, problem.key, device.key, answer.source, answer.config)
    return answer


def redecided(view: EngineView, miss: Miss, store: Any, stored: dict[str, Any]) -> Answer | None:
    """The fastest of the configs this launch may use among the stored timings of its key, where the stored winner
    is not one of them (removed from the list, or pruned here); None where none of them was timed."""
    try:
        times = store.trial_times(op=view.op, problem=miss.problem, device=miss.device) if store is not None else {}
    except Exception as exc:  # no stored timings to decide from: the miss policy decides
        log.info("autotuner: %s: no stored timings to re-decide from: %s", view.spec.name, str(exc))
        return None
    timed = [(ms, config) for config, ms in times.values() if ms is not None and view.spec.allows(miss, config)]
    if not timed:
        return None
    ms, config = min(timed, key=lambda t: t[0])
    return Answer(config, f"exact (re-decided among {len(timed)} stored timings: the stored winner "
                          f"{config_key(stored)} is no longer a config of this launch)", True)


def nearest_answer(view: EngineView, miss: Miss) -> Answer:
    """Between a sweep's points where its model beat nearest, its pick; else the nearest tuned key's winner; each only
    where valid for this key; else the default. Nothing is measured."""
    spec, problem, device = view.spec, miss.problem, miss.device
    pruned = spec.pruned(miss)
    allowed = None if pruned is None else {config_key(c) for c in pruned}
    passed = []
    pick = resolver().predicted(view.op, problem, device)
    if pick is not None and not spec.space.violations(pick.config, problem, device) and \
            (allowed is None or config_key(pick.config) in allowed):
        return Answer(pick.config, f"predicted (the model of sweep {pick.sweep_id}); the exact key is queued", False)
    for other, row in resolver().nearest(view.op, problem, device):
        if spec.space.violations(row.config, problem, device) or \
                (allowed is not None and config_key(row.config) not in allowed):
            passed.append(other.key)
            continue
        return Answer(row.config, f"nearest ({other.key}'s winner); the exact key is queued", False)
    why = f"no nearby tuned key's winner is valid here: {', '.join(passed)}" if passed else "nothing tuned near"
    return Answer(spec.default(miss), f"default ({why}); the exact key is queued",
                  False)


def _grids(miss: Miss, candidates: list[dict[str, Any]], pause: Callable[[], None]) -> dict[str, tuple[int, ...]]:
    out = {}
    for c in candidates:
        g = miss.grid({**miss.named, **miss.kwargs, **c}) if callable(miss.grid) else miss.grid
        out[config_key(c)] = tuple(int(x) for x in g)
        pause()
    return out


def _no_pause() -> None:
    pass


def _let_launches_run() -> None:
    """Give up the GIL for a moment: on a background thread, between steps, so that a launching thread waiting
    for it takes it now rather than after the interpreter's switch interval (5 ms)."""
    time.sleep(0)


def record(view: EngineView, miss: Miss, *, background: bool = False, tuned: bool = False) -> None:
    """Queue a tuning job holding what a worker needs to replay this launch (once per key and process); with
    `background`, the grids, the recorded call and the write happen on another thread. `tuned`: the key was tuned
    here; its call is kept as a job this process did (Resolver.keep_call), not queued."""
    r = resolver()
    if r.queued(view.op, miss.problem, miss.device):
        return

    pause = _let_launches_run if background else _no_pause
    pruned = view.spec.pruned(miss)  # (on the launching thread, with the launch's own arguments; once per miss)
    if background:  # what waits for the other thread holds the tensors' forms, not the tensors (nor their memory)
        miss = dataclasses.replace(miss, args=(), kwargs=forms(miss.kwargs), named=forms(miss.named), pruned=None)

    def write() -> None:
        spec = view.spec
        try:
            pause()
            candidates = spec.space.candidates(miss.problem, miss.device)
            pause()
            call = record_call(spec.keys.arg_names, miss.named, _grids(miss, candidates, pause),
                               [config_key(c) for c in pruned] if pruned is not None else None)
            pause()
            problem = spec.keys.problem(miss.named, call)
            pause()
            (r.keep_call if tuned else r.queue)(view.op, problem, miss.device)
        except Exception as exc:  # recording must never stop a launch
            log.warning("autotuner: could not record %s %s: %s", spec.name, miss.problem.key, str(exc))

    if background:
        r.in_background(write)
    else:
        write()
