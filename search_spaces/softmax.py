"""Softmax over the last dimension: problem, space (the row-wise space), inputs, cost model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from search_spaces.rowwise import RowwiseProblem, element_bytes, make_space, problem_from_x, random_rows
from search_spaces.space import Space


@dataclass(frozen=True)
class SoftmaxProblem(RowwiseProblem):
    pass


def make_inputs(p: SoftmaxProblem, device: str) -> dict[str, Any]:
    return {"x": random_rows(p, device)}


def problem_from_inputs(inputs: dict[str, Any]) -> SoftmaxProblem:
    return problem_from_x(inputs["x"], SoftmaxProblem)


def flops(p: SoftmaxProblem) -> float:
    return 5.0 * p.rows * p.cols  # max, sub, exp, sum, div


def bytes_moved(p: SoftmaxProblem) -> float:
    return 2.0 * p.rows * p.cols * element_bytes(p)


SPACE: Space[RowwiseProblem] = make_space()
