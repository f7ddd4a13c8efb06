"""Timing a launch: CUDA events with warm-up and the L2 flushed between repetitions, or, in Triton's
interpreter, a wall clock (said plainly: interpreter timings say nothing about GPU speed).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
CUDA_EVENTS = "cuda-events"
WALL_CLOCK = "wall-clock (interpreter)"


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    reps: int
    clock: str


def _quantile(sorted_ms: list[float], q: float) -> float:
    if len(sorted_ms) == 1:
        return sorted_ms[0]
    return statistics.quantiles(sorted_ms, n=100, method="inclusive")[int(q * 100) - 1]


def _summarise(times: list[float], clock: str) -> Timing:
    times = sorted(times)
    return Timing(statistics.median(times), _quantile(times, 0.2), _quantile(times, 0.8), len(times), clock)


PROBE_REPS = 3  # repetitions timed before giving up on a config clearly out of contention (time_cuda)
SLEEP_CYCLES_PER_S = 2.0e9  # torch.cuda._sleep counts GPU clock cycles; ~2 GHz boost clocks on current GPUs


MIN_REPS, MAX_REPS = 10, 300  # a full timing's repetitions, whatever the kernel's time


def repetitions(rep_ms: float, estimate_ms: float, scale: float = 1.0) -> int:
    """How many repetitions fill `rep_ms` (already scaled) at `estimate_ms` each, within MIN_REPS and MAX_REPS
    scaled alike: an eighth of a full timing (one of the re-time's interleaved rounds) is an eighth of its repetitions
    for a kernel of a few microseconds too, where `rep_ms` alone would ask for more than the cap."""
    return max(MIN_REPS, min(max(MIN_REPS, int(MAX_REPS * scale)), int(rep_ms / estimate_ms)))


def time_cuda(fn: Callable[[], Any], warmup_ms: float = 25.0, rep_ms: float = 100.0,
              give_up_ms: float | None = None, queue_slack_s: float = 0.0, scale: float = 1.0) -> Timing:
    """Median of per-repetition CUDA-event times; the L2 is emptied before each repetition (l2_flush.py). With
    `give_up_ms`, three repetitions are timed first, and if their median is slower than that, they are the
    timing (PROBE_REPS repetitions: a config clearly out of contention is not timed further). `queue_slack_s`:
    seconds added to the GPU sleep the repetitions queue behind, where other threads of this process may hold
    the GIL meanwhile (a decorated kernel measured on several GPUs)."""
    import torch  # here: the engine's process-side modules import no torch (cli.prestart starts them first)

    from autotuner.engine.l2_flush import (
        l2_flusher,  # here: a @triton.jit module is imported after kernels/ chose the backend
    )

    flush = l2_flusher(torch.device("cuda", torch.cuda.current_device()))
    fn()
    torch.cuda.synchronize()
    # Five flushed repetitions give the estimate (GPU time, events) and the CPU's cost of queueing one (the GPU is
    # idle when they are queued and five never fill the launch queue, so the CPU's clock sees the queueing alone).
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t_cpu = time.perf_counter()
    for _ in range(5):
        flush()
        fn()
    cpu_per_rep_s = (time.perf_counter() - t_cpu) / 5
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)
    # Every timed repetition is queued behind a GPU sleep long enough for the CPU to queue them all, so that the
    # Python launch cost of a candidate (which differs between torch, torch.compile and a Triton launcher), or this
    # process losing its core for a moment to the compile pool, never shows as idle GPU time between the events:
    # what is measured is the kernel, as a stream of launches would run it. (The brief probe below went without,
    # and gave up configs at two to three times their time while the pool compiled: benchmarks/RESULTS.md.)
    if give_up_ms is not None:
        probe = _time_reps(fn, flush, PROBE_REPS, cpu_per_rep_s, queue_slack_s)
        if statistics.median(probe) > give_up_ms:
            return _summarise(probe, CUDA_EVENTS)
    for _ in range(max(1, int(warmup_ms / estimate))):
        fn()
    reps = repetitions(rep_ms, estimate, scale)
    torch.cuda.synchronize()
    return _summarise(_time_reps(fn, flush, reps, cpu_per_rep_s, queue_slack_s), CUDA_EVENTS)


def _time_reps(fn: Callable[[], Any], flush: Callable[[], None], reps: int, cpu_per_rep_s: float,
               queue_slack_s: float = 0.0) -> list[float]:
    """`reps` repetitions, each after an L2 flush, timed alone with CUDA events (milliseconds), queued behind a
    GPU sleep of twice the CPU's time to queue them (at least 1 ms, at most 0.2 s) and `queue_slack_s`."""
    import torch

    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    sleep = getattr(torch.cuda, "_sleep", None)  # private but long-standing; without it, time as before
    if sleep is not None:
        sleep(int((min(0.2, max(1e-3, 2 * reps * cpu_per_rep_s)) + queue_slack_s) * SLEEP_CYCLES_PER_S))
    for start, end in events:
        flush()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def rotation(items: Sequence[T], round_index: int) -> list[T]:
    """The order to time `items` in on round `round_index` of interleaved rounds: each round starts one further
    along, so that across rounds every candidate takes every place, and no place in a round (after which
    candidate, how far into the round's heat) can favour one (a probe found no such bias yet:
    benchmarks/RESULTS.md#behind-the-code)."""
    k = round_index % len(items) if items else 0
    return [*items[k:], *items[:k]]


def cpu_per_call_us(fn: Callable[[], Any], calls: int, rounds: int, gpu: bool = True) -> float:
    """The CPU's cost of one call of `fn`, in microseconds, median of `rounds` rounds of `calls` calls. On a GPU the
    calls are queued behind a sleeping kernel, so the time is their submission's alone (a launch-bound kernel's
    own run time would hide it otherwise); `calls` should stay below what the launch queue holds."""
    import torch

    for _ in range(20):
        fn()
    if gpu:
        torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        if gpu:  # keeps the GPU busy past the last submission
            torch.cuda._sleep(int(SLEEP_CYCLES_PER_S * max(0.05, calls * 100e-6)))
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
        if gpu:
            torch.cuda.synchronize()
    return statistics.median(samples)


def time_wall(fn: Callable[[], Any], reps: int = 3) -> Timing:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return _summarise(times, WALL_CLOCK)


def time_fn(fn: Callable[[], Any], interpreter: bool, warmup_ms: float = 25.0, rep_ms: float = 100.0,
            give_up_ms: float | None = None, queue_slack_s: float = 0.0, scale: float = 1.0) -> Timing:
    """`scale` of a full timing (warm-up and repetitions), on the GPU or the interpreter's wall clock."""
    return time_wall(fn) if interpreter else time_cuda(fn, warmup_ms * scale, rep_ms * scale, give_up_ms=give_up_ms,
                                                       queue_slack_s=queue_slack_s, scale=scale)
