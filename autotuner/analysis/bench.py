"""`autotuner bench`: one problem, every way of computing it, on the same inputs, timed alike. More:
docs/design/service.md."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from autotuner.analysis.peaks import Peaks, device_peaks
from autotuner.base.device import DeviceInfo
from autotuner.base.registry import Op
from autotuner.engine.measure.timing import CUDA_EVENTS, WALL_CLOCK, interleaved, time_fn
from autotuner.store.interfaces import Storage
from search_spaces.contract import ProblemType

DEFAULT, TUNED = "triton default", "triton tuned"
COPY = "copy of the same bytes"  # not the op: how fast this device moves a problem's bytes at its size
SAME_AS_DEFAULT = "the default config (the tuner found nothing faster by its margin)"
# A problem doing at least this many floating-point operations per byte moved is reported in TFLOP/s, below it
# in GB/s (a Hopper GPU's ridge point is near 300 for 16-bit dense math; softmax does about 1, matmul 4096^3 1365).
COMPUTE_INTENSITY = 64.0


def compute_bound(op: Op, problem: ProblemType) -> bool:
    """Whether the problem's rate is best read in TFLOP/s (else GB/s), from the op's cost model."""
    if op.flops is None or op.bytes_moved is None:
        return False
    return op.flops(problem) >= COMPUTE_INTENSITY * op.bytes_moved(problem)


@dataclass
class BenchRow:
    name: str
    ms: float | None
    p20_ms: float | None = None
    p80_ms: float | None = None
    tflops: float | None = None
    gbs: float | None = None
    roofline: float | None = None
    vs_eager: float | None = None
    rounds_faster: int | None = None  # rounds in which this ran faster than torch eager (its round medians)
    error: float | None = None
    note: str = ""


@dataclass
class BenchResult:
    op: str
    problem_key: str
    device: str
    clock: str
    peaks: dict[str, Any] | None
    default_config: dict[str, Any]
    tuned_config: dict[str, Any] | None
    rounds: int = 0
    rows: list[BenchRow] = field(default_factory=list)

    def row(self, name: str) -> BenchRow | None:
        return next((r for r in self.rows if r.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def candidates(op: Op, problem: ProblemType, device: DeviceInfo, store: Storage | None, inputs: dict[str, Any],
               use_compile: bool, compile_mode: str | None = None,
               ) -> tuple[dict[str, Callable[[], Any] | str], dict[str, Any], dict[str, Any] | None]:
    """name -> a callable, or the reason it is left out; plus the default and tuned configs."""
    out: dict[str, Callable[[], Any] | str] = {}
    baseline = op.baseline
    if baseline is None:
        out["torch eager"] = f"{op.name} declares no torch baseline"
        out["torch.compile"] = f"{op.name} declares no torch baseline"
    else:
        out["torch eager"] = lambda: baseline(inputs)
        if not use_compile:
            out["torch.compile"] = "left out (--no-compile)"
        elif device.is_interpreter:
            out["torch.compile"] = "left out on the interpreter"
        else:
            compiled = torch.compile(baseline, mode=compile_mode)
            out["torch.compile"] = lambda: compiled(inputs)
    for name, variant in op.variants.items():
        out[name] = functools.partial(variant, inputs)
    default = op.space.default(problem, device)
    out[DEFAULT] = lambda: op.run(inputs, default)
    best = store.best(op=op, problem=problem, device=device) if store is not None else None
    tuned = best.config if best is not None and not best.stale else None
    if tuned is not None:
        out[TUNED] = lambda: op.run(inputs, tuned)
    else:
        why = f"stale ({best.stale_reason})" if best is not None else "no tuned result"
        out[TUNED] = f"{why}: run `autotuner tune {op.name} {op.command_args(problem)}`"
    return out, default, tuned


def same_bytes_copy(op: Op, problem: ProblemType, device: DeviceInfo) -> Callable[[], Any] | None:
    """For a memory-bound problem on a GPU, `dst.copy_(src)` moving as many bytes as the op: the rate a problem of this
    size can reach. None where it does not apply."""
    if device.is_interpreter or op.bytes_moved is None or compute_bound(op, problem):
        return None
    half = int(op.bytes_moved(problem)) // 2
    src = torch.empty(half, dtype=torch.uint8, device=device.torch_device)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def bench(op: Op, problem: ProblemType, device: DeviceInfo, *, store: Storage | None, use_compile: bool = True,
          rounds: int = 5, rep_ms: float = 100.0, remeasure_peaks: bool = False,
          compile_mode: str | None = None) -> BenchResult:
    """`compile_mode`: torch.compile's mode (None: its default; "max-autotune" searches Inductor's templates)."""
    peaks: Peaks | None = device_peaks(store, device, remeasure=remeasure_peaks) if store is not None else None
    inputs = op.make_inputs(problem, device.torch_device)
    fns, default, tuned = candidates(op, problem, device, store, inputs, use_compile, compile_mode)
    result = BenchResult(op.name, problem.key, device.key, WALL_CLOCK if device.is_interpreter else CUDA_EVENTS,
                         asdict(peaks) if peaks else None, default, tuned)
    ref = op.reference(inputs) if op.reference is not None else op.run(inputs, default)
    runnable: dict[str, Callable[[], Any]] = {}
    same = tuned == default  # the tuner kept the default: one kernel, timed once, shown in both rows
    for name, fn in fns.items():
        if isinstance(fn, str):
            result.rows.append(BenchRow(name, None, note=fn))
            continue
        if same and name == TUNED:
            result.rows.append(BenchRow(name, None, note=SAME_AS_DEFAULT))
            continue
        try:
            verdict = op.check(fn(), ref, problem)
        except Exception as exc:  # e.g. torch.compile failing on this machine: report, do not stop
            result.rows.append(BenchRow(name, None, note=f"failed: {type(exc).__name__}: {str(exc)[:200]}"))
            continue
        row = BenchRow(name, None, error=verdict.error, note="" if verdict.ok else f"WRONG RESULT: {verdict.message}")
        result.rows.append(row)
        if verdict.ok:
            runnable[name] = fn
    del ref
    copy = same_bytes_copy(op, problem, device)
    if copy is not None:  # timed in the rounds like the rest; not checked (it does not compute the op)
        result.rows.append(BenchRow(COPY, None, note="the device's rate for this many bytes, not the op"))
        runnable[COPY] = copy
    result.rounds = rounds if not device.is_interpreter else 1
    per_round: dict[str, list[Any]] = interleaved(list(runnable), result.rounds, lambda name: time_fn(
        runnable[name], device.is_interpreter, warmup_ms=10, rep_ms=rep_ms / rounds))
    if same and DEFAULT in per_round:
        per_round[TUNED] = per_round[DEFAULT]
    flops = op.flops(problem) if op.flops is not None else 0.0
    nbytes = op.bytes_moved(problem) if op.bytes_moved is not None else 0.0
    for row in result.rows:
        timings = per_round.get(row.name)
        if not timings:
            continue
        row.ms = statistics.median(t.median_ms for t in timings)
        row.p20_ms = statistics.median(t.p20_ms for t in timings)
        row.p80_ms = statistics.median(t.p80_ms for t in timings)
        if not flops and not nbytes:
            continue  # no cost model declared: times only
        row.tflops = flops / (row.ms * 1e-3) / 1e12
        row.gbs = nbytes / (row.ms * 1e-3) / 1e9
        if peaks is not None:
            row.roofline = peaks.fraction(flops, nbytes, problem.dtype, row.ms)
    eager = result.row("torch eager")
    for row in result.rows:
        if row.ms and eager is not None and eager.ms:
            row.vs_eager = eager.ms / row.ms
            row.rounds_faster = sum(t.median_ms < e.median_ms
                                    for t, e in zip(per_round[row.name], per_round[eager.name], strict=True))
    return result


def profile_table(op: Op, problem: ProblemType, device: DeviceInfo, config: dict[str, Any], calls: int = 20) -> str:
    """The torch profiler's kernel table for `calls` launches with `config`."""
    from torch.profiler import ProfilerActivity, profile

    inputs = op.make_inputs(problem, device.torch_device)
    op.run(inputs, config)
    activities = [ProfilerActivity.CPU] + ([] if device.is_interpreter else [ProfilerActivity.CUDA])
    with profile(activities=activities) as prof:
        for _ in range(calls):
            op.run(inputs, config)
        if not device.is_interpreter:
            torch.cuda.synchronize()
    averages = prof.key_averages()
    if device.is_interpreter:
        return str(averages.table(sort_by="self_cpu_time_total", row_limit=12))
    try:
        return str(averages.table(sort_by="device_time_total", row_limit=12))
    except (AttributeError, KeyError):  # older torch names it cuda_time_total
        return str(averages.table(sort_by="cuda_time_total", row_limit=12))
