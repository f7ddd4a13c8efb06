"""A Helion kernel's problem with nothing stored, and a worker's tuning of one: the miss policy (AUTOTUNER_ON_MISS)
as it reads for a Helion kernel, the tuning job it queues (the launch's arguments recorded), and the worker's run of
Helion's own search on arguments rebuilt from that record. The cache that calls these: helion_cache."""

from __future__ import annotations

import contextvars
import inspect
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotuner.decorator.after_import import when_imported
from autotuner.decorator.kernel_problem import KernelProblem, rebuild_args, record_call
from autotuner.decorator.miss import KernelNotTuned

log = logging.getLogger(__name__)


@dataclass
class Sink:
    """While a worker searches: the job's store, and what helion_cache.record wrote through it."""

    store: Any
    result: tuple[Any, float, int] | None = None  # (config, ms, run id)


SINK: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("helion_sink", default=None)


def missed(cache: Any, r: Any) -> Any:
    """What `cache` (a helion_cache store cache, nothing stored for its problem) answers, as AUTOTUNER_ON_MISS says.
    `tune`: None (Helion searches here, as without autotuner); `nearest`: the nearest tuned problem's config that
    Helion accepts, else Helion's default; `default`: Helion's default; `error`: KernelNotTuned. All but `tune`
    queue a tuning job for a worker."""
    policy = r.settings.on_miss
    if policy == "tune":
        return None
    queue(cache, r)
    if policy == "error":
        raise KernelNotTuned(f"{cache.label} has no tuned config on {cache.device.key} (and AUTOTUNER_ON_MISS=error);"
                             " a tuning job is queued for `autotuner worker`")
    if policy == "nearest":
        for other, row in r.nearest(cache.op, cache.problem, cache.device):
            config = cache._accepted(row.config)
            if config is not None:
                log.warning("autotuner: %s: launching the nearest tuned problem's config (%s's; expected regret %s); "
                            "a tuning job is queued", cache.label, other.key, regret(r, cache, other.key))
                return config
    log.warning("autotuner: %s: launching Helion's default config; a tuning job is queued", cache.label)
    return cache.kernel.config_spec.default_config()


def queue(cache: Any, r: Any) -> None:
    """A tuning job holding the launch's arguments' forms, written in the background."""
    named = dict(zip(inspect.signature(cache.kernel.kernel.fn).parameters, cache.args, strict=False))
    try:
        call = record_call(list(named), named, {})
    except TypeError as exc:
        log.warning("autotuner: %s: no job queued: %s", cache.label, exc)
        return
    problem = KernelProblem(cache.problem.values, cache.problem.dtypes, call)
    r.in_background(lambda: r.queue(cache.op, problem, cache.device))


def regret(r: Any, cache: Any, from_key: str) -> str:
    """The expected loss of serving the cache's problem with `from_key`'s config, in words."""
    from autotuner.store.regret import expected_regret

    store, _ = r.store.peek()
    try:
        found = expected_regret(store, cache.op, cache.problem, from_key, cache.device) if store is not None else None
    except Exception:  # noqa: BLE001 - said as not measured
        found = None
    return f"{found.loss:.1%}" if found is not None else "not measured"


def search(kernel: Any, patch: Callable[[], None], problem: KernelProblem, device: Any, store: Any,
           budget: int | None) -> tuple[Any, ...]:
    """A worker's tuning of a Helion kernel's problem: the recorded call's arguments rebuilt on `device`, Helion's
    own search run on them with the store's cache in place (`patch`; its settings from the worker's HELION_*
    environment; `budget` configs where the search takes a count), its pick written through `store` (the job's).
    (config, ms, run id)."""
    if not problem.call:
        raise ValueError(f"{problem.key}: no recorded call to rebuild the arguments from")
    when_imported("helion.autotuner", patch)
    named = rebuild_args(problem.call, device.torch_device)
    args = tuple(named[n] for n in inspect.signature(kernel.fn).parameters if n in named)
    sink = Sink(store)
    token = SINK.set(sink)
    try:
        kernel.autotune(args, force=True, **_count(budget))
    finally:
        SINK.reset(token)
    if sink.result is None:
        raise RuntimeError(f"{problem.key}: Helion's search kept no timed config")
    return sink.result


def _count(budget: int | None) -> dict[str, int]:
    """`count=budget` where the search Helion runs (HELION_AUTOTUNER's, else its default) takes a count."""
    from helion.autotuner import search_algorithms

    cls = search_algorithms.get(os.environ.get("HELION_AUTOTUNER", ""))
    if budget is None or cls is None or "count" not in inspect.signature(cls.__init__).parameters:
        return {}
    return {"count": budget}
