"""What every workload does around its library calls. A workload gives `make(seed)` (its inputs, new tensors) and
`step(inputs)` (the library's calls, forward and backward; what they computed, by name) to `main`, which runs:

- by default: seeded inputs, the first call timed (tuning included), a few more calls timed, every output and
  gradient saved for comparison, one JSON line printed;
- with WORKLOAD_MODE=train: a training-like loop, new inputs every step; the memory allocated after 10, 100 and
  1000 steps, and the steady time per step (new inputs included), one JSON line printed;
- with WORKLOAD_MODE=same_configs: the switch against Triton's own autotuner on Triton's configs, in one process,
  rounds alternating (`same_configs`);
- with WORKLOAD_MODE=kernels: torch's profiler over training-like steps, each kernel's CPU and GPU time.
"""

from __future__ import annotations

import contextlib
import gc
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


def train(name: str, make: Callable[[int], Any], step: Callable[[Any], Any], checkpoints: tuple[int, ...] = (10, 100, 1000),
          timed: int = 200) -> None:
    """The training-like loop (see the module's text); the per-step time is the fastest of five rounds of `timed`
    steps, after the checkpoints (with WORKLOAD_PROFILE, a sixth round profiled)."""
    memory = {}
    t0 = time.perf_counter()
    for i in range(1, max(checkpoints) + 1):
        step(make(i))
        if i in checkpoints:
            sync()
            gc.collect()
            memory[i] = torch.cuda.memory_allocated() / 2**20 if DEVICE == "cuda" else 0.0
    loop_s = time.perf_counter() - t0
    rounds = []
    profile = os.environ.get("WORKLOAD_PROFILE")  # a path: a sixth round's profile goes there (not counted)
    for r in range(6 if profile else 5):
        with profiled(profile if r == 5 else None, "tottime", 40):
            sync()
            t0 = time.perf_counter()
            for i in range(timed):
                step(make(i))
            sync()
        if r < 5:
            rounds.append((time.perf_counter() - t0) / timed)
    print(json.dumps({"workload": name, "loop": "train", "memory_mib": memory,
                      "growth_mib": memory[max(checkpoints)] - memory[min(checkpoints)],
                      "step_ms": min(rounds) * 1e3, "step_ms_rounds": [r * 1e3 for r in rounds],
                      "loop_s": loop_s}))
    sys.stdout.flush()


def same_configs(name: str, make: Callable[[int], Any], step: Callable[[Any], Any], timed: int = 50,
                 pairs_n: int = 40) -> None:
    """The switch against Triton's own autotuner on the same configs, in one process: Triton tunes in 10 steps,
    `autotuner.install()` takes its choices from Triton's cache, then `pairs_n` pairs of rounds of `timed` steps
    (uninstall, install), the order swapped every pair (ABBA: a drift in clocks or memory favours neither); the
    fastest round of each, and the median and quartiles of the pairs' ratios. What differs is only the launch
    path."""
    import autotuner

    for i in range(10):
        step(make(i))
    autotuner.install()
    for i in range(10):
        step(make(i))
    rounds: dict[str, list[float]] = {"triton": [], "switch": []}
    for p in range(pairs_n):
        for mode in ("triton", "switch") if p % 2 == 0 else ("switch", "triton"):
            (autotuner.uninstall if mode == "triton" else autotuner.install)()
            sync()
            t0 = time.perf_counter()
            for i in range(timed):
                step(make(i))
            sync()
            rounds[mode].append((time.perf_counter() - t0) / timed * 1e3)
    from autotuner.decorator.install import report

    sources = sorted({s for k in report() if k.covered for s in k.keys.values()})
    pairs = sorted(b / a for a, b in zip(rounds["triton"], rounds["switch"], strict=True))
    print(json.dumps({"workload": name, "loop": "same_configs", "triton_ms": min(rounds["triton"]),
                      "switch_ms": min(rounds["switch"]), "paired_median": pairs[len(pairs) // 2],
                      "paired_quartiles": [pairs[len(pairs) // 4], pairs[3 * len(pairs) // 4]],
                      "rounds_ms": rounds, "sources": sources}))
    sys.stdout.flush()


def kernels(name: str, make: Callable[[int], Any], step: Callable[[Any], Any], steps: int = 20) -> None:
    """Where a step's time goes: torch's profiler over `steps` training-like steps (after 10 untimed), the CPU and
    the GPU time of each kernel and call, the 25 largest by GPU time, then one JSON line."""
    from torch.profiler import ProfilerActivity, profile

    for i in range(10):
        step(make(i))
    sync()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(steps):
            step(make(i))
        sync()
    wall = (time.perf_counter() - t0) / steps
    print(prof.key_averages().table(sort_by="cuda_time_total" if DEVICE == "cuda" else "cpu_time_total",
                                    row_limit=25, max_name_column_width=60))
    print(json.dumps({"workload": name, "loop": "kernels", "step_ms_profiled": wall * 1e3}))
    sys.stdout.flush()


def main(name: str, make: Callable[[int], Any], step: Callable[[Any], dict[str, torch.Tensor]]) -> None:
    """Run the workload as WORKLOAD_MODE says (see the module's text)."""
    if os.environ.get("WORKLOAD_MODE") == "train":  # WORKLOAD_CHECKPOINTS, WORKLOAD_TIMED: a shorter loop (a try)
        checkpoints = tuple(int(c) for c in os.environ.get("WORKLOAD_CHECKPOINTS", "10,100,1000").split(","))
        train(name, make, step, checkpoints, int(os.environ.get("WORKLOAD_TIMED", "200")))
        return
    if os.environ.get("WORKLOAD_MODE") == "kernels":
        kernels(name, make, step)
        return
    if os.environ.get("WORKLOAD_MODE") == "same_configs":
        same_configs(name, make, step, int(os.environ.get("WORKLOAD_TIMED", "50")))
        return
    inputs = make(0)
    run(name, lambda: step(inputs))


def leaf(*shape: int, dtype: torch.dtype = torch.bfloat16, scale: float = 1.0, seed: int = 0) -> Any:
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    return (torch.randn(*shape, device=DEVICE, dtype=torch.float32, generator=g) * scale).to(dtype).requires_grad_()


START = float(os.environ.get("WORKLOAD_START", time.time()))
