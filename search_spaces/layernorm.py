"""LayerNorm over the last dimension with weight and bias: problem, space (row-wise), inputs, cost model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from search_spaces.rowwise import RowwiseProblem, element_bytes, make_space, problem_from_x, random_rows
from search_spaces.space import Space

EPS = 1e-5


@dataclass(frozen=True)
class LayerNormProblem(RowwiseProblem):
    pass


def make_inputs(p: LayerNormProblem, device: str) -> dict[str, Any]:
    g = torch.Generator(device="cpu").manual_seed(1)
    weight = (1.0 + 0.5 * torch.randn(p.cols, generator=g)).to(device=device, dtype=p.torch_dtype)
    bias = (0.5 * torch.randn(p.cols, generator=g)).to(device=device, dtype=p.torch_dtype)
    x = random_rows(p, device) + 3.0  # a non-zero mean, so centring is exercised
    return {"x": x, "weight": weight, "bias": bias, "eps": EPS}


def problem_from_inputs(inputs: dict[str, Any]) -> LayerNormProblem:
    return problem_from_x(inputs["x"], LayerNormProblem)


def flops(p: LayerNormProblem) -> float:
    return 8.0 * p.rows * p.cols


def bytes_moved(p: LayerNormProblem) -> float:
    return (2.0 * p.rows * p.cols + 2.0 * p.cols) * element_bytes(p)


SPACE: Space[RowwiseProblem] = make_space()
