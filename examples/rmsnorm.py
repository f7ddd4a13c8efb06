"""A fused RMSNorm forward written the way Liger-Kernel-style libraries write row-wise kernels: one program per
row, the whole row in one block, the rstd kept for the backward pass. Tuned over num_warps with a config list
keyed on the row length. The one change for autotuner is the decorator line:

    -@triton.autotune(configs=WARPS, key=["n_cols"])
    +@autotuner.autotune(configs=WARPS, key=["n_cols"])

    python examples/rmsnorm.py --rows 8192 --cols 4096            # on a GPU (bfloat16)
    TRITON_INTERPRET=1 python examples/rmsnorm.py --rows 16 --cols 256 --dtype float32   # without a GPU
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

import autotuner

WARPS = [triton.Config({}, num_warps=w) for w in (1, 2, 4, 8, 16)]


@autotuner.autotune(configs=WARPS, key=["n_cols"])
@triton.jit
def rms_norm_forward(Y_ptr, Y_row_stride, X_ptr, X_row_stride, W_ptr, RSTD_ptr, n_cols, eps,
                     BLOCK_SIZE: tl.constexpr):
    """y = x / sqrt(mean(x^2) + eps) * w, one row per program; rstd is stored per row."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(X_ptr + row * X_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(RSTD_ptr + row, rstd)
    tl.store(Y_ptr + row * Y_row_stride + cols, (x * rstd * w).to(Y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    shape = x.shape
    x = x.reshape(-1, shape[-1])
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    rms_norm_forward[(n_rows,)](y, y.stride(0), x, x.stride(0), w, rstd, n_cols, eps,
                                BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return y.reshape(shape), rstd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, args.dtype)
    x = torch.randn(args.rows, args.cols, device=device, dtype=dtype)
    w = torch.randn(args.cols, device=device, dtype=dtype)
    y, _ = rms_norm(x, w)
    ref = torch.nn.functional.rms_norm(x.float(), (args.cols,), w.float(), eps=1e-6)
    key = next(iter(rms_norm_forward.cache))
    print(f"rmsnorm {args.rows}x{args.cols} {args.dtype}: config {rms_norm_forward.cache[key].all_kwargs()} "
          f"({rms_norm_forward.sources[key]}); max error {(y.float() - ref).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
