"""Kernels written as their authors write them for `@triton.autotune`, switched to `autotuner.autotune` by the
decorator line only. A worker process imports this module by the kernels' recorded names."""

from __future__ import annotations

import triton
import triton.language as tl

import autotuner
from autotuner.decorator.configs import config_dict
from tests.support.interpreter_timing import drop_64, wall_bench

CONFIGS = [triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2),
           triton.Config({"BLOCK": 128}, num_warps=4)]


@autotuner.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def scale_kernel(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


@triton.jit
def _accumulate(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Sum x into out[0] with an atomic add per block: out must start at zero."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))


@triton.jit
def _bump(x_ptr, n, BLOCK: tl.constexpr):
    """x += 1 in place: timing it repeatedly would drift without restore_value."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


accumulate = autotuner.autotune(configs=CONFIGS, key=["n"], reset_to_zero=["out_ptr"],
                                prune_configs_by={"early_config_prune": drop_64})(_accumulate)
accumulate_triton = triton.autotune(configs=CONFIGS, key=["n"], reset_to_zero=["out_ptr"], do_bench=wall_bench,
                                    prune_configs_by={"early_config_prune": drop_64})(_accumulate)
bump = autotuner.autotune(configs=CONFIGS, key=["n"], restore_value=["x_ptr"])(_bump)
bump_triton = triton.autotune(configs=CONFIGS, key=["n"], restore_value=["x_ptr"], do_bench=wall_bench)(_bump)


def launch_scale(n: int) -> dict:
    """Launch scale_kernel at n in this process; what it used and where that came from (for other processes)."""
    import torch

    x = torch.arange(n, dtype=torch.float32)
    y = torch.empty(n)
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, 2.0)
    assert torch.equal(y, 2 * x)
    key = next(iter(scale_kernel.cache))
    return {"config": config_dict(scale_kernel.cache[key]), "source": scale_kernel.sources[key]}


if __name__ == "__main__":  # python -m tests.support.decorated_kernels N: launch once, print what was used
    import json
    import sys

    print(json.dumps(launch_scale(int(sys.argv[1]))))
