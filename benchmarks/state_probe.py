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
import functools
import importlib
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from autotuner.device import current_device  # noqa: E402
from autotuner.l2_flush import flush_buffer as _flush_buffer  # noqa: E402
from autotuner.l2_flush import l2_flusher  # noqa: E402
from autotuner.registry import get_op  # noqa: E402
from autotuner.timing import time_cuda  # noqa: E402

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


@triton.jit
def _read_with_policy(x_ptr, out_ptr, n, BLOCK: tl.constexpr, POLICY: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n, other=0.0, eviction_policy=POLICY)
    tl.store(out_ptr + tl.program_id(0), tl.sum(v.to(tl.float32)))


def read_with_policy(t: torch.Tensor, policy: str) -> Callable[[], object]:
    """A launch that reads every element of t once with the given L2 eviction policy ("" for none)."""
    n = t.numel()
    out = torch.empty(triton.cdiv(n, 4096), dtype=torch.float32, device=t.device)
    return lambda: _read_with_policy[(triton.cdiv(n, 4096),)](t, out, n, 4096, policy, num_warps=8)


def reset_persisting_l2() -> None:
    """cuCtxResetPersistingL2Cache: every line kept with the persisting (evict_last) property becomes normal."""
    rc = ctypes.CDLL("libcuda.so.1").cuCtxResetPersistingL2Cache()
    if rc != 0:
        raise RuntimeError(f"cuCtxResetPersistingL2Cache returned CUresult {rc}")


def time_with_reset(fn: Callable[[], object], reps: int = 100) -> float:
    """time_cuda's per-repetition measure, with the persisting lines reset before each usual flush."""
    flush = _flush_buffer(torch.device("cuda", torch.cuda.current_device()))
    fn()
    times = []
    for _ in range(reps):
        reset_persisting_l2()
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def l2_steps(op, inputs) -> list[tuple[str, Callable[[], object] | None]]:  # type: ignore[no-untyped-def]
    """Earlier work for l2_table, in order: reads of x with each L2 eviction policy, torch.compile, and so on."""
    x = inputs["x"]
    flush = _flush_buffer(torch.device("cuda", torch.cuda.current_device()))
    compiled = torch.compile(op.kernel_module.baseline)
    compiled(**inputs)
    steps: list[tuple[str, Callable[[], object] | None]] = [
        ("copy of x", lambda x=x: torch.empty_like(x).copy_(x)),  # type: ignore[misc]
        ("read x, no policy", read_with_policy(x, "")),
        ("read x, evict_first", read_with_policy(x, "evict_first")),
        ("read x, evict_last", read_with_policy(x, "evict_last")),
        ("read x, no policy (after evict_last)", read_with_policy(x, "")),
        ("read 256 MiB flush buffer, evict_last", read_with_policy(flush, "evict_last")),
        ("read x, no policy (after that)", read_with_policy(x, "")),
        ("torch.compile", lambda inputs=inputs, compiled=compiled: compiled(**inputs)),  # type: ignore[misc]
        ("nothing", None),
        ("reset persisting lines", reset_persisting_l2),
        ("nothing", None),
        ("torch eager", functools.partial(op.baseline, inputs)),
    ]
    return steps


def l2_table() -> None:
    """Is the fast state L2 lines of the input that survive the flush? Earlier work reads x with each eviction
    policy (torch.compile's kernels load with evict_last hints); then ours is timed the usual way, and with
    the persisting lines reset before each flush."""
    device = current_device()
    for op_name in ("softmax", "layernorm"):
        op = get_op(op_name)
        problem = op.parse_problem("4096x4096", "float16")
        inputs = op.make_inputs(problem, "cuda")
        config = op.space.default(problem, device)
        steps = l2_steps(op, inputs)
        ours = functools.partial(op.run, inputs, config)
        print(f"\n{op_name} {problem.key} default config: ours timed after each step, in order")
        print("| step | ours, usual flush ms | ours, persisting lines reset before each flush ms |\n|---|---|---|")
        for label, fn in steps:
            usual, reset = [], []
            for _ in range(3):
                if fn is not None:
                    time_cuda(fn, warmup_ms=10, rep_ms=20)
                usual.append(time_cuda(ours, warmup_ms=10, rep_ms=20).median_ms)
            for _ in range(3):
                if fn is not None:
                    time_cuda(fn, warmup_ms=10, rep_ms=20)
                reset.append(time_with_reset(ours))
            print(f"| {label} | {statistics.median(usual):.4f} | {statistics.median(reset):.4f} |", flush=True)
        compiled = dict(steps)["torch.compile"]
        assert compiled is not None
        for name, fn in (("torch.compile", compiled), ("torch eager", functools.partial(op.baseline, inputs)),
                         ("ours", ours)):
            print(f"{name}: usual flush {statistics.median(time_cuda(fn).median_ms for _ in range(3)):.4f} ms, "
                  f"persisting lines reset {statistics.median(time_with_reset(fn) for _ in range(3)):.4f} ms")


@triton.jit
def _fill_with_policy(buf_ptr, n, BLOCK: tl.constexpr, POLICY: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(buf_ptr + offs, tl.zeros((BLOCK,), tl.int32), mask=offs < n, eviction_policy=POLICY)


def flush_methods() -> dict[str, Callable[[], object]]:
    buf = _flush_buffer(torch.device("cuda", torch.cuda.current_device()))
    n = buf.numel()

    def fill(policy: str) -> None:
        _fill_with_policy[(triton.cdiv(n, 4096),)](buf, n, 4096, policy, num_warps=8)

    def last_then_zero() -> None:
        fill("evict_last")
        buf.zero_()

    read_last = read_with_policy(buf, "evict_last")

    def read_last_then_zero() -> None:
        read_last()
        buf.zero_()

    return {"zero_ (usual)": buf.zero_, "evict_last fill, then zero_": last_then_zero,
            "evict_last read, then zero_": read_last_then_zero, "evict_last fill": lambda: fill("evict_last")}


def time_with_flush(fn: Callable[[], object], flush: Callable[[], object], reps: int = 100) -> float:
    fn()
    times = []
    for _ in range(reps):
        flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def flush_table() -> None:
    """Which flush leaves the same L2 before every launch, whatever ran before? Ours after earlier work that
    reads x with each policy, timed after each kind of flush; and cuBLAS matmul, whose speed depends on the
    L2 it is left (a flush that pins lines would slow it)."""
    device = current_device()
    flushes = flush_methods()
    a = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
    print("\n| flush | cuBLAS 4096^3 fp16 ms | " + " | ".join(
        f"{o} after {s}" for o in ("softmax", "layernorm") for s in ("compile", "plain read", "evict_last read", "copy"))
          + " |\n|---|---|" + "---|" * 8)
    setups = []
    for op_name in ("softmax", "layernorm"):
        op = get_op(op_name)
        problem = op.parse_problem("4096x4096", "float16")
        inputs = op.make_inputs(problem, "cuda")
        steps = dict(l2_steps(op, inputs))
        chosen = [steps["torch.compile"], steps["read x, no policy"], steps["read x, evict_last"], steps["copy of x"]]
        setups.append((functools.partial(op.run, inputs, op.space.default(problem, device)), chosen))
    for label, flush in flushes.items():
        cells = [statistics.median(time_with_flush(lambda: a @ a, flush, 50) for _ in range(3))]
        for ours, chosen in setups:
            for fn in chosen:
                times = []
                for _ in range(3):
                    assert fn is not None
                    time_with_flush(fn, flush, 30)
                    times.append(time_with_flush(ours, flush))
                cells.append(statistics.median(times))
        print(f"| {label} | " + " | ".join(f"{t:.4f}" for t in cells) + " |", flush=True)


def bare_launches(setups, l2: bool, timing_flush: bool) -> None:  # type: ignore[no-untyped-def]
    """For a profiler: each preceding kind three times, then ours five times, each after a zero-fill of the
    flush buffer, or with `timing_flush` after time_cuda's flush (l2_flush.py)."""
    device = torch.device("cuda", torch.cuda.current_device())
    zero_fill = _flush_buffer(device).zero_
    flush = l2_flusher(device) if timing_flush else zero_fill
    for name, op, inputs, config, _ in setups:
        for label, fn in (l2_steps(op, inputs) if l2 else preceding(op, inputs).items()):
            torch.cuda.nvtx.range_push(f"{name} after {label}")
            for _ in range(3):
                if fn is not None:
                    fn()
            for _ in range(5):
                flush()
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
    keys = ["gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "launch__shared_mem_config_size", "launch__occupancy_limit_shared_mem",
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
    parser.add_argument("--l2", action="store_true", help="ours after reads of x with each L2 eviction policy")
    parser.add_argument("--flushes", action="store_true", help="ours after earlier work, under each kind of flush")
    parser.add_argument("--timing-flush", action="store_true", help="--launches with time_cuda's flush")
    args = parser.parse_args()
    if args.ncu_csv:
        ncu_table(args.ncu_csv)
        return
    if args.flushes:
        flush_table()
        return
    if args.l2 and not args.launches:
        l2_table()
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
        bare_launches(setups, args.l2, args.timing_flush)
    else:
        timing_table(setups, [None, 0, 100])


if __name__ == "__main__":
    main()
