"""LayerNorm over the last dimension with weight and bias: problem, space (row-wise), inputs, cost model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernels import _checks
from kernels import layernorm as k_layernorm
from kernels._torch import lazy
from search_spaces.contract import ELEMENTWISE_TOLERANCE, Example, LibraryCall, TunableOp, tensor_signature
from search_spaces.problem import normal, seeded
from search_spaces.rowwise import DTYPES, RowwiseProblem, element_bytes, make_space, problem_from_x, random_rows
from search_spaces.space import Space

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)

EPS = 1e-5


@dataclass(frozen=True)
class LayerNormProblem(RowwiseProblem):
    pass


def make_inputs(p: LayerNormProblem, device: str) -> dict[str, Any]:
    g = seeded(device, 1)
    weight = normal((p.cols,), g, device, p.torch_dtype, scale=0.5, shift=1.0)
    bias = normal((p.cols,), g, device, p.torch_dtype, scale=0.5)
    x = random_rows(p, device, offset=3.0)  # a non-zero mean, so centring is exercised
    return {"x": x, "weight": weight, "bias": bias, "eps": EPS}


def problem_from_inputs(inputs: dict[str, Any]) -> LayerNormProblem:
    return problem_from_x(inputs["x"], LayerNormProblem)


def flops(p: LayerNormProblem) -> float:
    return 8.0 * p.rows * p.cols


def elements(p: LayerNormProblem) -> int:
    return p.rows * p.cols


def bytes_moved(p: LayerNormProblem) -> float:
    return (2.0 * p.rows * p.cols + 2.0 * p.cols) * element_bytes(p)


SPACE: Space[RowwiseProblem] = make_space()


def _args(inputs: Any) -> tuple[Any, Any, Any, float]:
    return inputs["x"], inputs.get("weight"), inputs.get("bias"), inputs.get("eps", EPS)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> tuple[Any, ...]:
    """Layer normalisation over the last dimension, like torch.nn.functional.layer_norm(x, (N,), weight, bias, eps)."""
    return x, weight, bias, eps


LIBRARY = LibraryCall(
    face=layer_norm, tensors=(0, 1, 2), launch_args=(0, 1, 2),
    signature=lambda x, w, b, eps: (x.shape, x.stride(), x.dtype, x.device, tensor_signature(w), tensor_signature(b),
                                    eps),
    inputs=lambda x, w, b, eps: {"x": x},
    prepare=lambda x, w, b, eps, config: k_layernorm.prepare(x, w, b, eps, config),
    run=lambda x, w, b, eps, config: k_layernorm.layer_norm(x, w, b, eps, config),
    torch_op=k_layernorm.baseline,
)

OP: TunableOp[LayerNormProblem] = TunableOp(
    name="layernorm", problem_type=LayerNormProblem, space=SPACE, dtypes=DTYPES,
    call="autotuner.layer_norm(x, weight, bias)",
    description="layer normalisation over the last dimension with weight and bias",
    launch=lambda inputs, config: k_layernorm.layer_norm(*_args(inputs), config),
    make_inputs=make_inputs, problem_from_inputs=problem_from_inputs,
    reference=lambda inputs: k_layernorm.reference(*_args(inputs)), tolerance=ELEMENTWISE_TOLERANCE,
    sources=(k_layernorm, _checks), flops=flops, bytes_moved=bytes_moved, elements=elements,
    baseline=lambda inputs: k_layernorm.baseline(*_args(inputs)),
    library=LIBRARY,
    examples=(Example("13x300"), Example("6x1000"), Example("3x7")),
    gpu_examples=(Example("4096x4096", dtype="float16"), Example("16384x1024", dtype="bfloat16"),
                  Example("1000x70000", dtype="float32"),
                  Example("4096x5000", dtype="float16", why="a 16-column tail; strides multiples of 8, not 16"),
                  Example("1000x3001", dtype="bfloat16"),
                  Example("2048x24000", dtype="bfloat16", why="two tiles: 16384 + 8192")),
)
