"""What Triton's autotuner shows its users, kept as Triton keeps it for a decorated kernel: its `cache` (a dict whose
changes drop the kernel's launchers), `configs_timings` from the stored trials, TRITON_PRINT_AUTOTUNING, and the
autotuning listener told of each key resolved."""

from __future__ import annotations

import inspect
import logging
import math
import os
from collections.abc import Callable
from typing import Any

import triton
from triton.runtime.jit import JITFunction

from autotuner.decorator.configs import config_dict
from autotuner.decorator.engine_view import EngineView
from autotuner.launch.lookup import resolver
from search_spaces.space import config_key

log = logging.getLogger("autotuner.decorator.autotuned")


class NotifyingDict(dict):  # type: ignore[type-arg]
    """A dict that tells `changed` of every change (`Autotuned.cache`)."""

    def __init__(self, changed: Callable[[], None]) -> None:
        super().__init__()
        self._changed = changed

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._changed()

    def __ior__(self, other: Any) -> Any:  # type: ignore[misc]
        super().__ior__(other)
        self._changed()
        return self

    def clear(self) -> None:
        super().clear()
        self._changed()

    def pop(self, *args: Any) -> Any:
        try:
            return super().pop(*args)
        finally:
            self._changed()

    def popitem(self) -> Any:
        try:
            return super().popitem()
        finally:
            self._changed()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        try:
            return super().setdefault(key, default)
        finally:
            self._changed()

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._changed()


def timings(view: EngineView, miss: Any, configs: list[triton.Config]) -> dict[triton.Config, list[float]]:
    """Each listed config's stored time for this key, as Triton's `configs_timings` holds it (median, p20, p80:
    the median three times; a config that failed: inf)."""
    try:
        store = resolver().store.peek()[0]
        times = store.trial_times(op=view.op, problem=miss.problem, device=miss.device) if store else {}
    except Exception as exc:  # what is only told is never worth a failed launch
        log.info("autotuner: %s: no timings for configs_timings: %s", view.spec.name, str(exc))
        times = {}
    by_key = {config_key(config_dict(c)): c for c in configs}
    return {by_key[k]: [ms] * 3 if ms is not None else [math.inf] * 3 for k, (_, ms) in times.items() if k in by_key}


def print_autotuning() -> bool:
    """TRITON_PRINT_AUTOTUNING, as this Triton reads it."""
    knobs = getattr(triton, "knobs", None)
    if knobs is not None and hasattr(knobs, "autotuning"):
        return bool(knobs.autotuning.print)
    return os.environ.get("TRITON_PRINT_AUTOTUNING") == "1"


def tell_listener(kernel: Any, key: tuple[Any, ...], config: triton.Config, tuned: bool) -> None:
    """Triton's autotuning listener (`triton.knobs.autotuning.listener`, where this Triton has it), told of a key
    resolved as Triton's run tells it of a key tuned or read from its disk cache."""
    knobs = getattr(triton, "knobs", None)
    listener = getattr(getattr(knobs, "autotuning", None), "listener", None)
    if listener is None:
        return
    jit_fn = kernel.fn
    while not isinstance(jit_fn, JITFunction) and hasattr(jit_fn, "fn") and not inspect.isfunction(jit_fn):
        jit_fn = jit_fn.fn
    listener(fn=jit_fn if isinstance(jit_fn, JITFunction) else kernel.fn, key=key, best_config=config,
             configs_timings=getattr(kernel, "configs_timings", {}) if tuned else {},
             duration=kernel.bench_time if tuned else None, cache_hit=not tuned)
