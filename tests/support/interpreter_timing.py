"""What the test kernels' Triton autotuners share on the interpreter: a timer for Triton's own path (its
do_bench needs a GPU driver) and the pruning the tests check."""

from __future__ import annotations

import time


def wall_bench(fn, quantiles=(0.5, 0.2, 0.8)):
    """Three wall-clock runs of `fn`, in ms: the median, the fastest and the slowest, as do_bench's quantiles."""
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return [times[1], times[0], times[2]]


def drop_64(configs, named_args, **kwargs):
    """An early_config_prune: every config but BLOCK=64."""
    return [c for c in configs if c.kwargs["BLOCK"] != 64]
