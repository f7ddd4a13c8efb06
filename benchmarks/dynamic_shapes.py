"""A workload's shapes, not one, on kernels nobody tuned for it: a serving-like stream of calls whose M changes
on every call, served by a sweep and closed by traffic, against `@triton.autotune` on the same config list. For
each kernel of benchmarks/shape_kernels.py (written as libraries write them; their lists not tuned for this):

    lib_matmul  a tiled bf16 matmul, 12 configs of BLOCK_M/N, warps and stages, N = K = 4096, M = 16..4096
    small_k     the same at N = 1024, K = 256: few tiles, so its best config changes sharply with M
    rms_rows    an RMSNorm over rows of 4096 with ROWS rows per program (16 configs), M = 256..65536

Per kernel, each step in a new process, with a database of its own:

1. record: one launch at each power-of-two M of its range (AUTOTUNER_ON_MISS=default records the call);
2. sweep: `autotuner tune NAME --shape M=LOW-HIGH:pow2,...` (timed: the sweep's wall time, refinement and the
   model against nearest included);
3. stream: a serving-like stream of M (log-normal over the range, seeded; STREAM_CALLS calls, repeated for
   --seconds) with AUTOTUNER_ON_MISS=nearest and AUTOTUNER_RECHECK_S=2, while one `autotuner worker` runs beside
   it (on --worker-gpu, else on the stream's GPU): every miss queues its key, raised in priority by its meets; each
   --every seconds, the config each sampled key is served is noted. The first STREAM_CALLS calls' wall time (new
   inputs each call, misses resolved) is the stream time;
4. triton.autotune on the same stream for --triton-s seconds: its seconds per new key, and the stream's time at
   that rate (projected: every distinct key of the stream tuned once);
5. regret: at each sampled key, every config of the list timed (CUDA-graph replays: shape_kernels.Launcher.time),
   then the fastest FINALISTS and every config served there timed again in ROUNDS interleaved rounds (medians):
   each served config against the key's best of those. A single timing of a few-microsecond kernel moves by
   several percent from one moment to the next; the rounds keep that out of the regret. The sampled keys: the
   stream's most met half, and half drawn as the stream draws them.

Then the regret of what was served at each note (geomean and worst over the sampled keys, and weighted by how
often the stream meets them), from the sweep alone (t = 0) to the end.

    python benchmarks/dynamic_shapes.py --kernels small_k,lib_matmul,rms_rows --seconds 60 --out DIR   # on a GPU
    python benchmarks/dynamic_shapes.py --seconds 5 --every 2 --triton-s 2    # the steps, small, in the interpreter
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STREAM_CALLS = 2000
SAMPLED = 24
FINALISTS = 3  # the configs fastest at a key in one pass, timed again with those served there
ROUNDS = 3
REP_MS = 5.0  # milliseconds of launches in each timing's CUDA graph


def stream(spec: dict[str, Any], calls: int = STREAM_CALLS, seed: int = 0) -> list[int]:
    """The M of each call: log-normal, median 8x the range's low end, sigma 1.5, clipped to the range."""
    r = random.Random(seed)
    low, high = spec["low"], spec["high"]
    return [min(high, max(low, int(r.lognormvariate(math.log(8 * low), 1.5)))) for _ in range(calls)]


def sample(ms: list[int], n: int = SAMPLED, seed: int = 1) -> list[int]:
    """n distinct M of the stream: the n/2 it meets most, then more drawn as the stream draws them (frequent ones
    more often)."""
    r, seen = random.Random(seed), list(dict.fromkeys(ms))
    weights = {m: ms.count(m) for m in seen}
    out = sorted(seen, key=lambda m: -weights[m])[:n // 2]
    while len(out) < min(n, len(seen)):
        m = r.choices(seen, [weights[x] for x in seen])[0]
        if m not in out:
            out.append(m)
    return sorted(out)


def served(kernel: Any, keys: list[int]) -> dict[int, dict[str, Any]]:
    from autotuner.decorator.configs import config_dict

    return {int(k[0]): config_dict(c) for k, c in list(kernel.cache.items()) if int(k[0]) in keys}


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


# -- the steps, each in its own process ----------------------------------------------------------------------------
def step_record(spec: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.shape_kernels import Launcher, decorated

    launch, kernel = Launcher(spec), decorated(spec)
    m = spec["low"]
    while m <= spec["high"]:
        launch(kernel, m)
        m *= 2
    sync()
    from autotuner.launch.lookup import resolver

    resolver()._join_background()
    return {}


def step_stream(spec: dict[str, Any], seconds: float, every: float) -> dict[str, Any]:
    from benchmarks.shape_kernels import Launcher, decorated

    launch, kernel = Launcher(spec), decorated(spec)
    ms = stream(spec)
    keys = sample(ms)
    notes: list[tuple[float, dict[int, dict[str, Any]]]] = []
    sync()
    t0 = time.perf_counter()
    for m in ms:
        launch(kernel, m)
    sync()
    first_pass = time.perf_counter() - t0
    notes.append((first_pass, served(kernel, keys)))
    calls, next_note = len(ms), first_pass + every
    while time.perf_counter() - t0 < seconds:
        for m in ms:
            launch(kernel, m)
            if time.perf_counter() - t0 >= next_note:
                notes.append((time.perf_counter() - t0, served(kernel, keys)))
                next_note += every
        calls += len(ms)
    sync()
    notes.append((time.perf_counter() - t0, served(kernel, keys)))
    sources = [s.split()[0] for s in kernel.sources.values()]
    order = list(kernel.resolve_s.values())  # in the order the keys were met
    first = sorted(order)
    return {"stream_s": first_pass, "calls": calls, "distinct": len(set(ms)), "keys": keys,
            "meets": {m: ms.count(m) for m in keys}, "notes": notes,
            "sources_at_end": {s: sources.count(s) for s in sorted(set(sources))},
            "resolve_ms": {"first": order[0] * 1e3, "p50": first[len(first) // 2] * 1e3, "max": first[-1] * 1e3}
            if first else {}}


def step_triton(spec: dict[str, Any], seconds: float) -> dict[str, Any]:
    import triton

    from benchmarks.shape_kernels import DEVICE, Launcher, triton_configs

    launch = Launcher(spec)
    key = ["M", "N", "K"] if spec["kind"] == "matmul" else ["M", "N"]
    bench = {}
    if DEVICE == "cpu":  # the interpreter has no driver to time with: the wall clock, as Triton's quantiles
        from autotuner.engine.measure.timing import time_wall

        bench["do_bench"] = lambda fn, quantiles=None: [time_wall(fn).median_ms] * 3
    theirs = triton.autotune(configs=triton_configs(spec["configs"]), key=key, **bench)(spec["plain"])
    ms = stream(spec)
    sync()
    t0, done = time.perf_counter(), 0
    for m in ms:
        launch(theirs, m)
        done += 1
        if time.perf_counter() - t0 > seconds:
            break
    sync()
    wall = time.perf_counter() - t0
    tuned = len(theirs.cache)
    return {"wall_s": wall, "calls_done": done, "keys_tuned": tuned, "s_per_key": wall / max(tuned, 1),
            "projected_stream_s": wall / max(tuned, 1) * len(set(ms))}


def step_landscape(spec: dict[str, Any], keys: list[int], served_at: dict[int, list[int]]) -> dict[str, Any]:
    """Every config's time at each key (one pass), then the FINALISTS fastest and each config `served_at` the key
    (indices into the list) again in ROUNDS interleaved rounds: their medians."""
    import statistics

    from autotuner.engine.measure.timing import interleaved
    from benchmarks.shape_kernels import Launcher

    launch, configs = Launcher(spec), spec["configs"]
    for c in configs:
        launch.time(keys[0], c, rep=REP_MS)  # compile each config before timing any
    times, final = {}, {}
    for m in keys:
        times[m] = [launch.time(m, c, rep=REP_MS) for c in configs]
        picked = sorted(range(len(configs)), key=lambda i: times[m][i])[:FINALISTS]
        picked += [i for i in served_at.get(m, []) if i not in picked]
        def timed(i: int, m: int = m) -> float:
            return launch.time(m, configs[i], rep=REP_MS)

        rounds = interleaved(picked, ROUNDS, timed)
        final[m] = {i: statistics.median(ts) for i, ts in rounds.items()}
    return {"times": times, "final": final}


def child(kernel: str, step: str, args: argparse.Namespace) -> None:
    from benchmarks.shape_kernels import DEVICE, KERNELS, small_for_the_interpreter

    if DEVICE == "cpu":
        small_for_the_interpreter()

    spec = KERNELS[kernel]
    if step == "record":
        out = step_record(spec)
    elif step == "stream":
        out = step_stream(spec, args.seconds, args.every)
    elif step == "triton":
        out = step_triton(spec, args.triton_s)
    else:
        served_at = {int(m): v for m, v in json.loads(Path(args.served).read_text()).items()}
        out = step_landscape(spec, [int(k) for k in args.keys.split(",")], served_at)
    print("RESULT " + json.dumps(out, default=str), flush=True)


def run_child(kernel: str, step: str, env: dict[str, str], args: argparse.Namespace, *extra: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", step, "--kernels", kernel, "--seconds",
                          str(args.seconds), "--every", str(args.every), "--triton-s", str(args.triton_s), *extra],
                         cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env})
    if out.returncode != 0:
        raise RuntimeError(f"{kernel} {step} failed:\n{out.stderr[-4000:]}")
    return dict(json.loads(next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT "):]))


def list_index(configs: list[dict[str, Any]], full: dict[str, Any]) -> int | None:
    """Where a served config stands in the kernel's list, by the list's own parameters (Triton adds its defaults);
    None where it is not one of them."""
    config = {k: full.get(k) for k in configs[0]}
    return configs.index(config) if config in configs else None


def regret(final: dict[str, dict[str, float]], configs: list[dict[str, Any]], chosen: dict[str, dict[str, Any]],
           meets: dict[str, int]) -> dict[str, float | int]:
    """The loss of each key's served config against the best of its finalists (re-timed medians)."""
    losses, weights = [], []
    for m, full in chosen.items():
        i, t = list_index(configs, full), final[m]
        if i is None or str(i) not in t:
            continue
        losses.append(t[str(i)] / min(t.values()) - 1)
        weights.append(meets[m])
    if not losses:
        return {"keys": 0}
    return {"keys": len(losses), "geomean": math.exp(sum(math.log1p(x) for x in losses) / len(losses)) - 1,
            "worst": max(losses), "weighted": math.exp(sum(w * math.log1p(x) for w, x in zip(weights, losses,
                                                                                             strict=True))
                                                      / sum(weights)) - 1}


def served_indices(configs: list[dict[str, Any]], notes: list[Any]) -> dict[str, list[int]]:
    """Each sampled key's configs served at any note, as indices into the list."""
    out: dict[str, list[int]] = {}
    for _, chosen in notes:
        for m, full in chosen.items():
            i = list_index(configs, full)
            if i is not None and i not in out.setdefault(str(m), []):
                out[str(m)].append(i)
    return out


def run_kernel(kernel: str, args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.shape_kernels import DEVICE, DTYPE, KERNELS, small_for_the_interpreter, sweep_shape

    if DEVICE == "cpu":
        small_for_the_interpreter()

    spec = KERNELS[kernel]
    tmp = tempfile.mkdtemp()
    env = {"AUTOTUNER_DB_URL": f"sqlite:///{tmp}/{kernel}.db", "AUTOTUNER_KERNEL_CACHE_DIR": f"{tmp}/kept",
           "AUTOTUNER_KERNEL_MODULES": "benchmarks.shape_kernels", "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    run_child(kernel, "record", {**env, "AUTOTUNER_ON_MISS": "default"}, args)
    t0 = time.perf_counter()
    sweep = subprocess.run([sys.executable, "-m", "autotuner", "tune", spec["name"], "--shape", sweep_shape(spec),
                            "--dtype", str(DTYPE).removeprefix("torch."), "--json", "-q"], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, **env})
    sweep_s = time.perf_counter() - t0
    if sweep.returncode != 0:
        raise RuntimeError(f"{kernel} sweep failed:\n{sweep.stderr[-4000:]}")
    summary = json.loads(sweep.stdout)
    log = open(Path(args.out, f"dynamic_{kernel}_worker.log"), "w")  # noqa: SIM115 - the worker's own log
    gpu = {"CUDA_VISIBLE_DEVICES": str(args.worker_gpu)} if args.worker_gpu is not None else {}
    worker = subprocess.Popen([sys.executable, "-m", "autotuner", "worker"], cwd=ROOT, stdout=log,
                              stderr=subprocess.STDOUT, env={**os.environ, **env, **gpu})
    try:
        traffic = run_child(kernel, "stream", {**env, "AUTOTUNER_ON_MISS": "nearest", "AUTOTUNER_RECHECK_S": "2"},
                            args)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=120)
        log.close()
    theirs = run_child(kernel, "triton", env, args)
    keys = traffic["keys"]
    served_file = Path(tmp, "served.json")
    served_file.write_text(json.dumps(served_indices(spec["configs"], traffic["notes"])))
    land = run_child(kernel, "landscape", env, args, "--keys", ",".join(map(str, keys)), "--served", str(served_file))
    meets = {str(k): v for k, v in traffic["meets"].items()}
    over_time = [{"t_s": t, **regret(land["final"], spec["configs"], {str(k): v for k, v in chosen.items()}, meets)}
                 for t, chosen in traffic["notes"]]
    done = sum(": done," in line for line in open(Path(args.out, f"dynamic_{kernel}_worker.log")))
    return {"kernel": kernel, "sweep_s": sweep_s, "sweep_points": len(summary["points"]),
            "sweep_worst": summary.get("worst_loss"), "between_points": summary.get("between_points"),
            "stream": {k: traffic[k] for k in ("stream_s", "calls", "distinct", "sources_at_end", "resolve_ms")},
            "worker_jobs_done": done, "triton": theirs, "over_time": over_time, "keys": keys,
            "landscape": land["times"], "finalists": land["final"], "served": traffic["notes"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default="small_k,lib_matmul,rms_rows")
    ap.add_argument("--seconds", type=float, default=60.0, help="how long the stream runs beside the worker")
    ap.add_argument("--every", type=float, default=10.0, help="seconds between notes of what is served")
    ap.add_argument("--triton-s", type=float, default=20.0, help="how long triton.autotune's stream runs")
    ap.add_argument("--worker-gpu", type=int, help="the GPU the worker tunes on (default: the stream's own)")
    ap.add_argument("--out", default=".")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--keys", help=argparse.SUPPRESS)
    ap.add_argument("--served", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.kernels, args.child, args)
        return
    Path(args.out).mkdir(parents=True, exist_ok=True)
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (interpreter)"
    results = []
    for kernel in args.kernels.split(","):
        results.append(run_kernel(kernel, args))
        Path(args.out, f"dynamic_{kernel}.json").write_text(json.dumps(results[-1], indent=1, default=str))
        r = results[-1]
        print(f"{kernel}: sweep {r['sweep_s']:.0f} s ({r['sweep_points']} points), stream of {STREAM_CALLS} calls "
              f"{r['stream']['stream_s']:.2f} s, triton.autotune {r['triton']['s_per_key']:.2f} s a new key",
              flush=True)
    print(f"\ndevice: {device}; {SAMPLED} sampled keys per kernel (the {SAMPLED // 2} met most, the rest drawn by "
          "frequency), regret against each key's best of the list (CUDA-graph timings; finalists re-timed in "
          f"{ROUNDS} interleaved rounds)\n")
    print("| kernel | sweep | stream, 2000 calls | triton.autotune, projected | x | regret after the sweep "
          "(geomean / worst / by meets) | at the end | jobs done |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        first, last = r["over_time"][0], r["over_time"][-1]
        ratio = r["triton"]["projected_stream_s"] / r["stream"]["stream_s"]

        def cell(x: dict[str, Any]) -> str:
            return f"{x['geomean']:+.2%} / {x['worst']:+.1%} / {x['weighted']:+.2%} (t={x['t_s']:.0f} s)" \
                if x.get("keys") else "-"
        print(f"| {r['kernel']} | {r['sweep_s']:.0f} s | {r['stream']['stream_s']:.2f} s | "
              f"{r['triton']['projected_stream_s']:.0f} s | {ratio:.0f}x | {cell(first)} | {cell(last)} | "
              f"{r['worker_jobs_done']} |")
    print("\nregret over time (geomean / worst / by meets):")
    for r in results:
        print(f"  {r['kernel']}: " + ", ".join(f"{x['t_s']:.0f} s {x['geomean']:+.2%}/{x['worst']:+.1%}/"
                                               f"{x['weighted']:+.2%}" for x in r["over_time"] if x.get("keys")))


if __name__ == "__main__":
    main()
