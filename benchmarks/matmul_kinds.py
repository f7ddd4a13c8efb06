"""The matmul kernel's kinds on the same tiles, against cuBLAS, at real models' shapes. GPU only.

    python benchmarks/matmul_kinds.py [--rounds 5] [--shapes 3000x6144x4096:bfloat16,...]

Each row is one problem; each column one config of the 128x256x64 tile (8 warps, GROUP_M 8) that won the large
problems of the suite: a tile per program (TMA=1), persistent (TMA=2; "sub": its C tile stored in halves with 4
stages; "flat": its tile and K loops pipelined as one, FLATTEN=1), that with the last partial wave in half-width
tiles (TAIL_SPLIT=1), and warp-specialized (TMA=3); "dev": descriptors made by the kernel (DEVICE_DESC=1). Times are
medians of interleaved rounds (CUDA events, L2 flushed), as a fraction of cuBLAS's time (higher is faster). The
waves column is the tiles over the SMs: a fractional part leaves SMs idle in the last wave, which
TAIL_SPLIT shortens. A last table gives the CPU's cost per call of the prepared launcher (host descriptors
encoded per launch against the kernel's own), measured as benchmarks/launch_overhead.py does.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = ("4096x4096x4096:float16,4000x4000x4000:float16,2048x11008x4096:bfloat16,4096x14336x4096:bfloat16,"
          "3000x6144x4096:bfloat16,8192x8192x8192:bfloat16")
BIG = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8}
KINDS = {
    "TMA=1 s3": {**BIG, "TMA": 1, "num_stages": 3},
    "TMA=1 s4": {**BIG, "TMA": 1, "num_stages": 4},  # (16 bits: its C tile stored through the stages' buffers)
    "TMA=2 s3": {**BIG, "TMA": 2, "num_stages": 3},
    "TMA=2 flat s3": {**BIG, "TMA": 2, "FLATTEN": 1, "num_stages": 3},
    "TMA=2 sub s4": {**BIG, "TMA": 2, "SUBTILE": 1, "num_stages": 4},
    "TMA=2 flat sub s4": {**BIG, "TMA": 2, "SUBTILE": 1, "FLATTEN": 1, "num_stages": 4},
    "+TAIL_SPLIT": {**BIG, "TMA": 2, "SUBTILE": 1, "TAIL_SPLIT": 1, "num_stages": 4},
    "flat +TAIL_SPLIT": {**BIG, "TMA": 2, "SUBTILE": 1, "TAIL_SPLIT": 1, "FLATTEN": 1, "num_stages": 4},
    "TMA=3 s3": {**BIG, "TMA": 3, "num_stages": 3},
    "TMA=3 sub s4": {**BIG, "TMA": 3, "SUBTILE": 1, "num_stages": 4},
    "TMA=1 s3 dev": {**BIG, "TMA": 1, "DEVICE_DESC": 1, "num_stages": 3},
    "TMA=2 flat sub s4 dev": {**BIG, "TMA": 2, "SUBTILE": 1, "FLATTEN": 1, "DEVICE_DESC": 1, "num_stages": 4},
    "TMA=3 sub s4 dev": {**BIG, "TMA": 3, "SUBTILE": 1, "DEVICE_DESC": 1, "num_stages": 4},
}
# the CPU's cost per call of the prepared launcher, host descriptors against the kernel's own
CPU_KINDS = ("TMA=1 s3", "TMA=1 s3 dev", "TMA=2 flat sub s4", "TMA=2 flat sub s4 dev")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--kinds", default=",".join(KINDS), help="the columns, by name (default: all)")
    ap.add_argument("--no-cpu", action="store_true", help="leave out the CPU cost per call")
    args = ap.parse_args()
    kinds = {name: KINDS[name] for name in args.kinds.split(",")}

    import torch

    from autotuner.analysis.kinds import checked_medians
    from autotuner.base.device import current_device
    from autotuner.base.registry import get_op

    op = get_op("matmul")
    device = current_device()
    print(f"{device.name}, {device.sm_count} SMs; medians of {args.rounds} interleaved rounds; tuned/cuBLAS "
          "time ratio as speed (higher is faster)")
    print("| problem | waves | cuBLAS ms | " + " | ".join(kinds) + " |")
    print("|---|---|---|" + "---|" * len(kinds))
    for item in args.shapes.split(","):
        shape, dtype = item.split(":")
        problem = op.parse_problem(shape, dtype)
        inputs = op.make_inputs(problem, device.torch_device)
        assert op.baseline is not None
        # DEVICE_DESC: a kernel option the space does not search
        med = checked_medians(op, problem, device, inputs, kinds, {"cuBLAS": functools.partial(op.baseline, inputs)},
                              args.rounds, unsearched={"DEVICE_DESC": 0})
        tiles = -(-problem.M // 128) * -(-problem.N // 256)
        cells = [f"{med['cuBLAS'] / med[n]:.3f}x ({med[n]:.4f})" if n in med else "ruled out" for n in kinds]
        print(f"| {shape} {dtype} | {tiles / device.sm_count:.2f} | {med['cuBLAS']:.4f} | " + " | ".join(cells) + " |",
              flush=True)
        del inputs
        torch.cuda.empty_cache()
    if args.no_cpu:
        return
    from autotuner.engine.measure.timing import cpu_per_call_us
    from kernels import matmul as k_matmul

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    print("\nCPU us per call of the prepared launcher (4096^3 fp16; median of 7 rounds of 400 calls queued behind a "
          "sleeping kernel)\n\n| " + " | ".join(CPU_KINDS) + " |\n|" + "---|" * len(CPU_KINDS))
    launchers = [k_matmul.prepare(a, a, KINDS[name]) for name in CPU_KINDS]
    print("| " + " | ".join(f"{cpu_per_call_us(functools.partial(f, a, a, None), 400, 7):.1f}" for f in launchers) + " |")


if __name__ == "__main__":
    main()
