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
from search_spaces.contract import OWN_SEARCH

log = logging.getLogger(__name__)
HELION_STRATEGIES = ("tpe", "random", OWN_SEARCH)  # what `search` takes (a Helion op's default: OWN_SEARCH)


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


def parameter_names(kernel: Any) -> list[str]:
    """A Helion kernel's parameters, in order: what a launch's positional arguments are named by."""
    return list(inspect.signature(kernel.fn).parameters)


def queue(cache: Any, r: Any) -> None:
    """A tuning job holding the launch's arguments' forms, written in the background."""
    named = dict(zip(parameter_names(cache.kernel.kernel), cache.args, strict=False))
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
           budget: int | None, strategy: str = OWN_SEARCH) -> tuple[Any, ...]:
    """A worker's tuning of a Helion kernel's problem: the recorded call's arguments rebuilt on `device`, then a
    search with the store's cache in place (`patch`), its pick written through `store` (the job's). `strategy`:
    `tpe`, the project's search over Helion's config space (helion_search); `random`, Helion's random configs;
    OWN_SEARCH, Helion's own search (HELION_AUTOTUNER's, else its default; its settings from the worker's HELION_*
    environment). `budget`: configs benchmarked, where the search takes a count. (config, ms, run id)."""
    if strategy not in HELION_STRATEGIES:
        why = " (its space is not a finite list)" if strategy == "exhaustive" else ""
        raise ValueError(f"a Helion kernel is searched by {', '.join(HELION_STRATEGIES)}; not {strategy!r}{why}")
    if not problem.call:
        raise ValueError(f"{problem.key}: no recorded call to rebuild the arguments from")
    when_imported("helion.autotuner", patch)
    named = rebuild_args(problem.call, device.torch_device)
    args = tuple(named[n] for n in parameter_names(kernel) if n in named)
    sink = Sink(store)
    token = SINK.set(sink)
    try:
        if strategy == OWN_SEARCH:
            kernel.autotune(args, force=True, **_count(budget))
        else:
            _run(kernel, args, strategy, budget)
    finally:
        SINK.reset(token)
    if sink.result is None:
        raise RuntimeError(f"{problem.key}: the search kept no timed config")
    return sink.result


def _run(kernel: Any, args: tuple[Any, ...], strategy: str, budget: int | None) -> Any:
    """One of the project's searches over the kernel's configs, through the cache Helion's settings name (the
    store's, under `patch`), as Helion's default autotuner function would run its own."""
    from helion.autotuner import RandomSearch, cache_classes

    from autotuner.decorator.helion_search import DEFAULT_COUNT, search_class

    args = kernel.normalize_args(*args)
    bound = kernel.bind(args)
    cls = search_class() if strategy == "tpe" else RandomSearch
    search = cls(bound, args, count=budget or DEFAULT_COUNT)
    return cache_classes[bound.settings.autotune_cache](search).autotune(skip_cache=True)


def _count(budget: int | None) -> dict[str, int]:
    """`count=budget` where the search Helion runs (HELION_AUTOTUNER's, else its default) takes a count."""
    from helion.autotuner import search_algorithms

    cls = search_algorithms.get(os.environ.get("HELION_AUTOTUNER", ""))
    if budget is None or cls is None or "count" not in inspect.signature(cls.__init__).parameters:
        return {}
    return {"count": budget}
