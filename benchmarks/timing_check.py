"""Does `time_cuda` measure the kernel, or the kernel plus launch gaps? (GPU only.)

For a few short problems and every bench candidate, prints `time_cuda`'s median next to the GPU time of the
candidate's own kernels as the torch profiler (CUPTI) records them, under the same conditions (L2 flushed
before each call). The profiler's number has no launch cost in it; the two should agree within noise.

`--worker`: does the tuner measure what the bench measures? One config per problem (its default), timed in
interleaved rounds three ways: in this process as the bench does, in the tuner's trial worker process, and
in that worker while a compile pool launches other configs of the space on the same GPU (as during a search).

    python benchmarks/timing_check.py [--calls 30] [--worker]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from autotuner.bench import candidates  # noqa: E402
from autotuner.compile_pool import CompilePool  # noqa: E402
from autotuner.device import current_device  # noqa: E402
from autotuner.l2_flush import l2_flusher  # noqa: E402
from autotuner.registry import get_op  # noqa: E402
from autotuner.runner import TrialRunner, WorkerSpec  # noqa: E402
from autotuner.timing import time_cuda  # noqa: E402
from search_spaces.space import config_key  # noqa: E402

PROBLEMS = [("matmul", "1024x1024x1024", "float16"), ("matmul", "32x4096x4096", "float16"),
            ("softmax", "65536x256", "float16"), ("gelu", "4096x4096", "float16"),
            ("attention", "4x32x2048x128", "float16")]


def kernel_us_per_call(fn, calls: int) -> tuple[float, str]:  # type: ignore[no-untyped-def]
    flush = l2_flusher(torch.device("cuda", torch.cuda.current_device()))
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush()
            fn()
        torch.cuda.synchronize()
    per_name: dict[str, float] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and "fill" not in e.name.lower():
            per_name[e.name] = per_name.get(e.name, 0.0) + e.time_range.elapsed_us()
    top = max(per_name, key=per_name.__getitem__) if per_name else "-"
    return sum(per_name.values()) / calls, top


def worker_vs_process(rounds: int = 5) -> None:
    device = current_device()
    print("| problem | default config | bench, this process ms | trial worker ms | worker, compile pool busy ms |")
    print("|---|---|---|---|---|")
    for op_name, shape, dtype in [("softmax", "4096x4096", "float16"), ("layernorm", "4096x4096", "float16"),
                                  ("gelu", "4096x4096", "float16"), ("matmul", "4096x4096x4096", "float16")]:
        op = get_op(op_name)
        problem = op.parse_problem(shape, dtype)
        inputs = op.make_inputs(problem, "cuda")
        config = op.space.default(problem, device)
        others = op.space.enumerate(problem, device).valid
        spec = WorkerSpec(op.name, asdict(problem), (), torch.cuda.current_device())
        times: dict[str, list[float]] = {"process": [], "worker": [], "busy": []}
        run = functools.partial(op.run, inputs, config)
        pool = CompilePool(spec, 8)
        with TrialRunner(spec) as runner:
            runner.measure(config)
            try:
                for r in range(rounds):
                    times["process"].append(time_cuda(run, warmup_ms=10, rep_ms=20).median_ms)
                    outcome = runner.measure(config)
                    times["worker"].append(outcome.timing.median_ms if outcome.timing else float("nan"))
                    futures = [pool.submit(c) for c in others[r * 8:(r + 1) * 8]]
                    outcome = runner.measure(config)
                    times["busy"].append(outcome.timing.median_ms if outcome.timing else float("nan"))
                    for f in futures:
                        f.result()
            finally:
                pool.close()
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"| {op_name} {problem.key} | {config_key(config)} | {med['process']:.4f} | {med['worker']:.4f} "
              f"| {med['busy']:.4f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--worker", action="store_true", help="compare the trial worker's times with the bench's")
    args = ap.parse_args()
    device = current_device()
    print(f"{device.key}\n")
    if args.worker:
        worker_vs_process()
        return
    print("| problem | candidate | time_cuda median us | profiler kernel us/call | ratio | main kernel |")
    print("|---|---|---|---|---|---|")
    for op_name, shape, dtype in PROBLEMS:
        op = get_op(op_name)
        problem = op.parse_problem(shape, dtype)
        inputs = op.make_inputs(problem, "cuda")
        fns, _, _ = candidates(op, problem, device, None, inputs, use_compile=True)
        for name, fn in fns.items():
            if isinstance(fn, str):
                continue
            t = statistics.median(time_cuda(fn).median_ms for _ in range(3)) * 1e3
            k, top = kernel_us_per_call(fn, args.calls)
            print(f"| {op_name} {problem.key} | {name} | {t:.2f} | {k:.2f} | {t / k:.2f} | {top[:60]} |", flush=True)


if __name__ == "__main__":
    main()
