"""GPU tier: CUDA-event timing gives up on a config clearly out of contention after a few repetitions."""

from __future__ import annotations

import pytest
import torch

from autotuner.engine.timing import PROBE_REPS, time_cuda

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
