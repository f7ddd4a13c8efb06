"""The nearest tuned problem: same op and device; distance in log space of the dimensions.

For matmul, problems with the same N and K come first, nearest M first (LLM GEMMs vary only in M, with
the batch of tokens). Other options (dtype, epilogue, causal, approximate) must match too, except for a search's
warm starts (`any_options`): there a config of the causal twin or another epilogue is a good first guess (the
search skips one that is not a candidate), ranked after every problem whose options match.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def _options(problem: Any) -> dict[str, Any]:
    if hasattr(problem, "match_fields"):  # a problem type that says what must match (autotune kernels)
        return dict(problem.match_fields())
    d = dataclasses.asdict(problem)
    return {k: v for k, v in d.items() if isinstance(v, (str, bool))}


OPTION_PENALTY = 100.0  # per differing option, with any_options: after every problem whose options match


def distance(a: Any, b: Any, any_options: bool = False) -> float | None:
    """None when b can never stand in for a; otherwise a sortable distance (smaller is nearer)."""
    if type(a) is not type(b):
        return None
    oa, ob = _options(a), _options(b)
    differing = sum(oa[k] != ob[k] for k in oa)
    if differing and not any_options:
        return None
    da, db = a.dims(), b.dims()
    if len(da) != len(db):
        return None
    d = math.sqrt(sum(math.log2(x / y) ** 2 for x, y in zip(da, db, strict=False))) + OPTION_PENALTY * differing
    if hasattr(a, "M") and (a.N, a.K) != (b.N, b.K):
        d += 1000.0  # same N and K first
    return d


def rank(problem: Any, others: Sequence[tuple[Any, T]], any_options: bool = False) -> list[tuple[float, Any, T]]:
    """(distance, problem, payload) for every comparable other problem, nearest first (the same one excluded)."""
    out = []
    for other, payload in others:
        if other == problem:
            continue
        d = distance(problem, other, any_options)
        if d is not None:
            out.append((d, other, payload))
    return sorted(out, key=lambda t: t[0])
