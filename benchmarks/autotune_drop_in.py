"""`@autotuner.autotune` against `@triton.autotune` on the two examples (GPU only), in one run:

1. Time from process start to the first launch done with a tuned config, in a new process: triton.autotune
   (which times its whole list there) with a cold and a warm Triton cache, and autotuner.autotune after a
   tuning run stored the winner (cold and warm Triton cache).
2. The chosen config's kernel time against triton.autotune's choice from the same list, timed interleaved.
3. With `space=` (the tutorial kernel's parameters over a larger space, the engine's search, 48 trials): its
   winner's kernel time against triton.autotune's choice.

    python benchmarks/autotune_drop_in.py [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import os, sys, time, json
start = float(os.environ["BENCH_START"])
sys.path.insert(0, os.environ["BENCH_ROOT"])
import torch, triton
which, example = sys.argv[1], sys.argv[2]
if example == "matmul":
    from examples.tutorial_matmul import matmul_kernel as ours, get_autotune_config
    kernel = ours if which == "ours" else triton.autotune(configs=get_autotune_config(), key=["M", "N", "K"])(ours.fn)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16); b = torch.randn_like(a); c = torch.empty_like(a)
    grid = lambda m: (triton.cdiv(4096, m["BLOCK_SIZE_M"]) * triton.cdiv(4096, m["BLOCK_SIZE_N"]),)
    torch.cuda.synchronize(); t_launch = time.time()
    kernel[grid](a, b, c, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1)
else:
    from examples.rmsnorm import rms_norm_forward as ours, WARPS
    kernel = ours if which == "ours" else triton.autotune(configs=WARPS, key=["n_cols"])(ours.fn)
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16); w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x); rstd = torch.empty(8192, device="cuda")
    torch.cuda.synchronize(); t_launch = time.time()
    kernel[(8192,)](y, 4096, x, 4096, w, rstd, 4096, 1e-6, BLOCK_SIZE=4096)
torch.cuda.synchronize()
end = time.time()
src = next(iter(kernel.sources.values())) if which == "ours" else "triton.autotune"
print(json.dumps({"elapsed_s": end - start, "launch_s": end - t_launch, "source": src}))
"""


def child(which: str, example: str, env: dict[str, str]) -> dict[str, Any]:
    start = time.time()
    out = subprocess.run([sys.executable, "-c", CHILD, which, example], capture_output=True, text=True, timeout=900,
                         env={**os.environ, **env, "BENCH_START": str(start), "BENCH_ROOT": str(ROOT)}, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def start_to_tuned(example: str, tmp: str) -> dict[str, dict[str, float]]:
    """Per case: seconds from process start (interpreter, imports, inputs included) and of the first launch call
    alone, each until the GPU finished it."""
    db = f"sqlite:///{tmp}/{example}.db"
    runs = {
        "triton.autotune, cold cache": ("theirs", {"TRITON_CACHE_DIR": f"{tmp}/tc_theirs_{example}"}),
        "triton.autotune, warm cache": ("theirs", {"TRITON_CACHE_DIR": f"{tmp}/tc_theirs_{example}"}),
        "autotuner.autotune, the tuning run": ("ours", {"TRITON_CACHE_DIR": f"{tmp}/tc_tune_{example}", "AUTOTUNER_DB_URL": db}),
        "autotuner.autotune after tuning, cold cache": ("ours", {"TRITON_CACHE_DIR": f"{tmp}/tc_ours_{example}", "AUTOTUNER_DB_URL": db}),
        "autotuner.autotune after tuning, warm cache": ("ours", {"TRITON_CACHE_DIR": f"{tmp}/tc_ours_{example}", "AUTOTUNER_DB_URL": db}),
    }
    res = {}
    for name, (which, env) in runs.items():
        r = child(which, example, env)
        if "after tuning" in name:
            assert r["source"].startswith("exact"), r
        res[name] = {"from_start_s": r["elapsed_s"], "launch_s": r["launch_s"]}
    return res


def kernel_times(tmp: str) -> dict[str, Any]:
    """Both decorators' choices (and a space search's winner) timed interleaved, in this process."""
    import torch
    import triton

    import autotuner
    from autotuner.lookup import Resolver, set_resolver
    from autotuner.settings import Settings
    from autotuner.timing import time_cuda
    from examples.rmsnorm import WARPS
    from examples.rmsnorm import rms_norm_forward as ours_rms
    from examples.tutorial_matmul import get_autotune_config
    from examples.tutorial_matmul import matmul_kernel as ours_mm
    from search_spaces.space import Param, Space

    set_resolver(Resolver(Settings(db_url=f"sqlite:///{tmp}/times.db")))
    out: dict[str, Any] = {}
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b, c = torch.randn_like(a), torch.empty_like(a)
    args = (a, b, c, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1)

    def grid(m: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(4096, m["BLOCK_SIZE_M"]) * triton.cdiv(4096, m["BLOCK_SIZE_N"]),)

    theirs = triton.autotune(configs=get_autotune_config(), key=["M", "N", "K"])(ours_mm.fn)
    theirs[grid](*args)
    ours_mm[grid](*args)

    def smem(cfg: dict[str, int], p: Any, d: Any) -> str | None:
        need = cfg["num_stages"] * (cfg["BLOCK_SIZE_M"] + cfg["BLOCK_SIZE_N"]) * cfg["BLOCK_SIZE_K"] * 2
        return f"{need} B of shared memory, more than {d.smem_per_block}" if need > d.smem_per_block else None

    space = Space(params=(Param("BLOCK_SIZE_M", (64, 128, 256)), Param("BLOCK_SIZE_N", (64, 128, 256)),
                          Param("BLOCK_SIZE_K", (32, 64, 128)), Param("GROUP_SIZE_M", (1, 8)),
                          Param("num_warps", (4, 8)), Param("num_stages", (3, 4, 5))),
                  constraints=(smem,), default_fn=lambda p, d: {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128,
                                                                 "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8,
                                                                 "num_warps": 4, "num_stages": 4})
    spaced = autotuner.autotune(space=space, key=["M", "N", "K"], name="bench:matmul_space", trials=48)(ours_mm.fn)
    t0 = time.perf_counter()
    spaced[grid](*args)
    out["space search seconds"] = time.perf_counter() - t0
    choices = {"triton.autotune": theirs.best_config.all_kwargs(), "autotuner.autotune": ours_mm.best_config.all_kwargs(),
               "autotuner.autotune space=": spaced.best_config.all_kwargs()}
    rounds: dict[str, list[float]] = {k: [] for k in choices}
    for _ in range(5):
        for name, cfg in choices.items():
            rounds[name].append(time_cuda(lambda cfg=cfg: ours_mm.fn[grid(cfg)](*args, **cfg), 25, 100).median_ms)
    out["matmul 4096^3 float16"] = {k: {"config": {kk: vv for kk, vv in choices[k].items()},
                                        "ms": statistics.median(v)} for k, v in rounds.items()}

    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    y, rstd = torch.empty_like(x), torch.empty(8192, device="cuda")
    rargs = (y, 4096, x, 4096, w, rstd, 4096, 1e-6)
    theirs_rms = triton.autotune(configs=WARPS, key=["n_cols"])(ours_rms.fn)
    theirs_rms[(8192,)](*rargs, BLOCK_SIZE=4096)
    ours_rms[(8192,)](*rargs, BLOCK_SIZE=4096)
    rchoices = {"triton.autotune": theirs_rms.best_config.all_kwargs(),
                "autotuner.autotune": ours_rms.best_config.all_kwargs()}
    rr: dict[str, list[float]] = {k: [] for k in rchoices}
    for _ in range(5):
        for name, cfg in rchoices.items():
            rr[name].append(time_cuda(lambda cfg=cfg: ours_rms.fn[(8192,)](*rargs, BLOCK_SIZE=4096, **cfg), 25, 100).median_ms)
    out["rmsnorm 8192x4096 bfloat16"] = {k: {"config": rchoices[k], "ms": statistics.median(v)} for k, v in rr.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("this benchmark compares GPU timings: it needs a CUDA device")
    with tempfile.TemporaryDirectory() as tmp:
        results: dict[str, Any] = {"device": torch.cuda.get_device_name()}
        for example in ("matmul", "rmsnorm"):
            results[f"start to tuned launch, {example}"] = start_to_tuned(example, tmp)
            print(example, json.dumps(results[f"start to tuned launch, {example}"], indent=1), flush=True)
        results["kernel times"] = kernel_times(tmp)
    print(json.dumps(results, indent=1))
    print("\n| example | case | from process start | first launch call |\n|---|---|---|---|")
    for example in ("matmul", "rmsnorm"):
        for name, r in results[f"start to tuned launch, {example}"].items():
            print(f"| {example} | {name} | {r['from_start_s']:.2f} s | {r['launch_s'] * 1e3:.1f} ms |")
    kt = results["kernel times"]
    print("\n| problem | decorator | config | ms | vs triton.autotune's choice |\n|---|---|---|---|---|")
    for problem in ("matmul 4096^3 float16", "rmsnorm 8192x4096 bfloat16"):
        base = kt[problem]["triton.autotune"]["ms"]
        for name, v in kt[problem].items():
            print(f"| {problem} | {name} | {v['config']} | {v['ms']:.4f} | {base / v['ms']:.3f}x |")
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
