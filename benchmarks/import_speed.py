"""`autotuner import` of exports holding N results (softmax problems, each a run of 8 trials and its best config),
into a new SQLite file, as a user runs it: one process per import, its wall time. Prints a table.

    python benchmarks/import_speed.py [--sizes 2000,8000,50000] [--trials 8]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def export(n: int, trials: int) -> dict:
    from autotuner.base.registry import get_op
    from search_spaces.space import config_key

    op = get_op("softmax")
    configs = list(itertools.islice(op.space.grid(), 64))
    device = {"key": "NVIDIA H100 80GB HBM3 (sm_90)", "name": "NVIDIA H100 80GB HBM3", "capability": "9.0",
              "sm_count": 132, "total_memory": 85_000_000_000, "smem_per_block": 232_448}
    runs, bests = [], []
    for i in range(n):
        problem = op.parse_problem(f"{64 + i // 256}x{128 + i % 256}", "float16")
        stamp = f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:{(i // 60) % 60:02d}.{i:06d}+00:00"
        rows = [{"config": c, "config_key": config_key(c), "status": "ok", "median_ms": 0.01 + 0.001 * j,
                 "p20_ms": 0.01, "p80_ms": 0.02, "retimed_ms": None, "compile_s": 0.5, "error": None,
                 "created_at": stamp} for j, c in enumerate(configs[(i % 8) * 8:(i % 8) * 8 + trials])]
        fields = {"op": "softmax", "problem_key": problem.key, "problem": {"rows": problem.rows,
                                                                          "cols": problem.cols, "dtype": "float16"}}
        runs.append({**fields, "kernel_hash": "0" * 16, "triton_version": "3.6.0", "torch_version": "2.11.0",
                     "strategy": "tpe", "budget_trials": trials, "budget_seconds": None, "clock": "cuda_events",
                     "status": "done", "error": None, "started_at": stamp, "finished_at": stamp, "rejected": 0,
                     "rejections": None, "device": device["key"], "trials": rows})
        bests.append({**fields, "kernel_hash": "0" * 16, "triton_version": "3.6.0", "config": rows[0]["config"],
                      "median_ms": rows[0]["median_ms"], "default_ms": 0.05, "torch_ms": 0.04, "updated_at": stamp,
                      "device": device["key"], "run": i})
    return {"format": "autotuner-export", "version": 1, "devices": [device], "runs": runs, "best_configs": bests}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2000,8000,50000")
    ap.add_argument("--trials", type=int, default=8)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            path = Path(tmp) / f"export-{n}.json"
            path.write_text(json.dumps(export(n, args.trials)))
            db = f"sqlite:///{Path(tmp) / f'import-{n}.db'}"
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "autotuner", "import", str(path), "--db", db],
                                  capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
            wall = time.perf_counter() - t0
            rows.append((n, path.stat().st_size / 2**20, wall, done.returncode,
                         (done.stdout or done.stderr).strip().splitlines()[-1][:90]))
    print("\n| results | file MiB | import s | exit | said |")
    print("| --- | --- | --- | --- | --- |")
    for n, mib, wall, code, said in rows:
        print(f"| {n} | {mib:.1f} | {wall:.1f} | {code} | {said} |")


if __name__ == "__main__":
    main()
