"""GELU, element-wise: the problem is the element count (any shape flattens to it), dtype and form."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from kernels import _checks
from kernels import gelu as k_gelu
from kernels._torch import lazy
from search_spaces.contract import ELEMENTWISE_TOLERANCE, Example, LibraryCall, Option, TunableOp
from search_spaces.problem import (
    ELEMENT_BYTES,
    ProblemBase,
    ProblemError,
    dims_pattern,
    normal,
    parse_dims,
    parse_dtype,
    pow2_bucket,
    seeded,
    torch_dtype_of,
)
from search_spaces.space import Config, DeviceLimits, Param, Space, clamp, next_pow2, pow2_range

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)

DTYPES = ("float16", "bfloat16", "float32")
APPROXIMATIONS = ("tanh", "none")


@dataclass(frozen=True)
class GeluProblem(ProblemBase):
    n: int
    dtype: str = "float16"
    approximate: str = "tanh"
    layout: ClassVar[str] = "any shape, e.g. 4096x4096 or 16777216 (only the element count matters)"
    shape_pattern: ClassVar[str] = dims_pattern((1, 2, 3, 4, 5))

    def __post_init__(self) -> None:
        if self.approximate not in APPROXIMATIONS:
            raise ProblemError(f"approximate={self.approximate!r} is not supported; accepted: {', '.join(APPROXIMATIONS)}")

    @classmethod
    def parse(cls, shape: object, dtype: object = "float16", approximate: str = "tanh") -> GeluProblem:
        dims = parse_dims(shape, (1, 2, 3, 4, 5), cls.layout)
        n = 1
        for d in dims:
            n *= d
        return cls(n, parse_dtype(dtype, DTYPES), approximate)

    @property
    def shape(self) -> str:
        return str(self.n)

    @property
    def key(self) -> str:
        return f"{self.n}:{self.dtype}:{self.approximate}"

    def dims(self) -> tuple[int, ...]:
        return (self.n,)

    def bucket(self) -> GeluProblem:
        """The element count by powers of two."""
        return dataclasses.replace(self, n=pow2_bucket(self.n))

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype_of(self.dtype)


def make_inputs(p: GeluProblem, device: str) -> dict[str, Any]:
    g = seeded(device, 0)
    return {"x": normal((p.n,), g, device, p.torch_dtype, scale=3.0), "approximate": p.approximate}


def problem_from_inputs(inputs: dict[str, Any]) -> GeluProblem:
    x = inputs["x"]
    return GeluProblem(x.numel(), parse_dtype(x.dtype, DTYPES), inputs.get("approximate", "tanh"))


def flops(p: GeluProblem) -> float:
    return 10.0 * p.n


def elements(p: GeluProblem) -> int:
    return p.n


def bytes_moved(p: GeluProblem) -> float:
    return 2.0 * p.n * ELEMENT_BYTES[p.dtype]


def _block_vs_problem(c: Config, p: GeluProblem, d: DeviceLimits) -> str | None:
    useful = max(128, next_pow2(p.n))
    if c["BLOCK_SIZE"] > useful:
        return f"BLOCK_SIZE={c['BLOCK_SIZE']} is larger than useful for {p.n} elements (at most {useful})"
    return None


def _warps_vs_block(c: Config, p: GeluProblem, d: DeviceLimits) -> str | None:
    per_thread = c["BLOCK_SIZE"] // (32 * c["num_warps"])
    if per_thread < 1:
        return f"BLOCK_SIZE={c['BLOCK_SIZE']} has fewer elements than {c['num_warps']} warps have threads"
    if per_thread > 32:
        return f"BLOCK_SIZE={c['BLOCK_SIZE']} over {c['num_warps']} warps is {per_thread} elements per thread (at most 32)"
    return None


def default(p: GeluProblem, d: DeviceLimits) -> Config:
    block = clamp(next_pow2(p.n), 128, 1024)
    return {"BLOCK_SIZE": block, "num_warps": clamp(block // 256, 1, 4), "num_stages": 1}


SPACE: Space[GeluProblem] = Space(
    params=(
        Param("BLOCK_SIZE", pow2_range(128, 16384)),
        Param("num_warps", (1, 2, 4, 8, 16)),
        Param("num_stages", (1,)),
    ),
    constraints=(_block_vs_problem, _warps_vs_block),
    default_fn=default,
)

def gelu(x: torch.Tensor, approximate: str = "tanh") -> tuple[torch.Tensor, str]:
    """GELU, like torch.nn.functional.gelu(x, approximate=...); 'tanh' or 'none' (exact)."""
    if approximate not in APPROXIMATIONS:  # before the lookup, which would name the problem's field instead
        raise ValueError(f"approximate={approximate!r} is not supported; accepted: {', '.join(APPROXIMATIONS)}")
    return x, approximate


LIBRARY = LibraryCall(
    face=gelu, signature=lambda x, approximate: (x.shape, x.stride(), x.dtype, x.device, approximate), tensors=(0,),
    inputs=lambda x, approximate: {"x": x, "approximate": approximate},
    prepare=lambda x, approximate, config: k_gelu.prepare(x, config, approximate),
    run=lambda x, approximate, config: k_gelu.gelu(x, config, approximate), launch_args=(0,),
    torch_op=k_gelu.baseline,
)

OP: TunableOp[GeluProblem] = TunableOp(
    name="gelu", problem_type=GeluProblem, space=SPACE, dtypes=DTYPES,
    call="autotuner.gelu(x, approximate='tanh')",
    description="GELU, like torch.nn.functional.gelu(x, approximate=...)",
    options=(Option("approximate", APPROXIMATIONS, "tanh", "tanh or none (exact erf)"),),
    launch=lambda inputs, config: k_gelu.gelu(inputs["x"], config, inputs.get("approximate", "tanh")),
    make_inputs=make_inputs, problem_from_inputs=problem_from_inputs,
    reference=lambda inputs: k_gelu.reference(inputs["x"], inputs.get("approximate", "tanh")),
    tolerance=ELEMENTWISE_TOLERANCE, sources=(k_gelu, _checks), flops=flops, bytes_moved=bytes_moved, elements=elements,
    baseline=lambda inputs: k_gelu.baseline(inputs["x"], inputs.get("approximate", "tanh")),
    library=LIBRARY,
    variants={"manual (unfused torch)": lambda inputs: k_gelu.manual(inputs["x"], inputs.get("approximate", "tanh"))},
    examples=(Example("1000", {"approximate": "tanh"}), Example("3x5x77", {"approximate": "none"}),
              Example("7", {"approximate": "tanh"})),
    gpu_examples=(Example("4096x4096", {"approximate": "tanh"}, "float16"),
                  Example("16777216", {"approximate": "none"}, "float32"),
                  Example("1000003", {"approximate": "tanh"}, "bfloat16")),
)
