"""The nearest tuned problem: same op, dtype and device; distance in log space of the dimensions.

For matmul, problems with the same N and K come first, nearest M first (LLM GEMMs vary only in M, with
the batch of tokens). Other options (epilogue, causal, approximate) must match too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def _options(problem: Any) -> dict[str, Any]:
    d = dataclasses.asdict(problem)
    return {k: v for k, v in d.items() if isinstance(v, (str, bool))}


def distance(a: Any, b: Any) -> float | None:
    """None when b can never stand in for a; otherwise a sortable distance (smaller is nearer)."""
    if type(a) is not type(b) or _options(a) != _options(b):
        return None
    da, db = a.dims(), b.dims()
    if len(da) != len(db):
        return None
    d = math.sqrt(sum(math.log2(x / y) ** 2 for x, y in zip(da, db, strict=False)))
    if hasattr(a, "M") and (a.N, a.K) != (b.N, b.K):
        d += 1000.0  # same N and K first
    return d


def rank(problem: Any, others: Sequence[tuple[Any, T]]) -> list[tuple[float, Any, T]]:
    """(distance, problem, payload) for every comparable other problem, nearest first (the same one excluded)."""
    out = []
    for other, payload in others:
        if other == problem:
            continue
        d = distance(problem, other)
        if d is not None:
            out.append((d, other, payload))
    return sorted(out, key=lambda t: t[0])
