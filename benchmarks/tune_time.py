"""How long `autotuner tune` takes, where the time goes, and how good its winner is (issue 17). GPU only.

    python benchmarks/tune_time.py [--op matmul --shape 4096x4096x4096] [--out DIR]

1. `autotuner tune` from a new process with a cold Triton cache (a fresh TRITON_CACHE_DIR), as a new user runs it:
   wall time, and the phases from its --json (setup, search with its compile share, re-time, record).
2. An exhaustive run of the same problem (every valid config measured; the Triton cache now warm), written out
   as a landscape (`autotuner export --format landscape`) for benchmarks/replay_efficiency.py.
3. The same command handed to a local worker (`autotuner worker` already running on the host, started with its
   own cold Triton cache and left READY_S to start its processes): the command's wall time, and its phases.
4. The tuned winners against the exhaustive best, timed interleaved (7 rounds, CUDA events, L2 flushed): the
   ratio is a tuned config's time over the best's.
5. With `--gpus 0,1`: the same command measuring on those GPUs at once (`autotuner tune --gpus`), from a new
   process with its own cold Triton cache: wall time and search time against step 1's (issue 31, part 2).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def run(cmd: list[str], env: dict[str, str], log: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    log.write_text(out.stderr)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr[-2000:]}")
    return wall, out.stdout


def interleaved(op_name: str, shape: str, dtype: str, configs: list[dict], rounds: int = 7) -> list[float]:
    import torch

    from autotuner.base.registry import get_op
    from autotuner.engine.measure.timing import interleaved, time_cuda

    op = get_op(op_name)
    problem = op.parse_problem(shape, dtype)
    inputs = op.make_inputs(problem, "cuda:0")
    for c in configs:
        op.run(inputs, c)
    torch.cuda.synchronize()
    times = interleaved(range(len(configs)), rounds,
                        lambda i: time_cuda(functools.partial(op.run, inputs, configs[i])).median_ms)
    return [statistics.median(times[i]) for i in range(len(configs))]


READY_S = 20.0  # a worker's trial worker and compile pool start in the background; a running worker has them


def through_worker(args: argparse.Namespace, work: Path, problem: list[str], tag: str) -> tuple[float, dict]:
    """`autotuner tune` handed to a worker started READY_S before, on a fresh database and a cold Triton cache."""
    db = f"sqlite:///{work / 'worker.db'}"
    env = {**os.environ, "TRITON_CACHE_DIR": str(work / "triton_cache_worker"),
           "AUTOTUNER_RUNTIME_DIR": str(work / "run")}
    log = (args.out / f"worker_{tag}.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "autotuner", "worker", "--db", db], env=env, stdout=log,
                            stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not list((work / "run").glob("*.sock")):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the worker opened no door: {(args.out / f'worker_{tag}.log').read_text()[-2000:]}")
            time.sleep(0.1)
        time.sleep(READY_S)
        wall, out = run([sys.executable, "-m", "autotuner", "tune", args.op, *problem, "--db", db, "--json"], env,
                        args.out / f"tune_worker_{tag}.log")
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
    result = json.loads(out)
    if not result.get("worker"):
        raise SystemExit("the command was not handed to the worker")
    return wall, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", default="matmul")
    ap.add_argument("--shape", default="4096x4096x4096")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    ap.add_argument("--no-exhaustive", action="store_true")
    ap.add_argument("--no-worker", action="store_true", help="leave out the path through a running worker")
    ap.add_argument("--gpus", default="", help="also tune on these GPUs at once (e.g. 0,1) and compare")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tune_time_"))
    db = f"sqlite:///{work / 'tune.db'}"
    env = {**os.environ, "TRITON_CACHE_DIR": str(work / "triton_cache"), "AUTOTUNER_LOCAL_WORKER": "0"}
    tag = f"{args.op}_{args.shape}_{args.dtype}"
    problem = ["--shape", args.shape, "--dtype", args.dtype]

    wall, out = run([sys.executable, "-m", "autotuner", "tune", args.op, *problem, "--db", db, "--json"], env,
                    args.out / f"tune_{tag}.log")
    tuned = json.loads(out)
    (args.out / f"tune_{tag}.json").write_text(out)
    phases = {k: round(v, 2) for k, v in tuned["phases"].items()}
    print(f"tune {args.op} {args.shape} {args.dtype}, cold Triton cache: {wall:.1f} s wall "
          f"({tuned['elapsed_s']:.1f} s in tune, {wall - tuned['elapsed_s']:.1f} s start-up), "
          f"{len(tuned['trials'])} trials of {tuned['candidates']} valid; phases {phases}", flush=True)
    print(f"  winner {tuned['best_ms']:.4f} ms {tuned['best_config']}", flush=True)
    lanes: dict | None = None
    if args.gpus:
        g_env = {**env, "TRITON_CACHE_DIR": str(work / "triton_cache_gpus")}
        g_wall, out = run([sys.executable, "-m", "autotuner", "tune", args.op, *problem, "--db",
                           f"sqlite:///{work / 'gpus.db'}", "--json", "--gpus", args.gpus], g_env,
                          args.out / f"tune_gpus_{tag}.log")
        lanes = json.loads(out)
        (args.out / f"tune_gpus_{tag}.json").write_text(out)
        per_lane = {lane: sum(t["lane"] == lane for t in lanes["trials"]) for lane in sorted({t["lane"] for t in
                                                                                              lanes["trials"]})}
        one, many = tuned["phases"]["search_s"], lanes["phases"]["search_s"]
        print(f"--gpus {args.gpus}, cold Triton cache: {g_wall:.1f} s wall (one GPU: {wall:.1f} s); search "
              f"{many:.2f} s against {one:.2f} s on one GPU = {one / many:.2f}x; configs per GPU {per_lane}; "
              f"phases {({k: round(v, 2) for k, v in lanes['phases'].items()})}", flush=True)
        print(f"  winner {lanes['best_ms']:.4f} ms {lanes['best_config']}", flush=True)
    by_worker: dict | None = None
    if not args.no_worker:
        w_wall, by_worker = through_worker(args, work, problem, tag)
        w_phases = {k: round(v, 2) for k, v in by_worker["phases"].items()}
        print(f"through a running worker (its own cold Triton cache): {w_wall:.1f} s wall ({by_worker['elapsed_s']:.1f}"
              f" s in tune), {len(by_worker['trials'])} trials; phases {w_phases}", flush=True)
        print(f"  winner {by_worker['best_ms']:.4f} ms {by_worker['best_config']}", flush=True)
    if args.no_exhaustive:
        return

    ex_wall, out = run([sys.executable, "-m", "autotuner", "tune", args.op, *problem, "--db", db, "--json",
                        "--strategy", "exhaustive", "--trials", str(tuned["candidates"])], env,
                       args.out / f"exhaustive_{tag}.log")
    exhaustive = json.loads(out)
    print(f"exhaustive: {ex_wall:.1f} s wall, {len(exhaustive['trials'])} configs measured "
          f"(the first search's configs reused: {exhaustive['candidates']} valid)", flush=True)
    land_path = args.out / f"landscape_{tag}.json"
    subprocess.run([sys.executable, "-m", "autotuner", "export", "--format", "landscape", "--op", args.op, *problem,
                    "--db", db, "-o", str(land_path)], env=env, check=True, cwd=ROOT)
    land = json.loads(land_path.read_text())
    measured = [t for t in land["trials"] if t["ms"] is not None]
    best = min(measured, key=lambda t: t["ms"])
    print(f"landscape: {len(land['trials'])} configs, best {best['ms']:.4f} ms {best['config']}", flush=True)

    configs = [tuned["best_config"], best["config"]] + ([by_worker["best_config"]] if by_worker else []) + (
        [lanes["best_config"]] if lanes else [])
    a, b, *rest = interleaved(args.op, args.shape, args.dtype, configs)
    w = rest[:1] if by_worker else []
    if lanes:
        print(f"  on {args.gpus}: tuned {rest[-1]:.4f} ms, ratio {rest[-1] / b:.3f} "
              f"({'within' if rest[-1] <= 1.02 * b else 'NOT within'} 2%)", flush=True)
    print(f"interleaved (7 rounds): tuned {a:.4f} ms, exhaustive best {b:.4f} ms, ratio {a / b:.3f} "
          f"({'within' if a <= 1.02 * b else 'NOT within'} 2%)", flush=True)
    if w:
        print(f"  through the worker: tuned {w[0]:.4f} ms, ratio {w[0] / b:.3f} "
              f"({'within' if w[0] <= 1.02 * b else 'NOT within'} 2%)", flush=True)
    (args.out / f"summary_{tag}.json").write_text(json.dumps({
        "wall_s": wall, "tune_s": tuned["elapsed_s"], "phases": tuned["phases"], "trials": len(tuned["trials"]),
        "candidates": tuned["candidates"], "tuned_ms": a, "best_ms": b, "ratio": a / b,
        "worker": by_worker and {"wall_s": w_wall, "phases": by_worker["phases"], "tuned_ms": w[0]}}, indent=1))


if __name__ == "__main__":
    main()
