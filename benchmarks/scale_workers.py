"""Workers on N GPUs of one host draining the same jobs: how much faster than one worker (issue 17). GPU only.

    python benchmarks/scale_workers.py [--gpus 1,2] [--jobs 16] [--trials 24] [--layouts one,each]
        [--rounds R] [--warmup] [--out DIR]

For each N: a fresh SQLite database with the same 16 matmul jobs (4 shapes x 4 epilogue/dtype variants), a cold
Triton cache shared by the host's workers, and for N > 1 two layouts: `each`, one `autotuner worker --gpu i` per
GPU (a compile pool each), and `one`, one `autotuner worker --gpus 0,..,N-1` running a job on each GPU at once
(one compile pool for all). Two ways of timing it:
"cold", the workers started with the jobs queued (`--until-empty`), from their start to the last one's exit;
"running", the workers started and idle first (as a service's workers are), from the jobs' queueing until the
last is done. Each worker sizes its compile pool per host
(the CPU cores shared among the GPUs: autotuner/tuner.py). Prints, for each drain, where its time went (each
worker's jobs summed, its first job, when it ended; `account`), then N, wall, jobs per minute, speedup over N=1
and the share of linear. With `--rounds R` every drain runs R times, the drains of a round in rotated order
(`engine.measure.timing.interleaved`), so that a slow spell of the host lands on no one drain: the table gives each round's
wall, the medians, and the share of linear from the medians and from each round against its own N=1.
`--warmup` runs one drain first and counts it nowhere: on a freshly started machine the first drain, whichever
it is, also pays the disk's first reads of torch and Triton (benchmarks/RESULTS.md has how much).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = ["2048x2048x2048", "4096x4096x4096", "1024x4096x4096", "4096x1024x4096"]
VARIANTS = [("float16", None), ("bfloat16", None), ("float16", "bias"), ("float16", "bias_gelu")]


def _queue(store: object, jobs: int, trials: int) -> None:
    for i in range(jobs):
        dtype, epilogue = VARIANTS[(i // len(SHAPES)) % len(VARIANTS)]
        store.queue_job(op="matmul", shape=SHAPES[i % len(SHAPES)], dtype=dtype,  # type: ignore[attr-defined]
                        options={"epilogue": epilogue} if epilogue else {}, strategy="tpe", budget_trials=trials)


def _states(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as c:
        return dict(c.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())


def account(db: Path, wall: float) -> str:
    """Where a drain's time went, from its job rows: each worker's jobs summed, its first job, when its last one
    ended (from the first job's start), and the wall's time outside the jobs (the workers' start before the first
    claim, their exit after the last)."""
    from datetime import datetime

    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT worker, started_at, finished_at FROM jobs WHERE state = 'done' "
                         "ORDER BY started_at").fetchall()
    if not rows:
        return "no job done"
    spans = [(w, datetime.fromisoformat(a), datetime.fromisoformat(b)) for w, a, b in rows]
    t0 = spans[0][1]
    parts, ends = [], []
    for worker in sorted({w for w, _, _ in spans}):
        mine = [(a, b) for w, a, b in spans if w == worker]
        summed = sum((b - a).total_seconds() for a, b in mine)
        end = max((b - t0).total_seconds() for _, b in mine)
        ends.append(end)
        parts.append(f"{worker}: {len(mine)} jobs {summed:.1f} s, the first {(mine[0][1] - mine[0][0]).total_seconds():.1f} s, "
                     f"ended at {end:.1f} s")
    return "; ".join(parts) + f"; ends {max(ends) - min(ends):.1f} s apart; {wall - max(ends):.1f} s outside the jobs"


def drain(n: int, jobs: int, trials: int, out: Path, running: bool, layout: str = "each") -> float:
    """Seconds for n GPUs' workers (`layout`: a worker each, or one worker holding them all) to drain the jobs:
    from the workers' start (cold), or, with `running`, from the moment the jobs are queued to workers that started
    (and made their processes ready) before."""
    from autotuner.store.database import Store

    mode = ("running" if running else "cold") + ("" if layout == "each" or n == 1 else "_one")
    work = Path(tempfile.mkdtemp(prefix=f"scale{n}_{mode}_"))
    db = work / "jobs.db"
    url = f"sqlite:///{db}"
    store = Store(url)
    env = {**os.environ, "TRITON_CACHE_DIR": str(work / "triton_cache"), "AUTOTUNER_POLL_S": "0.2"}
    if not running:
        _queue(store, jobs, trials)
    t0 = time.perf_counter()
    one = layout == "one" and n > 1
    where = [["--gpus", ",".join(map(str, range(n))), "--name", "gpus"]] if one else \
        [["--gpu", str(g), "--name", f"gpu{g}"] for g in range(n)]
    logs = [out / f"scale_n{n}_{mode}_{i}.log" for i in range(len(where))]
    procs = [subprocess.Popen([sys.executable, "-m", "autotuner", "worker", *w, "--db", url,
                               *([] if running else ["--until-empty"])], env=env, cwd=ROOT,
                              stdout=log.open("w"), stderr=subprocess.STDOUT)
             for w, log in zip(where, logs, strict=True)]
    if running:
        while not all("polling every" in log.read_text() for log in logs):  # started...
            time.sleep(0.2)
        time.sleep(10)  # ...and their trial worker and compile pool made their CUDA contexts
        t0 = time.perf_counter()
        _queue(store, jobs, trials)
        while sum(n for state, n in _states(db).items() if state in ("done", "failed")) < jobs:
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        for p in procs:
            p.send_signal(signal.SIGTERM)
    codes = [p.wait() for p in procs]
    if not running:
        wall = time.perf_counter() - t0
    states = _states(db)
    with sqlite3.connect(db) as c:
        per_worker = dict(c.execute("SELECT worker, count(*) FROM jobs GROUP BY worker").fetchall())
    stopped = 128 + signal.SIGTERM if running else 0  # (a worker stopped by SIGTERM exits as a shell reports it)
    if codes != [stopped] * len(procs) or states.get("done") != jobs:
        raise SystemExit(f"N={n} ({mode}): exit codes {codes}, jobs {states}; see {out}")
    with sqlite3.connect(db) as src, sqlite3.connect(out / f"scale_n{n}_{mode}.db") as dst:
        src.backup(dst)  # every run and trial, for the timeline (a copy of the file would miss its WAL)
    print(f"N={n} ({mode}): {wall:.1f} s for {jobs} jobs, by worker {per_worker}", flush=True)
    print(f"  {account(db, wall)}", flush=True)
    return wall


def shares(walls: dict[tuple[str, int, str], list[float]]) -> list[dict[str, Any]]:
    """Each drain's walls, their median, and its share of linear against the same mode's smallest N: from the
    medians, and round by round (each round's drain against that round's smallest N)."""
    table = []
    for (mode, n, layout), ws in walls.items():
        base_n = min(k[1] for k in walls if k[0] == mode)
        base = walls[(mode, base_n, "each")]
        wall = statistics.median(ws)
        speedup = statistics.median(base) / wall
        table.append({"mode": mode, "n": n, "layout": layout, "walls": ws, "wall": wall, "speedup": speedup,
                      "share": speedup * base_n / n,
                      "shares": [b / w * base_n / n for b, w in zip(base, ws, strict=True)]})
    return table


def main() -> None:
    from autotuner.engine.measure.timing import interleaved

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="1,2")
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--modes", default="cold,running", help="cold: timed from the workers' start; running: from "
                    "the jobs' queueing, to workers started before")
    ap.add_argument("--layouts", default="each,one", help="for N > 1: each (a worker per GPU), one (one worker "
                    "holding them all)")
    ap.add_argument("--rounds", type=int, default=1, help="times each drain runs, interleaved round by round")
    ap.add_argument("--warmup", action="store_true", help="the last drain listed (the largest N's last layout) "
                    "once first, not counted: the first drain on a fresh machine also pays its disk's first reads "
                    "of torch and Triton")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    gpus = [int(n) for n in args.gpus.split(",")]
    drains = [(mode, n, layout) for mode in args.modes.split(",") for n in gpus
              for layout in (args.layouts.split(",") if n > 1 else ["each"])]
    if args.warmup:
        (args.out / "warmup").mkdir(exist_ok=True)
        print("warm-up, not counted:", flush=True)
        mode, n, layout = drains[-1]
        drain(n, args.jobs, args.trials, args.out / "warmup", mode == "running", layout)
    rounds: list[Path] = []  # each round's folder

    def next_round(r: int) -> bool:
        rounds.append(args.out / f"round{r + 1}" if args.rounds > 1 else args.out)
        rounds[-1].mkdir(parents=True, exist_ok=True)
        return True

    walls = interleaved(drains, args.rounds, lambda d: drain(d[1], args.jobs, args.trials, rounds[-1],
                                                             d[0] == "running", d[2]), go_on=next_round)
    table = shares(walls)
    print("\n| workers | GPUs | layout | wall, each round (s) | median wall | jobs/min | speedup | of linear | "
          "of linear, each round |\n|---|---|---|---|---|---|---|---|---|")
    for row in table:
        print(f"| {row['mode']} | {row['n']} | {row['layout'] if row['n'] > 1 else '-'} | "
              f"{' / '.join(f'{w:.1f}' for w in row['walls'])} | {row['wall']:.1f} | "
              f"{args.jobs / row['wall'] * 60:.1f} | {row['speedup']:.2f}x | {row['share']:.2f} | "
              f"{' / '.join(f'{s:.2f}' for s in row['shares'])} |")
    (args.out / "scale.json").write_text(json.dumps({"table": table, "jobs": args.jobs, "trials": args.trials}))


if __name__ == "__main__":
    main()
