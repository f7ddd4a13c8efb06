"""A stored best config as lookups see it, judged against the running kernel hash and Triton version: the one
definition for both ways a process reads it (autotuner.store.database through SQLAlchemy, db.sqlite_reads through
stdlib sqlite3 for a launching process)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from autotuner.store.row_checks import best_fault, checked


@dataclass(frozen=True)
class StoredBest:
    config: dict[str, Any]
    median_ms: float
    default_ms: float | None
    torch_ms: float | None
    problem: dict[str, Any]
    problem_key: str
    stale: bool
    stale_reason: str | None
    updated_at: Any
    run_id: int | None
    id: int


def versions() -> tuple[str, str]:
    """The running Triton's and torch's versions; torch's from its installed metadata where it is not imported
    (`tune`'s own process imports no torch: autotuner.cli.prestart)."""
    import triton

    torch = sys.modules.get("torch")
    return triton.__version__, torch.__version__ if torch is not None else _installed_torch()


@functools.cache
def _installed_torch() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:  # pragma: no cover - torch runs from a source tree
        import torch

        return str(torch.__version__)


def stored_best(row: Any, kernel_hash: str, triton_version: str | None = None) -> StoredBest:
    """A stored row (its columns by name) judged against a kernel hash and a Triton version (default: the
    running one)."""
    triton_version = triton_version or versions()[0]
    reasons = []
    if row.kernel_hash != kernel_hash:
        reasons.append(f"kernel source changed (stored hash {row.kernel_hash}, running {kernel_hash})")
    if row.triton_version != triton_version:
        reasons.append(f"Triton version differs (stored {row.triton_version}, running {triton_version})")
    return StoredBest(dict(row.config), row.median_ms, row.default_ms, row.torch_ms, dict(row.problem),
                      row.problem_key, bool(reasons), "; ".join(reasons) or None, row.updated_at, row.run_id, row.id)


def best_of(rows: Iterable[Any], kernel_hash: str, triton_version: str | None = None,
            space: Any = None) -> StoredBest | None:
    """The best of one problem's stored rows that pass the row checks (against the op's `space` where given), each
    judged by `stored_best`: the fastest current one if any, else the newest stale one."""
    judged = [stored_best(r, kernel_hash, triton_version)
              for r in checked("best_configs", rows, lambda r: best_fault(r, space))]
    if not judged:
        return None
    fresh = [r for r in judged if not r.stale]
    return min(fresh, key=lambda r: r.median_ms) if fresh else max(judged, key=lambda r: r.id)
