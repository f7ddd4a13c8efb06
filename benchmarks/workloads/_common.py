"""What every workload does around its library calls: seeded inputs, the first call timed (tuning included),
a few more calls timed, every output and gradient saved for comparison, one JSON line printed."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: only to try a workload on Triton's interpreter


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def run(name: str, step: Callable[[], dict[str, torch.Tensor]], repeats: int = 30) -> None:
    """`step` runs the library's calls (forward and backward) and returns what they computed, by name."""
    profile = os.environ.get("WORKLOAD_PROFILE")  # a path: the first call's profile, as text, goes there
    if profile:
        import cProfile

        profiler = cProfile.Profile()
    sync()
    t0 = time.perf_counter()
    if profile:
        profiler.enable()
    outputs = step()
    sync()
    first = time.perf_counter() - t0
    if profile:
        import io
        import pstats

        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
        with open(profile, "w") as f:
            f.write(text.getvalue())
    steadies = []
    for rounds in range(2):  # right after the first call, then once more (a GPU just woken clocks up meanwhile)
        if profile and rounds == 1:
            profiler = cProfile.Profile()
            profiler.enable()
        t0 = time.perf_counter()
        for _ in range(repeats):
            step()
        sync()
        steadies.append((time.perf_counter() - t0) / repeats)
    if profile:
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
        with open(profile + ".steady", "w") as f:
            f.write(text.getvalue())
    steady = steadies[0]
    target = os.environ.get("WORKLOAD_OUT")
    if target:
        torch.save({k: v.detach().cpu() for k, v in outputs.items()}, target)
    print(json.dumps({"workload": name, "first_call_s": first, "steady_ms": steady * 1e3,
                      "steady_again_ms": steadies[1] * 1e3,
                      "started_to_first_done_s": time.time() - START}))
    sys.stdout.flush()


def leaf(*shape: int, dtype: torch.dtype = torch.bfloat16, scale: float = 1.0, seed: int = 0) -> Any:
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    return (torch.randn(*shape, device=DEVICE, dtype=torch.float32, generator=g) * scale).to(dtype).requires_grad_()


START = float(os.environ.get("WORKLOAD_START", time.time()))
