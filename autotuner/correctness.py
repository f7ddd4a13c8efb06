"""Compare a kernel's output with the reference: scale-aware error, and no NaN where the reference has none."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Max |out - ref| / max |ref|, per dtype. Dot-product ops accumulate over K and use TF32 for float32 on GPUs.
DOT_TOLERANCE = {"float16": 1e-2, "bfloat16": 3e-2, "float32": 1e-2}
ELEMENTWISE_TOLERANCE = {"float16": 5e-3, "bfloat16": 2e-2, "float32": 1e-4}


@dataclass(frozen=True)
class Comparison:
    ok: bool
    error: float
    message: str


def compare(out: torch.Tensor, ref: torch.Tensor, tol: float) -> Comparison:
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, float("inf"), f"shape {tuple(out.shape)} differs from the reference's {tuple(ref.shape)}")
    o = out.float()
    r = ref.float().to(o.device)
    bad = ~torch.isfinite(o) & torch.isfinite(r)
    if bool(bad.any()):
        n = int(bad.sum())
        return Comparison(False, float("inf"), f"{n} of {o.numel()} elements are NaN/inf (unwritten or overflowed)")
    scale = float(r.abs().max()) or 1.0
    err = float((o - r).abs().max()) / scale
    if err > tol:
        return Comparison(False, err, f"max error {err:.3g} (relative to max |ref|) exceeds tolerance {tol:g}")
    return Comparison(True, err, f"max error {err:.3g} within {tol:g}")
