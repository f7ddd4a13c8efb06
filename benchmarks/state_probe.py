"""Why do our softmax/layernorm kernels run in two states on the H100? (GPU only.)

process_state_check.py found our softmax 4096x4096 kernel running 22.0 us or 25.4 us at the same SM clock
reading, depending on what the process ran before. This looks at what a kernel launch inherits from the
launches before it:

- the SM clock while the GPU is busy, from the time of a spin kernel of known cycles (`torch.cuda._sleep`)
  timed right after ours (NVML's clock reading is a sample taken when the GPU is idle);
- the split of each SM's 256 KiB between L1 and shared memory (the "carveout"), which the driver sets per
  launch from the kernel's preference and may carry over from earlier launches. Our kernels hold a whole row
  in registers; if they spill, the spills live in L1. The probe pins the carveout on our kernel's CUfunction
  (`cuFuncSetAttribute(..., PREFERRED_SHARED_MEMORY_CARVEOUT, pct)`) and times every state again.

    python benchmarks/state_probe.py                # timing table
    ncu --clock-control none --cache-control none --metrics launch__shared_mem_config_size,... \\
        python benchmarks/state_probe.py --launches  # a few bare launches per state, for the profiler
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from autotuner.device import current_device  # noqa: E402
from autotuner.registry import get_op  # noqa: E402
from autotuner.timing import _flush_buffer, time_cuda  # noqa: E402

CARVEOUT_ATTRIBUTE = 9  # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT (percent of the maximum; -1 none)
SPIN_CYCLES = 200_000


class Captured:
    """Stands in for a @triton.jit function in its module and keeps the CompiledKernel of the last launch."""

    def __init__(self, jit):  # type: ignore[no-untyped-def]
        self.jit, self.kernel = jit, None

    def __getitem__(self, grid):  # type: ignore[no-untyped-def]
        launch = self.jit[grid]

        def run(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.kernel = launch(*args, **kwargs)
            return self.kernel

        return run


def compiled_kernel(op, inputs, config, jit_name: str):  # type: ignore[no-untyped-def]
    module = importlib.import_module(op.kernel_module.__name__)
    original = getattr(module, jit_name)
    capture = Captured(original)
    setattr(module, jit_name, capture)
    try:
        op.run(inputs, config)
    finally:
        setattr(module, jit_name, original)
    kernel = capture.kernel
    if getattr(kernel, "function", None) is None and hasattr(kernel, "_init_handles"):
        kernel._init_handles()
    return kernel


def set_carveout(kernel, pct: int) -> None:  # type: ignore[no-untyped-def]
    cuda = ctypes.CDLL("libcuda.so.1")
    rc = cuda.cuFuncSetAttribute(ctypes.c_void_p(kernel.function), ctypes.c_int(CARVEOUT_ATTRIBUTE), ctypes.c_int(pct))
    if rc != 0:
        raise RuntimeError(f"cuFuncSetAttribute(carveout={pct}) returned CUresult {rc}")


def spin_mhz() -> float:
    """The SM clock while one spin kernel runs: its known cycle count over its event time."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(SPIN_CYCLES)
    end.record()
    end.synchronize()
    return SPIN_CYCLES / (start.elapsed_time(end) * 1e3)


def preceding(op, inputs) -> dict[str, Callable[[], object] | None]:  # type: ignore[no-untyped-def]
    x = next(iter(inputs.values()))
    compiled = torch.compile(op.kernel_module.baseline)
    compiled(**inputs)
    a = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
    return {
        "nothing": None,
        "torch.compile": lambda: compiled(**inputs),
        "torch eager": lambda: op.baseline(inputs),
        "spin kernel 40 us": lambda: torch.cuda._sleep(80_000),
        "fp16 matmul 4096^3": lambda: a @ a,
        "copy of the input": lambda: torch.empty_like(x).copy_(x),
        "torch.compile again": lambda: compiled(**inputs),
        "nothing again": None,
    }


def timing_table(setups, carveouts: list[int | None]) -> None:  # type: ignore[no-untyped-def]
    for name, op, inputs, config, kernel in setups:
        ours = lambda op=op, inputs=inputs, config=config: op.run(inputs, config)  # noqa: E731
        before = preceding(op, inputs)
        print(f"\n{name}: {kernel.n_regs} registers, {kernel.n_spills} spilled, "
              f"{kernel.metadata.shared} B shared memory per program, {kernel.metadata.num_warps} warps")
        print("| preceded by | " + " | ".join(f"carveout {c if c is not None else 'unset'} ms" for c in carveouts)
              + " | spin MHz |\n|---|" + "---|" * (len(carveouts) + 1))
        for label, fn in before.items():
            cells, clocks = [], []
            for c in carveouts:
                set_carveout(kernel, -1 if c is None else c)
                times = []
                for _ in range(3):
                    if fn is not None:
                        time_cuda(fn, warmup_ms=10, rep_ms=20)
                    times.append(time_cuda(ours, warmup_ms=10, rep_ms=20).median_ms)
                    clocks.append(spin_mhz())
                cells.append(f"{statistics.median(times):.4f}")
            print(f"| {label} | " + " | ".join(cells) + f" | {statistics.median(clocks):.0f} |", flush=True)
        set_carveout(kernel, -1)


def bare_launches(setups) -> None:  # type: ignore[no-untyped-def]
    """For a profiler: each preceding kind three times, then ours five times, each after the usual flush."""
    flush = _flush_buffer(torch.device("cuda", torch.cuda.current_device()))
    for name, op, inputs, config, _ in setups:
        for label, fn in preceding(op, inputs).items():
            torch.cuda.nvtx.range_push(f"{name} after {label}")
            for _ in range(3):
                if fn is not None:
                    fn()
            for _ in range(5):
                flush.zero_()
                op.run(inputs, config)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            print(f"{name}: after {label}", flush=True)


def ncu_table(path: str) -> None:
    """Our kernels' rows from `ncu --csv --page raw --log-file PATH`, in launch order, with what ran between."""
    import csv

    lines = Path(path).read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.DictReader(lines[first:]))[1:]  # the row after the header holds the units
    keys = ["gpu__time_duration.sum", "launch__shared_mem_config_size", "launch__occupancy_limit_shared_mem",
            "launch__occupancy_limit_registers", "sm__warps_active.avg.pct_of_peak_sustained_active",
            "gpc__cycles_elapsed.avg.per_second", "lts__t_sector_hit_rate.pct"]
    print("| id | kernel | " + " | ".join(keys) + " |\n|---|---|" + "---|" * len(keys))
    between: list[str] = []
    for row in rows:
        name = row["Kernel Name"]
        if "softmax_kernel" in name or "layernorm_kernel" in name:
            if between:
                print(f"| | ({len(between)} others; smem config {sorted(set(between))}) |" + " |" * len(keys))
                between = []
            print(f"| {row['ID']} | {name[:24]} | " + " | ".join(row.get(k, "-") for k in keys) + " |")
        elif "fill" not in name.lower():
            between.append(row.get("launch__shared_mem_config_size", "-"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launches", action="store_true", help="bare launches per state, for ncu")
    parser.add_argument("--ncu-csv", help="summarise a CSV written by ncu --csv --page raw --log-file")
    args = parser.parse_args()
    if args.ncu_csv:
        ncu_table(args.ncu_csv)
        return
    device = current_device()
    print(device.key)
    setups = []
    for op_name, shape, dtype, jit_name in [("softmax", "4096x4096", "float16", "softmax_kernel"),
                                            ("layernorm", "4096x4096", "float16", "layernorm_kernel")]:
        op = get_op(op_name)
        problem = op.parse_problem(shape, dtype)
        inputs = op.make_inputs(problem, "cuda")
        config = op.space.default(problem, device)
        kernel = compiled_kernel(op, inputs, config, jit_name)
        setups.append((f"{op_name} {problem.key} {dict(config)}", op, inputs, config, kernel))
    if args.launches:
        bare_launches(setups)
    else:
        timing_table(setups, [None, 0, 100])


if __name__ == "__main__":
    main()
