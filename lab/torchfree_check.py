"""The second half of lab/torchfree_compile_probe.py, on a GPU: a torch process launching the probe's configs on real
inputs, with the same TRITON_CACHE_DIR. Prints each config's first launch time and the compiled kernels (cubins) it
added to Triton's cache: none where it found what the torch-free process compiled."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def cubins() -> set[str]:
    root = Path(os.environ["TRITON_CACHE_DIR"])
    return {str(p.parent.name) for p in root.rglob("*.cubin")}


def main() -> None:
    t0 = time.perf_counter()
    import torch
    from torchfree_compile_probe import CONFIGS

    import autotuner  # noqa: F401
    from autotuner.base.registry import get_op

    print(f"import torch and autotuner: {time.perf_counter() - t0:.2f} s")
    before = cubins()
    print(f"cubins in the cache from the torch-free process: {len(before)}")
    for op_name, (shape, dtype, configs) in CONFIGS.items():
        op = get_op(op_name)
        problem = op.parse_problem(shape, dtype)
        inputs = op.make_inputs(problem, "cuda")
        for cfg in configs:
            seen = cubins()
            t = time.perf_counter()
            out = op.run(inputs, cfg)
            torch.cuda.synchronize()
            s = time.perf_counter() - t
            ref = op.reference(inputs)
            ok = op.check(out, ref, problem).ok
            print(f"{op_name} {cfg}: first launch {s:.3f} s, new cubins {len(cubins() - seen)}, output ok {ok}")


if __name__ == "__main__":
    main()
