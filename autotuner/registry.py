"""The op contract: one entry per op tying its problem type, space, launcher, reference and cost model.

    op = get_op("softmax")
    problem = op.parse_problem("4096x4096", "float16")
    inputs = op.make_inputs(problem, device)
    out = op.run(inputs, op.space.default(problem, device))
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import kernels  # noqa: F401  (backend first)
from autotuner.correctness import DOT_TOLERANCE, ELEMENTWISE_TOLERANCE, Comparison, compare
from autotuner.device import DeviceInfo
from kernels import _checks
from search_spaces import attention as s_attention
from search_spaces import gelu as s_gelu
from search_spaces import layernorm as s_layernorm
from search_spaces import matmul as s_matmul
from search_spaces import softmax as s_softmax
from search_spaces.rowwise import DTYPES as ROWWISE_DTYPES
from search_spaces.space import Space

# kernels/<op>.py modules (the package's top-level names are the library calls: kernels.softmax(x) etc.)
k_attention = importlib.import_module("kernels.attention")
k_gelu = importlib.import_module("kernels.gelu")
k_layernorm = importlib.import_module("kernels.layernorm")
k_matmul = importlib.import_module("kernels.matmul")
k_softmax = importlib.import_module("kernels.softmax")


class UnknownOpError(ValueError):
    pass


def problem_to_dict(problem: Any) -> dict[str, Any]:
    return dataclasses.asdict(problem)


@dataclass(frozen=True)
class Op:
    name: str
    problem_type: Any
    space: Space[Any]
    kernel_module: ModuleType
    launcher: Callable[..., Any]
    reference_fn: Callable[..., Any]
    space_module: ModuleType
    tolerance: Mapping[str, float]
    options: tuple[str, ...]  # problem options beyond shape and dtype, e.g. ("epilogue",)
    dtypes: tuple[str, ...]

    def parse_problem(self, shape: object, dtype: object = "float16", **options: Any) -> Any:
        unknown = sorted(k for k, v in options.items() if k not in self.options and v is not None)
        if unknown:
            accepted = ", ".join(self.options) or "none"
            raise ValueError(f"{self.name} takes no option(s) {', '.join(unknown)}; accepted: {accepted}")
        return self.problem_type.parse(shape, dtype, **{k: v for k, v in options.items() if v is not None})

    def problem_from_inputs(self, inputs: Mapping[str, Any]) -> Any:
        return self.space_module.problem_from_inputs(dict(inputs))

    def make_inputs(self, problem: Any, device: DeviceInfo | str) -> dict[str, Any]:
        torch_device = device.torch_device if isinstance(device, DeviceInfo) else device
        return self.space_module.make_inputs(problem, torch_device)

    def run(self, inputs: Mapping[str, Any], config: Mapping[str, Any]) -> Any:
        return self.launcher(**inputs, config=config)

    def reference(self, inputs: Mapping[str, Any]) -> Any:
        return self.reference_fn(**inputs)

    def baseline(self, inputs: Mapping[str, Any]) -> Any:
        """The torch eager equivalent in the input dtype: what the tuned kernel is compared against."""
        return self.kernel_module.baseline(**inputs)

    def check(self, out: Any, ref: Any, problem: Any) -> Comparison:
        return compare(out, ref, self.tolerance[problem.dtype])

    def flops(self, problem: Any) -> float:
        return float(self.space_module.flops(problem))

    def bytes(self, problem: Any) -> float:
        return float(self.space_module.bytes_moved(problem))

    @functools.cached_property
    def kernel_hash(self) -> str:
        """Hash of the kernel's source (and the shared launcher checks): a result is exact only while it matches."""
        h = hashlib.sha256()
        for mod in (self.kernel_module, _checks):
            h.update(inspect.getsource(mod).encode())
        return h.hexdigest()[:16]


_OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op("matmul", s_matmul.MatmulProblem, s_matmul.SPACE, k_matmul, k_matmul.matmul, k_matmul.reference,
           s_matmul, DOT_TOLERANCE, ("epilogue",), s_matmul.DTYPES),
        Op("softmax", s_softmax.SoftmaxProblem, s_softmax.SPACE, k_softmax, k_softmax.softmax, k_softmax.reference,
           s_softmax, ELEMENTWISE_TOLERANCE, (), ROWWISE_DTYPES),
        Op("layernorm", s_layernorm.LayerNormProblem, s_layernorm.SPACE, k_layernorm, k_layernorm.layer_norm,
           k_layernorm.reference, s_layernorm, ELEMENTWISE_TOLERANCE, (), ROWWISE_DTYPES),
        Op("gelu", s_gelu.GeluProblem, s_gelu.SPACE, k_gelu, k_gelu.gelu, k_gelu.reference, s_gelu,
           ELEMENTWISE_TOLERANCE, ("approximate",), s_gelu.DTYPES),
        Op("attention", s_attention.AttentionProblem, s_attention.SPACE, k_attention, k_attention.attention,
           k_attention.reference, s_attention, DOT_TOLERANCE, ("causal",), s_attention.DTYPES),
    )
}


def register_op(op: Op) -> None:
    """Add an op (e.g. from a plugin module named in AUTOTUNER_PLUGINS); a name is registered once."""
    if op.name in _OPS and _OPS[op.name] is not op:
        raise ValueError(f"an op named {op.name!r} is already registered")
    _OPS[op.name] = op


def load_plugins(modules: list[str]) -> None:
    """Import modules that call register_op (worker processes do this before looking ops up)."""
    for name in modules:
        importlib.import_module(name)


def op_names() -> list[str]:
    return list(_OPS)


def get_op(name: str) -> Op:
    try:
        return _OPS[name]
    except (KeyError, TypeError):
        raise UnknownOpError(f"unknown op {name!r}; known ops: {', '.join(_OPS)}") from None
