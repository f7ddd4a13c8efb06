"""What a library call's config lookup costs per launch.

1. On any machine: the lookup alone on a cache hit, in microseconds (kernels.softmax with the launcher
   replaced by a no-op, minus the same no-op called directly).
2. With CUDA: kernels.softmax(x) at 1024x1024 float16 (launch overhead dominates) against the same kernel
   launched with the config written in the code, and against a @triton.autotune copy of the kernel on its
   cache hit. Wall clock over back-to-back launches, median of rounds.

    python benchmarks/launch_overhead.py [--db URL]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import kernels  # noqa: E402
from autotuner.device import current_device  # noqa: E402
from autotuner.lookup import Resolver, set_resolver  # noqa: E402
from autotuner.registry import get_op  # noqa: E402
from autotuner.settings import Settings  # noqa: E402

lib = importlib.import_module("kernels.library")
ksoftmax = importlib.import_module("kernels.softmax")


def per_call_us(fn, n: int, rounds: int = 7) -> float:
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(samples)


def lookup_cost(x: torch.Tensor) -> tuple[float, float]:
    real = lib._softmax
    noop = type("NoLaunch", (), {"softmax": staticmethod(lambda x, config: x)})
    lib._softmax = noop
    try:
        kernels.softmax(x)  # resolve once: later calls are cache hits
        with_lookup = per_call_us(lambda: kernels.softmax(x), 200_000)
        cfg = lib._cached(("softmax", x.numel(), x.shape[-1], x.dtype, x.device))
        direct = per_call_us(lambda: noop.softmax(x, cfg), 200_000)
    finally:
        lib._softmax = real
    return with_lookup, direct


def gpu_table(x: torch.Tensor) -> list[tuple[str, float]]:
    import triton

    op = get_op("softmax")
    problem = op.problem_from_inputs({"x": x})
    cfg = kernels.library._cached(("softmax", x.numel(), x.shape[-1], x.dtype, x.device)) or \
        op.space.default(problem, current_device())
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    autotuned = triton.autotune(
        configs=[triton.Config({"BLOCK_N": cfg["BLOCK_N"], "ROWS": cfg["ROWS"]}, num_warps=cfg["num_warps"],
                               num_stages=cfg["num_stages"]),
                 triton.Config({"BLOCK_N": 1024, "ROWS": 1}, num_warps=4, num_stages=1),
                 triton.Config({"BLOCK_N": 1024, "ROWS": 4}, num_warps=8, num_stages=1)],
        key=["n_cols"],
    )(triton.jit(ksoftmax.softmax_kernel.fn))

    def launch_autotuned():
        grid = lambda meta: (triton.cdiv(n_rows, meta["ROWS"]),)  # noqa: E731
        autotuned[grid](x, y, n_rows, n_cols, x.stride(0), y.stride(0), SINGLE_PASS=True)

    rows = []
    for name, fn in (("kernels.softmax(x) (tuned config looked up)", lambda: kernels.softmax(x)),
                     ("launcher with the config written in code", lambda: ksoftmax.softmax(x, cfg)),
                     ("@triton.autotune copy, cache hit", launch_autotuned),
                     ("torch.softmax", lambda: torch.softmax(x, -1))):
        fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(7):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(2000):
                fn()
            torch.cuda.synchronize()
            samples.append((time.perf_counter() - t0) / 2000 * 1e6)
        rows.append((name, statistics.median(samples)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", default=None, help="database with tuned results (default: a fresh temporary one)")
    args = parser.parse_args()
    db = args.db or f"sqlite:///{tempfile.mkdtemp()}/overhead.db"
    set_resolver(Resolver(Settings(db_url=db)))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(1024, 1024, device=device, dtype=torch.float16)
    with_lookup, direct = lookup_cost(x)
    print(f"lookup on a cache hit: {with_lookup - direct:.2f} us per launch "
          f"(library call {with_lookup:.2f} us, the bare call it wraps {direct:.2f} us)")
    if device == "cuda":
        rows = gpu_table(x)
        base = rows[1][1]
        print(f"\n{torch.cuda.get_device_name()}, softmax 1024x1024 float16, us per launch (back-to-back, median of 7x2000)")
        print("| launch | us per call | vs config in code |")
        print("|---|---|---|")
        for name, us in rows:
            print(f"| {name} | {us:.2f} | {us / base:.3f}x |")


if __name__ == "__main__":
    main()
