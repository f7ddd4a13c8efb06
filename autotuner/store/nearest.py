"""The nearest tuned problem: same op and device; distance in log space of the dimensions. More: docs/design/store.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from autotuner.store.row_checks import best_fault, checked
from autotuner.store.stored_best import StoredBest, stored_best
from search_spaces.contract import ProblemType

if TYPE_CHECKING:
    from autotuner.base.registry import Op

T = TypeVar("T")
P = TypeVar("P", bound=ProblemType)

OPTION_PENALTY = 100.0  # per differing field, with any_options: after every problem whose fields match
GROUP_PENALTY = 1000.0  # another nearest group: after every problem of the same group


def distance(a: ProblemType, b: ProblemType, any_options: bool = False) -> float | None:
    """None when b can never stand in for a; otherwise a sortable distance (smaller is nearer)."""
    if type(a) is not type(b):
        return None
    fa, fb = a.match_fields(), b.match_fields()
    differing = sum(fa[k] != fb.get(k) for k in fa)
    if differing and not any_options:
        return None
    da, db = a.dims(), b.dims()
    if len(da) != len(db):
        return None
    d = math.sqrt(sum(math.log2(x / y) ** 2 for x, y in zip(da, db, strict=True))) + OPTION_PENALTY * differing
    if a.nearest_group() != b.nearest_group():
        d += GROUP_PENALTY
    return d


def current_problems(op: Op, rows: Iterable[Any], *, kernel_hash: str | None = None,
                     triton_version: str | None = None) -> list[tuple[ProblemType, StoredBest]]:
    """The current stored bests among `rows` (one op's, on one device), each with its problem."""
    others = []
    for row in checked("best_configs", rows, lambda r: best_fault(r, op.space)):
        judged = stored_best(row, kernel_hash or op.kernel_hash, triton_version)
        if judged.stale:
            continue
        try:
            others.append((op.problem_from_dict(judged.problem), judged))
        except (TypeError, ValueError):  # stored by another version of the op
            continue
    return others


def nearest_stored(op: Op, problem: ProblemType, rows: Iterable[Any], *, kernel_hash: str | None = None,
                   triton_version: str | None = None, limit: int = 3,
                   any_options: bool = False) -> list[tuple[ProblemType, StoredBest]]:
    """The current stored bests among `rows` (one op's, on one device) of the problems nearest `problem`, nearest
    first: what Store.nearest and a launching process's sqlite3 reads answer alike."""
    others = current_problems(op, rows, kernel_hash=kernel_hash, triton_version=triton_version)
    return [(p, r) for _, p, r in rank(problem, others, any_options)[:limit]]


def rank(problem: P, others: Sequence[tuple[P, T]], any_options: bool = False) -> list[tuple[float, P, T]]:
    """(distance, problem, payload) for every comparable other problem, nearest first (the same one excluded)."""
    out = []
    for other, payload in others:
        if other == problem:
            continue
        d = distance(problem, other, any_options)
        if d is not None:
            out.append((d, other, payload))
    return sorted(out, key=lambda t: t[0])
