"""What every workload does around its library calls: seeded inputs, the first call timed (tuning included),
a few more calls timed, every output and gradient saved for comparison, one JSON line printed."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: only to try a workload on Triton's interpreter


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def profiled(path: str | None, sort: str, lines: int) -> Iterator[None]:
    """The block's profile, as text, written to `path` (nothing when it is None)."""
    if path is None:
        yield
        return
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(sort).print_stats(lines)
        with open(path, "w") as f:
            f.write(text.getvalue())


def run(name: str, step: Callable[[], dict[str, torch.Tensor]], repeats: int = 30) -> None:
    """`step` runs the library's calls (forward and backward) and returns what they computed, by name."""
    profile = os.environ.get("WORKLOAD_PROFILE")  # a path: the first call's profile (and the steady one's) go there
    sync()
    t0 = time.perf_counter()
    with profiled(profile, "cumulative", 45):
        outputs = step()
        sync()
        first = time.perf_counter() - t0  # before the profile is written
    steadies = []
    for rounds in range(2):  # right after the first call, then once more (a GPU just woken clocks up meanwhile)
        with profiled(profile + ".steady" if profile and rounds == 1 else None, "tottime", 30):
            t0 = time.perf_counter()
            for _ in range(repeats):
                step()
            sync()
            steadies.append((time.perf_counter() - t0) / repeats)
    target = os.environ.get("WORKLOAD_OUT")
    if target:
        torch.save({k: v.detach().cpu() for k, v in outputs.items()}, target)
    print(json.dumps({"workload": name, "first_call_s": first, "steady_ms": steadies[0] * 1e3,
                      "steady_again_ms": steadies[1] * 1e3,
                      "started_to_first_done_s": time.time() - START}))
    sys.stdout.flush()


def leaf(*shape: int, dtype: torch.dtype = torch.bfloat16, scale: float = 1.0, seed: int = 0) -> Any:
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    return (torch.randn(*shape, device=DEVICE, dtype=torch.float32, generator=g) * scale).to(dtype).requires_grad_()


START = float(os.environ.get("WORKLOAD_START", time.time()))
