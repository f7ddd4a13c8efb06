"""Does `time_cuda` measure the kernel, or the kernel plus launch gaps? (GPU only.)

For a few short problems and every bench candidate, prints `time_cuda`'s median next to the GPU time of the
candidate's own kernels as the torch profiler (CUPTI) records them, under the same conditions (L2 flushed
before each call). The profiler's number has no launch cost in it; the two should agree within noise.

    python benchmarks/timing_check.py [--calls 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from autotuner.bench import candidates  # noqa: E402
from autotuner.device import current_device  # noqa: E402
from autotuner.registry import get_op  # noqa: E402
from autotuner.timing import _flush_buffer, time_cuda  # noqa: E402

PROBLEMS = [("matmul", "1024x1024x1024", "float16"), ("matmul", "32x4096x4096", "float16"),
            ("softmax", "65536x256", "float16"), ("gelu", "4096x4096", "float16"),
            ("attention", "4x32x2048x128", "float16")]


def kernel_us_per_call(fn, calls: int) -> tuple[float, str]:  # type: ignore[no-untyped-def]
    flush = _flush_buffer(torch.device("cuda", torch.cuda.current_device()))
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    per_name: dict[str, float] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and "fill" not in e.name.lower():
            per_name[e.name] = per_name.get(e.name, 0.0) + e.time_range.elapsed_us()
    top = max(per_name, key=per_name.__getitem__) if per_name else "-"
    return sum(per_name.values()) / calls, top


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=30)
    args = ap.parse_args()
    device = current_device()
    print(f"{device.key}\n")
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
