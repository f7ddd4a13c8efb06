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
K = TypeVar("K")
V = TypeVar("V")
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


PROBE_REPS = 3  # repetitions timed first: the pace of the rest, and a config clearly out of contention's timing
SLEEP_CYCLES_PER_S = 2.0e9  # torch.cuda._sleep counts GPU clock cycles; ~2 GHz boost clocks on current GPUs


MIN_REPS, MAX_REPS = 10, 300  # a full timing's repetitions, whatever the kernel's time


def repetitions(rep_ms: float, estimate_ms: float, scale: float = 1.0) -> int:
    """How many repetitions fill `rep_ms` (already scaled) at `estimate_ms` each, within MIN_REPS and MAX_REPS
    scaled alike: an eighth of a full timing (one of the re-time's interleaved rounds) is an eighth of its repetitions
    for a kernel of a few microseconds too, where `rep_ms` alone would ask for more than the cap."""
    return max(MIN_REPS, min(max(MIN_REPS, int(MAX_REPS * scale)), int(rep_ms / estimate_ms)))


def time_cuda(fn: Callable[[], Any], warmup_ms: float = 25.0, rep_ms: float = 100.0,
              give_up_ms: float | None = None, queue_slack_s: float = 0.0, scale: float = 1.0) -> Timing:
    """Median of per-repetition CUDA-event times, the L2 emptied before each. With `give_up_ms`, a config whose first
    PROBE_REPS are slower than that is not timed further. `queue_slack_s`: seconds added to the GPU's sleep where other
    threads may hold the GIL meanwhile (several lanes)."""
    import torch  # here: the engine's process-side modules import no torch (cli.prestart starts them first)

    from autotuner.engine.measure.l2_flush import (
        l2_flusher,  # here: a @triton.jit module is imported after kernels/ chose the backend
    )

    flush = l2_flusher(torch.device("cuda", torch.cuda.current_device()))
    fn()
    torch.cuda.synchronize()
    probe, pace = _probe(fn, flush, queue_slack_s)
    if give_up_ms is not None and statistics.median(probe) > give_up_ms:
        return _summarise(probe, CUDA_EVENTS)
    for _ in range(max(1, int(warmup_ms / pace.gpu_ms))):
        fn()
    reps = repetitions(rep_ms, pace.gpu_ms, scale)
    torch.cuda.synchronize()
    return _summarise(_time_reps(fn, flush, reps, queue_sleep_s(reps, pace, queue_slack_s))[0], CUDA_EVENTS)


@dataclass(frozen=True)
class Pace:
    """One repetition (an L2 flush, then the launch between its events): the GPU's milliseconds running it, the
    CPU's seconds queueing it."""

    gpu_ms: float
    cpu_s: float


MIN_QUEUE_SLEEP_S, MAX_QUEUE_SLEEP_S = 1e-3, 0.2
_last_pace = Pace(gpu_ms=0.0, cpu_s=1e-3)  # the pace the last probe in this process found (the next one's guess)


def queue_sleep_s(reps: int, pace: Pace, queue_slack_s: float = 0.0) -> float:
    """How long the GPU sleeps before `reps` repetitions at `pace` so that it never waits on the CPU inside one: the
    CPU's first two repetitions plus what it falls behind over all of them, twice over, within MIN_QUEUE_SLEEP_S and
    MAX_QUEUE_SLEEP_S, plus `queue_slack_s`."""
    behind_s = max(0.0, pace.cpu_s - pace.gpu_ms / 1e3) * reps
    return min(MAX_QUEUE_SLEEP_S, max(MIN_QUEUE_SLEEP_S, 2 * (2 * pace.cpu_s + behind_s))) + queue_slack_s


def _probe(fn: Callable[[], Any], flush: Callable[[], None], queue_slack_s: float) -> tuple[list[float], Pace]:
    """PROBE_REPS timed repetitions (ms) and the pace they show (the GPU's time per repetition, the CPU's median time to
    queue one), behind a sleep sized by the last pace seen; taken once more behind a longer sleep where the CPU outran
    it. Not more than once: a launch that waits on the GPU itself would outlast any sleep."""
    global _last_pace
    import torch

    sleep_s = queue_sleep_s(PROBE_REPS, _last_pace, queue_slack_s)
    times, cpu_s, cpu_each, span_ms = _time_reps(fn, flush, PROBE_REPS, sleep_s)
    if cpu_s >= sleep_s and sleep_s < MAX_QUEUE_SLEEP_S and hasattr(torch.cuda, "_sleep"):
        times, cpu_s, cpu_each, span_ms = _time_reps(fn, flush, PROBE_REPS,
                                                     min(MAX_QUEUE_SLEEP_S, 2 * cpu_s + queue_slack_s))
    _last_pace = Pace(gpu_ms=max(span_ms / PROBE_REPS, 1e-3), cpu_s=statistics.median(cpu_each))
    return times, _last_pace


def _time_reps(fn: Callable[[], Any], flush: Callable[[], None], reps: int,
               sleep_s: float) -> tuple[list[float], float, list[float], float]:
    """`reps` repetitions, each after an L2 flush, timed alone with CUDA events (milliseconds), queued behind a
    GPU sleep of `sleep_s`; the CPU's seconds from queueing the sleep to queueing the last event, and to queue each
    repetition; the GPU's milliseconds from the end of the sleep to the last event."""
    import torch

    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    woke = torch.cuda.Event(enable_timing=True)
    sleep = getattr(torch.cuda, "_sleep", None)  # private but long-standing; without it, time as before
    marks = [time.perf_counter()]
    if sleep is not None:
        sleep(int(sleep_s * SLEEP_CYCLES_PER_S))
    woke.record()
    marks.append(time.perf_counter())
    for start, end in events:
        flush()
        start.record()
        fn()
        end.record()
        marks.append(time.perf_counter())
    torch.cuda.synchronize()
    each = [b - a for a, b in zip(marks[1:], marks[2:], strict=False)]
    return [start.elapsed_time(end) for start, end in events], marks[-1] - marks[0], each, \
        woke.elapsed_time(events[-1][1])


def rotation(items: Sequence[T], round_index: int) -> list[T]:
    """The order of `items` on round `round_index` of interleaved rounds: each round starts one further along, so every
    candidate takes every place across rounds."""
    k = round_index % len(items) if items else 0
    return [*items[k:], *items[:k]]


def interleaved(keys: Sequence[K], rounds: int, measure: Callable[[K], V | None], *,
                go_on: Callable[[int], bool] | None = None) -> dict[K, list[V]]:
    """Each of `keys` measured once a round for `rounds` rounds in `rotation` order, so drift falls on every key alike:
    each key's measurements. A key whose `measure` answers None is dropped; `go_on(r)` may stop early."""
    out: dict[K, list[V]] = {k: [] for k in keys}
    for r in range(rounds):
        if go_on is not None and not go_on(r):
            break
        for key in rotation(list(out), r):
            value = measure(key)
            if value is None:
                del out[key]
            else:
                out[key].append(value)
    return out


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
