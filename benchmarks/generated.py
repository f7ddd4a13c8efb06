"""Kernels other systems generate, kept and served by autotuner (docs/helion.md, docs/inductor.md), on a GPU.

Each scenario is a new process (this script with --probe), timed from its start to the end of its first call:

- Helion: a tiled matmul and a row-wise softmax as Helion's examples write them, searched at the `quick` effort.
  `helion` is Helion alone, with a fresh local cache, and `helion 2nd` the same again (its local cache read).
  `first` is under `python -m autotuner run` on a fresh database. `second` is the same again: same database and
  local folders. `new host` has the same database but fresh Helion, Triton and Inductor folders.
- Inductor: a transformer block under torch.compile(mode="max-autotune"), with AUTOTUNER_COMPILE_SECRET set.
  `inductor` is torch alone with fresh folders. `first` is under autotuner on a fresh database. `second` is the
  same again. `new host` has the same database and fresh folders.

Reported for each: seconds to the first call's end, the configs benchmarked (Helion's search; Inductor's GPU
timings as they run, with its GEMM choices and the kernels coordinate descent tunes at run time: Inductor's own
counters replay a cached graph's compile counts), and the tuned kernel's time against Helion's own pick and torch's.

`--searches SEEDS` instead runs, per seed, Helion's default search and then autotuner's (`tpe`,
autotuner/decorator/helion_search.py) on as many configs, each in a new process with nothing cached, and reports
for each the seconds to within 2% of the best either found, the search's seconds and its pick re-timed.

    python benchmarks/generated.py --json-out out.json
    python benchmarks/generated.py --workloads matmul,softmax --searches 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SECRET = "generated-benchmark-secret-0123456789abcdef"
HERE = Path(__file__).resolve()


try:  # (the driver runs without Helion; a probe of a Helion workload needs it)
    import helion
    import helion.language as hl
    import torch
except ImportError:
    helion = None

if helion is not None:
    @helion.kernel(static_shapes=True)
    def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        m, k = x.size()
        _, n = y.size()
        out = torch.empty([m, n], dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
        for tile_m, tile_n in hl.tile([m, n]):
            acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in hl.tile(k):
                acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
            out[tile_m, tile_n] = acc
        return out

    @helion.kernel(static_shapes=True)
    def softmax(x: torch.Tensor) -> torch.Tensor:
        n, _m = x.size()
        out = torch.empty_like(x)
        for tile_n in hl.tile(n):
            out[tile_n, :] = torch.nn.functional.softmax(x[tile_n, :], dim=1)
        return out


def _gpu_ms(fn, reps: int = 50) -> float:
    """Median milliseconds of `fn()` by CUDA events, after a warm-up."""
    import torch

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def _helion_benchmarks() -> list[tuple[float, float]]:
    """Each config Helion's search times in this process, as (time.perf_counter() when timed, ms): its search's
    timing method, wrapped."""
    from helion.autotuner import base_search

    timed: list[tuple[float, float]] = []
    for name in ("benchmark_function", "benchmark"):  # (Helion 1.0 times through the first, which returns the ms)
        original = getattr(base_search.BaseSearch, name, None)
        if original is None:
            continue

        def wrapped(self, *args, _original=original, **kwargs):
            result = _original(self, *args, **kwargs)
            timed.append((time.perf_counter(), float(getattr(result, "perf", result))))
            return result

        setattr(base_search.BaseSearch, name, wrapped)
        break
    return timed


def _workload(name: str) -> tuple:
    """A Helion workload: its kernel, arguments and torch's op on them."""
    import torch

    kernel = {"matmul": matmul, "softmax": softmax}[name]
    torch.manual_seed(0)
    args: tuple[torch.Tensor, ...]
    if name == "matmul":
        args = (torch.randn(4096, 4096, device="cuda", dtype=torch.float16),
                torch.randn(4096, 4096, device="cuda", dtype=torch.float16))
        return kernel, args, lambda: torch.mm(*args)
    args = (torch.randn(4096, 32768, device="cuda", dtype=torch.bfloat16),)
    return kernel, args, lambda: torch.softmax(args[0], dim=1)


def probe_helion(name: str, started: float) -> dict:
    import torch

    timed = _helion_benchmarks()
    kernel, args, reference = _workload(name)
    out = kernel(*args)
    torch.cuda.synchronize()
    first = time.time() - started
    ok = bool(torch.allclose(out.float(), reference().float(), atol=2e-2, rtol=2e-2))
    bound = kernel.bind(args)
    config = getattr(bound, "_config", None)
    return {"first_call_s": first, "benchmarks": len(timed), "matches": ok, "ms": _gpu_ms(lambda: kernel(*args)),
            "torch_ms": _gpu_ms(reference), "config": str(config)}


def probe_search(searcher: str, name: str) -> dict:
    """One search of a Helion workload's configs, nothing cached: Helion's default search (`helion`, at the effort
    HELION_AUTOTUNE_EFFORT names) or autotuner's (`tpe`: helion_search, GENERATED_COUNT configs). Each config's
    time as the search measured it, with the seconds since the search began; the pick re-timed."""
    import torch

    timed = _helion_benchmarks()
    kernel, args, reference = _workload(name)
    seed = int(os.environ.get("HELION_AUTOTUNE_RANDOM_SEED", "0"))
    t0 = time.perf_counter()
    if searcher == "helion":
        config = kernel.autotune(args, force=True)
    else:
        from autotuner.decorator.helion_search import search_class

        normal = kernel.normalize_args(*args)
        bound = kernel.bind(normal)
        config = search_class()(bound, normal, count=int(os.environ["GENERATED_COUNT"]), seed=seed).autotune()
        bound.set_config(config)
    search_s = time.perf_counter() - t0
    timeline = [(t - t0, ms) for t, ms in timed]
    out = kernel(*args)
    ok = bool(torch.allclose(out.float(), reference().float(), atol=2e-2, rtol=2e-2))
    return {"search_s": search_s, "timeline": timeline, "matches": ok, "ms": _gpu_ms(lambda: kernel(*args)),
            "torch_ms": _gpu_ms(reference), "config": str(config)}


def probe_inductor(started: float) -> dict:
    import torch
    from torch._dynamo.utils import counters

    class Block(torch.nn.Module):
        def __init__(self, d: int = 1024, heads: int = 16) -> None:
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))

    seen = _count_inductor_benchmarks()
    torch.manual_seed(0)
    block = Block().cuda().to(torch.bfloat16)
    x = torch.randn(16, 1024, 1024, device="cuda", dtype=torch.bfloat16)  # (large enough that the GPU, not
    # the launches, sets the time)
    compiled = torch.compile(block, mode="max-autotune")
    with torch.no_grad():
        out = compiled(x)
        torch.cuda.synchronize()
        first = time.time() - started
        ok = bool(torch.allclose(out.float(), block(x).float(), atol=1e-1, rtol=5e-2))
        c = counters["inductor"]
        real = dict(seen, coordesc_kernels=sorted(set(seen["coordesc_kernels"])))
        return {"first_call_s": first, "matches": ok, "fx_hit": c.get("fxgraph_cache_hit", 0),
                "benchmarks": real["gpu_timings"], "gemm_choices_benchmarked": real["gemm_choices"],
                "coordesc_kernels": real["coordesc_kernels"], "ms": _gpu_ms(lambda: compiled(x)),
                "torch_ms": _gpu_ms(lambda: block(x)), "counters": dict(c)}


def _count_inductor_benchmarks() -> dict:
    """What Inductor really benchmarks in this process: GEMM selections (each one's choices), and GPU timings of
    any kind with the kernels coordinate descent tunes at run time. (Inductor's own counters cannot tell: a graph
    loaded from its cache adds the counts its compile made, `counter_deltas`, as if benchmarked again.)"""
    from torch._inductor import select_algorithm
    from torch._inductor.runtime import benchmarking, triton_heuristics

    seen: dict = {"gemm_choices": 0, "gpu_timings": 0, "coordesc_kernels": []}
    bench = select_algorithm.AlgorithmSelectorCache.benchmark
    gpu = type(benchmarking.benchmarker).benchmark_gpu
    tune = triton_heuristics.CachingAutotuner._coordinate_descent_tuning

    def benchmark(self, choices, *a, **k):
        seen["gemm_choices"] += len(choices)
        return bench(self, choices, *a, **k)

    def benchmark_gpu(self, *a, **k):
        seen["gpu_timings"] += 1
        return gpu(self, *a, **k)

    def coordesc(self, *a, **k):
        seen["coordesc_kernels"].append(self.inductor_meta.get("kernel_name"))
        return tune(self, *a, **k)

    select_algorithm.AlgorithmSelectorCache.benchmark = benchmark  # type: ignore[method-assign]
    type(benchmarking.benchmarker).benchmark_gpu = benchmark_gpu  # type: ignore[method-assign]
    triton_heuristics.CachingAutotuner._coordinate_descent_tuning = coordesc  # type: ignore[method-assign]
    return seen


def run_probe(workload: str, under_autotuner: bool, folders: Path, db: str, secret: str | None,
              extra: dict[str, str] | None = None) -> dict:
    env = {**os.environ, "HELION_CACHE_DIR": str(folders / "helion"), "TRITON_CACHE_DIR": str(folders / "triton"),
           "TORCHINDUCTOR_CACHE_DIR": str(folders / "inductor"), "AUTOTUNER_DB_URL": db,
           "AUTOTUNER_KERNEL_CACHE_DIR": str(folders / "kept"), "HELION_AUTOTUNE_EFFORT": "quick",
           "HELION_AUTOTUNE_PROGRESS_BAR": "0", **(extra or {})}
    env.pop("AUTOTUNER_COMPILE_SECRET", None)
    if secret:
        env["AUTOTUNER_COMPILE_SECRET"] = secret
    probe = [str(HERE), "--probe", workload, "--started", "{started}"]
    cmd = [sys.executable, "-m", "autotuner", "run", "--", *probe] if under_autotuner else [sys.executable, *probe]
    started = time.time()
    try:
        out = subprocess.run([c.replace("{started}", repr(started)) for c in cmd], capture_output=True, text=True,
                             env=env, timeout=float(os.environ.get("GENERATED_TIMEOUT", "900")))
    except subprocess.TimeoutExpired as exc:
        return {"error": f"timed out; its output's end: {str(exc.stderr or exc.stdout or '')[-1500:]}",
                "wall_s": time.time() - started}
    wall = time.time() - started
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"error": (out.stderr or out.stdout)[-1500:], "wall_s": wall}
    return {**json.loads(lines[-1]), "wall_s": wall}


def scenarios(workload: str, root: Path) -> dict[str, dict]:
    """The processes of one workload, in order."""
    helion = workload != "inductor"
    secret = None if helion else SECRET
    db = f"sqlite:///{root / workload}.db"
    results = {"helion" if helion else "inductor": run_probe(workload, False, root / f"{workload}-alone",
                                                               f"sqlite:///{root / workload}-alone.db", None)}
    if helion:  # Helion's own local cache, for what a process that reads it costs
        results["helion 2nd"] = run_probe(workload, False, root / f"{workload}-alone",
                                          f"sqlite:///{root / workload}-alone.db", None)
    results["first"] = run_probe(workload, True, root / f"{workload}-host1", db, secret)
    results["second"] = run_probe(workload, True, root / f"{workload}-host1", db, secret)
    results["new host"] = run_probe(workload, True, root / f"{workload}-host2", db, secret)
    return results


def search_scenarios(workload: str, root: Path, seeds: int) -> dict[str, dict]:
    """Helion's default search, then autotuner's on the same budget (the configs Helion's benchmarked), per seed;
    each a new process with fresh folders."""
    out: dict[str, dict] = {}
    for seed in range(seeds):
        env = {"HELION_AUTOTUNE_RANDOM_SEED": str(seed)}
        theirs = run_probe(f"search-helion:{workload}", False, root / f"{workload}-{seed}-helion",
                           f"sqlite:///{root}/unused.db", None, env)
        out[f"helion seed {seed}"] = theirs
        print(f"  helion seed {seed}: {_brief(theirs)}", flush=True)
        count = len(theirs.get("timeline", ())) or 30
        out[f"tpe seed {seed}"] = run_probe(f"search-tpe:{workload}", False, root / f"{workload}-{seed}-tpe",
                                            f"sqlite:///{root}/unused.db", None, {**env, "GENERATED_COUNT": str(count)})
        print(f"  tpe seed {seed}: {_brief(out[f'tpe seed {seed}'])}", flush=True)
    return out


def _brief(r: dict) -> str:
    if "error" in r:
        return f"ERROR after {r['wall_s']:.0f} s: {r['error'][-800:]}"
    ms = [m for _, m in r["timeline"]]
    return f"{len(ms)} configs in {r['search_s']:.1f} s (process {r['wall_s']:.0f} s), best {min(ms, default=0):.4f} ms"


def report_searches(workload: str, runs: dict[str, dict]) -> None:
    """Per search: configs benchmarked, seconds to within 2% of the best any search of the workload found, the
    search's seconds, and its pick's time re-measured."""
    found = [ms for r in runs.values() for _, ms in r.get("timeline", ()) if ms == ms and ms != float("inf")]
    best = min(found) if found else None
    for name, r in runs.items():
        if "error" in r or best is None:
            print(f"{workload:8} {name:14} ERROR {r.get('error', 'no config timed')[-600:]}", flush=True)
            continue
        near = next((t for t, ms in r["timeline"] if ms <= 1.02 * best), None)
        own_best = min((ms for _, ms in r["timeline"]), default=float("inf"))
        print(f"{workload:8} {name:14} configs {len(r['timeline']):4}  within 2% after "
              f"{'never' if near is None else f'{near:6.1f} s'}  search {r['search_s']:6.1f} s  best found "
              f"{own_best / best:.3f}x of all  pick {r['ms']:.4f} ms ({r['torch_ms'] / r['ms']:.3f}x torch)  "
              f"matches {r['matches']}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--workloads", default="matmul,softmax,inductor")
    parser.add_argument("--searches", type=int, default=0, metavar="SEEDS",
                        help="instead: Helion's default search against autotuner's on the same budget, per seed")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    if args.probe:
        started = args.started or time.time()
        if args.probe.startswith("search-"):
            searcher, name = args.probe.removeprefix("search-").split(":")
            result = probe_search(searcher, name)
        elif args.probe == "inductor":
            result = probe_inductor(started)
        else:
            result = probe_helion(args.probe, started)
        print(json.dumps(result))
        return
    import torch

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    every = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workload in args.workloads.split(","):
            if args.searches:
                every[workload] = search_scenarios(workload, Path(tmp), args.searches)
                report_searches(workload, every[workload])
                continue
            every[workload] = scenarios(workload, Path(tmp))
            own = next(iter(every[workload].values())).get("ms")
            for name, r in every[workload].items():
                if "error" in r:
                    print(f"{workload:8} {name:10} ERROR {r['error'][-600:]}", flush=True)
                    continue
                vs = f"{own / r['ms']:.3f}x own" if own else "-"
                print(f"{workload:8} {name:10} first call {r['first_call_s']:7.2f} s  benchmarks {r['benchmarks']:4}  "
                      f"{r['ms']:.4f} ms ({vs}, {r['torch_ms'] / r['ms']:.3f}x torch)  matches {r['matches']}"
                      + (f"  (GEMM choices {r['gemm_choices_benchmarked']}, coordinate descent of "
                         f"{len(r['coordesc_kernels'])} kernels: {' '.join(r['coordesc_kernels'])[:160]})"
                         if "coordesc_kernels" in r else ""), flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(every, indent=1))


if __name__ == "__main__":
    main()
