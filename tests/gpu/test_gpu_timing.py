"""GPU tier: CUDA-event timing gives up on a config clearly out of contention after a few repetitions."""

from __future__ import annotations

import time

import pytest
import torch

from autotuner.engine.measure.timing import PROBE_REPS, time_cuda

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: no CUDA device here"),
]


def test_a_slow_config_is_timed_a_few_repetitions_and_a_fast_one_in_full():
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    time_cuda(lambda: a @ a, warmup_ms=5, rep_ms=20)  # cuBLAS's first call out of the way
    full = time_cuda(lambda: a @ a, warmup_ms=5, rep_ms=20)
    given_up = time_cuda(lambda: a @ a, warmup_ms=5, rep_ms=20, give_up_ms=full.median_ms / 10)
    kept = time_cuda(lambda: a @ a, warmup_ms=5, rep_ms=20, give_up_ms=full.median_ms * 10)
    # (the full timings' repetitions follow their estimate of the kernel's time: at least 10)
    assert given_up.reps == PROBE_REPS and full.reps >= 10 and kept.reps >= 10
    # the few repetitions time the same kernel: within a third of the full timing
    assert abs(given_up.median_ms - full.median_ms) < full.median_ms / 3


def _spin(seconds: float) -> None:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pass


@pytest.mark.parametrize("cpu_us", [50, 400])
def test_a_launch_the_cpu_takes_longer_to_queue_than_the_gpu_to_run_is_timed_at_the_gpus_time(cpu_us: int):
    """The GPU sleeps long enough before the repetitions that it never waits on the CPU inside one: a launch that
    spends `cpu_us` of Python before a kernel of a few microseconds times at the kernel's time, whether the CPU
    is faster than the GPU's flush and kernel (50 us) or slower (400 us), and however its pace was guessed."""
    x = torch.zeros(1024, device="cuda")
    quick = time_cuda(lambda: x.add_(1), warmup_ms=5, rep_ms=20)

    def slow_launch() -> None:
        _spin(cpu_us / 1e6)
        x.add_(1)

    timed = time_cuda(slow_launch, warmup_ms=5, rep_ms=20)
    again = time_cuda(slow_launch, warmup_ms=5, rep_ms=20, give_up_ms=1e3)  # (a probe first, as the search times)
    assert timed.reps >= 10 and again.reps >= 10
    for t in (timed, again):  # the kernel's time, not the CPU's 50 or 400 us between the events
        assert t.median_ms < quick.median_ms + 0.02, (t, quick)


def test_a_launch_that_waits_for_the_gpu_paces_the_sleep_by_the_gpus_time():
    """A launch that synchronizes (a `.item()`, a wait on the stream) cannot run ahead of the GPU, so no sleep lets
    the CPU queue it early: its first repetition after the sleep waits the sleep out. The pace then takes the CPU's
    median repetition, the GPU's own time, not the sleep's (whose share made each later sleep longer, up to the
    0.2 s cap), and the probe is taken again once at most."""
    from autotuner.engine.measure import timing

    x = torch.zeros(1024, device="cuda")

    def waits() -> None:
        x.add_(1)
        torch.cuda.synchronize()

    timed = time_cuda(waits, warmup_ms=5, rep_ms=20, give_up_ms=1e3)
    assert timed.reps >= 10
    assert timing._last_pace.cpu_s < 1e-3, timing._last_pace  # (the sleep before it: 1 ms at least)
