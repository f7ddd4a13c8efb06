"""Softmax over the last dimension: problem, space (the row-wise space), inputs, cost model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernels import _checks, _counters
from kernels import softmax as k_softmax
from kernels._torch import lazy
from search_spaces.contract import ELEMENTWISE_TOLERANCE, Example, LibraryCall, TunableOp
from search_spaces.rowwise import DTYPES, RowwiseProblem, element_bytes, make_space, problem_from_x, random_rows
from search_spaces.space import Space

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)


@dataclass(frozen=True)
class SoftmaxProblem(RowwiseProblem):
    pass


def make_inputs(p: SoftmaxProblem, device: str) -> dict[str, Any]:
    return {"x": random_rows(p, device)}


def problem_from_inputs(inputs: dict[str, Any]) -> SoftmaxProblem:
    return problem_from_x(inputs["x"], SoftmaxProblem)


def flops(p: SoftmaxProblem) -> float:
    return 5.0 * p.rows * p.cols  # max, sub, exp, sum, div


def elements(p: SoftmaxProblem) -> int:
    return p.rows * p.cols


def bytes_moved(p: SoftmaxProblem) -> float:
    return 2.0 * p.rows * p.cols * element_bytes(p)


SPACE: Space[RowwiseProblem] = make_space(persist=True)


def softmax(x: torch.Tensor) -> tuple[torch.Tensor]:
    """softmax(x, dim=-1), like torch.softmax."""
    return (x,)


LIBRARY = LibraryCall(
    face=softmax, signature=lambda x: (x.shape, x.stride(), x.dtype, x.device), tensors=(0,),
    inputs=lambda x: {"x": x}, prepare=lambda x, config: k_softmax.prepare(x, config),
    run=lambda x, config: k_softmax.softmax(x, config), launch_args=(0,), torch_op=k_softmax.baseline,
)

OP: TunableOp[SoftmaxProblem] = TunableOp(
    name="softmax", problem_type=SoftmaxProblem, space=SPACE, dtypes=DTYPES,
    call="autotuner.softmax(x)",
    description="softmax over the last dimension, like torch.softmax(x, -1)",
    launch=lambda inputs, config: k_softmax.softmax(inputs["x"], config),
    make_inputs=make_inputs, problem_from_inputs=problem_from_inputs,
    reference=lambda inputs: k_softmax.reference(inputs["x"]), tolerance=ELEMENTWISE_TOLERANCE,
    sources=(k_softmax, _checks, _counters), flops=flops, bytes_moved=bytes_moved, elements=elements,
    baseline=lambda inputs: torch.softmax(inputs["x"], dim=-1),
    variants={"manual (unfused torch)": lambda inputs: k_softmax.manual(inputs["x"])},
    library=LIBRARY,
    examples=(Example("13x300"), Example("5x1000"), Example("3x7")),
    gpu_examples=(Example("4096x4096", dtype="float16"), Example("1024x32768", dtype="float32"),
                  Example("65536x256", dtype="float16"), Example("1000x3001", dtype="bfloat16"),
                  Example("16384x1024", dtype="bfloat16")),
)
