"""`@autotuner.autotune` against `@triton.autotune` on the two examples (GPU only), in one run:

1. Time from process start to the first launch done with a tuned config, in a new process: triton.autotune
   (which times its whole list there) with a cold and a warm Triton cache, and autotuner.autotune after a
   tuning run stored the winner (cold and warm Triton cache; with the kept binaries, autotuner.launch.binary_cache,
   and without them; with the kept binaries but not the kept specializations, autotuner.launch.specializations). Each
   child says whether its first launch imported gluon (Triton's native specialization does).
2. The chosen config's kernel time against triton.autotune's choice from the same list, timed interleaved.
3. With `space=` (the tutorial kernel's parameters over wider ranges, the engine's search, 64 trials): its
   winner's kernel time against triton.autotune's choice, at 4096^3 (the shape the tutorial's list was written
   for) and two it was not: a long K (1024x1024x16384) and few rows (128x8192x8192).

    python benchmarks/autotune_drop_in.py [--json-out FILE] [--profile-dir DIR] [--skip-kernel-times] [--rounds N]
        [--examples matmul,rmsnorm]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Every child should read compiled bytecode, as from an installed package: where site-packages is read-only (the
# GPU machines' is) Python otherwise compiles Triton's sources again in each new process (the first launch's
# gluon import). start_to_tuned fills it before the first timed child. Setting the prefix alone is not enough:
# PYTHONDONTWRITEBYTECODE must be removed too, or the profiles still show the sources compiled.
PYCACHE = os.path.join(tempfile.gettempdir(), "autotune_drop_in_pycache")
sys.path.insert(0, str(ROOT))

# The examples as they were before the switch: the decorator line back to triton.autotune, `import autotuner` a comment.
# The triton.autotune and plain children import these, so they pay for nothing of autotuner's, and their kernels
# are JITFunctions of their own (an example module's kernel carries the kept-binary hook: a triton.autotune wrapped
# around it compiled through autotuner's kept binaries, and a timing of it would count those loads as "cold").
EXAMPLES = {"matmul": ("tutorial_matmul", "matmul_kernel"), "rmsnorm": ("rmsnorm", "rms_norm_forward")}


def write_before(folder: Path) -> None:
    """Each example with its one changed line changed back, as `before_<module>.py` in `folder`."""
    for module, _ in EXAMPLES.values():
        text = (ROOT / "examples" / f"{module}.py").read_text()
        lines = text.splitlines(keepends=True)
        switched = [i for i, line in enumerate(lines) if line.startswith("@autotuner.autotune(")]
        imports = [i for i, line in enumerate(lines) if line.strip() == "import autotuner"]
        if len(switched) != 1 or len(imports) != 1:
            raise RuntimeError(f"examples/{module}.py: expected one @autotuner.autotune line and one import")
        lines[switched[0]] = lines[switched[0]].replace("@autotuner.autotune(", "@triton.autotune(", 1)
        lines[imports[0]] = "# import autotuner: not before the switch (a line kept, so Triton's cache key, which holds the kernel's line, is the same)\n"
        before = "".join(lines)
        if "autotuner." in before.split("\n@triton.autotune", 1)[1]:
            raise RuntimeError(f"examples/{module}.py uses autotuner beyond its decorator line")
        (folder / f"before_{module}.py").write_text(before)


CHILD = r"""
import importlib, os, sys, time, json
start = float(os.environ["BENCH_START"])
import torch, triton
which, example = sys.argv[1], sys.argv[2]
module, name = json.loads(os.environ["BENCH_EXAMPLE"])
config = json.loads(os.environ.get("BENCH_CONFIG", "{}"))  # "plain": the config written into the launch
profile, imported = None, []
if os.environ.get("BENCH_PROFILE"):
    import cProfile, importlib.abc, traceback
    profile = cProfile.Profile()

    class Imports(importlib.abc.MetaPathFinder):  # what the first launch imports, and from where
        def find_spec(self, fullname, path, target=None):
            if profile_on and fullname not in sys.modules:
                frames = [f for f in traceback.extract_stack()[:-1] if "importlib" not in f.filename]
                imported.append(f"{fullname} <- {frames[-1].filename}:{frames[-1].lineno}" if frames else fullname)
            return None
    profile_on = False
    sys.meta_path.insert(0, Imports())
if which == "ours":
    sys.path.insert(0, os.environ["BENCH_ROOT"])
    kernel = getattr(importlib.import_module("examples." + module), name)
else:  # the file before the switch: triton.autotune, or its JITFunction launched with the config written in
    sys.path.insert(0, os.environ["BENCH_BEFORE"])
    kernel = getattr(importlib.import_module("before_" + module), name)
    if which == "plain":
        kernel = kernel.fn
    assert "autotuner" not in sys.modules
if example == "matmul":
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16); b = torch.randn_like(a); c = torch.empty_like(a)
    grid = lambda m: (triton.cdiv(4096, m["BLOCK_SIZE_M"]) * triton.cdiv(4096, m["BLOCK_SIZE_N"]),)
    torch.cuda.synchronize(); t_launch = time.time()
    if profile: profile_on = True; profile.enable()
    kernel[grid](a, b, c, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1, **config)
else:
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16); w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x); rstd = torch.empty(8192, device="cuda")
    torch.cuda.synchronize(); t_launch = time.time()
    if profile: profile_on = True; profile.enable()
    kernel[(8192,)](y, 4096, x, 4096, w, rstd, 4096, 1e-6, BLOCK_SIZE=4096, **config)
torch.cuda.synchronize()
end = time.time()
if profile:
    profile.disable()
    profile_on = False
    import pstats
    with open(os.environ["BENCH_PROFILE"], "w") as f:
        pstats.Stats(profile, stream=f).sort_stats("cumulative").print_stats(40)
        f.write(f"modules imported by the first launch ({len(imported)}):\n" + "\n".join(imported) + "\n")
src = next(iter(kernel.sources.values())) if which == "ours" else which
chosen = kernel.best_config.all_kwargs() if which in ("ours", "theirs") else config
print(json.dumps({"elapsed_s": end - start, "launch_s": end - t_launch, "source": src, "config": chosen,
                  "gluon": "triton.experimental.gluon" in sys.modules}))
"""


def child(which: str, example: str, env: dict[str, str], before: str) -> dict[str, Any]:
    start = time.time()
    child_env = {**os.environ, **env, "BENCH_START": str(start), "BENCH_ROOT": str(ROOT), "BENCH_BEFORE": before,
                 "BENCH_EXAMPLE": json.dumps(EXAMPLES[example]), "PYTHONPYCACHEPREFIX": PYCACHE}
    child_env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, "-c", CHILD, which, example], capture_output=True, text=True, timeout=900,
                         env=child_env, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def start_to_tuned(example: str, tmp: str, before: str, profile_dir: Path | None) -> dict[str, dict[str, float]]:
    """Per case: seconds from process start (interpreter, imports, inputs included) and of the first launch call
    alone, each until the GPU finished it."""
    ours = {"AUTOTUNER_DB_URL": f"sqlite:///{tmp}/{example}.db", "AUTOTUNER_KERNEL_CACHE_DIR": f"{tmp}/kept_{example}"}
    runs = {
        "triton.autotune, cold cache": ("theirs", {"TRITON_CACHE_DIR": f"{tmp}/tc_theirs_{example}"}),
        "triton.autotune, warm cache": ("theirs", {"TRITON_CACHE_DIR": f"{tmp}/tc_theirs_{example}"}),
        "autotuner.autotune, the tuning run": ("ours", {"TRITON_CACHE_DIR": f"{tmp}/tc_tune_{example}", **ours}),
        # a new Triton cache: the tuned kernel comes from the kept binaries, Triton's own launcher code is built
        "autotuner.autotune after tuning, cold cache": ("ours", {"TRITON_CACHE_DIR": f"{tmp}/tc_ours_{example}", **ours}),
        "autotuner.autotune after tuning, warm cache": ("ours", {"TRITON_CACHE_DIR": f"{tmp}/tc_ours_{example}", **ours}),
        # the kept binaries without the kept specializations (autotuner.launch.specializations): Triton's binder
        # specializes the first launch, and its native code imports gluon
        "autotuner.autotune after tuning, warm cache, specializations not kept": (
            "ours", {"TRITON_CACHE_DIR": f"{tmp}/tc_ours_{example}", **ours,
                     "AUTOTUNER_KERNEL_CACHE_DIR": f"{tmp}/kept_binaries_only_{example}"}),
        # Triton's cache as the tuning run left it: every config of the list compiled and kept by Triton
        "autotuner.autotune after tuning, warm cache, kept binaries off": (
            "ours", {"TRITON_CACHE_DIR": f"{tmp}/tc_tune_{example}", **ours, "AUTOTUNER_KERNEL_CACHE": "0"}),
        # the floor of any Triton program: the tuned config written into a plain `kernel[grid](...)` (a JITFunction
        # of its own, so without the kept binaries)
        "plain kernel[grid] with the tuned config written in, warm cache": (
            "plain", {"TRITON_CACHE_DIR": f"{tmp}/tc_tune_{example}"}),
    }
    # Not timed: fill PYCACHE with both sides' imports (ours launches its default: nothing tuned, nothing kept where
    # the timed runs look).
    fill = {"TRITON_CACHE_DIR": f"{tmp}/tc_pycache_{example}", "AUTOTUNER_DB_URL": f"sqlite:///{tmp}/fill_{example}.db",
            "AUTOTUNER_KERNEL_CACHE_DIR": f"{tmp}/kept_fill_{example}", "AUTOTUNER_ON_MISS": "default"}
    for which in ("theirs", "ours"):
        child(which, example, fill, before)
    res = {}
    tuned: dict[str, Any] = {}
    for name, (which, env) in runs.items():
        if which == "plain":
            env = {**env, "BENCH_CONFIG": json.dumps(tuned)}
        if "specializations not kept" in name:  # a copy of the kept folder as it is now, less its specializations
            shutil.copytree(ours["AUTOTUNER_KERNEL_CACHE_DIR"], env["AUTOTUNER_KERNEL_CACHE_DIR"],
                            ignore=lambda folder, names: ["specializations"] if "specializations" in names else [])
        r = child(which, example, env, before)
        # Profiled again, untimed: the profiler and the import tracer cost 20-30 ms of a 100 ms launch (session
        # 13's first call profiled timed runs).
        if profile_dir is not None and "after tuning, warm cache" in name and "specializations" not in name:
            profile = profile_dir / f"{example}_{'off' if 'off' in name else 'kept'}.txt"
            child(which, example, {**env, "BENCH_PROFILE": str(profile)}, before)
        if "after tuning" in name:
            assert r["source"].startswith("exact"), r
        if "the tuning run" in name:
            tuned = r["config"]
        res[name] = {"from_start_s": r["elapsed_s"], "launch_s": r["launch_s"], "gluon": r["gluon"]}
    return res


def kernel_times(tmp: str) -> dict[str, Any]:
    """Both decorators' choices (and a space search's winner) timed interleaved, in this process."""
    import torch
    import triton

    import autotuner
    from autotuner.base.settings import Settings
    from autotuner.engine.measure.timing import interleaved, time_cuda
    from autotuner.launch.lookup import Resolver, set_resolver
    from examples.rmsnorm import WARPS
    from examples.rmsnorm import rms_norm_forward as ours_rms
    from examples.tutorial_matmul import get_autotune_config
    from examples.tutorial_matmul import matmul_kernel as ours_mm
    from search_spaces.space import Param, Space

    set_resolver(Resolver(Settings(db_url=f"sqlite:///{tmp}/times.db")))
    out: dict[str, Any] = {}

    def smem(cfg: dict[str, int], p: Any, d: Any) -> str | None:
        need = cfg["num_stages"] * (cfg["BLOCK_SIZE_M"] + cfg["BLOCK_SIZE_N"]) * cfg["BLOCK_SIZE_K"] * 2
        return f"{need} B of shared memory, more than {d.smem_per_block}" if need > d.smem_per_block else None

    def registers(cfg: dict[str, int], p: Any, d: Any) -> str | None:
        per_thread = cfg["BLOCK_SIZE_M"] * cfg["BLOCK_SIZE_N"] // (32 * cfg["num_warps"])
        return f"{per_thread} fp32 accumulators per thread, more than 128" if per_thread > 128 else None

    # What a user of the tutorial kernel would declare: the list's parameters over wider ranges.
    space: Space[Any] = Space(params=(Param("BLOCK_SIZE_M", (32, 64, 128, 256)), Param("BLOCK_SIZE_N", (32, 64, 128, 256)),
                          Param("BLOCK_SIZE_K", (32, 64, 128)), Param("GROUP_SIZE_M", (1, 8)),
                          Param("num_warps", (2, 4, 8)), Param("num_stages", (2, 3, 4, 5))),
                  constraints=(smem, registers), default_fn=lambda p, d: {
                      "BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8,
                      "num_warps": 4, "num_stages": 4})
    theirs = triton.autotune(configs=get_autotune_config(), key=["M", "N", "K"])(triton.jit(ours_mm.fn.fn))
    spaced = autotuner.autotune(space=space, key=["M", "N", "K"], name="bench:matmul_space", trials=64)(ours_mm.fn)
    for M, N, K in ((4096, 4096, 4096), (1024, 1024, 16384), (128, 8192, 8192)):
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        c = torch.empty(M, N, device="cuda", dtype=torch.float16)
        args = (a, b, c, M, N, K, K, 1, N, 1, N, 1)

        def grid(m: dict[str, Any], M: int = M, N: int = N) -> tuple[int]:
            return (triton.cdiv(M, m["BLOCK_SIZE_M"]) * triton.cdiv(N, m["BLOCK_SIZE_N"]),)

        theirs[grid](*args)
        ours_mm[grid](*args)
        t0 = time.perf_counter()
        spaced[grid](*args)
        problem = f"matmul {M}x{N}x{K} float16"
        out[f"space search seconds, {problem}"] = time.perf_counter() - t0
        choices = {"triton.autotune": theirs.best_config.all_kwargs(),
                   "autotuner.autotune": ours_mm.best_config.all_kwargs(),
                   "autotuner.autotune space=": spaced.best_config.all_kwargs()}
        def timed(name: str, choices: dict[str, Any] = choices, args: tuple[Any, ...] = args) -> float:
            return time_cuda(functools.partial(ours_mm.fn[grid(choices[name])], *args, **choices[name]), 25,
                             100).median_ms

        rounds = interleaved(list(choices), 5, timed)
        out[problem] = {k: {"config": dict(choices[k]), "ms": statistics.median(v)} for k, v in rounds.items()}

    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    y, rstd = torch.empty_like(x), torch.empty(8192, device="cuda")
    rargs = (y, 4096, x, 4096, w, rstd, 4096, 1e-6)
    theirs_rms = triton.autotune(configs=WARPS, key=["n_cols"])(triton.jit(ours_rms.fn.fn))
    theirs_rms[(8192,)](*rargs, BLOCK_SIZE=4096)
    ours_rms[(8192,)](*rargs, BLOCK_SIZE=4096)
    rchoices = {"triton.autotune": theirs_rms.best_config.all_kwargs(),
                "autotuner.autotune": ours_rms.best_config.all_kwargs()}
    rr = interleaved(list(rchoices), 5, lambda name: time_cuda(functools.partial(
        ours_rms.fn[(8192,)], *rargs, BLOCK_SIZE=4096, **rchoices[name]), 25, 100).median_ms)
    out["rmsnorm 8192x4096 bfloat16"] = {k: {"config": rchoices[k], "ms": statistics.median(v)} for k, v in rr.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--profile-dir", type=Path, help="write a cProfile of the first launch of the warm-cache runs")
    parser.add_argument("--skip-kernel-times", action="store_true", help="only the time to a tuned launch")
    parser.add_argument("--rounds", type=int, default=1, help="time every case this many times, each round from empty "
                        "caches (the table gives the median)")
    parser.add_argument("--examples", default="matmul,rmsnorm", help="which examples, comma-separated")
    args = parser.parse_args()
    examples = args.examples.split(",")
    import torch

    if not torch.cuda.is_available():
        sys.exit("this benchmark compares GPU timings: it needs a CUDA device")
    with tempfile.TemporaryDirectory() as tmp:
        results: dict[str, Any] = {"device": torch.cuda.get_device_name()}
        before = Path(tmp) / "before"
        before.mkdir()
        write_before(before)
        for example in examples:
            rounds = []
            for i in range(args.rounds):  # each round from nothing: its own caches, database and kept binaries
                os.makedirs(f"{tmp}/{example}_round{i}")
                rounds.append(start_to_tuned(example, f"{tmp}/{example}_round{i}", str(before),
                                             args.profile_dir if i == 0 else None))
            results[f"start to tuned launch, {example}"] = {
                name: {k: statistics.median(r[name][k] for r in rounds) for k in ("from_start_s", "launch_s")}
                | {"rounds": [r[name] for r in rounds]} for name in rounds[0]}
            print(example, json.dumps(results[f"start to tuned launch, {example}"], indent=1), flush=True)
        if not args.skip_kernel_times:
            results["kernel times"] = kernel_times(tmp)
    print(json.dumps(results, indent=1))
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=1))
    print(f"\nMedians of {args.rounds} round(s):\n| example | case | from process start | first launch call | each round's "
          "first launch | gluon imported |\n|---|---|---|---|---|---|")
    for example in examples:
        for name, r in results[f"start to tuned launch, {example}"].items():
            each = ", ".join(f"{x['launch_s'] * 1e3:.0f}" for x in r["rounds"])
            gluon = "/".join("yes" if x["gluon"] else "no" for x in r["rounds"])
            print(f"| {example} | {name} | {r['from_start_s']:.2f} s | {r['launch_s'] * 1e3:.1f} ms | {each} ms | {gluon} |")
    kt = results.get("kernel times", {})
    if not kt:
        return
    print("\n| problem | decorator | config | ms | vs triton.autotune's choice |\n|---|---|---|---|---|")
    for problem in [k for k in kt if k.startswith(("matmul", "rmsnorm"))]:
        base = kt[problem]["triton.autotune"]["ms"]
        for name, v in kt[problem].items():
            print(f"| {problem} | {name} | {v['config']} | {v['ms']:.4f} | {base / v['ms']:.3f}x |")


if __name__ == "__main__":
    main()
