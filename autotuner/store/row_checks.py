"""Every row the store reads is checked here, once: a database writer is trusted less than the operator. A row that
fails is skipped with one warning naming its table and id and never served, launched or raised; `autotuner db check`
lists and can quarantine them.

    rows = checked("best_configs", rows, lambda r: best_fault(r, space))
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any, TypeVar

log = logging.getLogger("autotuner.store")
R = TypeVar("R")
_warned: set[tuple[str, Any]] = set()
_SCALARS = (bool, int, float, str)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def time_fault(name: str, value: Any, *, optional: bool) -> str | None:
    """Why a stored time in ms is not one (None, where `optional`, is no time)."""
    if value is None and optional:
        return None
    if not _number(value) or not math.isfinite(value) or value <= 0:
        return f"{name} is {value!r}, not a finite positive number of ms"
    return None


def config_fault(config: Any, space: Any = None) -> str | None:
    """Why a stored config is not one a kernel can be launched with: a JSON object of scalars, and where the op's
    space is a grid (a built-in op's), one of its configs."""
    if not isinstance(config, dict):
        return f"config is {_shown(config)}, not a JSON object"
    for key, value in config.items():
        if not isinstance(key, str) or not _launch_value(value):
            return f"config holds {key!r}: {_shown(value)}, not a value a kernel is launched with"
    if space is not None and space.params and not space.listed:  # a grid (a built-in op's): one of its configs; a
        # space without parameters is a generated kernel's, whose generator checks its configs itself
        fault = next(iter(space.outside(config, partial=True)), None)
        if fault is not None:
            return f"config: {fault}"
    return None


def _launch_value(value: Any) -> bool:
    """A config's value as a launch takes it: a finite number, a string, a bool, None, or a list of these (a
    tuple-valued constexpr, as JSON keeps it)."""
    if isinstance(value, list):
        return all(_launch_value(v) for v in value)
    return value is None or isinstance(value, _SCALARS) and not (isinstance(value, float) and not math.isfinite(value))


def _text_fault(row: Any, *names: str) -> str | None:
    for name in names:
        if not isinstance(getattr(row, name), str):
            return f"{name} is {_shown(getattr(row, name))}, not text"
    return None


def best_fault(row: Any, space: Any = None) -> str | None:
    """Why a best_configs row (its columns by name) cannot be served, or None."""
    if not isinstance(row.problem, dict):
        return f"problem is {_shown(row.problem)}, not a JSON object"
    return (_text_fault(row, "op", "problem_key", "kernel_hash", "triton_version")
            or config_fault(row.config, space)
            or time_fault("median_ms", row.median_ms, optional=False)
            or time_fault("default_ms", row.default_ms, optional=True)
            or time_fault("torch_ms", row.torch_ms, optional=True))


def trial_fault(row: Any) -> str | None:
    """Why a trials row cannot be read as a measured (or failed) config, or None."""
    return (_text_fault(row, "config_key", "status") or config_fault(row.config)
            or next((fault for name in ("median_ms", "retimed_ms", "p20_ms", "p80_ms") if hasattr(row, name)
                     if (fault := time_fault(name, getattr(row, name), optional=True))), None))


def run_fault(row: Any) -> str | None:
    """Why a tuning_runs row cannot be shown, or None."""
    if not isinstance(row.problem, dict):
        return f"problem is {_shown(row.problem)}, not a JSON object"
    if row.rejections is not None and not isinstance(row.rejections, dict):
        return f"rejections is {_shown(row.rejections)}, not a JSON object"
    return _text_fault(row, "op", "problem_key", "kernel_hash", "triton_version", "strategy", "status")


def job_fault(row: Any) -> str | None:
    """Why a jobs row cannot be run as the job it names, or None."""
    fault = _text_fault(row, "op", "shape", "dtype", "strategy", "kind")
    if fault:
        return fault
    if not isinstance(row.options, dict):
        return f"options is {_shown(row.options)}, not a JSON object"
    if row.budget_trials is not None and not (isinstance(row.budget_trials, int) and row.budget_trials >= 0):
        return f"budget_trials is {_shown(row.budget_trials)}, not a count"
    if row.budget_seconds is not None and not (_number(row.budget_seconds) and math.isfinite(row.budget_seconds)
                                               and row.budget_seconds > 0):
        return f"budget_seconds is {_shown(row.budget_seconds)}, not a finite positive number"
    if row.gpus is not None and not (isinstance(row.gpus, int) and row.gpus >= 1):
        return f"gpus is {_shown(row.gpus)}, not a positive count"
    return None


def warn_once(table: str, row_id: Any, fault: str) -> None:
    if (table, row_id) not in _warned:
        _warned.add((table, row_id))
        log.warning("skipped %s row %s: %s (autotuner db check lists such rows)", table, row_id, fault)


def checked(table: str, rows: Iterable[R], fault: Callable[[R], str | None]) -> list[R]:
    """The rows that pass `fault`; each that fails is left out with one warning naming its table and id."""
    out = []
    for row in rows:
        reason = fault(row)
        if reason is None:
            out.append(row)
        else:
            warn_once(table, getattr(row, "id", "?"), reason)
    return out


def _shown(value: Any) -> str:
    text = repr(str(value) if type(value).__name__ == "NotJSON" else value)
    return ("text that is not JSON: " if type(value).__name__ == "NotJSON" else "") + (
        text if len(text) <= 40 else text[:37] + "...")


def cross_timing_fault(row: Any) -> str | None:
    """Why a cross_timings row cannot be read, or None."""
    return (_text_fault(row, "winner_key", "on_key", "kernel_hash", "triton_version") or config_fault(row.config)
            or time_fault("ms", row.ms, optional=True) or time_fault("own_ms", row.own_ms, optional=True))


def trial_times(rows: Iterable[Any], now: datetime | None = None) -> dict[str, tuple[dict[str, Any], float | None]]:
    """config_key -> (config, median ms, or None for a kept failure) of the trial rows that pass the checks; a config's
    latest row answers. A failure is no answer unless it repeats the one before with the same cause within
    FAILURE_KEPT_S: otherwise the config is measured again, as Triton does in a new process."""
    now = now or datetime.now(timezone.utc)
    latest: dict[str, tuple[Any, Any]] = {}  # config key -> (its latest row, the one before)
    for row in checked("trials", rows, trial_fault):
        latest[row.config_key] = (row, latest.get(row.config_key, (None, None))[0])
    ran = any(row.status == "ok" for row, _ in latest.values())
    out: dict[str, tuple[dict[str, Any], float | None]] = {}
    for key, (row, before) in latest.items():
        if row.status == "ok":
            out[key] = (dict(row.config), row.retimed_ms or row.median_ms)
        elif ran or (before is not None and before.status != "ok" and failure_cause(before) == failure_cause(row)
                     and _within(getattr(row, "created_at", None), now, FAILURE_KEPT_S)):
            out[key] = (dict(row.config), None)
    return out


FAILURE_KEPT_S = 6 * 3600.0  # how long a failure that repeated with the same cause is kept as the config's answer


def failure_cause(row: Any) -> tuple[str, str]:
    """A failed trial's cause: its status and its error with the numbers taken out (a timeout's seconds, an
    address), so that the same failure twice compares equal."""
    return row.status, re.sub(r"\d+(\.\d+)?", "#", str(getattr(row, "error", None) or ""))


def _within(when: Any, now: datetime, seconds: float) -> bool:
    if not isinstance(when, datetime):
        return False
    if when.tzinfo is None:  # SQLite keeps UTC without its zone
        when = when.replace(tzinfo=timezone.utc)
    return (now - when).total_seconds() <= seconds
