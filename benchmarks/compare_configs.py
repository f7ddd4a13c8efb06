"""Time several configs of one problem side by side in one process, interleaved, so run-to-run drift
(clocks, temperature) does not decide between them.

    python benchmarks/compare_configs.py matmul 4096x4096x4096 '{"BLOCK_M":128,...}' '{"BLOCK_M":...}' [--rounds 9]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotuner.device import current_device  # noqa: E402
from autotuner.registry import get_op  # noqa: E402
from autotuner.timing import time_fn  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("op")
    parser.add_argument("shape")
    parser.add_argument("configs", nargs="+", help="JSON configs")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    op = get_op(args.op)
    device = current_device()
    problem = op.parse_problem(args.shape, args.dtype)
    inputs = op.make_inputs(problem, device)
    configs = [op.space.validate(json.loads(c), problem, device) for c in args.configs]
    runs = [*((json.dumps(c), lambda c=c: op.run(inputs, c)) for c in configs), ("torch", lambda: op.baseline(inputs))]
    samples: dict[str, list[float]] = {name: [] for name, _ in runs}
    for _ in range(args.rounds):
        for name, fn in runs:
            samples[name].append(time_fn(fn, device.is_interpreter).median_ms)
    best = min(statistics.median(v) for v in samples.values())
    print(f"{args.op} {problem.key} on {device.key}: median of {args.rounds} interleaved rounds")
    print("| config | ms | spread (min-max) | vs fastest |")
    print("|---|---|---|---|")
    for name, v in samples.items():
        m = statistics.median(v)
        print(f"| {name} | {m:.4f} | {min(v):.4f}-{max(v):.4f} | {m / best:.3f}x |")


if __name__ == "__main__":
    main()
