"""Workers on N GPUs of one host draining the same jobs: how much faster than one worker (issue 17). GPU only.

    python benchmarks/scale_workers.py [--gpus 1,2] [--jobs 16] [--trials 24] [--out DIR]

For each N: a fresh SQLite database with the same 16 matmul jobs (4 shapes x 4 epilogue/dtype variants), a cold
Triton cache shared by the host's workers, and one `autotuner worker --gpu i --until-empty` per GPU started
together; the time is from their start to the last one's exit. Each worker sizes its compile pool per host
(the CPU cores shared among the GPUs: autotuner/tuner.py). Prints N, wall, jobs per minute, speedup over N=1
and the share of linear.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = ["2048x2048x2048", "4096x4096x4096", "1024x4096x4096", "4096x1024x4096"]
VARIANTS = [("float16", None), ("bfloat16", None), ("float16", "bias"), ("float16", "bias_gelu")]


def drain(n: int, jobs: int, trials: int, out: Path) -> float:
    from autotuner.store import Store

    work = Path(tempfile.mkdtemp(prefix=f"scale{n}_"))
    url = f"sqlite:///{work / 'jobs.db'}"
    store = Store(url)
    for i in range(jobs):
        dtype, epilogue = VARIANTS[(i // len(SHAPES)) % len(VARIANTS)]
        store.queue_job(op="matmul", shape=SHAPES[i % len(SHAPES)], dtype=dtype,
                        options={"epilogue": epilogue} if epilogue else {}, strategy="tpe", budget_trials=trials)
    env = {**os.environ, "TRITON_CACHE_DIR": str(work / "triton_cache")}
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "autotuner", "worker", "--gpu", str(g), "--until-empty",
                               "--name", f"gpu{g}", "--db", url], env=env, cwd=ROOT,
                              stdout=(out / f"scale_n{n}_gpu{g}.log").open("w"), stderr=subprocess.STDOUT)
             for g in range(n)]
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t0
    with sqlite3.connect(work / "jobs.db") as c:
        states = dict(c.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())
        per_worker = dict(c.execute("SELECT worker, count(*) FROM jobs GROUP BY worker").fetchall())
    if codes != [0] * n or states.get("done") != jobs:
        raise SystemExit(f"N={n}: exit codes {codes}, jobs {states}; see {out}")
    with sqlite3.connect(work / "jobs.db") as src, sqlite3.connect(out / f"scale_n{n}.db") as dst:
        src.backup(dst)  # every run and trial, for the timeline (a copy of the file would miss its WAL)
    print(f"N={n}: {wall:.1f} s for {jobs} jobs, by worker {per_worker}", flush=True)
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="1,2")
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    walls = {int(n): drain(int(n), args.jobs, args.trials, args.out) for n in args.gpus.split(",")}
    base = walls[min(walls)] * min(walls)
    print("\n| GPUs | wall (s) | jobs/min | speedup | of linear |\n|---|---|---|---|---|")
    for n, w in walls.items():
        print(f"| {n} | {w:.1f} | {args.jobs / w * 60:.1f} | {base / w:.2f}x | {base / w / n:.2f} |")
    (args.out / "scale.json").write_text(json.dumps({"walls": walls, "jobs": args.jobs, "trials": args.trials}))


if __name__ == "__main__":
    main()
