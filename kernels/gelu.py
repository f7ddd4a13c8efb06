"""GELU, element-wise, over a contiguous tensor of any shape, BLOCK_SIZE elements per program in float32: "tanh" is x *
sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3); "none" is 0.5 x (1 + erf(x / sqrt(2)))."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import triton
import triton.language as tl

from kernels._checks import check_config, check_pow2, check_same_device, check_tensor
from kernels._direct import Launcher, new_output  # (_checks.new_output, allocating faster)
from kernels._torch import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)

DTYPES = ("float16", "bfloat16", "float32")
APPROXIMATIONS = ("tanh", "none")
PARAMS = ("BLOCK_SIZE",)


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr, TANH: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if TANH:
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        y = x / (1.0 + tl.exp(-2.0 * u))
    else:
        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def prepare(x: torch.Tensor, config: Mapping[str, Any], approximate: str = "tanh") -> Callable[[torch.Tensor], torch.Tensor]:
    """Check x and the config once; the returned launch(x) takes any tensor with this x's dtype, shape, device
    and 16-byte alignment."""
    check_tensor("x", x, DTYPES)
    if approximate not in APPROXIMATIONS:
        raise ValueError(f"approximate={approximate!r} is not supported; accepted: {', '.join(APPROXIMATIONS)}")
    check_same_device(x=x)
    if not x.is_contiguous():
        raise ValueError(f"x must be contiguous (strides {tuple(x.stride())}); call .contiguous() first")
    cfg = check_config(config, PARAMS, "gelu")
    check_pow2("gelu", cfg, PARAMS)
    shape, dtype, device = x.shape, x.dtype, x.device
    n = x.numel()
    launcher = Launcher(gelu_kernel, (triton.cdiv(n, cfg["BLOCK_SIZE"]),), dict(
        BLOCK_SIZE=cfg["BLOCK_SIZE"], TANH=approximate == "tanh", num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"]))

    def launch(x: torch.Tensor) -> torch.Tensor:
        y = new_output(shape, dtype, device)
        launcher(x, y, n)
        return y

    return launch


def gelu(x: torch.Tensor, config: Mapping[str, Any], approximate: str = "tanh") -> torch.Tensor:
    """GELU of a contiguous tensor; approximate is 'tanh' or 'none' (exact, erf)."""
    return prepare(x, config, approximate)(x)


def reference(x: torch.Tensor, approximate: str = "tanh") -> torch.Tensor:
    return torch.nn.functional.gelu(x.float(), approximate=approximate)


def manual(x: torch.Tensor, approximate: str = "tanh") -> torch.Tensor:
    """Unfused GELU from primitive ops, as written by hand (for benchmarks)."""
    if approximate == "tanh":
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))


def baseline(x: torch.Tensor, approximate: str = "tanh") -> torch.Tensor:
    return torch.nn.functional.gelu(x, approximate=approximate)
