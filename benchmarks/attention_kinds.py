"""The attention kernel with and without a persistent grid (PERSIST=0, 1, 2 programs per SM), on the configs the
suite's tuning chose, against SDPA's flash backend and its default (cuDNN on Hopper). GPU only.

    python benchmarks/attention_kinds.py [--rounds 5]

Each row is one problem of the suite and its config; times are medians of interleaved rounds (CUDA events, L2
flushed), each column's as a fraction of the flash backend's time (higher is faster).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (problem, the config an H200 suite's tuning chose for it: benchmarks/RESULTS.md)
PROBLEMS = (
    ("4x32x2048x128:float16:causal", {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}),
    ("4x32x2048x128:float16:full", {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 1}),
    ("1x16x8192x64:bfloat16:causal", {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3}),
    ("8x16x4096x64:bfloat16:full", {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2}),
)


def _sdpa(inputs: dict[str, Any], causal: bool, backend: Any) -> Any:
    """torch's scaled_dot_product_attention on one backend (None: its own choice)."""
    import torch
    from torch.nn.attention import sdpa_kernel

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    if backend is None:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    with sdpa_kernel(backend):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    import torch
    from torch.nn.attention import SDPBackend

    from autotuner.analysis.kinds import checked_medians
    from autotuner.base.device import current_device
    from autotuner.base.registry import get_op

    op = get_op("attention")
    device = current_device()
    kinds = ("PERSIST=0", "PERSIST=1", "PERSIST=2")
    print(f"{device.name}, {device.sm_count} SMs; medians of {args.rounds} interleaved rounds; flash backend's time "
          "over each (higher is faster)")
    print("| problem | config | flash ms | SDPA default | " + " | ".join(kinds) + " |")
    print("|---|---|---|---|" + "---|" * len(kinds))
    for spec, base in PROBLEMS:
        shape, dtype, mask = spec.split(":")
        problem = op.parse_problem(shape, dtype, causal=mask == "causal")
        inputs = op.make_inputs(problem, device.torch_device)
        baselines = {"flash": functools.partial(_sdpa, inputs, problem.causal, SDPBackend.FLASH_ATTENTION),
                     "default": functools.partial(_sdpa, inputs, problem.causal, None)}
        configs = {name: {**base, "TMA": 1, "PERSIST": persist} for persist, name in enumerate(kinds)}
        # PERSIST: a kernel option the space does not search
        med = checked_medians(op, problem, device, inputs, configs, baselines, args.rounds, unsearched={"PERSIST": 0})
        cells = [f"{med['flash'] / med[n]:.3f}x ({med[n]:.4f})" if n in med else "ruled out"
                 for n in ("default", *kinds)]
        tile = f"{base['BLOCK_M']}x{base['BLOCK_N']} w{base['num_warps']} s{base['num_stages']}"
        print(f"| {spec} | {tile} | {med['flash']:.4f} | " + " | ".join(cells) + " |", flush=True)
        del inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
