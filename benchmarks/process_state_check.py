"""Does the state of the timing process change `time_cuda`'s reading of our kernels? (GPU only.)

In the H100 suite, softmax and layernorm 4096x4096 read ~12% faster in bench runs that included
torch.compile than in runs without it, while the tuner's worker read the same in both. This times the
default configs in one process, in steps: fresh; after more of the same (drift); after torch.compile of
the op's torch function ran once; after that compiled function ran in rounds with ours, as the bench does.

    python benchmarks/process_state_check.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from autotuner.device import current_device  # noqa: E402
from autotuner.registry import get_op  # noqa: E402
from autotuner.timing import time_cuda  # noqa: E402

PROBLEMS = [("softmax", "4096x4096", "float16"), ("layernorm", "4096x4096", "float16"), ("gelu", "4096x4096", "float16")]


def offsets(setup) -> None:  # type: ignore[no-untyped-def]
    """Our softmax writing into a fixed buffer at chosen offsets: does the output's address alone move the time?"""
    import importlib

    name, op, inputs, config = setup
    module = importlib.import_module("kernels.softmax")
    x = inputs["x"]
    arena = torch.empty(x.numel() * 4 + (64 << 20), dtype=x.dtype, device="cuda")
    original = module.new_output
    print(f"\n{name}: output at an offset into one buffer (input at {x.data_ptr() % (1 << 30) / 2**20:.3f} MiB mod 1 GiB)")
    print("| output offset KiB | ms |\n|---|---|")
    try:
        for kib in (0, 4, 64, 256, 1024, 2048, 4096, 8192, 16384, 16384 + 64, 32768 + 512):
            y = arena[kib * 512: kib * 512 + x.numel()].view(x.shape)
            module.new_output = lambda *a, y=y: y
            t = statistics.median(time_cuda(lambda: op.run(inputs, config), warmup_ms=10, rep_ms=20).median_ms
                                  for _ in range(5))
            print(f"| {kib} | {t:.4f} |", flush=True)
    finally:
        module.new_output = original


def causes(setup) -> None:  # type: ignore[no-untyped-def]
    """Our softmax timed right after other work, each way: what in the preceding timing changes ours? With
    the GPU time of our kernel from the profiler (CUPTI), and the SM clock where NVML answers."""
    from timing_check import kernel_us_per_call  # type: ignore[import-not-found]

    name, op, inputs, config = setup
    x = inputs["x"]
    compiled = torch.compile(op.kernel_module.baseline)
    compiled(**inputs)
    a = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
    sleep = torch.cuda._sleep
    before = {
        "nothing": None,
        "torch.compile softmax": lambda: compiled(**inputs),
        "torch eager softmax": lambda: op.baseline(inputs),
        "spin kernel 40 us": lambda: sleep(80_000),
        "fp16 matmul 4096^3": lambda: a @ a,
        "copy of x": lambda: torch.empty_like(x).copy_(x),
    }
    ours = lambda: op.run(inputs, config)  # noqa: E731
    print(f"\n{name}: ours timed right after timing each of these (median of 5 pairs)")
    print("| preceded by | time_cuda ms | profiler kernel us | SM clock MHz |\n|---|---|---|---|")
    for label, fn in before.items():
        times, clocks = [], []
        for _ in range(5):
            if fn is not None:
                time_cuda(fn, warmup_ms=10, rep_ms=20)
            times.append(time_cuda(ours, warmup_ms=10, rep_ms=20).median_ms)
            try:
                clocks.append(torch.cuda.clock_rate())
            except Exception:  # noqa: BLE001 - NVML missing: leave the column empty
                pass
        if fn is not None:
            time_cuda(fn, warmup_ms=10, rep_ms=20)
        k, _ = kernel_us_per_call(ours, 30)
        clock = f"{statistics.median(clocks):.0f}" if clocks else "-"
        print(f"| {label} | {statistics.median(times):.4f} | {k:.2f} | {clock} |", flush=True)


def main() -> None:
    device = current_device()
    print(device.key)
    setups = []
    for op_name, shape, dtype in PROBLEMS:
        op = get_op(op_name)
        problem = op.parse_problem(shape, dtype)
        inputs = op.make_inputs(problem, "cuda")
        config = op.space.default(problem, device)
        setups.append((f"{op_name} {problem.key}", op, inputs, config))

    def ours(op, inputs, config):  # type: ignore[no-untyped-def]
        return lambda: op.run(inputs, config)

    steps: dict[str, dict[str, float]] = {}
    outputs: dict[str, set[float]] = {}

    def step(label: str, extra=None) -> None:  # type: ignore[no-untyped-def]
        steps[label] = {}
        for name, op, inputs, config in setups:
            fn = ours(op, inputs, config)
            if name.startswith("softmax"):
                x = inputs["x"]
                outputs[label] = {round((fn().data_ptr() - x.data_ptr()) / 2**20, 3) for _ in range(3)}
            times = []
            for _ in range(5):
                if extra is not None:
                    time_cuda(extra[name], warmup_ms=10, rep_ms=20)
                times.append(time_cuda(fn, warmup_ms=10, rep_ms=20).median_ms)
            steps[label][name] = statistics.median(times)

    step("fresh")
    step("again (drift)")
    compiled = {}
    for name, op, inputs, _ in setups:
        f = torch.compile(op.kernel_module.baseline)
        f(**inputs)
        compiled[name] = (lambda f=f, inputs=inputs: f(**inputs))
    torch.cuda.synchronize()
    step("after torch.compile ran once")
    step("interleaved with torch.compile", compiled)
    eager = {name: (lambda op=op, inputs=inputs: op.baseline(inputs)) for name, op, inputs, _ in setups}
    step("interleaved with torch eager", eager)
    causes(setups[0])
    print("\n| problem | " + " | ".join(steps) + " |")
    for label, addrs in outputs.items():
        print(f"{label}: output addresses (MiB from the input) {sorted(addrs)}")
    print("|---|" + "---|" * len(steps))
    for name, *_ in setups:
        print(f"| {name} | " + " | ".join(f"{steps[s][name]:.4f}" for s in steps) + " |")


if __name__ == "__main__":
    main()
